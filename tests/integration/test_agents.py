"""Agents (issue 28, docs/agents.md): who each agent is and what it may reach.

A tokens_file line `TOKEN agent NAME` names the agent; an `[agent.NAME]` section's
`allow = TARGET: ITEM, ...` lines are all it may do: an upstream's paths (METHOD PATTERN,
matched with case on the canonical path), an MCP server's tools, the actions API's scopes,
inbox sources. Anything else is 403 not_allowed (a tool error with
_meta["once/outcome"] = "not_allowed" for tools/call), decided before anything is stored
or sent: every refusal below is checked against the provider, which must see nothing.
An agent without a section keeps full reach unless [server] agents = closed.

Grants are decided before the store is touched, so these run on SQLite only; limits (which the
store counts) run on both, in test_agent_limits.py.
Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_agents.py
"""
import json
import subprocess
import uuid

import pytest
import requests

from gateway import Provider, assert_problem, describe, new_key, once_bin, require_serve
from hooks_harness import AgentGateway
from mcp_harness import McpUpstream, call, node_or_skip, once_meta, result_of, run_client

SUPPORT = "tok-support-5b1e7c9d2a4f6e80"   # [agent.support]: demo POST /charges*, GET *; mcp lookup; support-*
CODER = "tok-coder-8c2d4e6f1a3b5c7d"       # [agent.coder]: other upstream only; hooks: tickets
FREE = "tok-free-1f2e3d4c5b6a7980"         # an agent without a section: full reach (agents = open)
OPERATOR = "tok-operator-9a8b7c6d5e4f3a21"

INBOX = {"verify": "none", "insecure": True, "event_id": "header:X-Event-Id"}


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


