"""Agents' limits (issue 28, docs/agents.md): hard budgets where the effect happens.

`limit = TARGET[: RULE] [sum({json:/pointer})] N/WINDOW` in an [agent.NAME] section: never more
than N new actions (or N summed) in any window of that length, across every node of one store,
counted in the same transaction as the reservation. Replays, refused requests, released and
denied actions do not count; unknown and held ones do. Past a limit: 429 limit_exceeded with
Retry-After (over_limit = refuse), or the action waits for a person (over_limit = approve).

Every test counts what the provider received: the yes/no answer to "did the agent get more
effects than its budget?". Run on both stores; the two-node storm needs $ONCE_TEST_PG_URL.
Run: ONCE_BIN=build/asan/once ONCE_TEST_PG_URL=... /usr/bin/python3 -m pytest -q tests/integration/test_agent_limits.py
"""
import concurrent.futures
import time
import uuid

import pytest
import requests

from gateway import NO_PG_REASON, Provider, assert_problem, describe, new_key, pg_base_url, require_serve, store_url
from multinode import Cluster
from hooks_harness import AgentGateway, ini
from test_agents import bearer

BOT = "tok-bot-2c4e6a8b0d1f3e5a"
OPS = "tok-ops-7b9d1f3a5c7e9b0d"


def write_tokens(d):
    p = d / "tokens"
    p.write_text(f"{BOT} agent bot\n{OPS} operator ops\n")
    p.chmod(0o600)
    return p


def start(tmp_path, store_kind, provider, agent, upstream=None, name="gw"):
    require_serve()
    tokens = write_tokens(tmp_path)
    up = {"url": provider.url}
    up.update(upstream or {})
    g = AgentGateway(tmp_path / name, {"agent.bot": agent}, sources={}, upstreams={"demo": up},
                     server={"tokens_file": str(tokens), "loop_interval": "200ms"}, store_kind=store_kind)
    g.start()
    return g


def charge(g, key=None, body=None, path="/charges"):
    return requests.post(f"{g.url}/v1/proxy/demo{path}", json={"amount": 1} if body is None else body,
                         headers={**bearer(BOT), "Idempotency-Key": key or new_key()}, timeout=30)


@pytest.fixture
def provider():
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def gateways():
    gs = []
    yield gs
    for g in gs:
        g.stop()


def test_count_limit_at_the_boundary_and_replays_are_free(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider, {"allow": "demo: *", "limit": "demo 3/1h"})
    gateways.append(g)
    keys = [new_key() for _ in range(3)]
    for k in keys:
        r = charge(g, k)
        assert r.status_code == 200, describe(r)
    r = charge(g)
    assert_problem(r, 429, "limit_exceeded")
    assert "demo 3/1h" in r.json()["detail"]
    retry = int(r.headers["Retry-After"])
    assert 0 < retry <= 3600 + 120, r.headers
    # A replay is not a new action: it is answered, and costs nothing.
    for k in keys:
        r = charge(g, k)
        assert r.status_code == 200 and r.headers.get("Once-Outcome") == "replayed", describe(r)
    assert provider.count() == 3
    # The operator sees the use.
    r = requests.get(f"{g.url}/v1/agents", headers=bearer(OPS), timeout=30)
    assert r.status_code == 200, describe(r)
    bot = [a for a in r.json()["agents"] if a["name"] == "bot"][0]
    assert bot["limits"][0]["limit"] == "demo 3/1h" and bot["limits"][0]["used"] == 3, bot
    assert bot["limits"][0]["max"] == 3 and bot["limits"][0]["window_s"] == 3600
    assert requests.get(f"{g.url}/v1/agents", headers=bearer(BOT), timeout=30).status_code == 403
    text = requests.get(f"{g.url}/metrics", timeout=30).text
    assert 'once_limit_used{agent="bot",limit="demo 3/1h"} 3\n' in text, text[-3000:]
    assert 'once_agent_actions_total{agent="bot",outcome="completed"} 3\n' in text, text[-3000:]
    assert 'once_agent_actions_total{agent="bot",outcome="replayed"} 3\n' in text, text[-3000:]
    assert 'once_refusals_total{agent="bot",code="limit_exceeded"} 1\n' in text, text[-3000:]
    assert 'once_refusals_total{agent="bot",code="forbidden"} 1\n' in text, text[-3000:]
    # The record names the agent, and ?agent= finds it.
    r = requests.get(f"{g.url}/v1/actions/demo/{keys[0]}", headers=bearer(OPS), timeout=30)
    assert r.json()["agent"] == "bot", r.json()
    r = requests.get(f"{g.url}/v1/actions", params={"scope": "demo", "agent": "bot"}, headers=bearer(OPS),
                     timeout=30)
    assert sorted(a["key"] for a in r.json()["items"]) == sorted(keys)


