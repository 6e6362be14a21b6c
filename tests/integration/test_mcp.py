"""The MCP gateway (issue 17, docs/mcp.md, /v1/mcp/NAME): exactly-once tool calls for agents
that speak the Model Context Protocol, checked against the behaviour docs/mcp.md describes.

Both ends are the official MCP TypeScript SDK from npm (tests/clients, `npm ci`), never an
imitation: the upstream is tests/clients/mcp_server.mjs (McpServer over
StreamableHTTPServerTransport, SSE answers by default, JSON with --json; or over stdio,
spawned by once), the agent is tests/clients/mcp_client.mjs (Client over
StreamableHTTPClientTransport), run as a subprocess with a JSON script; see mcp_harness.py.

Every test counts the upstream's effects (one JSON line per effect in the server's effects
file, filtered by a fresh order id): the yes/no answer to "did it happen exactly once?".

One gateway per module and store kind (store_kind: SQLite and PostgreSQL), with a tokens_file
(every agent call carries the agent token) and these [mcp.NAME] sections:
  shop     the SSE upstream, header X-Api-Key injected   tmpl  key.charge = {json:/arguments/order_id}
  ro       readonly = charge                              gated approve = refund
  careful  approve = destructive                          quick timeout = 2s (for `hang`)
  impatient  wait = 1s (a duplicate gives up on the first call: in_flight)
  plain    the JSON upstream (enableJsonResponse)         fragile its own upstream (charge_then_die)
  local    a stdio upstream: command = node mcp_server.mjs --stdio ...
Skipped (with the reason) only when node or tests/clients/node_modules is missing.

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_mcp.py -k sqlite
"""
import json
import random
import string
import time
import urllib.parse

import pytest
import requests

from gateway import Gateway, assert_problem, describe, new_key, require_serve
from hooks_harness import parse_metrics
from mcp_harness import (AMBIGUOUS, McpUpstream, call, calls_of, hashed_key, key_of, node_or_skip, once_meta,
                         outcome_of, result_of, run_client, start_client, stdio_command, texts, without_once_meta)

AGENT = "tok-agent-mcp-1a2b3c4d5e6f"
OPERATOR = "tok-oper-mcp-9f8e7d6c5b4a"
SECRET = "upstream-secret-7d1e"
OPER_H = {"Authorization": f"Bearer {OPERATOR}"}
SEND_WITHIN_S = 10   # an approved call is sent within one loop interval; slack for ASan on 2 cores
SETTLE_S = 1.0       # how long a test waits to see that nothing more reaches the upstream


class Env:
    pass


@pytest.fixture(scope="module")
def env(tmp_path_factory, store_kind):
    require_serve()
    node_or_skip()
    work = tmp_path_factory.mktemp("mcp")
    e = Env()
    e.sse = McpUpstream(work / "sse", name="sse")
    e.json = McpUpstream(work / "json", json=True, name="json")
    e.fragile = McpUpstream(work / "fragile", name="fragile")
    cmd, e.local = stdio_command(work / "stdio")
    tokens = work / "tokens"
    tokens.write_text(f"{AGENT} agent bot\n{OPERATOR} operator alice\n")
    tokens.chmod(0o600)
    mcp = {
        "shop": {"url": e.sse.url, "header": f"X-Api-Key: {SECRET}", "timeout": "20s"},
        "tmpl": {"url": e.sse.url, "key.charge": "{json:/arguments/order_id}"},
        "ro": {"url": e.sse.url, "readonly": "charge"},
        "gated": {"url": e.sse.url, "approve": "refund"},
        "careful": {"url": e.sse.url, "approve": "destructive"},
        "quick": {"url": e.sse.url, "timeout": "2s"},
        "impatient": {"url": e.sse.url, "wait": "1s"},
        "plain": {"url": e.json.url},
        "fragile": {"url": e.fragile.url},
        "local": {"command": cmd, "timeout": "20s"},
    }
    server = {"tokens_file": str(tokens), "loop_interval": "200ms", "lease": "2s"}
    e.g = Gateway(work / "gw", {}, server=server, store_kind=store_kind, mcp=mcp)
    try:
        e.g.start()
        yield e
        rc = e.g.stop()
        assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{e.g.stderr()[-3000:]}"
        assert not e.g.sanitizer_reports(), e.g.stderr(all_runs=True)[-6000:]
    finally:
        if e.g.alive():
            e.g.kill()
        for up in (e.sse, e.json, e.fragile):
            up.stop()


# Tests of the protocol alone (what passes through, which key is chosen, what is relayed): the
# store plays no part beyond what the ledger tests show on both, so they run on SQLite only and
# keep `make test` within CI's 30 minutes. The ledger's part (duplicates, waits, unknown, held,
# approvals, the chaos test) runs on both stores.
protocol_only = pytest.mark.protocol_only


