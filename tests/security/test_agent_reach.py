"""An agent reaching past its grants (issue 28; docs/agents.md, docs/security.md).

An agent whose token names an `[agent.NAME]` section may do only what its `allow` lines say.
Each test below is one route an attacker holding that agent's token would try, to reach a
target its grants do not cover, and each ends with a yes/no it cannot fake: a real second
server behind that target (the lenient provider, which routes paths the way real providers
do between them; the attacker's server, which records every connection; the official MCP SDK
server, whose effects file and request log record every tools/call) must see nothing.

The gateway (one `once serve`, SQLite, tokens_file):
  pay     url = the lenient provider, `header = Authorization: Bearer sk_live_SECRET`, its own
          `listen` port. support may `POST /v1/charges*` and `GET /v1/charges/*` there.
  other   url = the attacker's server, the same header, its own `listen` port: coder's only.
  shop    the SDK MCP server: support may call `lookup` (not `charge`).
  vault   a second SDK MCP server: coder's only.
  tickets, billing   inbox sources (verify = none): coder may claim tickets; support no source.
  actions: support-* for support, coder-* for coder.
Tokens: support's line is `sha256:HEX agent support` from `once token support` (its plain token
is in no file); coder's and the operator's are plain lines.

Targets are sent byte for byte (sh.http_request on a socket): no client normalizes them.
Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/security/test_agent_reach.py
Everything listens on 127.0.0.1; every wait is bounded.
"""
import hashlib
import json
import time
import uuid
from urllib.parse import quote

import pytest
import requests

from attacker import Attacker
from gateway import assert_problem, describe, free_port, new_key, require_serve
from hooks_harness import AgentGateway
from lenient_provider import LenientProvider, routed
from mcp_harness import McpUpstream, node_or_skip
import security_harness as sh

CODER = "tok-coder-reach-6d1f0a9e3b7c52"
OPS = "tok-ops-reach-2a8e5c1d9f4b70"
INBOX = {"verify": "none", "insecure": True, "event_id": "header:X-Event-Id"}
PROTO = "2025-06-18"
HTTP_S = 30
SETTLE_S = 0.3

SUPPORT_GRANTS = {"allow": ["pay: POST /v1/charges*, GET /v1/charges/*", "mcp.shop: lookup", "actions: support-*"]}
CODER_GRANTS = {"allow": ["other: *", "mcp.vault: *", "hooks: tickets", "actions: coder-*"]}


def granted_to_support(method, path):
    """Whether support's pay grant covers METHOD PATH (a lenient provider's reading)."""
    return (method == "POST" and path.startswith("/v1/charges")) or \
           (method == "GET" and path.startswith("/v1/charges/"))


class World:
    pass


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_serve()
    node_or_skip()
    d = tmp_path_factory.mktemp("reach")
    w = World()
    # support's token: made by `once token`, kept only as its SHA-256 in the file.
    r = sh.run_once("token", "support")
    assert r.returncode == 0, sh.output_of(r)
    w.support, w.support_line = r.stdout.splitlines()[:2]
    w.tokens = sh.write_tokens(d / "tokens", [w.support_line, f"{CODER} agent coder", f"{OPS} operator ops"])
    w.lenient = LenientProvider().start()
    w.attacker = Attacker().start()
    w.shop = McpUpstream(d / "shop", json=True, name="shop")
    w.vault = McpUpstream(d / "vault", json=True, name="vault")
    w.pay_port, w.other_port = free_port(), free_port()
    w.g = AgentGateway(
        d / "gw",
        {"mcp.shop": {"url": w.shop.url}, "mcp.vault": {"url": w.vault.url},
         "agent.support": SUPPORT_GRANTS, "agent.coder": CODER_GRANTS},
        sources={"tickets": INBOX, "billing": INBOX},
        upstreams={"pay": {"url": w.lenient.url, "header": [sh.INJECTED], "listen": f"127.0.0.1:{w.pay_port}"},
                   "other": {"url": w.attacker.url, "header": [sh.INJECTED],
                             "listen": f"127.0.0.1:{w.other_port}"}},
        server={"tokens_file": str(w.tokens)})
    w.g.start()
    yield w
    sh.finish(w.g)
    w.shop.stop()
    w.vault.stop()
    w.attacker.stop()
    w.lenient.stop()


@pytest.fixture
def world_quiet(world):
    """The module's world with what the second servers saw forgotten."""
    world.lenient.forget()
    world.attacker.forget()
    return world


def auth(token, extra=None):
    h = {"Authorization": f"Bearer {token}"}
    h.update(extra or {})
    return h