def test_a_limited_request_needs_a_key(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider, {"allow": "demo: *", "limit": "demo 3/1h"})
    gateways.append(g)
    r = requests.post(f"{g.url}/v1/proxy/demo/charges", json={}, headers=bearer(BOT), timeout=30)
    assert_problem(r, 400, "key_required")
    assert provider.count() == 0


def test_sum_limit_and_its_field(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider,
              {"allow": "demo: *", "limit": "demo: POST /charges* sum({json:/amount}) 100/1h"})
    gateways.append(g)
    assert charge(g, body={"amount": 60}).status_code == 200
    assert charge(g, body={"amount": 40}).status_code == 200
    r = charge(g, body={"amount": 1})
    assert_problem(r, 429, "limit_exceeded")
    assert "Retry-After" in r.headers
    # More than the whole budget: never, so no Retry-After.
    r = charge(g, body={"amount": 150})
    assert_problem(r, 429, "limit_exceeded")
    assert "Retry-After" not in r.headers
    for bad in ({"amount": "ten"}, {}, {"amount": -5}):
        r = charge(g, body=bad)
        assert_problem(r, 400, "invalid_request")
        assert "/amount" in r.json()["detail"]
    # Other paths are not under this limit.
    assert charge(g, body={"amount": 500}, path="/refunds").status_code == 200
    assert provider.count() == 3


def test_room_comes_back_after_the_window(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider, {"allow": "demo: *", "limit": "demo 2/2s"})
    gateways.append(g)
    assert charge(g).status_code == 200
    assert charge(g).status_code == 200
    r = charge(g)
    assert_problem(r, 429, "limit_exceeded")
    wait = int(r.headers["Retry-After"])
    assert 1 <= wait <= 3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.25)
        r = charge(g)
        if r.status_code == 200:
            break
    assert r.status_code == 200, describe(r)
    assert provider.count() == 3


def test_release_gives_back_and_unknown_stays_counted(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider, {"allow": ["demo: *", "actions: jobs"], "limit": "actions 2/1h"})
    gateways.append(g)

    def reserve(key):
        return requests.post(f"{g.url}/v1/actions", json={"scope": "jobs", "key": key}, headers=bearer(BOT),
                             timeout=30)

    a, b = reserve("a"), reserve("b")
    assert a.status_code == 201 and b.status_code == 201, describe(a)
    assert_problem(reserve("c"), 429, "limit_exceeded")
    r = requests.post(f"{g.url}/v1/actions/release", json={"scope": "jobs", "key": "a", "token": a.json()["token"]},
                      headers=bearer(BOT), timeout=30)
    assert r.status_code == 200, describe(r)
    c = reserve("c")
    assert c.status_code == 201, describe(c)
    r = requests.post(f"{g.url}/v1/actions/unknown", json={"scope": "jobs", "key": "b", "token": b.json()["token"],
                                                           "reason": "timed out"},
                      headers=bearer(BOT), timeout=30)
    assert r.status_code == 200, describe(r)
    assert_problem(reserve("d"), 429, "limit_exceeded")


def test_over_limit_approve_waits_for_a_person(tmp_path, store_kind, provider, gateways):
    g = start(tmp_path, store_kind, provider,
              {"allow": "demo: *", "limit": "demo 1/1h", "over_limit": "approve"})
    gateways.append(g)
    assert charge(g).status_code == 200
    key = new_key()
    r = charge(g, key)
    assert r.status_code == 202, describe(r)
    assert provider.count() == 1
    rec = requests.get(f"{g.url}/v1/actions/demo/{key}", headers=bearer(OPS), timeout=30).json()
    assert rec["state"] == "awaiting_approval" and rec["waits_for"] == "limit", rec
    r = requests.post(f"{g.url}/v1/actions/demo/{key}/approve", json={}, headers=bearer(OPS), timeout=30)
    assert r.status_code == 200, describe(r)
    provider.wait_count(2, timeout=15)
    assert provider.count() == 2


def test_concurrent_new_intents_send_exactly_the_limit(tmp_path, store_kind, provider, gateways):
    n = 5
    g = start(tmp_path, store_kind, provider, {"allow": "demo: *", "limit": f"demo {n}/1h"})
    gateways.append(g)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        codes = list(ex.map(lambda _: charge(g).status_code, range(4 * n)))
    assert codes.count(200) == n and codes.count(429) == 3 * n, codes
    assert provider.count() == n


