"""Several `once serve` processes on one PostgreSQL: the unique constraint decides for all.

- 300 concurrent requests with one key, spread over three nodes: the provider
  sees one effect; the others are answered 409 key_in_flight or replayed;
- one webhook event posted to all three nodes: one row, one delivery; and many
  events, delivered while all three nodes claim (FOR UPDATE SKIP LOCKED): each
  exactly once;
- SIGKILL of one node mid-call: another node's background loop turns the
  action unknown, then held; it is never resent;
- PostgreSQL restarted in the middle of load (a private server, never the
  shared one): answers are 200, 503 store_unavailable (nothing sent) or 504
  outcome_unknown (sent once, not recorded); no effect is duplicated, no
  answered reservation or accepted event is lost, /readyz fails during the
  outage and every node serves again by itself within a bounded time;
- /readyz follows PostgreSQL back at the first ask on every node (issue 26,
  item 10): after a restart under load once every agent has its answer, after
  a restart with no request in between (every writer's connection was cut),
  and after 4 s down (the nodes backing off).

PostgreSQL: $ONCE_TEST_PG_URL, or a throwaway server from scripts/pg. Every
test has its own schema (?once_schema=...). Run:
ONCE_BIN=build/h-mn/once /usr/bin/python3 -m pytest -q tests/integration/test_multinode.py
"""
import collections
import concurrent.futures
import json
import threading
import time
import uuid

import pytest
import requests

from gateway import Provider, assert_problem, describe, new_key, outcome
from hooks_harness import Agent, deliveries_total, sign_github, wait_until, webhooks_total
from multinode import Cluster, PgServer, drop_schema, log_counts, new_schema, with_schema

N = 3
GH_SECRET = "multinode webhook secret"
LEASE_S = 3
LOOP_S = 0.5


@pytest.fixture(scope="module")
def pg():
    s = PgServer.shared()
    yield s
    s.stop()


@pytest.fixture
def store_url(pg):
    schema = new_schema()
    yield with_schema(pg.url, schema)
    drop_schema(pg, schema)


@pytest.fixture
def provider():
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def agent():
    a = Agent()
    yield a
    a.stop()


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(url, **kw):
        c = Cluster(tmp_path / f"c{len(made)}", url, kw.pop("n", N), **kw)
        made.append(c)
        return c.start()

    yield make
    failures = []
    for c in made:
        try:
            c.stop_clean()
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def gh_headers(body, delivery=None):
    return {"X-Hub-Signature-256": sign_github(GH_SECRET, body), "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-GitHub-Event": "push", "Content-Type": "application/json"}


def state_of(g, scope, key):
    r = g.action(scope, key)
    assert r.status_code == 200, describe(r)
    return r.json()


# =========================================================================== one key, three nodes

