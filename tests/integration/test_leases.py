"""Leases that renew (issue 13, docs/guarantees.md §4): a reservation lives `lease` without news
from its owner, and the owner renews it every lease/3 while its call runs, so

- a live call longer than the lease stays pending: retries get 409 key_in_flight
  (never outcome_unknown), it completes once, and /metrics shows the lease held;
- a SIGKILLed gateway's action is unknown (then held) within one lease + one loop
  interval (+ slack), whatever the upstream's timeout; never resent;
- on three nodes sharing PostgreSQL a survivor does that for a dead node;
- a stalled node (SIGSTOP) that comes back with the answer records it as a late
  completion, and the retry gets it replayed;
- POST /v1/actions/renew: the agent's own renewal, its answers and errors; an agent
  that renews keeps its reservation past the lease.

Run on both stores (store_kind); the multi-node tests need $ONCE_TEST_PG_URL.
Run: ONCE_BIN=build/asan/once ONCE_TEST_PG_URL=... /usr/bin/python3 -m pytest -q tests/integration/test_leases.py
"""
import datetime
import os
import signal
import threading
import time
import uuid

import pytest
import requests

from gateway import (NO_PG_REASON, Gateway, Provider, assert_problem, describe, is_time, new_key, outcome,
                     pg_base_url, require_serve, store_url)
from hooks_harness import parse_metrics
from multinode import Cluster, log_counts

LEASE_S = 2
LOOP_S = 0.2
SLACK_S = 5          # a loaded 2-core machine running ASan builds: generous, but far below the old ~65 s
SERVER = {"lease": f"{LEASE_S}s", "loop_interval": f"{int(LOOP_S * 1000)}ms"}


# --------------------------------------------------------------------------- helpers

@pytest.fixture
def provider():
    """A fresh fake provider per test: its effect count is the test's."""
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def clusters():
    """Clusters a test made: every live node stopped cleanly at the end."""
    made = []
    yield made
    failures = []
    for c in made:
        try:
            c.stop_clean()
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def need_pg():
    if not pg_base_url():
        pytest.skip(NO_PG_REASON)


def state_of(g, scope, key):
    r = g.action(scope, key, timeout=10)
    assert r.status_code == 200, describe(r)
    return r.json()


def parse_time(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def fire(g, key, headers, body=None, timeout=60):
    """A proxied POST in the background: (thread, out) with out["r"] or out["e"]."""
    out = {}

    def run():
        try:
            out["r"] = g.proxy("POST", "demo", "/charges", key=key, json=body or {"amount": 500},
                               headers=headers, timeout=timeout)
        except requests.RequestException as e:
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def wait_state(g, scope, key, states, deadline):
    """Polls until the action's state is one of states or the monotonic deadline passes;
    returns (record, monotonic time it was seen)."""
    rec = state_of(g, scope, key)
    while rec["state"] not in states and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = state_of(g, scope, key)
    return rec, time.monotonic()


def leases_held(g):
    r = requests.get(g.url + "/metrics", timeout=10)
    assert r.status_code == 200, describe(r)
    return parse_metrics(r.text).value("once_leases_held")


def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


# =========================================================================== the proxy renews

def test_live_call_longer_than_the_lease_stays_in_flight_and_completes_once(tmp_path, provider, store_kind,
                                                                           gateways):
    """A 6-second call with lease = 2s (upstream timeout 30s): the gateway renews the lease,
    so retries at ~1, 3 and 5 s get 409 key_in_flight (never outcome_unknown), the lease's
    end moves on, /metrics shows once_leases_held 1 during the call and 0 after, and the
    call completes once (200 completed, one effect, the action completed)."""
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "30s"}}, server=SERVER,
                store_kind=store_kind)
    gateways.append(g)
    g.start()
    key = new_key("live")
    t, out = fire(g, key, {"X-Fake-Delay-Ms": "6000"})
    assert provider.wait_count(1, timeout=20) == 1, "the call never reached the provider"
    t0 = time.monotonic()

    # the lease of the call in flight is held (and renewed) by this node
    deadline = t0 + 3
    held = leases_held(g)
    while held != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        held = leases_held(g)
    assert held == 1, f"once_leases_held {held} during the call"

    leases, answers = [], []
    for at in (1, 3, 5):
        sleep_until(t0 + at)
        r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 500}, timeout=10)
        answers.append((round(time.monotonic() - t0, 1), r.status_code, r.headers.get("Once-Outcome")))
        j = assert_problem(r, 409, "key_in_flight")
        assert outcome(r) == "in_flight", describe(r)
        assert "Retry-After" in r.headers, describe(r)
        assert j.get("code") != "outcome_unknown"
        rec = state_of(g, "demo", key)
        assert rec["state"] == "pending", f"{at} s into a live call with lease {LEASE_S}s: {rec}"
        leases.append(rec["lease_expires_at"])
    assert "r" not in out, f"answered before the provider did: {out}"
    assert all(is_time(x) for x in leases), leases
    ends = [parse_time(x) for x in leases]
    assert ends[0] < ends[1] < ends[2], f"the lease was not renewed: lease_expires_at at 1/3/5 s: {leases}"

    t.join(30)
    assert "r" in out, f"the call did not answer: {out.get('e')!r}\n{g.stderr()[-3000:]}"
    r = out["r"]
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    rec = state_of(g, "demo", key)
    assert rec["state"] == "completed" and rec["attempt"] == 1, rec
    assert rec.get("note") is None, f"a live call is not a late completion: {rec}"
    assert leases_held(g) == 0, "the lease is still held after the call ended"
    r2 = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    assert r2.status_code == 200 and outcome(r2) == "replayed" and r2.content == r.content, describe(r2)
    time.sleep(0.5)
    assert provider.count() == 1, f"{provider.count()} effects; retries {answers}"