AGENTS = {
    "agent.support": {
        "allow": ["demo: POST /charges*, GET *", "mcp.shop: lookup", "actions: support-*"],
    },
    "agent.coder": {
        "allow": ["other: *", "hooks: tickets"],
    },
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_serve()
    node_or_skip()
    d = tmp_path_factory.mktemp("agents")
    demo, other = Provider(), Provider()
    shop = McpUpstream(d / "shop", json=True, name="shop")
    tokens = d / "tokens"
    tokens.write_text(f"{SUPPORT} agent support\n{CODER} agent coder\n{FREE} agent free\n"
                      f"{OPERATOR} operator ops\n")
    tokens.chmod(0o600)
    g = AgentGateway(d / "gw", {"mcp.shop": {"url": shop.url}, **AGENTS}, sources={"tickets": INBOX, "billing": INBOX},
                     upstreams={"demo": {"url": demo.url}, "other": {"url": other.url}},
                     server={"tokens_file": str(tokens)})
    try:
        g.start()
        yield g, demo, other, shop
        g.stop()
    finally:
        demo.stop()
        other.stop()
        shop.stop()


def proxy(g, token, method, upstream, path, **kw):
    return requests.request(method, f"{g.url}/v1/proxy/{upstream}{path}",
                            headers={**bearer(token), "Idempotency-Key": new_key()}, timeout=30, **kw)


def refused(r):
    assert_problem(r, 403, "not_allowed")


# ---- the proxy ---------------------------------------------------------------------------

def test_a_granted_request_is_sent(world):
    g, demo, _, _ = world
    before = demo.count()
    r = proxy(g, SUPPORT, "POST", "demo", "/charges", json={"amount": 1})
    assert r.status_code == 200, describe(r)
    assert demo.count() == before + 1


def test_a_path_no_grant_covers_is_refused_and_nothing_is_sent(world):
    g, demo, _, _ = world
    before = len(demo.requests_seen())
    for method, path in [("POST", "/refunds"), ("DELETE", "/charges/ch_1"), ("PUT", "/charges")]:
        refused(proxy(g, SUPPORT, method, "demo", path, json={"amount": 1}))
    assert len(demo.requests_seen()) == before


def test_allow_rules_match_with_case_and_on_every_reading_of_the_path(world):
    """A provider that routes with case reads /Charges as another path; a router that cuts
    ';params' and a trailing '/' reads /charges/;x as /charges... each must be granted."""
    g, demo, _, _ = world
    before = len(demo.requests_seen())
    refused(proxy(g, SUPPORT, "POST", "demo", "/Charges", json={}))
    refused(proxy(g, SUPPORT, "POST", "demo", "/CHARGES/x", json={}))
    assert len(demo.requests_seen()) == before
    # Escapes of unreserved characters are decoded first: /%63harges is /charges.
    r = proxy(g, SUPPORT, "POST", "demo", "/%63harges", json={"amount": 2})
    assert r.status_code == 200, describe(r)


def test_encodings_cannot_reach_a_path_outside_the_grant(world):
    """The hardening issue's spellings against allow rules, sent byte for byte (no client
    normalizes them): each is refused (ambiguous on an upstream with path rules, invalid, or not
    granted), and the provider sees nothing."""
    g, demo, _, _ = world
    before = len(demo.requests_seen())
    for path in ["/charges/..%2Frefunds", "/charges%2F..%2Frefunds", "/charges/%2e%2e/refunds",
                 "/charges//../refunds", "/charges/..;/refunds", "/charges/%2E%2E;x/refunds", "/%72efunds",
                 "/Charges/x", "/charges/../refunds"]:
        r = g.raw("POST", "/v1/proxy/demo" + path, body=b"{}",
                  headers={**bearer(SUPPORT), "Idempotency-Key": new_key(), "Content-Type": "application/json"})
        assert r.status_code in (400, 403), (path, r.status_code, r.text)
    assert len(demo.requests_seen()) == before


def test_an_upstream_not_granted_is_refused(world):
    g, _, other, _ = world
    before = len(other.requests_seen())
    refused(proxy(g, SUPPORT, "GET", "other", "/anything"))
    assert len(other.requests_seen()) == before


def test_an_agent_without_a_section_keeps_full_reach(world):
    g, demo, other, _ = world
    for up in ("demo", "other"):
        r = proxy(g, FREE, "POST", up, "/refunds", json={})
        assert r.status_code == 200, describe(r)


def test_an_operator_is_not_limited_by_grants(world):
    g, _, other, _ = world
    r = proxy(g, OPERATOR, "POST", "other", "/x", json={})
    assert r.status_code == 200, describe(r)


# ---- the actions API ---------------------------------------------------------------------

def reserve(g, token, scope, key=None):
    return requests.post(f"{g.url}/v1/actions", json={"scope": scope, "key": key or new_key()},
                         headers=bearer(token), timeout=30)


def test_actions_scopes_are_granted_by_pattern(world):
    g, _, _, _ = world
    r = reserve(g, SUPPORT, "support-eu")
    assert r.status_code == 201, describe(r)
    refused(reserve(g, SUPPORT, "billing"))
    refused(reserve(g, CODER, "support-eu"))
    assert reserve(g, FREE, "billing").status_code == 201


def test_an_agent_reads_and_settles_only_its_scopes(world):
    g, _, _, _ = world
    scope, key = "billing-" + uuid.uuid4().hex[:6], new_key()
    r = reserve(g, FREE, scope, key)
    assert r.status_code == 201, describe(r)
    token = r.json()["token"]
    refused(requests.get(f"{g.url}/v1/actions/{scope}/{key}", headers=bearer(SUPPORT), timeout=30))
    refused(requests.post(f"{g.url}/v1/actions/complete", headers=bearer(SUPPORT), timeout=30,
                          json={"scope": scope, "key": key, "token": token, "response": {"status": 200, "body": "x"}}))
    refused(requests.post(f"{g.url}/v1/actions/release", headers=bearer(SUPPORT), timeout=30,
                          json={"scope": scope, "key": key, "token": token}))
    refused(requests.get(f"{g.url}/v1/actions", params={"scope": scope}, headers=bearer(SUPPORT), timeout=30))
    # Its own upstream's scope (demo) it may read: the proxy wrote it there.
    r = requests.get(f"{g.url}/v1/actions", params={"scope": "demo"}, headers=bearer(SUPPORT), timeout=30)
    assert r.status_code == 200, describe(r)
    # Unfiltered, the list would span scopes it may not read: it must name one.
    r = requests.get(f"{g.url}/v1/actions", headers=bearer(SUPPORT), timeout=30)
    refused(r)
    assert "scope" in r.json()["detail"], describe(r)


# ---- the inbox ---------------------------------------------------------------------------

def test_an_inbox_is_read_only_by_agents_granted_its_source(world):
    g, _, _, _ = world
    r = g.inbox("tickets", "claim", {"max": 1}, CODER)
    assert r.status_code == 200, describe(r)
    refused(g.inbox("tickets", "claim", {"max": 1}, SUPPORT))
    refused(g.inbox("billing", "claim", {"max": 1}, CODER))
    assert g.inbox("billing", "claim", {"max": 1}, FREE).status_code == 200


# ---- MCP -----------------------------------------------------------------------------------

def test_tools_list_shows_only_the_granted_tools(world):
    g, _, _, _ = world
    lines, _ = run_client(f"{g.url}/v1/mcp/shop", [{"op": "list"}], token=SUPPORT)
    tools = [t["name"] for line in lines if line.get("op") == "list" for t in line["tools"]]
    assert tools == ["lookup"], lines
    lines, _ = run_client(f"{g.url}/v1/mcp/shop", [{"op": "list"}], token=FREE)
    tools = [t["name"] for line in lines if line.get("op") == "list" for t in line["tools"]]
    assert "charge" in tools and "lookup" in tools, lines


def test_a_tool_not_granted_is_a_tool_error_and_is_not_called(world):
    g, _, _, shop = world
    order = "A-" + uuid.uuid4().hex[:8]
    lines, _ = run_client(f"{g.url}/v1/mcp/shop", [call("charge", {"order_id": order, "amount": 5})], token=SUPPORT)
    res = result_of([x for x in lines if x.get("op") == "call"][0])
    assert res.get("isError") is True, res
    assert once_meta(res).get("once/outcome") == "not_allowed", res
    assert shop.count(order) == 0
    r = requests.get(f"{g.url}/v1/actions", params={"scope": "shop"}, headers=bearer(OPERATOR), timeout=30)
    assert r.status_code == 200, describe(r)
    assert not any(order in a["key"] for a in r.json()["items"]), "a refused call was recorded"


def test_an_mcp_server_not_granted_is_refused(world):
    g, _, _, _ = world
    r = requests.post(f"{g.url}/v1/mcp/shop", headers={**bearer(CODER), "Accept": "application/json, text/event-stream",
                                                        "Content-Type": "application/json"},
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                          "protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "t", "version": "1"}}}), timeout=30)
    refused(r)


# ---- the config ----------------------------------------------------------------------------

def check_config(tmp_path, text, tokens=None):
    (tmp_path / "tokens").write_text(tokens or f"{SUPPORT} agent support\n")
    (tmp_path / "tokens").chmod(0o600)
    cfg = tmp_path / "once.ini"
    cfg.write_text("[server]\nlisten = 127.0.0.1:7600\nstore = sqlite:x.db\ntokens_file = tokens\n\n"
                   "[upstream.demo]\nurl = http://127.0.0.1:9\n\n[source.tickets]\nverify = none\n"
                   "insecure = yes\nevent_id = header:X-Id\n" + text)
    return subprocess.run([str(once_bin()), "check-config", str(cfg)], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("lines, says", [
    ("allow = nowhere: *", "no [upstream.NAME] named 'nowhere'"),
    ("allow = mcp.demo: *", "'demo' is an upstream"),
    ("allow = demo", "is not TARGET: ITEM"),
    ("allow = demo: post /x", "is not METHOD PATTERN"),
    ("allow = hooks: nope", "no [source.NAME] named 'nope'"),
    ("allow = demo: *\nlimit = demo 10/1y", "N/WINDOW"),
    ("allow = demo: *\nlimit = demo 10/100d", "between 1s and 30d"),
    ("allow = demo: *\nlimit = demo sum({header:X}) 10/1d", "sum() reads a member of the JSON body"),
    ("allow = demo: *\nlimit = actions 10/1d", "no allow line grants its target"),
    ("allow = demo: *\nover_limit = approve", "does nothing without limit"),
    ("limit = demo 10/1d", "allows nothing"),
])
def test_bad_agent_sections_are_one_line_errors(tmp_path, lines, says):
    require_serve()
    r = check_config(tmp_path, "\n[agent.support]\n" + lines + "\n")
    assert r.returncode != 0, r.stdout + r.stderr
    err = r.stderr.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert "once.ini:" in err, err


def test_closed_agents_need_a_section_for_every_agent_token(tmp_path):
    require_serve()
    text = "\n[agent.support]\nallow = demo: *\n"
    tokens = f"{SUPPORT} agent support\n{FREE} agent free\n{OPERATOR} operator ops\n"
    r = check_config(tmp_path, text.replace("[agent.support]", "[agent.support]"), tokens)
    assert r.returncode == 0, r.stderr
    cfg = (tmp_path / "once.ini").read_text().replace("tokens_file = tokens\n", "tokens_file = tokens\nagents = closed\n")
    (tmp_path / "once.ini").write_text(cfg)
    r = subprocess.run([str(once_bin()), "check-config", str(tmp_path / "once.ini")], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "free" in r.stderr and "agents = closed" in r.stderr, r.stderr


def test_check_config_and_serve_count_in_the_same_words(tmp_path, world):
    """One wording everywhere (issue 33): check-config's summary is serve's first log line's."""
    g, _, _, _ = world
    r = subprocess.run([str(once_bin()), "check-config", str(g.config_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    summary = "2 upstreams, 1 MCP server, 2 webhook sources, 2 agent sections"
    assert r.stdout.strip().endswith(f": ok ({summary})"), r.stdout
    assert f": {summary}" in g.stderr(), g.stderr()[-2000:]


def test_the_worked_example_of_docs_agents_md_loads(tmp_path):
    """docs/agents.md's support bot, taken from the Markdown (its last ini block), passes
    check-config with the files it names."""
    require_serve()
    import re
    from gateway import REPO_ROOT
    text = (REPO_ROOT / "docs" / "agents.md").read_text()
    block = re.findall(r"```ini\n(.*?)```", text, re.S)[-1]
    (tmp_path / "once.ini").write_text(block)
    for name, body in [("tokens", f"sha256:{'0' * 64} agent support\nsha256:{'1' * 64} operator alice\n"),
                       ("mail.header", "Authorization: Bearer x\n"), ("stripe.header", "Authorization: Bearer y\n"),
                       ("zendesk.secret", "s3cret\n")]:
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o600)
    r = subprocess.run([str(once_bin()), "check-config", str(tmp_path / "once.ini")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert "1 agent section" in r.stdout, r.stdout
    # agents = closed: a token of an agent without a section is named.
    (tmp_path / "tokens").write_text(f"sha256:{'0' * 64} agent support\nsha256:{'2' * 64} agent coder\n")
    r = subprocess.run([str(once_bin()), "check-config", str(tmp_path / "once.ini")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "'coder'" in r.stderr, r.stderr


# ---- reload (SIGHUP) ---------------------------------------------------------------------------

def wait_log(g, text, count=1, timeout=15):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if g.stderr().count(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {count} x {text!r} in the log:\n{g.stderr()[-3000:]}")


def test_sighup_adds_revokes_and_survives_a_broken_file(tmp_path):
    import os
    import signal
    require_serve()
    demo = Provider()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{SUPPORT} agent support\n{OPERATOR} operator ops\n")
    tokens.chmod(0o600)
    agents = {"agent.support": {"allow": "demo: POST /charges*"}}
    g = AgentGateway(tmp_path / "gw", agents, sources={}, upstreams={"demo": {"url": demo.url}},
                     server={"tokens_file": str(tokens)})
    g.start()
    try:
        assert proxy(g, SUPPORT, "POST", "demo", "/charges", json={}).status_code == 200
        refused(proxy(g, SUPPORT, "POST", "demo", "/refunds", json={}))
        assert proxy(g, CODER, "POST", "demo", "/charges", json={}).status_code == 401
        # Add an agent and widen support's grant.
        tokens.write_text(f"{SUPPORT} agent support\n{CODER} agent coder\n{OPERATOR} operator ops\n")
        g.extra = {"agent.support": {"allow": "demo: POST /charges*, POST /refunds"}}
        g.write_config()
        os.kill(g.proc.pid, signal.SIGHUP)
        wait_log(g, "reload: 3 token(s) and 1 agent section(s)")
        assert proxy(g, CODER, "POST", "demo", "/anything", json={}).status_code == 200
        assert proxy(g, SUPPORT, "POST", "demo", "/refunds", json={}).status_code == 200
        r = requests.get(f"{g.url}/v1/agents", headers=bearer(OPERATOR), timeout=30)
        assert {a["name"] for a in r.json()["agents"]} == {"support", "coder", "ops"}, r.json()
        # Revoke coder: refused from the next request.
        tokens.write_text(f"{SUPPORT} agent support\n{OPERATOR} operator ops\n")
        os.kill(g.proc.pid, signal.SIGHUP)
        wait_log(g, "reload: 2 token(s)")
        assert proxy(g, CODER, "POST", "demo", "/anything", json={}).status_code == 401
        # A broken file changes nothing: one log line, the counter.
        g.extra = {"agent.support": {"allow": "nowhere: *"}}
        g.write_config()
        os.kill(g.proc.pid, signal.SIGHUP)
        wait_log(g, "the running tokens and agents stay")
        assert proxy(g, SUPPORT, "POST", "demo", "/refunds", json={}).status_code == 200
        text = requests.get(f"{g.url}/metrics", headers=bearer(OPERATOR), timeout=30).text
        assert "once_config_reload_failures_total 1\n" in text
        # Another section changed: named as needing a restart; the agents still apply.
        g.extra = {"agent.support": {"allow": "demo: POST /charges*"}}
        g.upstreams["demo"]["timeout"] = "7s"
        g.write_config()
        os.kill(g.proc.pid, signal.SIGHUP)
        wait_log(g, "[upstream.demo] changed on disk and take(s) effect after a restart")
        refused(proxy(g, SUPPORT, "POST", "demo", "/refunds", json={}))
    finally:
        g.stop()
        demo.stop()