def test_300_concurrent_same_key_over_three_nodes_one_effect(store_url, provider, make_cluster):
    c = make_cluster(store_url, upstreams={"demo": {"url": provider.url, "timeout": "10s"}})
    key = new_key("same")
    barrier = threading.Barrier(100)

    def send(i):
        if i < 100:
            barrier.wait(20)
        g = c[i % N]
        return i % N, g.proxy("POST", "demo", "/charges", key=key, json={"amount": 500},
                              headers={"X-Fake-Delay-Ms": "1500"}, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(100) as ex:
        rs = list(ex.map(send, range(300)))
    by = collections.Counter()
    for node, r in rs:
        if r.status_code == 200:
            by[(node, outcome(r))] += 1
            assert outcome(r) in ("completed", "replayed"), describe(r)
        else:
            assert_problem(r, 409, "key_in_flight")
            by[(node, "in_flight")] += 1
    completed = sum(v for (n, o), v in by.items() if o == "completed")
    assert completed == 1, f"answers by (node, outcome): {dict(by)}"
    # every node took part
    assert {n for (n, _o) in by} == set(range(N)), dict(by)
    time.sleep(0.5)
    assert provider.count() == 1, f"{provider.count()} effects for one key over {N} nodes: {dict(by)}"
    bodies = {r.content for _n, r in rs if r.status_code == 200}
    assert len(bodies) == 1, "the replays differ from the first answer"
    # afterwards, every node replays the one answer
    for g in c.nodes:
        r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
        assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
        rec = state_of(g, "demo", key)
        assert rec["state"] == "completed" and rec["attempt"] == 1, rec
    assert provider.count() == 1


def test_new_keys_on_three_nodes_each_once(store_url, provider, make_cluster):
    c = make_cluster(store_url, upstreams={"demo": {"url": provider.url, "timeout": "10s"}})
    keys = [new_key("nk") for _ in range(60)]

    def send(i):
        # each key sent twice, to two different nodes, at about the same time
        key = keys[i // 2]
        return key, c[i % N].proxy("POST", "demo", "/charges", key=key, json={"k": key}, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(40) as ex:
        rs = list(ex.map(send, range(2 * len(keys))))
    for _k, r in rs:
        assert r.status_code == 200 or (r.status_code == 409 and r.json()["code"] == "key_in_flight"), describe(r)
    effects = collections.Counter(json.loads(e["body"])["k"] for e in provider.effects())
    assert set(effects) == set(keys) and set(effects.values()) == {1}, effects


# =========================================================================== webhooks

def push_source(agent):
    return {"push": {"verify": "github", "secret": GH_SECRET, "deliver_to": agent.url + "/hooks/in",
                     "retry_base": "50ms", "retry_cap": "200ms"}}


def test_same_webhook_event_on_three_nodes_one_row_one_delivery(store_url, agent, make_cluster):
    c = make_cluster(store_url, sources=push_source(agent))
    body = b'{"action":"completed","check_run":{"id":7}}'
    h = gh_headers(body)
    barrier = threading.Barrier(30)

    def send(i):
        barrier.wait(20)
        return c[i % N].hook("push", body, h)

    with concurrent.futures.ThreadPoolExecutor(30) as ex:
        rs = list(ex.map(send, range(30)))
    for r in rs:
        assert r.status_code == 200, describe(r)
    statuses = collections.Counter(r.json()["status"] for r in rs)
    assert statuses == {"accepted": 1, "duplicate": 29}, statuses
    rows = c[0].hooks_ls(source="push")
    assert [x["event_id"] for x in rows] == [h["X-GitHub-Delivery"]], rows
    wait_until(lambda: (c[1].hooks_show("push", h["X-GitHub-Delivery"]) or {}).get("state") == "delivered",
               what="delivered")
    time.sleep(1.5)  # every node's delivery loop had several chances to deliver it again
    ds = agent.deliveries()
    assert len(ds) == 1, f"the event was delivered {len(ds)} times over {N} nodes: {ds}"
    ms = [g.metrics() for g in c.nodes]
    assert sum(webhooks_total(m, "push", "accepted") for m in ms) == 1
    assert sum(webhooks_total(m, "push", "duplicate") for m in ms) == 29
    assert sum(deliveries_total(m, "push", "delivered") for m in ms) == 1


def test_many_events_delivered_once_while_three_nodes_claim(store_url, agent, make_cluster):
    agent.configure(delay_ms=100)  # deliveries overlap: every node has claims in flight
    c = make_cluster(store_url, sources=push_source(agent))
    ids = [str(uuid.uuid4()) for _ in range(90)]

    def send(i):
        body = json.dumps({"n": i}).encode()
        return c[i % N].hook("push", body, gh_headers(body, ids[i]))

    with concurrent.futures.ThreadPoolExecutor(30) as ex:
        rs = list(ex.map(send, range(len(ids))))
    for r in rs:
        assert r.status_code == 200 and r.json() == {"status": "accepted"}, describe(r)
    wait_until(lambda: len(c[0].hooks_ls(source="push", status="delivered")) == len(ids), timeout=60,
               what=f"{len(ids)} events delivered")
    time.sleep(1.5)
    per_event = collections.Counter(d["headers"].get("once-event-id") for d in agent.deliveries())
    assert set(per_event) == set(ids), per_event
    twice = {k: v for k, v in per_event.items() if v != 1}
    assert not twice, f"delivered more than once: {twice}"
    per_node = [deliveries_total(g.metrics(), "push", "delivered") for g in c.nodes]
    assert sum(per_node) == len(ids), per_node
    print(f"deliveries per node: {per_node}")


# =========================================================================== a node dies

def test_sigkill_one_node_mid_call_another_node_holds_it(store_url, provider, make_cluster):
    c = make_cluster(store_url, upstreams={"demo": {"url": provider.url, "timeout": "2s", "lease": f"{LEASE_S}s"}},
                     server={"loop_interval": f"{int(LOOP_S * 1000)}ms"})
    a, b, d = c.nodes
    key = new_key("kill")
    out = {}

    def run():
        try:
            out["r"] = a.proxy("POST", "demo", "/charges", key=key, json={"amount": 1},
                               headers={"X-Fake-Hang": "1"}, timeout=30)
        except requests.RequestException as e:
            out["e"] = e

    t0 = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert provider.wait_count(1) == 1, "the call never reached the provider"
    a.kill()
    th.join(10)
    assert "r" not in out or out["r"].status_code != 200, "answered although killed"

    # while the lease runs: in flight on the other nodes, never resent
    r = b.proxy("POST", "demo", "/charges", key=key, json={"amount": 1})
    assert r.status_code == 409 and r.json()["code"] in ("key_in_flight", "outcome_unknown"), describe(r)

    deadline = t0 + LEASE_S + LOOP_S + 15
    rec = state_of(d, "demo", key)
    while rec["state"] != "held" and time.monotonic() < deadline:
        time.sleep(0.1)
        rec = state_of(d, "demo", key)
    assert rec["state"] == "held", f"lease {LEASE_S}s, loop {LOOP_S}s; still {rec}"
    assert rec["attempt"] == 1, rec
    # the background loop of a surviving node did it: lease expired (unknown), then held
    pat = r"leases expired: (?P<expired>\d+), actions held: (?P<held>\d+)"
    counts = [log_counts(g, pat) for g in (b, d)]
    assert sum(x.get("expired", 0) for x in counts) == 1, counts
    assert sum(x.get("held", 0) for x in counts) == 1, counts
    for g in (b, d):
        r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 1})
        j = assert_problem(r, 409, "outcome_unknown")
        assert j["state"] == "held", j
    time.sleep(1)
    assert provider.count() == 1, "an action of a killed node was resent"


# =========================================================================== the database restarts

@pytest.fixture
def private_pg():
    """A server of our own: restarting the shared one would disturb other tests."""
    s = PgServer.start_private()
    yield s
    s.stop()


LOAD_CLIENTS = 12
HOOK_CLIENTS = 3
HTTP_TIMEOUT = 60
ANSWER_BOUND_S = 40  # statement_timeout 30 s + connect_timeout 5 s: no request may wait longer


def test_postgres_restart_under_load(private_pg, provider, make_cluster):
    url = with_schema(private_pg.url, new_schema())
    c = make_cluster(url, upstreams={"demo": {"url": provider.url, "timeout": "10s", "lease": "5s"}},
                     sources={"pull": {"verify": "github", "secret": GH_SECRET}},
                     server={"loop_interval": "500ms"})
    stop = threading.Event()
    calls = []   # (key, node, status, outcome, code, seconds)
    hooks = []   # (event id, node, status, json status or code, seconds)
    lock = threading.Lock()

    def caller(ci):
        i = 0
        while not stop.is_set():
            i += 1
            key = f"pg-{ci}-{i}-{uuid.uuid4().hex[:8]}"
            node = (ci + i) % N
            t = time.monotonic()
            try:
                r = c[node].proxy("POST", "demo", "/charges", key=key, json={"k": key}, timeout=HTTP_TIMEOUT)
                code = r.json().get("code") if r.status_code != 200 else None
                rec = (key, node, r.status_code, outcome(r), code, time.monotonic() - t)
            except requests.RequestException as e:
                rec = (key, node, None, None, repr(e), time.monotonic() - t)
            with lock:
                calls.append(rec)

    def hooker(ci):
        i = 0
        while not stop.is_set():
            i += 1
            eid = f"ev-{ci}-{i}-{uuid.uuid4().hex[:8]}"
            node = (ci + i) % N
            body = json.dumps({"e": eid}).encode()
            t = time.monotonic()
            try:
                r = c[node].hook("pull", body, gh_headers(body, eid), timeout=HTTP_TIMEOUT)
                what = r.json().get("status") if r.status_code == 200 else r.json().get("code")
                rec = (eid, node, r.status_code, what, time.monotonic() - t)
            except (requests.RequestException, ValueError) as e:
                rec = (eid, node, None, repr(e), time.monotonic() - t)
            with lock:
                hooks.append(rec)

    ready_log = []  # (time, node, ready?)

    def ready_poller():
        while not stop.is_set():
            for i, g in enumerate(c.nodes):
                ready_log.append((time.monotonic(), i, c.ready(g)))
            time.sleep(0.05)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(LOAD_CLIENTS)]
    threads += [threading.Thread(target=hooker, args=(i,), daemon=True) for i in range(HOOK_CLIENTS)]
    threads.append(threading.Thread(target=ready_poller, daemon=True))
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        with lock:
            before = len(calls)
        t_restart = time.monotonic()
        private_pg.restart()
        t_back = time.monotonic()
        recovered_in = c.wait_ready()
        time.sleep(3)  # load keeps running on the recovered database
    finally:
        stop.set()
        for t in threads:
            t.join(HTTP_TIMEOUT + 10)
    assert not any(t.is_alive() for t in threads), "a client thread did not finish: a request never got an answer"
    assert before > 0, "no load before the restart"
    assert all(g.alive() for g in c.nodes), "\n".join(g.death_note() for g in c.nodes if not g.alive())

    summary = collections.Counter((s, o if s == 200 else code) for _k, _n, s, o, code, _t in calls)
    hook_summary = collections.Counter((s, w) for _e, _n, s, w, _t in hooks)
    print(f"restart took {t_back - t_restart:.1f} s; all nodes ready {recovered_in:.1f} s later")
    print(f"calls: {dict(summary)}")
    print(f"webhooks: {dict(hook_summary)}")

    # -- every answer is an allowed one, and came in bounded time
    allowed = {(200, "completed"), (503, "store_unavailable"), (504, "outcome_unknown")}
    bad = [x for x in calls if (x[2], x[3] if x[2] == 200 else x[4]) not in allowed]
    assert not bad, f"unexpected answers: {bad[:10]}"
    hook_allowed = {(200, "accepted"), (503, "store_unavailable")}
    bad = [x for x in hooks if (x[2], x[3]) not in hook_allowed]
    assert not bad, f"unexpected webhook answers: {bad[:10]}"
    slow = max([x[5] for x in calls] + [x[4] for x in hooks])
    assert slow < ANSWER_BOUND_S, f"an answer took {slow:.1f} s"
    # the outage was seen: /readyz failed on some node during it
    assert any(not ok for t, _i, ok in ready_log if t >= t_restart), "/readyz never failed while PostgreSQL was down"

    # -- the gateways serve again, without being restarted
    for g in c.nodes:
        k = new_key("after")
        r = g.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        calls.append((k, None, 200, "completed", None, 0))

    # -- effects: never two for a key; none for a key answered 503; one for 200 and 504
    time.sleep(1)
    effects = collections.Counter(json.loads(e["body"])["k"] for e in provider.effects())
    dup = {k: v for k, v in effects.items() if v > 1}
    assert not dup, f"effects duplicated: {dup}"
    by_status = collections.defaultdict(list)
    for k, _n, s, _o, _code, _t in calls:
        by_status[s].append(k)
    sent_503 = [k for k in by_status[503] if effects.get(k)]
    assert not sent_503, f"answered 503 store_unavailable but sent upstream: {sent_503[:10]}"
    for k in by_status[200] + by_status[504]:
        assert effects.get(k) == 1, f"{k}: {effects.get(k)} effects"

    # -- no acknowledged reservation lost: every 200 completed is completed in the store
    g = c[0]
    ls = g.cli("ls", "--scope", "demo", "--limit", "100000", "--json")
    assert ls.returncode == 0, ls.stderr
    rows = {x["key"]: x for x in json.loads(ls.stdout)}
    not_completed = [rows.get(k) or k for k in by_status[200] if (rows.get(k) or {}).get("state") != "completed"]
    assert not not_completed, f"answered 200 completed, not completed in the store: {not_completed[:10]}"
    # a 504 (sent, not recorded) stays pending, then unknown/held: never completed by itself, never resent
    for k in by_status[504]:
        assert k in rows and rows[k]["state"] in ("pending", "unknown", "held"), rows.get(k, k)

    # -- retrying what failed never sends twice
    def retry(k):
        return c[1 + hash(k) % (N - 1)].proxy("POST", "demo", "/charges", key=k, json={"k": k})

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        for r in ex.map(retry, by_status[503] + by_status[504]):
            assert r.status_code in (200, 409), describe(r)
    time.sleep(0.5)
    effects = collections.Counter(json.loads(e["body"])["k"] for e in provider.effects())
    dup = {k: v for k, v in effects.items() if v > 1}
    assert not dup, f"effects duplicated after the retries: {dup}"

    # -- no accepted event lost
    stored = {x["event_id"] for x in g.hooks_ls(source="pull")}
    accepted = [e for e, _n, s, w, _t in hooks if s == 200 and w == "accepted"]
    lost = [e for e in accepted if e not in stored]
    assert not lost, f"events answered accepted but not in the store: {lost[:10]}"
    assert len(stored) == len(set(stored))