@pytest.mark.parametrize("fault", [{"X-Fake-Hang": "1"}, {"X-Fake-Delay-Ms": "30000"}], ids=["hang", "slow"])
def test_sigkilled_gateway_action_unknown_within_one_lease(tmp_path, provider, store_kind, gateways, fault):
    """lease = 2s, loop 200ms, upstream timeout 60s: the gateway is SIGKILLed during the call
    and restarted on the same store. The action turns unknown/held within lease + loop (+ 5 s
    slack, counted from the kill or from the restart if that came later) — not timeout + 5 s
    as before; it ends held, the retry gets 409 outcome_unknown and nothing is resent."""
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "60s"}}, server=SERVER,
                store_kind=store_kind)
    gateways.append(g)
    g.start()
    key = new_key("kill")
    t, out = fire(g, key, fault)
    assert provider.wait_count(1, timeout=20) == 1, "the call never reached the provider"
    t_kill = time.monotonic()
    g.kill()
    t.join(10)
    assert "r" not in out or out["r"].status_code != 200, "answered 200 although killed mid-call"

    g.start()
    t_up = time.monotonic()
    bound = max(t_kill + LEASE_S + LOOP_S, t_up) + SLACK_S
    rec, seen = wait_state(g, "demo", key, ("unknown", "held"), bound)
    assert rec["state"] in ("unknown", "held"), (
        f"lease {LEASE_S}s, loop {LOOP_S}s, upstream timeout 60s: {time.monotonic() - t_kill:.1f} s after the "
        f"kill (restart took {t_up - t_kill:.1f} s) the action is still {rec}")
    assert seen <= bound, f"unknown only {seen - t_kill:.1f} s after the kill"
    rec, _ = wait_state(g, "demo", key, ("held",), time.monotonic() + 10)
    assert rec["state"] == "held" and rec["attempt"] == 1, rec
    r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    j = assert_problem(r, 409, "outcome_unknown")
    assert j.get("state") == "held", j
    time.sleep(0.5)
    assert provider.count() == 1, "an action of a killed gateway was resent"