@pytest.fixture(autouse=True)
def protocol_on_sqlite(request, store_kind):
    if store_kind != "sqlite" and request.node.get_closest_marker("protocol_only"):
        pytest.skip("a protocol test: the store plays no part (run on SQLite)")


@pytest.fixture(autouse=True)
def alive(env):
    yield
    assert env.g.alive(), env.g.death_note()


def mcp_url(env, name):
    return f"{env.g.url}/v1/mcp/{name}"


def agent(env, name, steps, token=AGENT, **kw):
    """Runs the SDK client against /v1/mcp/NAME; returns (call lines, run)."""
    lines, run = run_client(mcp_url(env, name), steps, token=token, **kw)
    return calls_of(lines), run


def one(env, name, step, **kw):
    """One call in a session of its own; returns (CallToolResult, run)."""
    calls, run = agent(env, name, [step], **kw)
    return result_of(calls[0], run), run


def record(env, name, key):
    """The action record (GET /v1/actions/NAME/KEY), or None on 404."""
    r = env.g.action(name, key, headers=OPER_H)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_state(env, name, key, states, timeout=SEND_WITHIN_S):
    deadline = time.monotonic() + timeout
    rec = record(env, name, key)
    while (rec is None or rec["state"] not in states) and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = record(env, name, key)
    return rec


def decide(env, name, key, verb, note=None, headers=OPER_H):
    body = {} if note is None else {"note": note}
    return env.g.post(f"/v1/actions/{urllib.parse.quote(name, safe='')}/{urllib.parse.quote(key, safe='')}/{verb}",
                      json=body, headers=headers)


def order():
    return new_key("ord")


def charge_args(oid, amount=500):
    return {"order_id": oid, "amount": amount}


def assert_outcome(result, want, run=None):
    got = outcome_of(result)
    ok = got in want if isinstance(want, tuple) else got == want
    assert ok, f"once/outcome {got!r}, expected {want!r}: {json.dumps(result)[:1500]}" + (run.describe() if run else "")


def assert_once_says(result, want, key=None):
    """One of once's own outcomes: an isError result with a text for the model."""
    assert_outcome(result, want)
    assert result.get("isError") is True, result
    assert texts(result) and all(isinstance(t, str) and t for t in texts(result)), result
    if key is not None:
        assert key_of(result) == key, result


def settle(up, oid, want, tool=None):
    """The effect count of oid, after waiting for want and then SETTLE_S more for extras."""
    up.wait_count(want, order_id=oid, tool=tool, timeout=SEND_WITHIN_S)
    time.sleep(SETTLE_S)
    return up.count(order_id=oid, tool=tool)


# =========================================================================== dedupe and keys

def test_identical_calls_from_two_sessions_are_one_effect(env):
    """Session 1 calls charge: completed, once/key = charge:sha256(canonical arguments), the
    upstream's result (text, structuredContent) intact. Session 2 (another Mcp-Session-Id,
    the same JSON-RPC ids) calls it twice: replayed both times, the same result; one effect."""
    oid = order()
    args = charge_args(oid)
    key = hashed_key("charge", args)
    (c1,), run1 = agent(env, "shop", [call("charge", args)])
    r1 = result_of(c1, run1)
    assert_outcome(r1, "completed", run1)
    assert key_of(r1) == key, r1
    assert texts(r1)[0] == f"charged {oid} 500", r1
    assert r1.get("isError") in (None, False), r1
    assert r1["structuredContent"]["order_id"] == oid and r1["structuredContent"]["amount"] == 500, r1
    assert set(once_meta(r1)) >= {"once/outcome", "once/key"}, r1

    calls2, run2 = agent(env, "shop", [call("charge", args), call("charge", args)])
    for c in calls2:
        r = result_of(c, run2)
        assert_outcome(r, "replayed", run2)
        assert key_of(r) == key, r
        assert without_once_meta(r) == without_once_meta(r1), (r, r1)
    s1 = [x for x in run1.lines if x["op"] == "connect"][0]["session"]
    s2 = [x for x in run2.lines if x["op"] == "connect"][0]["session"]
    assert s1 and s2 and s1 != s2, (s1, s2)
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)
    assert wait_state(env, "shop", key, ("completed",))["state"] == "completed"