# =========================================================================== readiness after a restart

AGENTS = 60
ANSWERED_BEFORE_RESTART = 15
AGENT_DEADLINE_S = 90        # an agent retries a 503 for this long at the most
AGENT_ATTEMPTS = 1000        # and this many times at the most
READY_ROUND_S = 2.0          # one /readyz must answer 200 within this once PostgreSQL is back
READY_ASKS = 12              # asks per node after the first: 3 x the writers, so each is likely asked


def readyz(g):
    """One /readyz: (status or None, seconds)."""
    t = time.monotonic()
    try:
        s = requests.get(g.url + "/readyz", timeout=READY_ROUND_S + 30).status_code
    except requests.RequestException:
        s = None
    return s, time.monotonic() - t


def assert_ready_in_one_round(c, when):
    """Every node's first /readyz is 200 within READY_ROUND_S, and so is every
    one after it: no connection of a node is still broken (issue 26, item 10)."""
    for i, g in enumerate(c.nodes):
        seen = [readyz(g) for _ in range(1 + READY_ASKS)]
        bad = [(n, s, round(t, 2)) for n, (s, t) in enumerate(seen) if s != 200 or t >= READY_ROUND_S]
        assert not bad, (f"node {i}, {when}: /readyz (ask, status, seconds) not 200 within {READY_ROUND_S} s: "
                         f"{bad}\n{g.stderr()[-3000:]}")