def send(port, method, target, headers=None, body=b""):
    """One request with its target exactly as given, on a new connection; a RawAnswer."""
    data = sh.http_request(method, target, f"127.0.0.1:{port}", dict(headers or {}, Connection="close"), body)
    buf, how = sh.exchange_from(port, data, timeout=HTTP_S)
    assert how == "answer" or sh.status_of(buf) is not None, f"no answer to {data[:300]!r}: {how}, {buf[:300]!r}"
    return sh.RawAnswer(data, buf, port)


def assert_lenient_saw_nothing(w, what):
    time.sleep(SETTLE_S)
    seen = w.lenient.routed_paths()
    assert seen == [], f"{what}: the provider received {seen!r}"


def assert_outside_grant_never_arrived(w, what):
    """Whatever reached the lenient provider, it routed it inside support's grant."""
    time.sleep(SETTLE_S)
    bad = [(m, p) for m, p in w.lenient.routed_paths() if not granted_to_support(m, p)]
    assert bad == [], f"{what}: the provider routed requests outside the grant: {bad!r}"


def refused(r):
    assert_problem(r, 403, "not_allowed")


def record(w, scope, key):
    r = w.g.action(scope, key, headers=auth(OPS))
    assert r.status_code == 200, describe(r)
    return r.json()


# =========================================================================== tokens and names

def test_the_sha256_line_is_all_the_file_holds_and_the_token_works(world_quiet):
    """`once token support` gave a token and `sha256:HEX agent support`: the file holds the
    digest, never the token; the token works; the digest (or the line's word) as a bearer
    does not."""
    w = world_quiet
    digest = hashlib.sha256(w.support.encode()).hexdigest()
    assert w.support_line == f"sha256:{digest} agent support", w.support_line
    text = w.tokens.read_text()
    assert w.support not in text and digest in text
    key = new_key()
    r = w.g.proxy("POST", "pay", "/v1/charges", key=key, headers=auth(w.support), json={"amount": 1})
    assert r.status_code == 200, describe(r)
    assert record(w, "pay", key)["agent"] == "support"
    for wrong in (digest, f"sha256:{digest}", digest.upper()):
        r = w.g.proxy("POST", "pay", "/v1/charges", key=new_key(), headers=auth(wrong), json={"amount": 1})
        assert_problem(r, 401, "unauthorized")
    assert w.lenient.routed_paths() == [("POST", "/v1/charges")]


@pytest.mark.parametrize("header", ["X-Agent", "Once-Agent", "X-Once-Agent"])
def test_a_header_naming_another_agent_changes_nothing(world_quiet, header):
    """Names come from the tokens file: support's token with `X-Agent: coder` still is
    support (coder's upstream, scope and inbox stay refused; the record says support), and
    coder's token with `…: support` gets none of support's grants."""
    w = world_quiet
    as_coder = auth(w.support, {header: "coder"})
    refused(w.g.proxy("POST", "other", "/x", key=new_key(), headers=as_coder, json={}))
    refused(requests.post(f"{w.g.url}/v1/actions", json={"scope": "coder-x", "key": new_key()}, headers=as_coder,
                          timeout=HTTP_S))
    refused(requests.post(f"{w.g.url}/v1/inbox/tickets/claim", json={"max": 1}, headers=as_coder, timeout=HTTP_S))
    w.attacker.assert_saw_nothing(secrets=[sh.SECRET])
    key = new_key()
    r = w.g.proxy("POST", "pay", "/v1/charges?agent=coder", key=key, headers=as_coder, json={"agent": "coder"})
    assert r.status_code == 200, describe(r)
    assert record(w, "pay", key)["agent"] == "support"
    # The actions API: a body member or a query parameter naming another agent.
    key = new_key()
    r = requests.post(f"{w.g.url}/v1/actions?agent=support", json={"scope": "coder-x", "key": key, "agent": "support"},
                      headers=auth(CODER, {header: "support"}), timeout=HTTP_S)
    assert r.status_code == 201, describe(r)
    assert record(w, "coder-x", key)["agent"] == "coder"
    # coder dressed as support: none of support's grants.
    w.lenient.forget()
    refused(w.g.proxy("POST", "pay", "/v1/charges", key=new_key(), headers=auth(CODER, {header: "support"}),
                      json={}))
    refused(requests.post(f"{w.g.url}/v1/actions", json={"scope": "support-x", "key": new_key()},
                          headers=auth(CODER, {header: "support"}), timeout=HTTP_S))
    assert_lenient_saw_nothing(w, "coder's token with a header naming support")
    # The request log names the token's agent: only support was refused in coder-x.
    lines = [ln for ln in w.g.log_lines() if ln.get("route") == "actions" and ln.get("status") == 403
             and ln.get("scope") == "coder-x"]
    assert lines and {ln.get("agent") for ln in lines} == {"support"}, lines[-5:]