def test_lease_expired_action_is_looked_up_only_after_the_upstream_timeout(tmp_path, provider, store_kind,
                                                                          gateways):
    """An upstream with a lookup, lease = 2s, timeout 5s, lookup_backoff 500ms: the gateway is
    SIGKILLed while the provider stalls 4 s before it performs the effect. The lease expires
    after ~2 s, but a lookup then would find nothing yet and free the key for a second send;
    the reconciler waits until the call's timeout has surely passed, so the lookup finds the
    effect: the action ends completed, one effect, and the retry replays it."""
    require_serve()
    timeout_s = 5
    up = {"url": provider.url, "timeout": f"{timeout_s}s",
          "lookup": "GET /v1/lookup?by=json:/ref&ref={key}", "lookup_found": "json:/data/0/id",
          "lookup_absent": "json-empty:/data", "lookup_backoff": "500ms", "lookup_attempts": 5}
    g = Gateway(tmp_path / "gw", {"demo": up}, server=SERVER, store_kind=store_kind)
    gateways.append(g)
    g.start()
    key = new_key("lookup")
    t_sent_wall = time.time()
    t, out = fire(g, key, {"X-Fake-Stall-Ms": "4000"}, body={"ref": key, "amount": 500})
    # the reservation is durable before the request goes out; give it a moment to arrive
    deadline = time.monotonic() + 10
    r = g.action("demo", key)
    while r.status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.02)
        r = g.action("demo", key)
    assert r.status_code == 200 and r.json()["state"] == "pending", describe(r)
    time.sleep(0.5)
    assert provider.count() == 0, "the provider performed the effect before its stall ended"
    g.kill()
    t.join(10)
    g.start()

    rec, _ = wait_state(g, "demo", key, ("completed", "released", "held"),
                        time.monotonic() + LEASE_S + timeout_s + 0.5 + 20)
    seen = requests.get(provider.url + "/_fake/lookups", timeout=10).json()
    assert rec["state"] == "completed", (
        f"the lease-expired action was settled {rec['state']} (effects {provider.count()}, lookups at "
        f"{[round(x['time'] - t_sent_wall, 1) for x in seen]} s after the send): {rec}")
    assert seen, "completed without a lookup?"
    first = min(x["time"] for x in seen) - t_sent_wall
    assert first >= timeout_s, f"looked up {first:.1f} s after the send, before the upstream timeout ({timeout_s}s)"
    assert provider.count() == 1
    r = g.proxy("POST", "demo", "/charges", key=key, json={"ref": key, "amount": 500})
    assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
    time.sleep(0.5)
    assert provider.count() == 1, "sent twice"


# =========================================================================== several nodes (PostgreSQL)

def test_three_nodes_survivor_holds_a_dead_nodes_action_within_one_lease(tmp_path, provider, clusters):
    """Three nodes on PostgreSQL, lease = 2s, loop 200ms, upstream timeout 60s: node A takes
    a hanging call and is SIGKILLed. A surviving node's loop makes the action unknown, then
    held, within lease + loop (+ slack) of the kill; retries on B and C get 409
    outcome_unknown; the provider saw one effect."""
    need_pg()
    url = store_url("postgres", tmp_path)
    c = Cluster(tmp_path / "c", url, 3, upstreams={"demo": {"url": provider.url, "timeout": "60s"}},
                server=SERVER)
    clusters.append(c)
    c.start()
    a, b, d = c.nodes
    key = new_key("mn-kill")
    t, out = fire(a, key, {"X-Fake-Hang": "1"})
    assert provider.wait_count(1, timeout=20) == 1, "the call never reached the provider"
    t_kill = time.monotonic()
    a.kill()
    t.join(10)
    assert "r" not in out or out["r"].status_code != 200, "answered although killed"

    bound = t_kill + LEASE_S + LOOP_S + SLACK_S
    rec, seen = wait_state(d, "demo", key, ("unknown", "held"), bound)
    assert rec["state"] in ("unknown", "held"), (
        f"{time.monotonic() - t_kill:.1f} s after the kill (lease {LEASE_S}s, loop {LOOP_S}s) still {rec}")
    rec, seen = wait_state(d, "demo", key, ("held",), bound)
    assert rec["state"] == "held", f"{time.monotonic() - t_kill:.1f} s after the kill: {rec}"
    assert rec["attempt"] == 1, rec
    pat = r"leases expired: (?P<expired>\d+), actions held: (?P<held>\d+)"
    counts = [log_counts(g, pat) for g in (b, d)]
    assert sum(x.get("expired", 0) for x in counts) == 1, counts
    for g in (b, d):
        r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 1})
        j = assert_problem(r, 409, "outcome_unknown")
        assert j.get("state") == "held", j
    time.sleep(0.5)
    assert provider.count() == 1, "the dead node's action was resent"