def test_readyz_follows_postgres_restart_on_both_nodes(private_pg, provider, make_cluster):
    """Issue 26, item 10: 60 agents through 2 nodes, PostgreSQL restarted (fast)
    once 15 have answered; when every agent has its answer, /readyz is 200 on
    both nodes at the first ask — readiness follows recovery, not a lucky write."""
    url = with_schema(private_pg.url, new_schema())
    c = make_cluster(url, n=2, upstreams={"demo": {"url": provider.url, "timeout": "10s", "lease": "5s"}},
                     server={"loop_interval": "1s"})
    answers = []  # (agent, node, status, code, attempts)
    lock = threading.Lock()
    enough = threading.Event()

    def agent(i):
        g = c[i % 2]
        key = f"agent-{i}-{uuid.uuid4().hex[:8]}"
        time.sleep(i * 0.01)  # agents arrive over 0.6 s
        deadline = time.monotonic() + AGENT_DEADLINE_S
        rec = (i, i % 2, None, "no answer", 0)
        for attempt in range(1, AGENT_ATTEMPTS + 1):
            if time.monotonic() >= deadline:
                break
            try:
                r = g.proxy("POST", "demo", "/charges", key=key, json={"k": key},
                            headers={"X-Fake-Delay-Ms": "100"}, timeout=HTTP_TIMEOUT)
            except requests.RequestException as e:
                rec = (i, i % 2, None, repr(e), attempt)
                time.sleep(0.05)
                continue
            if r.status_code == 503:  # store unavailable: nothing was sent; the agent retries
                rec = (i, i % 2, 503, "store_unavailable", attempt)
                time.sleep(0.05)
                continue
            rec = (i, i % 2, r.status_code, outcome(r) if r.status_code == 200 else r.json().get("code"), attempt)
            break
        with lock:
            answers.append(rec)
            if sum(1 for a in answers if a[2] not in (None, 503)) >= ANSWERED_BEFORE_RESTART:
                enough.set()

    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(AGENTS)]
    for t in threads:
        t.start()
    try:
        assert enough.wait(60), f"{ANSWERED_BEFORE_RESTART} agents did not answer within 60 s: {answers}"
        with lock:
            before = len(answers)
        t_restart = time.monotonic()
        private_pg.restart()
        t_back = time.monotonic()
    finally:
        for t in threads:
            t.join(AGENT_DEADLINE_S + HTTP_TIMEOUT + 10)
    assert not any(t.is_alive() for t in threads), "an agent never finished"
    assert before < AGENTS, "every agent answered before the restart: nothing ran across it"
    unanswered = [a for a in answers if a[2] in (None, 503)]
    assert not unanswered, f"agents without an answer: {unanswered[:10]}"
    assert all(g.alive() for g in c.nodes), "\n".join(g.death_note() for g in c.nodes if not g.alive())
    print(f"restart took {t_back - t_restart:.1f} s; {before} answered before it; "
          f"answers: {dict(collections.Counter((a[2], a[3]) for a in answers))}")
    assert_ready_in_one_round(c, "after every agent had its answer")