def test_an_inbox_claim_names_the_token_s_agent(world_quiet):
    w = world_quiet
    eid = "ev-" + uuid.uuid4().hex[:10]
    assert w.g.hook("tickets", b'{"t":1}', {"X-Event-Id": eid, "Content-Type": "application/json"}).status_code == 200
    r = requests.post(f"{w.g.url}/v1/inbox/tickets/claim", json={"max": 100},
                      headers=auth(CODER, {"X-Agent": "support", "Once-Agent": "support"}), timeout=HTTP_S)
    assert r.status_code == 200, describe(r)
    receipts = [e["receipt"] for e in r.json()["events"]]
    assert any(e["event_id"] == eid for e in r.json()["events"]), r.text
    r = requests.get(f"{w.g.url}/v1/events", params={"source": "tickets", "limit": 1000}, headers=auth(OPS),
                     timeout=HTTP_S)
    assert r.status_code == 200, describe(r)
    ev = [e for e in r.json()["items"] if e["event_id"] == eid]
    assert ev and ev[0].get("claimed_by") == "coder", ev
    w.g.ack("tickets", receipts, token=CODER)


@pytest.mark.parametrize("line, says", [
    ("agent sup/port", "name"),
    ("agent " + "s" * 65, "name"),
    ("agent süpport", "name"),
    ("agent support extra", None),
])
def test_a_name_outside_the_alphabet_is_refused_by_check_config(tmp_path, line, says):
    """A name is 1-64 of A-Z a-z 0-9 . _ - (it is stored in the ledger and printed in logs)."""
    require_serve()
    tokens = sh.write_tokens(tmp_path / "tokens", [f"tok-name-test-1234567890 {line}"])
    cfg = tmp_path / "once.ini"
    cfg.write_text(f"[server]\nlisten = 127.0.0.1:{free_port()}\nstore = sqlite:{tmp_path / 'x.db'}\n"
                   f"tokens_file = {tokens}\n\n[upstream.demo]\nurl = http://127.0.0.1:9\n")
    r = sh.run_once("check-config", cfg)
    assert r.returncode != 0, sh.output_of(r)
    out = sh.output_of(r)
    assert "tokens" in out and "tok-name-test" not in out, out
    if says:
        assert says in out.lower(), out


# =========================================================================== the proxy

def test_an_upstream_not_granted_is_refused_and_its_server_sees_nothing(world_quiet):
    w = world_quiet
    for method in ("POST", "GET", "DELETE", "PUT"):
        refused(w.g.proxy(method, "other", "/v1/anything", key=new_key(), headers=auth(w.support), json={}))
    w.attacker.assert_saw_nothing(secrets=[sh.SECRET])
    # Control: coder, whose grant it is, gets through (and the attacker server does see that).
    r = w.g.proxy("POST", "other", "/v1/anything", key=new_key(), headers=auth(CODER), json={})
    assert r.status_code == 200, describe(r)
    assert len(w.attacker.requests) == 1


# Spellings of the upstream name in /v1/proxy/NAME/... that might land on `other`.
OTHER_SPELLINGS = [
    "/v1/proxy/other/x", "/v1/proxy/OTHER/x", "/v1/proxy/Other/x", "/v1/proxy/%6Fther/x", "/v1/proxy/%6fther/x",
    "/v1/proxy/other%2Fx", "/v1/proxy/pay/../other/x", "/v1/proxy/pay/..%2Fother/x", "/v1/proxy/pay%2F..%2Fother/x",
    "/v1/proxy//other/x", "/v1/proxy/other;pay/x", "/v1/proxy/other/", "/v1/proxy/other", "/v1/proxy/other?x=1",
    "/v1/proxy/./other/x", "/v1/proxy/%2e/other/x", "/v1/proxy/pay/%2e%2e/other/x", "/v1/proxy/pay/..;/other/x",
    "/v1/proxy/other%00/x", "/V1/PROXY/other/x", "/v1/proxy/%252Fother/x",
]