def test_stalled_node_late_answer_is_a_late_completion(tmp_path, provider, clusters):
    """Two nodes on PostgreSQL, lease = 2s, loop 200ms, upstream timeout 30s: A forwards a
    call the provider answers after 4 s and is SIGSTOPped right away (it cannot renew). B
    expires the lease (unknown, then held) and a retry on B gets 409 outcome_unknown. Once
    the provider has answered, SIGCONT: A records the answer anyway — the action ends
    completed with a "late completion" note, one effect, and a retry gets it replayed."""
    need_pg()
    url = store_url("postgres", tmp_path)
    c = Cluster(tmp_path / "c", url, 2, upstreams={"demo": {"url": provider.url, "timeout": "30s"}},
                server=SERVER)
    clusters.append(c)
    c.start()
    a, b = c.nodes
    key = new_key("stall")
    t, out = fire(a, key, {"X-Fake-Delay-Ms": "4000"})
    assert provider.wait_count(1, timeout=20) == 1, "the call never reached the provider"
    t_sent = time.monotonic()
    os.kill(a.pid, signal.SIGSTOP)
    try:
        bound = t_sent + LEASE_S + LOOP_S + SLACK_S
        rec, _ = wait_state(b, "demo", key, ("unknown", "held"), bound)
        assert rec["state"] in ("unknown", "held"), (
            f"{time.monotonic() - t_sent:.1f} s after A stalled (lease {LEASE_S}s) still {rec}")
        r = b.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
        j = assert_problem(r, 409, "outcome_unknown")
        assert j.get("state") in ("unknown", "held"), j
        during = state_of(b, "demo", key)
        # the provider's answer is waiting in A's socket
        sleep_until(t_sent + 4.5)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    t.join(30)
    assert "r" in out, f"A never answered its caller: {out.get('e')!r}\n{a.stderr()[-3000:]}"
    r = out["r"]
    assert r.status_code == 200, "A recorded the late answer, so its caller gets it" + describe(r)

    rec, _ = wait_state(b, "demo", key, ("completed",), time.monotonic() + 10)
    assert rec["state"] == "completed", f"the late answer was not recorded (it was {during['state']}): {rec}"
    assert rec["attempt"] == 1, rec
    assert isinstance(rec.get("note"), str) and rec["note"].startswith("late completion"), rec
    r2 = b.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    assert r2.status_code == 200 and outcome(r2) == "replayed", describe(r2)
    assert r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert r2.content == r.content, "the replay is not the answer A recorded" + describe(r2)
    assert r2.json().get("id") == "eff_1", describe(r2)
    time.sleep(0.5)
    assert provider.count() == 1, "the stalled node's action was resent"


# =========================================================================== POST /v1/actions/renew

@pytest.fixture(scope="module")
def api(tmp_path_factory, store_kind):
    """One gateway per store kind for the actions API tests: lease 2s, loop 200ms, and an
    upstream (so its scope is reserved)."""
    require_serve()
    g = Gateway(tmp_path_factory.mktemp("leases-api"), {"demo": {"url": "http://127.0.0.1:9"}},
                server=SERVER, store_kind=store_kind)
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


def scope():
    return "agent-" + uuid.uuid4().hex[:10]


def reserve(g, s, k, **extra):
    return g.post("/v1/actions", json=dict({"scope": s, "key": k}, **extra))


def reserved(g, s, k, **extra):
    r = reserve(g, s, k, **extra)
    assert r.status_code == 201, describe(r)
    return r.json()


def settle(g, what, s, k, token, **extra):
    return g.post(f"/v1/actions/{what}", json=dict({"scope": s, "key": k, "token": token}, **extra))


def renew(g, s, k, token, **extra):
    return settle(g, "renew", s, k, token, **extra)


def other_token(tok):
    c = tok[-1]
    return tok[:-1] + ("0" if c != "0" else "1")


def test_renew_moves_the_lease_on(api):
    """Renewing with lease_ms 60000 answers 200 {scope, key, lease_expires_at} about a minute
    later than the reservation's lease; the record says the same; a renewal without
    lease_ms takes the server's lease (2 s from now)."""
    s, k = scope(), new_key()
    j = reserved(api, s, k, lease_ms=2000)
    first = parse_time(j["lease_expires_at"])
    r = renew(api, s, k, j["token"], lease_ms=60000)
    assert r.status_code == 200, describe(r)
    body = r.json()
    assert body["scope"] == s and body["key"] == k and is_time(body["lease_expires_at"]), body
    moved = parse_time(body["lease_expires_at"])
    assert moved - first >= datetime.timedelta(seconds=55), (j["lease_expires_at"], body)
    rec = state_of(api, s, k)
    assert rec["state"] == "pending" and rec["lease_expires_at"] == body["lease_expires_at"], rec
    now = datetime.datetime.now(datetime.timezone.utc)
    r = renew(api, s, k, j["token"])
    later = datetime.datetime.now(datetime.timezone.utc)
    assert r.status_code == 200, describe(r)
    default = parse_time(r.json()["lease_expires_at"])
    lease = datetime.timedelta(seconds=LEASE_S)
    slack = datetime.timedelta(seconds=1)
    assert now + lease - slack <= default <= later + lease + slack, \
        f"without lease_ms the server's lease ({LEASE_S}s) applies from now ({now}): {r.json()}"
    assert settle(api, "complete", s, k, j["token"], result={"ok": 1}).status_code == 200