def test_readyz_after_postgres_restart_before_any_write(private_pg, provider, make_cluster):
    """The same, made deterministic: the nodes' writer connections are opened
    under load, PostgreSQL restarts (fast: every session is cut) while nothing
    reaches the nodes (no request, no background round), and the first request
    after it is /readyz. It must be 200 on both nodes at once: the ping finds
    the broken connection, replaces it and answers in the same call."""
    url = with_schema(private_pg.url, new_schema())
    c = make_cluster(url, n=2, upstreams={"demo": {"url": provider.url, "timeout": "10s", "lease": "5s"}},
                     server={"loop_interval": "1h"})

    def send(i):
        g = c[i % 2]
        k = new_key(f"warm{i}")
        r = g.proxy("POST", "demo", "/charges", key=k, json={"k": k}, headers={"X-Fake-Delay-Ms": "50"})
        return r.status_code

    # concurrent batches on every node, so that each of its writers opens its connection
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        for _ in range(3):
            codes = list(ex.map(send, range(64)))
            assert codes == [200] * 64, collections.Counter(codes)
    assert_ready_in_one_round(c, "before the restart")
    private_pg.restart()
    assert_ready_in_one_round(c, "first request after the restart")
    for g in c.nodes:
        k = new_key("after")
        r = g.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)