@pytest.mark.parametrize("target", OTHER_SPELLINGS)
def test_no_spelling_of_another_upstream_reaches_it(world_quiet, target):
    w = world_quiet
    r = send(w.g.port, "POST", target, auth(w.support, {"Idempotency-Key": new_key(),
                                                        "Content-Type": "application/json"}), b"{}")
    assert r.status_code in (400, 403, 404), f"{target}: {r.status_code}" + describe(r)
    w.attacker.assert_saw_nothing(secrets=[sh.SECRET])
    assert_outside_grant_never_arrived(w, target)


def test_paths_and_methods_outside_the_grant_are_refused(world_quiet):
    w = world_quiet
    for method, path in [("POST", "/v1/refunds"), ("DELETE", "/v1/charges/ch_1"), ("PUT", "/v1/charges"),
                         ("PATCH", "/v1/charges/ch_1"), ("GET", "/v1/customers"), ("GET", "/v1/charges"),
                         ("POST", "/v1/customers/cus_1/delete"), ("OPTIONS", "/v1/charges"), ("HEAD", "/v1/refunds")]:
        r = w.g.proxy(method, "pay", path, key=new_key(), headers=auth(w.support),
                      **({"json": {}} if method not in ("GET", "HEAD", "OPTIONS") else {}))
        if method == "HEAD":
            assert r.status_code == 403, describe(r)
        else:
            refused(r)
    assert_lenient_saw_nothing(w, "paths outside the grant")
    # Control: inside the grant.
    assert w.g.proxy("GET", "pay", "/v1/charges/ch_1", headers=auth(w.support)).status_code == 200
    assert w.lenient.routed_paths() == [("GET", "/v1/charges/ch_1")]


# The hardening issue's spellings, each routed by a lenient provider outside the grant
# (to /v1/refunds, /v1/customers/…), most of them starting with the granted /v1/charges.
ESCAPES = [
    "/v1/refunds",
    "/v1/charges/../refunds",
    "/v1/charges/./../refunds",
    "/v1/charges/..%2Frefunds",
    "/v1/charges/..%2frefunds",
    "/v1/charges%2F..%2Frefunds",
    "/v1/charges%2f%2e%2e%2frefunds",
    "/v1/charges/%2e%2e/refunds",
    "/v1/charges/%2E%2E/refunds",
    "/v1/charges/.%2e/refunds",
    "/v1/charges/%2e./refunds",
    "/v1/charges/..;/refunds",
    "/v1/charges/..;x=1/refunds",
    "/v1/charges/%2e%2e;x/refunds",
    "/v1/charges/%2e%2e%3Bx/refunds",
    "/v1/charges/..%00/refunds",
    "/v1/charges/..%3B/refunds",
    "/v1/charges//../refunds",
    "/v1/charges//..//refunds",
    "/v1/charges\\..\\refunds",
    "/v1/charges%5C..%5Crefunds",
    "/v1/charges%5c..%5crefunds",
    "/v1/charges/%252e%252e/refunds",
    "/v1/charges%252F..%252Frefunds",
    "/v1/%2572efunds",
    "/v1/%72efunds",
    "/v1/%72%65%66%75%6E%64%73",
    "/V1/REFUNDS",
    "/V1/Charges/../Refunds",
    "/v1/Refunds/",
    "/v1/refunds/",
    "/v1/refunds;charges",
    "/v1/refunds;/v1/charges",
    "/v1/refunds/;x",
    "//v1/refunds",
    "/v1//refunds",
    "/./v1/refunds",
    "/v1/charges/x/../../customers/cus_1/delete",
    "/v1/charges;/../refunds",
    "/v1/charges%3B/../refunds",
    "/v1/charges%2F%2E%2E%2Fcustomers%2Fcus_1%2Fdelete",
]


@pytest.mark.parametrize("target", ESCAPES)
@pytest.mark.parametrize("route", ["proxy", "listen"])
def test_encodings_cannot_carry_a_request_outside_the_grant(world_quiet, route, target):
    """Each spelling is sent byte for byte (on /v1/proxy/pay, and as the whole target on pay's
    own listen port). Each is refused (400 invalid_path or ambiguous_path, 403 not_allowed)
    and the lenient provider, which would route it outside the grant, sees nothing."""
    w = world_quiet
    assert not granted_to_support("POST", routed(target)), f"{target} is no escape: {routed(target)}"
    port, full = (w.g.port, "/v1/proxy/pay" + target) if route == "proxy" else (w.pay_port, target)
    r = send(port, "POST", full, auth(w.support, {"Idempotency-Key": new_key(),
                                                  "Content-Type": "application/json"}), b'{"amount":1}')
    assert r.status_code in (400, 403), f"{route} {target}: {r.status_code}" + describe(r)
    j = r.json()
    assert j.get("code") in ("invalid_path", "ambiguous_path", "not_allowed", "bad_request"), j
    assert_lenient_saw_nothing(w, f"{route} {target}")