@protocol_only
def test_different_arguments_are_two_effects_and_member_order_does_not_matter(env):
    """amount 1 and amount 2: two keys, two effects. The same arguments with their members in
    another order are the same canonical JSON: replayed."""
    oid = order()
    a1, a2 = charge_args(oid, 1), charge_args(oid, 2)
    reordered = {"amount": 1, "order_id": oid}
    calls, run = agent(env, "shop", [call("charge", a1), call("charge", a2), call("charge", reordered)])
    r1, r2, r3 = (result_of(c, run) for c in calls)
    assert_outcome(r1, "completed", run)
    assert_outcome(r2, "completed", run)
    assert key_of(r1) == hashed_key("charge", a1) != key_of(r2) == hashed_key("charge", a2)
    assert texts(r1)[0] == f"charged {oid} 1" and texts(r2)[0] == f"charged {oid} 2", (r1, r2)
    assert_outcome(r3, "replayed", run)
    assert without_once_meta(r3) == without_once_meta(r1)
    assert settle(env.sse, oid, 2) == 2, env.sse.effects(oid)


def test_meta_idempotency_key_decides(env):
    """params._meta.idempotencyKey is the key: other arguments under the same idempotencyKey are
    the first call replayed (one effect); it wins over an Idempotency-Key header."""
    oid = order()
    ik = new_key("ik")
    r1, _ = one(env, "shop", call("charge", charge_args(oid, 1), meta={"idempotencyKey": ik}))
    assert_outcome(r1, "completed")
    assert key_of(r1) == f"charge:{ik}", r1
    r2, run2 = one(env, "shop", call("charge", charge_args(oid, 99), meta={"idempotencyKey": ik}))
    assert_outcome(r2, "replayed", run2)
    assert key_of(r2) == f"charge:{ik}" and texts(r2)[0] == f"charged {oid} 1", r2
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)

    oid2, header = order(), new_key("hdr")
    ik1, ik2 = new_key("ik"), new_key("ik")
    calls, run = agent(env, "shop", [
        call("charge", charge_args(oid2), meta={"idempotencyKey": ik1}, headers={"Idempotency-Key": header}),
        call("charge", charge_args(oid2), meta={"idempotencyKey": ik2}, headers={"Idempotency-Key": header})])
    k = [key_of(result_of(c, run)) for c in calls]
    assert k == [f"charge:{ik1}", f"charge:{ik2}"], k
    assert [outcome_of(result_of(c, run)) for c in calls] == ["completed", "completed"], run.describe()
    assert settle(env.sse, oid2, 2) == 2, env.sse.effects(oid2)


@protocol_only
def test_idempotency_key_header_decides(env):
    """Without _meta.idempotencyKey, the HTTP Idempotency-Key header of the tools/call POST is
    the key: two sessions, other amounts, one header value -> one effect."""
    oid, k = order(), new_key("hk")
    r1, _ = one(env, "shop", call("charge", charge_args(oid, 1), headers={"Idempotency-Key": k}))
    assert_outcome(r1, "completed")
    assert key_of(r1) == f"charge:{k}", r1
    r2, run2 = one(env, "shop", call("charge", charge_args(oid, 2), headers={"Idempotency-Key": k}))
    assert_outcome(r2, "replayed", run2)
    assert without_once_meta(r2) == without_once_meta(r1)
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)


@protocol_only
def test_key_template(env):
    """key.charge = {json:/arguments/order_id}: another amount for the same order is the same
    key (charge:ORDER) -> one effect; another order is another effect."""
    oid, other = order(), order()
    r1, _ = one(env, "tmpl", call("charge", charge_args(oid, 1)))
    assert_outcome(r1, "completed")
    assert key_of(r1) == f"charge:{oid}", r1
    r2, run2 = one(env, "tmpl", call("charge", charge_args(oid, 2)))
    assert_outcome(r2, "replayed", run2)
    assert texts(r2)[0] == f"charged {oid} 1", r2
    r3, _ = one(env, "tmpl", call("charge", charge_args(other, 2)))
    assert_outcome(r3, "completed")
    assert key_of(r3) == f"charge:{other}", r3
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)
    assert env.sse.count(order_id=other) == 1


@protocol_only
def test_read_only_tools_pass_through_unrecorded(env):
    """lookup (annotations.readOnlyHint: true in the upstream's tools/list) and charge under
    `readonly = charge`: every call reaches the upstream, the result has no once/ _meta, and
    there is no ledger row."""
    oid = order()
    args = {"order_id": oid}
    (c1,), run1 = agent(env, "shop", [{"op": "list"}, call("lookup", args)])
    (c2,), run2 = agent(env, "shop", [call("lookup", args)])
    for c, run in ((c1, run1), (c2, run2)):
        r = result_of(c, run)
        assert once_meta(r) == {}, r
        assert texts(r)[0].startswith(f"order {oid}:"), r
    assert len(env.sse.calls(order_id=oid, tool="lookup")) == 2
    assert record(env, "shop", hashed_key("lookup", args)) is None
    assert env.sse.count(order_id=oid) == 0

    oid2 = order()
    a = charge_args(oid2)
    for _ in range(2):
        r, _ = one(env, "ro", call("charge", a))
        assert once_meta(r) == {} and texts(r)[0] == f"charged {oid2} 500", r
    assert env.sse.count(order_id=oid2) == 2, "a tool under `readonly =` must not be deduplicated"
    assert record(env, "ro", hashed_key("charge", a)) is None