DOWN_S = 4        # PostgreSQL stays down this long: the nodes back off (to 5 s between attempts)
HAMMERS = 8       # clients asking the nodes for new keys meanwhile


def test_readyz_follows_postgres_return_through_the_backoff(private_pg, provider, make_cluster):
    """While PostgreSQL is down, requests make a node back off (no connection
    attempt for up to 5 s). When it is back, /readyz must say so at the first
    ask, not when the back-off ends: a ping probes through it (one probe at a
    time). While it is down, /readyz never says 200."""
    url = with_schema(private_pg.url, new_schema())
    c = make_cluster(url, n=2, upstreams={"demo": {"url": provider.url, "timeout": "10s", "lease": "5s"}},
                     server={"loop_interval": "1h"})
    for g in c.nodes:
        k = new_key("warm")
        r = g.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200, describe(r)
    private_pg.down()
    stop = threading.Event()
    codes = collections.Counter()
    lock = threading.Lock()

    def hammer(i):
        for _ in range(2000):
            if stop.is_set():
                return
            k = new_key(f"down{i}")
            try:
                s = c[i % 2].proxy("POST", "demo", "/charges", key=k, json={"k": k}, timeout=HTTP_TIMEOUT).status_code
            except requests.RequestException:
                s = None
            with lock:
                codes[s] += 1
            time.sleep(0.02)

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(HAMMERS)]
    for t in threads:
        t.start()
    down_ready = []
    try:
        deadline = time.monotonic() + DOWN_S
        while time.monotonic() < deadline:
            down_ready += [readyz(g)[0] for g in c.nodes]
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(HTTP_TIMEOUT + 10)
    assert not any(t.is_alive() for t in threads), "a request never got an answer"
    assert 200 not in down_ready, f"/readyz said 200 while PostgreSQL was down: {collections.Counter(down_ready)}"
    assert codes.get(200, 0) == 0 and codes.get(503, 0) > 0, dict(codes)
    private_pg.up()
    assert_ready_in_one_round(c, "first ask after PostgreSQL returned")
    for g in c.nodes:
        k = new_key("after")
        r = g.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