@pytest.mark.parametrize("target", ["/V1/CHARGES", "/v1/Charges", "/V1/charges/x", "/v1/%43harges"])
def test_allow_rules_match_with_case(world_quiet, target):
    """A provider that routes with case reads /v1/Charges as another path: an allow rule is
    matched with case, so these are refused and nothing is sent."""
    w = world_quiet
    for port, full in ((w.g.port, "/v1/proxy/pay" + target), (w.pay_port, target)):
        r = send(port, "POST", full, auth(w.support, {"Idempotency-Key": new_key(),
                                                      "Content-Type": "application/json"}), b"{}")
        refused(r)
    assert_lenient_saw_nothing(w, target)


def test_the_upstream_listen_ports_keep_the_grants(world_quiet):
    """An upstream's own `listen` port is the proxy by another door: support on other's port is
    refused (the attacker's server sees nothing), and on pay's only the grant gets through."""
    w = world_quiet
    for method, target in [("POST", "/v1/anything"), ("GET", "/"), ("DELETE", "/x"), ("POST", "/v1/charges")]:
        r = send(w.other_port, method, target, auth(w.support, {"Idempotency-Key": new_key(),
                                                                 "Content-Type": "application/json"}), b"{}")
        refused(r)
    w.attacker.assert_saw_nothing(secrets=[sh.SECRET])
    r = send(w.pay_port, "POST", "/v1/refunds", auth(w.support, {"Idempotency-Key": new_key(),
                                                                  "Content-Type": "application/json"}), b"{}")
    refused(r)
    assert_lenient_saw_nothing(w, "pay's listen, /v1/refunds")
    r = send(w.pay_port, "POST", "/v1/charges", auth(w.support, {"Idempotency-Key": new_key(),
                                                                  "Content-Type": "application/json"}), b"{}")
    assert r.status_code == 200, describe(r)
    # The other agent on pay's port: no grant there.
    refused(send(w.pay_port, "GET", "/v1/charges/ch_1", auth(CODER)))
    assert w.lenient.routed_paths() == [("POST", "/v1/charges")]


# =========================================================================== MCP

class Rpc:
    """The attacker's own MCP client: JSON-RPC over plain POSTs to /v1/mcp/NAME."""

    def __init__(self, g, name, token):
        self.url = f"{g.url}/v1/mcp/{name}"
        self.token = token
        self.session = None
        self.next_id = 100

    def headers(self, session=True):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {self.token}"}
        if session and self.session:
            h["Mcp-Session-Id"] = self.session
            h["MCP-Protocol-Version"] = PROTO
        return h

    def post(self, body, session=True):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return requests.post(self.url, data=data, headers=self.headers(session), timeout=HTTP_S,
                             allow_redirects=False)

    def initialize(self):
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": PROTO, "capabilities": {},
                                  "clientInfo": {"name": "attacker", "version": "1"}}}, session=False)
        assert r.status_code == 200, describe(r)
        self.session = r.headers.get("Mcp-Session-Id")
        assert self.session, describe(r)
        r = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status_code in (200, 202), describe(r)
        return self

    def request(self, method, params):
        self.next_id += 1
        r = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert r.status_code == 200, describe(r)
        return r, r.json()


def charges_at(w, oid):
    """What the shop server did and was asked to do for an order: effects, calls, and tools/call
    messages in its own request log."""
    posted = [m for m in w.shop.posts("tools/call") if oid in json.dumps(m)]
    return {"effects": w.shop.count(order_id=oid), "calls": len(w.shop.calls(order_id=oid)), "posted": posted}


def test_a_tool_not_granted_is_a_not_allowed_tool_error_and_the_server_sees_nothing(world_quiet):
    w = world_quiet
    rpc = Rpc(w.g, "shop", w.support).initialize()
    oid = "A-" + uuid.uuid4().hex[:10]
    for meta in (None, {"idempotencyKey": new_key()}):
        params = {"name": "charge", "arguments": {"order_id": oid, "amount": 5}}
        if meta:
            params["_meta"] = meta
        r, msg = rpc.request("tools/call", params)
        res = msg.get("result")
        assert isinstance(res, dict) and res.get("isError") is True, msg
        assert (res.get("_meta") or {}).get("once/outcome") == "not_allowed", msg
    time.sleep(SETTLE_S)
    assert charges_at(w, oid) == {"effects": 0, "calls": 0, "posted": []}
    r = requests.get(f"{w.g.url}/v1/actions", params={"scope": "shop", "limit": 1000}, headers=auth(OPS),
                     timeout=HTTP_S)
    assert r.status_code == 200 and oid not in r.text, "a refused call was recorded" + describe(r)
    # Control: the granted tool is called.
    r, msg = rpc.request("tools/call", {"name": "lookup", "arguments": {"order_id": oid}})
    assert "result" in msg and not msg["result"].get("isError"), msg