@pytest.mark.skipif(not pg_base_url(), reason=NO_PG_REASON)
def test_two_nodes_on_one_postgres_share_the_limit(tmp_path, provider):
    n = 6
    tokens = write_tokens(tmp_path)
    url = store_url("postgres", tmp_path)
    cl = Cluster(tmp_path, url, 2, upstreams={"demo": {"url": provider.url}},
                 server={"tokens_file": str(tokens)})
    for node in cl.nodes:
        with open(node.config_path, "a") as f:
            f.write(ini({"agent.bot": {"allow": "demo: *", "limit": f"demo {n}/1h"}}))
        node.write_config = lambda: None  # keep the agent section on restart
    cl.start()
    try:
        def one(i):
            return charge(cl[i % 2]).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(one, range(4 * n)))
        assert codes.count(200) == n and codes.count(429) == 3 * n, codes
        assert provider.count() == n
    finally:
        cl.stop_clean()


def test_sigkill_between_count_and_send_keeps_the_count_until_it_settles(tmp_path, store_kind, provider, gateways):
    """The count is taken with the reservation, before the call: a gateway killed mid-call leaves
    it taken (the action may have happened), and only its settling as released gives it back."""
    import threading
    g = start(tmp_path, store_kind, provider, {"allow": "demo: *", "limit": "demo 1/1h"},
              upstream={"timeout": "2s", "lease": "1s"})
    gateways.append(g)
    key = new_key()
    def hanging_call():
        try:
            requests.post(f"{g.url}/v1/proxy/demo/charges", json={"amount": 1},
                          headers={**bearer(BOT), "Idempotency-Key": key, "X-Fake-Hang": "1"}, timeout=30)
        except requests.RequestException:
            pass  # the gateway is killed under it

    t = threading.Thread(target=hanging_call, daemon=True)
    t.start()
    assert provider.wait_count(1) == 1
    g.kill()
    t.join(10)
    g.start()
    assert_problem(charge(g), 429, "limit_exceeded")
    deadline = time.monotonic() + 15
    state = None
    while time.monotonic() < deadline:
        state = requests.get(f"{g.url}/v1/actions/demo/{key}", headers=bearer(OPS), timeout=30).json()["state"]
        if state in ("unknown", "held"):
            break
        time.sleep(0.1)
    assert state in ("unknown", "held"), state
    assert_problem(charge(g), 429, "limit_exceeded")
    r = requests.post(f"{g.url}/v1/actions/demo/{key}/resolve", json={"outcome": "released"}, headers=bearer(OPS),
                      timeout=30)
    assert r.status_code == 200, describe(r)
    assert charge(g).status_code == 200
    assert provider.count() == 2


def test_mcp_tool_limit_with_a_sum_over_the_arguments(tmp_path, store_kind, gateways):
    """A limit on an MCP tool, summing an argument: past it, a tool error (once/outcome
    limit_exceeded) the model can read; the server runs the tool only within the budget."""
    from mcp_harness import McpUpstream, call, node_or_skip, once_meta, result_of, run_client
    require_serve()
    node_or_skip()
    shop = McpUpstream(tmp_path / "shop", json=True, name="shop")
    try:
        tokens = write_tokens(tmp_path)
        g = AgentGateway(tmp_path / "gw", {"mcp.shop": {"url": shop.url},
                                            "agent.bot": {"allow": "mcp.shop: charge, lookup",
                                                          "limit": "mcp.shop: charge sum({json:/arguments/amount}) 10/1h"}},
                         sources={}, upstreams={}, server={"tokens_file": str(tokens)}, store_kind=store_kind)
        g.start()
        gateways.append(g)
        orders = ["A-" + uuid.uuid4().hex[:8] for _ in range(3)]
        steps = [call("charge", {"order_id": orders[0], "amount": 6}), call("charge", {"order_id": orders[1], "amount": 4}),
                 call("charge", {"order_id": orders[2], "amount": 1})]
        lines, run = run_client(f"{g.url}/v1/mcp/shop", steps, token=BOT)
        results = [result_of(x, run) for x in lines if x.get("op") == "call"]
        assert [once_meta(r).get("once/outcome") for r in results] == ["completed", "completed", "limit_exceeded"], results
        assert results[2].get("isError") is True
        assert shop.count(orders[0]) == 1 and shop.count(orders[1]) == 1 and shop.count(orders[2]) == 0
    finally:
        shop.stop()