def test_renew_with_a_stale_token_409_and_changes_nothing(api):
    """A token of an earlier attempt (released, reserved again) or any other well-formed
    token: 409 stale_token, and the current attempt's lease is untouched."""
    s, k = scope(), new_key()
    old = reserved(api, s, k)["token"]
    assert settle(api, "release", s, k, old).status_code == 200
    cur = reserved(api, s, k, lease_ms=60000)
    assert cur["attempt"] == 2, cur
    before = state_of(api, s, k)
    assert_problem(renew(api, s, k, old, lease_ms=600000), 409, "stale_token")
    assert_problem(renew(api, s, k, other_token(cur["token"]), lease_ms=600000), 409, "stale_token")
    after = state_of(api, s, k)
    assert after["state"] == "pending" and after["attempt"] == 2, after
    assert after["lease_expires_at"] == before["lease_expires_at"], (before, after)


@pytest.mark.parametrize("finish", ["unknown", "complete", "release"])
def test_renew_of_a_row_no_longer_pending_409_invalid_transition(api, finish):
    """After POST /v1/actions/unknown (or complete, release) the lease is over: a renewal
    with the same token is 409 invalid_transition and the state stays."""
    s, k = scope(), new_key()
    tok = reserved(api, s, k)["token"]
    extra = {"result": {"ok": 1}} if finish == "complete" else {}
    r = settle(api, finish, s, k, tok, **extra)
    assert r.status_code == 200, describe(r)
    state = state_of(api, s, k)["state"]
    assert_problem(renew(api, s, k, tok, lease_ms=60000), 409, "invalid_transition")
    after = state_of(api, s, k)["state"]
    assert after == state or (state == "unknown" and after == "held"), (state, after)


def test_renew_of_a_missing_action_404(api):
    """A well-formed token for a key that has no row: 404 not_found."""
    tok = reserved(api, scope(), new_key())["token"]
    assert_problem(renew(api, scope(), new_key(), tok), 404, "not_found")


@pytest.mark.parametrize("lease_ms", [0, -1, "2000", 1.5, 7 * 24 * 3600 * 1000 + 1], ids=repr)
def test_renew_bad_lease_ms_400(api, lease_ms):
    """lease_ms must be an integer between 1 ms and 7 days: else 400 invalid_request and
    the lease is untouched."""
    s, k = scope(), new_key()
    j = reserved(api, s, k, lease_ms=60000)
    before = state_of(api, s, k)["lease_expires_at"]
    assert_problem(renew(api, s, k, j["token"], lease_ms=lease_ms), 400, "invalid_request")
    assert state_of(api, s, k)["lease_expires_at"] == before


def test_agent_that_renews_keeps_its_reservation_past_the_lease(api):
    """lease = 2s, loop 200ms: an agent whose own call takes 6 s renews every ~600 ms; all
    that time another reserve of the key gets 409 key_in_flight; then it completes and a
    reserve replays the result. A reservation made beside it and never renewed turns
    unknown/held within lease + loop (+ slack): the renewals are what kept the first."""
    s, k, lazy = scope(), new_key("renewed"), new_key("lazy")
    j = reserved(api, s, k)
    reserved(api, s, lazy)
    t0 = time.monotonic()
    conflicts, renewals, lazy_seen = [], [], None
    i = 0
    while time.monotonic() - t0 < 6:
        i += 1
        sleep_until(t0 + 0.6 * i)
        r = renew(api, s, k, j["token"])
        renewals.append(r.status_code)
        assert r.status_code == 200, f"renewal {i} at {time.monotonic() - t0:.1f} s" + describe(r)
        if i % 2 == 0:
            r = reserve(api, s, k)
            conflicts.append(r.status_code)
            assert_problem(r, 409, "key_in_flight")
        if lazy_seen is None and state_of(api, s, lazy)["state"] in ("unknown", "held"):
            lazy_seen = time.monotonic() - t0
    assert state_of(api, s, k)["state"] == "pending"
    assert lazy_seen is not None and lazy_seen <= LEASE_S + LOOP_S + SLACK_S, \
        f"the reservation that was never renewed is {state_of(api, s, lazy)} after 6 s"
    r = settle(api, "complete", s, k, j["token"], result={"id": "agent-1"}, provider_id="p-1")
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)
    assert r.json().get("note") is None, r.json()
    r = reserve(api, s, k)
    assert r.status_code == 200, describe(r)
    body = r.json()
    assert body["status"] == "completed" and body["result"] == {"id": "agent-1"} and body["replayed"] is True, body
    assert len(renewals) >= 9 and len(conflicts) >= 4, (renewals, conflicts)