def test_tools_list_hides_the_tools_not_granted(world_quiet):
    w = world_quiet
    rpc = Rpc(w.g, "shop", w.support).initialize()
    r, msg = rpc.request("tools/list", {})
    names = [t["name"] for t in msg["result"]["tools"]]
    assert names == ["lookup"], msg
    # The operator (no grants) sees them all: the server has more.
    rpc = Rpc(w.g, "shop", OPS).initialize()
    r, msg = rpc.request("tools/list", {})
    assert {"charge", "lookup"} <= {t["name"] for t in msg["result"]["tools"]}, msg


def _smuggled(oid):
    args = json.dumps({"order_id": oid, "amount": 5})
    return {
        "params.name twice": '{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"lookup",'
                             f'"arguments":{args},"name":"charge"}}}}',
        "params.name twice, escaped": '{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"lookup",'
                                      f'"arguments":{args},"na\\u006de":"charge"}}}}',
        "params twice": '{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"lookup",'
                        f'"arguments":{args}}},"params":{{"name":"charge","arguments":{args}}}}}',
        "escaped name": '{"jsonrpc":"2.0","id":35,"method":"tools\\/call","params":{"name":"ch\\u0061rge",'
                        f'"arguments":{args}}}}}',
        "notification": f'{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"charge","arguments":{args}}}}}',
        "batch": f'[{{"jsonrpc":"2.0","id":36,"method":"tools/call","params":{{"name":"charge","arguments":{args}}}}}]',
        "name with a NUL": '{"jsonrpc":"2.0","id":37,"method":"tools/call","params":{"name":"lookup\\u0000charge",'
                           f'"arguments":{args}}}}}',
    }


@pytest.mark.parametrize("form", list(_smuggled("x")))
def test_no_message_shape_smuggles_a_call_of_a_tool_not_granted(world_quiet, form):
    w = world_quiet
    rpc = Rpc(w.g, "shop", w.support).initialize()
    oid = "S-" + uuid.uuid4().hex[:10]
    r = rpc.post(_smuggled(oid)[form].encode())
    assert r.status_code in (200, 202, 400, 403), describe(r)
    if r.status_code == 200 and form != "name with a NUL":
        msg = r.json()
        res = msg.get("result") or {}
        assert res.get("isError") is True and (res.get("_meta") or {}).get("once/outcome") == "not_allowed", msg
    time.sleep(SETTLE_S)
    got = charges_at(w, oid)
    assert got["effects"] == 0 and got["calls"] == 0, got
    assert not [m for m in got["posted"] if (m.get("params") or {}).get("name") == "charge"], got


@pytest.mark.parametrize("target", ["/v1/mcp/vault", "/v1/mcp/vault/", "/v1/mcp/VAULT", "/v1/mcp/%76ault",
                                    "/v1/mcp/shop/../vault", "/v1/mcp/shop%2F..%2Fvault", "/v1/mcp//vault",
                                    "/v1/mcp/vault;shop", "/v1/mcp/vault?x=1", "/v1/proxy/vault/mcp"])
def test_an_mcp_server_not_granted_sees_nothing(world_quiet, target):
    w = world_quiet
    before = len(w.vault.requests_seen())
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTO, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
    r = send(w.g.port, "POST", target, auth(w.support, {"Content-Type": "application/json",
                                                        "Accept": "application/json, text/event-stream"}), body)
    if target == "/v1/mcp/vault":
        refused(r)
    else:
        assert r.status_code in (400, 403, 404), f"{target}: {r.status_code}" + describe(r)
    for method in ("GET", "DELETE"):
        r = send(w.g.port, method, "/v1/mcp/vault", auth(w.support, {"Accept": "text/event-stream"}))
        assert r.status_code in (403, 405), describe(r)
    time.sleep(SETTLE_S)
    assert len(w.vault.requests_seen()) == before, w.vault.requests_seen()[before:]


# =========================================================================== the actions API