@pytest.mark.parametrize("tool", ["charge", "slow"])
def test_ten_concurrent_duplicates_from_ten_sessions(env, tool):
    """Ten sessions call the same tool with the same arguments at the same moment (slow: each
    takes 0.5 s upstream, so the duplicates are surely in flight): one effect, all ten get the
    same result, one completed and nine replayed."""
    oid = order()
    args = charge_args(oid) if tool == "charge" else {"order_id": oid, "steps": 5}
    calls, run = agent(env, "shop", [call(tool, args)], sessions=10)
    assert len(calls) == 10, run.describe()
    results = [result_of(c, run) for c in calls]
    outcomes = sorted(outcome_of(r) for r in results)
    assert outcomes == ["completed"] + ["replayed"] * 9, outcomes
    first = without_once_meta(results[0])
    assert all(without_once_meta(r) == first for r in results), run.describe()
    assert len({c["s"] for c in calls}) == 10
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)


def test_duplicate_that_waits_longer_than_wait_is_in_flight(env):
    """[mcp.impatient] wait = 1s: a duplicate of a 3 s call gets in_flight after about a second
    (isError, a text for the model), nothing sent; once the first call is done the duplicate
    gets it replayed. One effect."""
    oid = order()
    args = {"order_id": oid, "steps": 30}
    key = hashed_key("slow", args)
    first = start_client(mcp_url(env, "impatient"), [call("slow", args)], token=AGENT)
    try:
        deadline = time.monotonic() + 10
        while not env.sse.calls(order_id=oid) and time.monotonic() < deadline:
            time.sleep(0.02)
        r, _ = one(env, "impatient", call("slow", args))
        assert_once_says(r, "in_flight", key)
        r1 = result_of(calls_of(first.wait())[0], first)
    finally:
        first.kill()
    assert_outcome(r1, "completed", first)
    r2, run2 = one(env, "impatient", call("slow", args))
    assert_outcome(r2, "replayed", run2)
    assert without_once_meta(r2) == without_once_meta(r1)
    assert settle(env.sse, oid, 1) == 1
    assert len(env.sse.calls(order_id=oid)) == 1


# =========================================================================== errors and ambiguity

def test_tool_error_result_is_recorded_and_replayed(env):
    """An isError result from the upstream (`fail`: the effect happened, the card was declined)
    is the upstream's answer: completed, recorded, replayed — never re-run."""
    oid = order()
    calls, run = agent(env, "shop", [call("fail", {"order_id": oid}), call("fail", {"order_id": oid})])
    r1, r2 = (result_of(c, run) for c in calls)
    assert_outcome(r1, "completed", run)
    assert r1.get("isError") is True and texts(r1)[0] == f"card declined for {oid}", r1
    assert_outcome(r2, "replayed", run)
    assert without_once_meta(r2) == without_once_meta(r1)
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)


def test_jsonrpc_error_is_passed_on_and_releases_the_key(env):
    """`reject` is answered with a JSON-RPC error (-32602 invalid params, in the contract's
    -32700..-32600; nothing done). The agent gets that error unchanged (code and message), the
    key is released (no row, or released), and the identical retry reaches the upstream again
    and gets the same error — never unknown, never a replay."""
    oid = order()
    args = {"order_id": oid}
    key = hashed_key("reject", args)
    calls, run = agent(env, "shop", [call("reject", args), call("reject", args)])
    for c in calls:
        assert "error" in c and c["code"] == -32602, run.describe()
        assert c["error"] == f"MCP error -32602: order {oid} is locked", run.describe()
    assert len(env.sse.calls(order_id=oid, tool="reject")) == 2, "the retry did not reach the upstream"
    rec = record(env, "shop", key)
    assert rec is None or rec["state"] == "released", rec
    assert env.sse.count(order_id=oid) == 0


def test_url_elicitation_error_is_passed_on_and_releases_the_key(env):
    """`needs_consent` answers its first call with the one JSON-RPC error an SDK McpServer sends
    from a tool (UrlElicitationRequired, -32042: nothing done, the user must consent at a URL
    and the client then retries). The agent gets that error unchanged, the key is released, and
    the identical retry runs (one effect), then replays. (The contract: "An upstream JSON-RPC
    error answer ... is passed on unchanged and the key is released".)"""
    oid = order()
    args = {"order_id": oid}
    calls, run = agent(env, "shop", [call("needs_consent", args), call("needs_consent", args),
                                     call("needs_consent", args)])
    e = calls[0]
    assert "error" in e and e["code"] == -32042, run.describe()
    assert e["data"]["elicitations"][0]["url"].endswith(urllib.parse.quote(oid)), e
    assert_outcome(result_of(calls[1], run), "completed", run)
    assert_outcome(result_of(calls[2], run), "replayed", run)
    assert len(env.sse.calls(order_id=oid, tool="needs_consent")) == 2
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)