@pytest.fixture
def coders_action(world):
    """An action of coder's in coder-abc: (scope, key, token), pending."""
    w = world
    scope, key = "coder-" + uuid.uuid4().hex[:6], new_key()
    r = requests.post(f"{w.g.url}/v1/actions", json={"scope": scope, "key": key, "request": {"secret": "c0der"}},
                      headers=auth(CODER), timeout=HTTP_S)
    assert r.status_code == 201, describe(r)
    return scope, key, r.json()["token"]


def test_reserving_outside_the_granted_scopes_is_refused(world):
    w = world
    for scope in ("coder-x", "billing", "other", "SUPPORT-x", "support", "xsupport-x", "shop", "vault"):
        r = requests.post(f"{w.g.url}/v1/actions", json={"scope": scope, "key": new_key()}, headers=auth(w.support),
                          timeout=HTTP_S)
        assert r.status_code == 403 and r.json()["code"] in ("not_allowed", "scope_reserved"), (scope, describe(r))
    # Two scope members: whichever is read, the one the store uses is checked.
    for body in ('{"scope":"support-x","key":"%s","scope":"coder-x"}', '{"scope":"coder-x","key":"%s","scope":"support-x"}'):
        key = new_key()
        r = requests.post(f"{w.g.url}/v1/actions", data=(body % key).encode(), headers=auth(w.support,
                          {"Content-Type": "application/json"}), timeout=HTTP_S)
        if r.status_code == 201:
            assert w.g.action("coder-x", key, headers=auth(OPS)).status_code == 404, "reserved in coder-x" + describe(r)
        else:
            assert r.status_code in (400, 403), describe(r)
    assert requests.post(f"{w.g.url}/v1/actions", json={"scope": "support-x", "key": new_key()},
                         headers=auth(w.support), timeout=HTTP_S).status_code == 201


def test_another_agents_action_cannot_be_read_listed_or_settled(world, coders_action):
    w = world
    scope, key, token = coders_action
    h = auth(w.support)
    refused(w.g.action(scope, key, headers=h))
    for target in (f"/v1/actions/{quote(scope)}/{quote(key)}", f"/v1/actions/%63{scope[1:]}/{key}",
                   f"/v1/actions/support-x%2F..%2F{scope}/{key}", f"/v1/actions/support-x/../{scope}/{key}",
                   f"/v1/actions//{scope}/{key}", f"/v1/actions/{scope.upper()}/{key}"):
        r = send(w.g.port, "GET", target, h)
        assert r.status_code in (400, 403, 404), f"{target}: {r.status_code}" + describe(r)
        assert b"c0der" not in r.content, target
    for params in ({"scope": scope}, {"scope": scope, "agent": "coder"}, {"agent": "coder"}, {},
                   {"scope": "coder-*"}, {"status": "pending"}):
        r = requests.get(f"{w.g.url}/v1/actions", params=params, headers=h, timeout=HTTP_S)
        refused(r)
    # A second scope parameter: the list must never hold coder's action.
    for q in (f"scope=support-x&scope={scope}", f"scope={scope}&scope=support-x"):
        r = send(w.g.port, "GET", f"/v1/actions?{q}", h)
        assert r.status_code in (200, 400, 403), describe(r)
        assert key.encode() not in r.content and b"c0der" not in r.content, f"{q}: coder's action listed" + describe(r)
    for verb, extra in (("complete", {"result": {"ok": True}}), ("release", {}), ("unknown", {}), ("renew", {})):
        r = requests.post(f"{w.g.url}/v1/actions/{verb}", json={"scope": scope, "key": key, "token": token, **extra},
                          headers=h, timeout=HTTP_S)
        refused(r)
        # Two scope members in the body.
        raw = ('{"scope":"support-x","key":%s,"token":%s,"scope":%s}'
               % (json.dumps(key), json.dumps(token), json.dumps(scope))).encode()
        r = requests.post(f"{w.g.url}/v1/actions/{verb}", data=raw, headers=auth(w.support,
                          {"Content-Type": "application/json"}), timeout=HTTP_S)
        assert r.status_code in (400, 403, 404), f"{verb} with two scopes: {r.status_code}" + describe(r)
    rec = record(w, scope, key)
    assert rec["state"] == "pending" and rec["attempt"] == 1 and rec["agent"] == "coder", rec
    # Operator routes stay operator routes.
    r = requests.post(f"{w.g.url}/v1/actions/{scope}/{key}/resolve", json={"outcome": "released"}, headers=h,
                      timeout=HTTP_S)
    assert r.status_code == 403, describe(r)
    assert requests.get(f"{w.g.url}/v1/agents", headers=h, timeout=HTTP_S).status_code == 403
    # coder settles its own.
    r = requests.post(f"{w.g.url}/v1/actions/complete", json={"scope": scope, "key": key, "token": token,
                                                              "result": {"ok": 1}}, headers=auth(CODER), timeout=HTTP_S)
    assert r.status_code == 200, describe(r)


def test_an_upstream_scope_not_granted_cannot_be_read(world_quiet):
    """coder's proxied request to `other` is recorded in scope `other`: support may not read it,
    nor list that scope; it may read its own upstream's scope (pay)."""
    w = world_quiet
    key = new_key()
    assert w.g.proxy("POST", "other", "/v1/secret", key=key, headers=auth(CODER), json={"pin": 1234}).status_code == 200
    refused(w.g.action("other", key, headers=auth(w.support)))
    refused(requests.get(f"{w.g.url}/v1/actions", params={"scope": "other"}, headers=auth(w.support), timeout=HTTP_S))
    r = requests.get(f"{w.g.url}/v1/actions", params={"scope": "pay", "agent": "coder"}, headers=auth(w.support),
                     timeout=HTTP_S)
    assert r.status_code == 200 and r.json()["items"] == [], describe(r)


# =========================================================================== the inbox

def test_an_inbox_not_granted_is_refused_and_a_receipt_does_not_open_it(world_quiet):
    w = world_quiet
    eid = "ev-" + uuid.uuid4().hex[:10]
    assert w.g.hook("tickets", b'{"t":2}', {"X-Event-Id": eid, "Content-Type": "application/json"}).status_code == 200
    for source in ("tickets", "billing"):
        refused(requests.post(f"{w.g.url}/v1/inbox/{source}/claim", json={"max": 100}, headers=auth(w.support),
                              timeout=HTTP_S))
    for target in ("/v1/inbox/Tickets/claim", "/v1/inbox/%74ickets/claim", "/v1/inbox/tickets%2Fclaim",
                   "/v1/inbox/billing/../tickets/claim", "/v1/inbox/billing%2F..%2Ftickets/claim",
                   "/v1/inbox//tickets/claim", "/v1/inbox/tickets;x/claim", "/v1/inbox/tickets/claim/"):
        r = send(w.g.port, "POST", target, auth(w.support, {"Content-Type": "application/json"}), b'{"max":100}')
        assert r.status_code in (400, 403, 404, 405), f"{target}: {r.status_code}" + describe(r)
        assert eid.encode() not in r.content, target
    # coder holds a claim; support cannot ack or nack it with the receipt.
    events = w.g.claim("tickets", max=100, token=CODER)
    receipts = [e["receipt"] for e in events if e["event_id"] == eid]
    assert receipts, events
    for verb in ("ack", "nack"):
        refused(requests.post(f"{w.g.url}/v1/inbox/tickets/{verb}", json={"receipts": receipts}, headers=auth(w.support),
                              timeout=HTTP_S))
    r = requests.get(f"{w.g.url}/v1/events", params={"source": "tickets", "limit": 1000}, headers=auth(OPS),
                     timeout=HTTP_S)
    ev = [e for e in r.json()["items"] if e["event_id"] == eid][0]
    assert ev["state"] == "pending" and ev.get("claimed_by") == "coder", ev
    assert w.g.ack("tickets", receipts, token=CODER)["acked"] == 1
    assert requests.get(f"{w.g.url}/v1/events", headers=auth(w.support), timeout=HTTP_S).status_code == 403


# =========================================================================== one name, two roles

def test_an_agent_cannot_share_its_name_with_an_operator(tmp_path):
    """An agent token named like an operator (`TOKEN operator support` beside `TOKEN agent
    support`) would make the ledger's agent and decided_by, and the log, unable to tell who did
    what: the tokens file is refused at its line, by check-config and by serve."""
    require_serve()
    agent_tok, op_tok = "tok-twin-agent-0a1b2c3d4e5f", "tok-twin-oper-6a7b8c9d0e1f"
    sh.write_tokens(tmp_path / "tokens", [f"{agent_tok} agent support", f"{op_tok} operator support"])
    cfg = tmp_path / "once.ini"
    cfg.write_text("[server]\ntokens_file = tokens\n")
    r = sh.run_once("check-config", str(cfg))
    assert r.returncode != 0, sh.output_of(r)
    assert "may not share a name" in r.stderr and "line 3" in r.stderr, r.stderr
    assert agent_tok not in r.stderr and op_tok not in r.stderr