def test_upstream_dies_after_the_effect_is_unknown_and_never_resent(env):
    """charge_then_die writes its effect, then the server exits before answering: the agent
    gets unknown (or held), the action becomes held (no lookup for MCP), and retries — after
    the server is back on the same port, where a re-sent call would be answered and leave a
    second effect — get unknown/held and never reach the upstream."""
    up = env.fragile
    oid = order()
    args = {"order_id": oid}
    key = hashed_key("charge_then_die", args)
    r1, run1 = one(env, "fragile", call("charge_then_die", args, timeout_ms=60000))
    assert_once_says(r1, AMBIGUOUS, key)
    assert up.wait_dead(10), "charge_then_die did not kill the upstream"
    assert up.count(order_id=oid) == 1
    up.start()
    try:
        for _ in range(2):
            r, run = one(env, "fragile", call("charge_then_die", args))
            assert_once_says(r, AMBIGUOUS, key)
        assert settle(up, oid, 1) == 1, f"re-sent after the upstream died: {up.effects(oid)}"
        assert len(up.calls(order_id=oid)) == 1
        rec = wait_state(env, "fragile", key, ("held",))
        assert rec["state"] == "held", rec
        r, _ = one(env, "fragile", call("charge_then_die", args))
        assert_once_says(r, "held", key)
        assert up.count(order_id=oid) == 1
    finally:
        if not up.alive():
            up.start()


def test_upstream_timeout_is_unknown_and_never_resent(env):
    """`hang` has its effect and never answers; [mcp.quick] timeout = 2s: unknown (or held);
    retries get unknown/held and never reach the upstream."""
    oid = order()
    args = {"order_id": oid}
    key = hashed_key("hang", args)
    t0 = time.monotonic()
    r1, _ = one(env, "quick", call("hang", args, timeout_ms=60000))
    assert_once_says(r1, AMBIGUOUS, key)
    assert time.monotonic() - t0 < 30, "the timeout of the call was not kept"
    for _ in range(2):
        r, _ = one(env, "quick", call("hang", args))
        assert_once_says(r, AMBIGUOUS, key)
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)
    assert len(env.sse.calls(order_id=oid)) == 1
    assert wait_state(env, "quick", key, ("held",))["state"] == "held"


def test_client_that_hangs_up_does_not_cancel_the_call(env):
    """The agent process is killed 0.3 s into a 1 s call: once still reads the call to its end
    and records it; the retry gets it replayed; one effect."""
    oid = order()
    args = {"order_id": oid, "steps": 10}
    key = hashed_key("slow", args)
    run = start_client(mcp_url(env, "shop"), [call("slow", args)], token=AGENT)
    deadline = time.monotonic() + 10
    while not env.sse.calls(order_id=oid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert env.sse.calls(order_id=oid), "the call never reached the upstream"
    time.sleep(0.3)
    run.kill()
    assert env.sse.wait_count(1, order_id=oid, timeout=10) == 1
    rec = wait_state(env, "shop", key, ("completed",))
    assert rec and rec["state"] == "completed", rec
    r, run2 = one(env, "shop", call("slow", args))
    assert_outcome(r, "replayed", run2)
    assert texts(r)[0] == f"slow {oid} done after 10 steps", r
    assert settle(env.sse, oid, 1) == 1


@pytest.mark.parametrize("name", ["shop", "local"])
def test_client_timeout_cancel_does_not_lose_the_result(env, name):
    """The SDK client gives up after 0.3 s and sends notifications/cancelled for its request
    (what Protocol.request does on a timeout or an abort). A recorded call is not cancelled by
    the agent (contract: a client that hangs up does not cancel the call) — and an SDK server
    that got the cancellation would abort the handler and drop its answer, leaving the action
    unknown although the tool finished. So the retry a little later gets the result replayed;
    one effect. For the HTTP upstream (shop) and the stdio one (local)."""
    up = env.sse if name == "shop" else env.local
    oid = order()
    args = {"order_id": oid, "steps": 10}
    calls, run = agent(env, name, [call("slow", args, timeout_ms=300), {"op": "sleep", "ms": 2500},
                                   call("slow", args)])
    assert calls[0].get("code") == -32001, run.describe()   # RequestTimeout, on the client side
    r = result_of(calls[1], run)
    assert_outcome(r, "replayed", run)
    assert texts(r)[0] == f"slow {oid} done after 10 steps", r
    assert settle(up, oid, 1) == 1
    if name == "shop":
        session = run.lines[0]["session"]
        relayed = [x["body"] for x in up.requests_seen() if x["session"] == session
                   and isinstance(x.get("body"), dict) and x["body"].get("method") == "notifications/cancelled"]
        assert not relayed, f"the agent's notifications/cancelled reached the upstream: {relayed}"


# =========================================================================== approvals

def test_approval_then_once_sends_it_and_the_agent_gets_it_replayed(env):
    """approve = refund: the first call is awaiting_approval (isError, once/key) and nothing
    is sent; retries the same; the operator approves (POST .../approve, operator token; an
    agent's token is refused); once sends it itself within seconds (one effect); the agent's
    identical call gets the upstream's result replayed. A tool not listed (charge) passes."""
    oid = order()
    args = {"order_id": oid}
    key = hashed_key("refund", args)
    r1, _ = one(env, "gated", call("refund", args))
    assert_once_says(r1, "awaiting_approval", key)
    r2, _ = one(env, "gated", call("refund", args))
    assert_once_says(r2, "awaiting_approval", key)
    time.sleep(SETTLE_S)
    assert env.sse.count(order_id=oid) == 0, "sent before anyone approved"
    rec = record(env, "gated", key)
    assert rec and rec["state"] == "awaiting_approval", rec

    assert_problem(decide(env, "gated", key, "approve", headers={"Authorization": f"Bearer {AGENT}"}),
                   403, "forbidden")
    a = decide(env, "gated", key, "approve", note="refund ok")
    assert a.status_code == 200, describe(a)
    assert env.sse.wait_count(1, order_id=oid, timeout=SEND_WITHIN_S) == 1, "the approved call was not sent"
    rec = wait_state(env, "gated", key, ("completed",))
    assert rec["state"] == "completed", rec
    r3, run3 = one(env, "gated", call("refund", args))
    assert_outcome(r3, "replayed", run3)
    assert texts(r3)[0] == f"refunded {oid}" and not r3.get("isError"), r3
    assert settle(env.sse, oid, 1) == 1, env.sse.effects(oid)

    oid2 = order()
    r, _ = one(env, "gated", call("charge", charge_args(oid2)))
    assert_outcome(r, "completed")
    assert env.sse.count(order_id=oid2) == 1


def test_denied_call_is_never_sent(env):
    oid = order()
    args = {"order_id": oid}
    key = hashed_key("refund", args)
    r1, _ = one(env, "gated", call("refund", args))
    assert_once_says(r1, "awaiting_approval", key)
    d = decide(env, "gated", key, "deny", note="no refunds today")
    assert d.status_code == 200, describe(d)
    r2, _ = one(env, "gated", call("refund", args))
    assert_once_says(r2, "denied", key)
    assert record(env, "gated", key)["state"] == "denied"
    time.sleep(SETTLE_S)
    assert env.sse.count(order_id=oid) == 0


@protocol_only
def test_approve_destructive_follows_the_annotations(env):
    """approve = destructive: every tool whose annotations do not say destructiveHint: false or
    readOnlyHint: true waits — refund (destructiveHint: true) and charge (no destructiveHint: the
    MCP default is destructive) wait; note (destructiveHint: false) and lookup (read-only) pass."""
    oid = order()
    calls, run = agent(env, "careful", [
        {"op": "list"},
        call("note", {"order_id": oid, "text": "hi"}),
        call("lookup", {"order_id": oid}),
        call("refund", {"order_id": oid}),
        call("charge", charge_args(oid))])
    note, lookup, refund, charge = (result_of(c, run) for c in calls)
    assert_outcome(note, "completed", run)
    assert once_meta(lookup) == {}, lookup
    assert_once_says(refund, "awaiting_approval", hashed_key("refund", {"order_id": oid}))
    assert_once_says(charge, "awaiting_approval", hashed_key("charge", charge_args(oid)))
    time.sleep(SETTLE_S)
    assert [e["tool"] for e in env.sse.effects(oid)] == ["note"], env.sse.effects(oid)


# =========================================================================== streaming, JSON, stdio

@protocol_only
def test_progress_is_relayed_before_the_result_and_the_replay_is_the_same(env):
    """slow with 8 steps ~100 ms apart, asked with a progressToken (the SSE upstream): the 8
    progress notifications reach the agent as they happen (the first long before the result),
    then the result — recorded before the agent hears it. The replay is the same result."""
    oid = order()
    args = {"order_id": oid, "steps": 8}
    key = hashed_key("slow", args)
    (c,), run = agent(env, "shop", [call("slow", args, progress=True)])
    r = result_of(c, run)
    assert_outcome(r, "completed", run)
    # recorded before the agent heard it: the record is completed the moment the client is done
    rec = record(env, "shop", key)
    assert rec and rec["state"] == "completed", rec
    prog = c["progress"]
    assert [p["progress"] for p in prog] == list(range(1, 9)), run.describe()
    assert all(p["total"] == 8 for p in prog), prog
    assert prog[0]["t"] < c["t1"] - 400, f"progress was held back until the end: {prog} result at {c['t1']}"
    assert all(p["t"] <= c["t1"] for p in prog), "progress after the result"

    (c2,), run2 = agent(env, "shop", [call("slow", args, progress=True)])
    r2 = result_of(c2, run2)
    assert_outcome(r2, "replayed", run2)
    assert without_once_meta(r2) == without_once_meta(r)
    assert settle(env.sse, oid, 1) == 1


@protocol_only
def test_json_upstream(env):
    """An upstream that answers application/json (enableJsonResponse): identical calls from two
    sessions -> one effect and the same result replayed."""
    oid = order()
    args = charge_args(oid)
    r1, _ = one(env, "plain", call("charge", args))
    assert_outcome(r1, "completed")
    r2, run2 = one(env, "plain", call("charge", args))
    assert_outcome(r2, "replayed", run2)
    assert without_once_meta(r2) == without_once_meta(r1)
    assert settle(env.json, oid, 1) == 1, env.json.effects(oid)


def test_stdio_upstream_dedupes_across_sessions(env):
    """[mcp.local] command = node mcp_server.mjs --stdio: one process shared by every session
    (whose JSON-RPC ids collide: each SDK client counts from 0, so all three concurrent calls
    below are id 1). Identical calls from two sessions -> one effect; three sessions with
    different orders at the same moment -> three effects, each answer the one for its order."""
    oid = order()
    args = charge_args(oid)
    r1, run1 = one(env, "local", call("charge", args))
    assert_outcome(r1, "completed", run1)
    assert key_of(r1) == hashed_key("charge", args)
    r2, run2 = one(env, "local", call("charge", args))
    assert_outcome(r2, "replayed", run2)
    assert without_once_meta(r2) == without_once_meta(r1)
    assert settle(env.local, oid, 1) == 1, env.local.effects(oid)

    base = order()
    calls, run = agent(env, "local", [call("slow", {"order_id": base + "-{s}", "steps": 3})], sessions=3)
    assert len(calls) == 3, run.describe()
    for c in calls:
        r = result_of(c, run)
        assert_outcome(r, "completed", run)
        assert texts(r)[0] == f"slow {base}-{c['s']} done after 3 steps", run.describe()
    for i in range(3):
        assert env.local.count(order_id=f"{base}-{i}") == 1, env.local.effects()


@protocol_only
def test_stdio_progress_is_relayed(env):
    """Progress notifications of a stdio upstream reach the agent too (server notifications
    pass through in both directions), then the recorded result."""
    oid = order()
    (c,), run = agent(env, "local", [call("slow", {"order_id": oid, "steps": 4}, progress=True)])
    assert_outcome(result_of(c, run), "completed", run)
    assert [p["progress"] for p in c["progress"]] == [1, 2, 3, 4], run.describe()
    assert settle(env.local, oid, 1) == 1


# =========================================================================== the pass-through

@protocol_only
def test_session_lifecycle_passes_through(env):
    """initialize (the upstream's serverInfo and protocol version), tools/list (annotations
    intact), the GET stream and DELETE reach the upstream with the upstream's Mcp-Session-Id,
    and the SDK transport reports no error."""
    lines, run = run_client(mcp_url(env, "shop"), [{"op": "list"}, {"op": "sleep", "ms": 300}, {"op": "delete"}],
                            token=AGENT, delete=False)
    conn = lines[0]
    assert conn["server"]["name"] == "once-test-upstream", conn
    assert conn["protocol"] and conn["session"], conn
    tools = {t["name"]: t for t in lines[1]["tools"]}
    assert tools["lookup"]["annotations"]["readOnlyHint"] is True
    assert tools["refund"]["annotations"]["destructiveHint"] is True
    assert "outputSchema" in tools["charge"]
    assert lines[3] == {"op": "delete", "ok": True}, run.describe()
    assert lines[-1] == {"op": "end", "errors": []}, run.describe()
    seen = [r for r in env.sse.requests_seen() if r["session"] == conn["session"]]
    methods = {r["method"] for r in seen}
    assert {"POST", "GET", "DELETE"} <= methods, f"the upstream saw {sorted(methods)} of session {conn['session']}"


@protocol_only
def test_tools_list_changed_reaches_the_agent_and_refreshes_readonly(env):
    """add_tool registers a read-only tool at the upstream, which sends
    notifications/tools/list_changed (on the session's GET stream, through once). once refreshes
    what it knows: the new tool is read-only, so two calls both reach the upstream, unrecorded."""
    name = "peek_" + "".join(random.choice(string.ascii_lowercase) for _ in range(10))
    oid = order()
    calls, run = agent(env, "shop", [
        {"op": "sleep", "ms": 500},     # the SDK client opens its GET stream after initialized
        call("add_tool", {"name": name, "readonly": True}),
        {"op": "sleep", "ms": 800},
        {"op": "notifications"},
        {"op": "list"},
        call(name, {"order_id": oid}),
        call(name, {"order_id": oid})])
    notes = [x for x in run.lines if x["op"] == "notifications"][0]["received"]
    assert any(n["method"] == "notifications/tools/list_changed" for n in notes), run.describe()
    listed = [x for x in run.lines if x["op"] == "list"][0]["tools"]
    assert any(t["name"] == name for t in listed), listed
    for c in calls[1:]:
        r = result_of(c, run)
        assert once_meta(r) == {}, r
    assert len(env.sse.calls(order_id=oid, tool=name)) == 2


@protocol_only
def test_auth_tokens_and_injected_header(env):
    """With a tokens_file: no token or a wrong one -> 401 problem+json (the SDK client cannot
    connect); the agent token works. The upstream never sees the agent's Authorization, and
    sees the configured `header = X-Api-Key: ...` on every request of the session."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}
    h = {"Accept": "application/json, text/event-stream"}
    assert_problem(requests.post(mcp_url(env, "shop"), json=init, headers=h, timeout=30), 401, "unauthorized")
    assert_problem(requests.post(mcp_url(env, "shop"), json=init, timeout=30,
                                 headers=dict(h, Authorization="Bearer tok-not-a-token-0000")), 401, "unauthorized")
    run = start_client(mcp_url(env, "shop"), [call("charge", charge_args(order()))])
    lines = run.wait()
    assert run.returncode == 2 and "401" in lines[0].get("error", ""), run.describe()

    oid = order()
    (c,), run = agent(env, "shop", [{"op": "sleep", "ms": 300}, call("charge", charge_args(oid))])
    assert_outcome(result_of(c, run), "completed", run)
    eff = env.sse.effects(oid)
    assert len(eff) == 1, eff
    assert "authorization" not in eff[0]["headers"], eff[0]["headers"]
    assert eff[0]["headers"].get("x-api-key") == SECRET, eff[0]["headers"]
    session = run.lines[0]["session"]
    seen = [r for r in env.sse.requests_seen() if r["session"] == session]
    assert seen, f"no request of session {session} seen upstream"
    for r in seen:
        assert "authorization" not in r["headers"], r
        assert r["headers"].get("x-api-key") == SECRET, r
    for r in env.sse.requests_seen() + env.json.requests_seen():
        assert AGENT not in json.dumps(r) and OPERATOR not in json.dumps(r), f"a token reached the upstream: {r}"


@protocol_only
def test_jsonrpc_batch_is_refused(env):
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "charge", "arguments": charge_args(order())}},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    r = requests.post(mcp_url(env, "shop"), json=batch, timeout=30,
                      headers={"Authorization": f"Bearer {AGENT}", "Accept": "application/json, text/event-stream"})
    assert_problem(r, 400, "batch_not_supported")
    assert env.sse.count(order_id=batch[0]["params"]["arguments"]["order_id"]) == 0


# =========================================================================== operators

def test_cli_and_metrics_show_mcp_actions(env):
    """`once ls` lists the MCP action (scope = the server's name, key TOOL:KEY); `once show`
    shows the tool and its arguments; /metrics counts once_mcp_calls_total per outcome."""
    oid = order()
    args = charge_args(oid, 777)
    key = hashed_key("charge", args)
    agent(env, "shop", [call("charge", args), call("charge", args)])
    r = env.g.cli("ls", "--json", "--scope", "shop", "--limit", "100000")
    assert r.returncode == 0, r.stderr
    rows = [x for x in json.loads(r.stdout) if x["key"] == key]
    assert len(rows) == 1 and rows[0]["scope"] == "shop" and rows[0]["state"] == "completed", rows
    r = env.g.cli("ls", "--scope", "shop", "--limit", "100000")
    assert r.returncode == 0 and key in r.stdout, r.stdout[-2000:]
    r = env.g.cli("show", "shop", key)
    assert r.returncode == 0, r.stderr
    assert "charge" in r.stdout and oid in r.stdout, r.stdout
    m = parse_metrics(requests.get(env.g.url + "/metrics", timeout=10).text)
    for outcome in ("completed", "replayed"):
        assert m.value("once_mcp_calls_total", server="shop", tool="charge", outcome=outcome) >= 1, outcome
