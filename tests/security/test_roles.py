"""Who may do what: bearer tokens with roles (agent, operator), the route x role table,
the metrics token, and "decide before reading" (auth, route and size are answered
from the headers, before a body the attacker never sends).
"""
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pytest

from gateway import assert_problem, describe, new_key
import security_harness as sh

AGENT = "tok-agent-4f1c2e9a7b3d5a61"
PLAIN = "tok-plain-0b9e8d7c6a5f4e32"        # a bare TOKEN line: role agent by default
OPERATOR = "tok-operator-7d2a9c4e1f0b8a53"
STRANGER = "tok-unknown-5e6f7a8b9c0d1e2f"   # in no tokens_file
METRICS = "tok-metrics-3c4d5e6f7a8b9c0d"

ROLES = {"none": None, "stranger": STRANGER, "agent": AGENT, "plain": PLAIN, "operator": OPERATOR}
INBOX = {"verify": "none", "insecure": True, "event_id": "header:X-Event-Id"}


def token_lines():
    return [f"{AGENT} agent alice", PLAIN, f"{OPERATOR} operator ops-bob"]


def _roles_gateway(tmp_path_factory, provider_process, max_body):
    d = tmp_path_factory.mktemp("roles")
    tokens = sh.write_tokens(d / "tokens", token_lines())
    return sh.launch(d, upstreams={"up": {"url": provider_process.url}},
                     server={"tokens_file": str(tokens), "max_body": max_body}, sources={"inbox": INBOX})


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider_process):
    """Tokens for an agent (named), a bare token (agent) and an operator; one upstream
    `up`; a pull source `inbox`; bodies up to 1 MiB."""
    g = _roles_gateway(tmp_path_factory, provider_process, "1MiB")
    yield g
    sh.finish(g)


@pytest.fixture(scope="module")
def small_gw(tmp_path_factory, provider_process):
    """The same with bodies up to 64 KiB."""
    g = _roles_gateway(tmp_path_factory, provider_process, "64KiB")
    yield g
    sh.finish(g)


def fresh_scope():
    return "free-" + uuid.uuid4().hex[:10]


def reserve(gw, token=AGENT, scope=None):
    """A new reservation made with token: (scope, key, fencing token)."""
    scope, key = scope or fresh_scope(), new_key()
    r = gw.post("/v1/actions", json={"scope": scope, "key": key}, headers=sh.bearer(token))
    assert r.status_code == 201, "setup: reserve" + describe(r)
    return scope, key, r.json()["token"]


# Still waiting for a person: the gateway's loop holds an unknown action without a lookup
# within one loop_interval (1 s), so a check made later on a busy machine finds it held.
UNSETTLED = ("unknown", "held")


def unknown_action(gw):
    """An action made unknown by its agent (so it may be resolved): (scope, key)."""
    scope, key, tok = reserve(gw)
    r = gw.post("/v1/actions/unknown", json={"scope": scope, "key": key, "token": tok, "error": "timeout"},
                headers=sh.bearer(AGENT))
    assert r.status_code == 200, "setup: unknown" + describe(r)
    return scope, key


# ----------------------------------------------------------------------------- the route x role table

@dataclass
class Route:
    """One route: how to make a request of it (given the gateway; setup made with the
    agent token), and the status expected without a token, with an agent's and with
    an operator's. An unknown token is expected to fare as no token, a bare token as
    an agent's."""
    name: str
    make: Callable            # gw -> (method, path, json body or None, extra headers)
    none: int
    agent: int
    operator: int
    codes: dict = field(default_factory=lambda: {401: "unauthorized", 403: "forbidden"})

    def expected(self, role):
        return {"none": self.none, "stranger": self.none, "agent": self.agent, "plain": self.agent,
                "operator": self.operator}[role]


def _complete(gw):
    scope, key, tok = reserve(gw)
    return "POST", "/v1/actions/complete", {"scope": scope, "key": key, "token": tok, "result": {"ok": 1}}, {}


def _release(gw):
    scope, key, tok = reserve(gw)
    return "POST", "/v1/actions/release", {"scope": scope, "key": key, "token": tok}, {}


def _show(gw):
    scope, key, _ = reserve(gw)
    return "GET", f"/v1/actions/{scope}/{key}", None, {}


def _resolve(gw):
    scope, key = unknown_action(gw)
    return "POST", f"/v1/actions/{scope}/{key}/resolve", {"outcome": "released", "note": "checked"}, {}


def _redeliver(gw):
    event_id = new_key("evt")
    r = gw.post("/v1/hooks/inbox", json={"e": 1}, headers={"X-Event-Id": event_id})
    assert r.status_code == 200, "setup: hook" + describe(r)
    return "POST", f"/v1/events/inbox/{event_id}/redeliver", None, {}


ROUTES = [
    Route("healthz", lambda gw: ("GET", "/healthz", None, {}), 200, 200, 200),
    Route("readyz", lambda gw: ("GET", "/readyz", None, {}), 200, 200, 200),
    Route("metrics", lambda gw: ("GET", "/metrics", None, {}), 200, 200, 200),
    Route("proxy", lambda gw: ("POST", "/v1/proxy/up/x", {"a": 1}, {"Idempotency-Key": new_key()}),
          401, 200, 200),
    Route("reserve", lambda gw: ("POST", "/v1/actions", {"scope": fresh_scope(), "key": new_key()}, {}),
          401, 201, 201),
    Route("list", lambda gw: ("GET", "/v1/actions", None, {}), 401, 200, 200),
    Route("show", _show, 401, 200, 200),
    Route("complete", _complete, 401, 200, 200),
    Route("release", _release, 401, 200, 200),
    Route("resolve", _resolve, 401, 403, 200),
    Route("claim", lambda gw: ("POST", "/v1/inbox/inbox/claim", {"max": 1}, {}), 401, 200, 200),
    Route("hook", lambda gw: ("POST", "/v1/hooks/inbox", {"e": 1}, {"X-Event-Id": new_key("evt")}),
          200, 200, 200),
    # the operator's decisions: an action that does not exist is 404, but only once the role
    # was checked (an agent learns nothing)
    Route("approve", lambda gw: ("POST", f"/v1/actions/up/{new_key()}/approve", {}, {}), 401, 403, 404),
    Route("deny", lambda gw: ("POST", f"/v1/actions/up/{new_key()}/deny", {"note": "n"}, {}), 401, 403, 404),
    Route("events", lambda gw: ("GET", "/v1/events?status=dead", None, {}), 401, 403, 200),
    Route("redeliver", _redeliver, 401, 403, 200),
    # the console's page holds no data: open, like /healthz
    Route("console", lambda gw: ("GET", "/console", None, {}), 200, 200, 200),
]


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("route", ROUTES, ids=[r.name for r in ROUTES])
def test_route_role_table(gw, provider, route, role):
    """Each route asked with no token, an unknown token, an agent's, a bare (agent)
    token and an operator's: only the documented roles get through."""
    method, path, body, headers = route.make(gw)
    r = gw.request(method, path, json=body, headers=dict(headers, **sh.bearer(ROLES[role])))
    want = route.expected(role)
    if want in route.codes:
        assert_problem(r, want, route.codes[want])
        if want == 401:
            assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), describe(r)
    else:
        assert r.status_code == want, f"{route.name} as {role}: expected {want}" + describe(r)


@pytest.mark.parametrize("method", ["TRACE", "CONNECT"])
@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("route", ROUTES, ids=[r.name for r in ROUTES])
def test_route_role_table_trace_and_connect(gw, provider, route, role, method):
    """TRACE (which echoes the request, injected credentials included) and CONNECT (a
    tunnel) on every route, in every role: 405 before anything is stored or sent."""
    _, path, _, headers = route.make(gw)
    provider.reset()
    r = gw.request(method, path, headers=dict(headers, **sh.bearer(ROLES[role])))
    assert_problem(r, 405, "method_not_allowed")
    assert "TRACE" not in r.headers.get("Allow", "TRACE") and "CONNECT" not in r.headers["Allow"], describe(r)
    sh.assert_provider_saw_nothing(provider)


# ----------------------------------------------------------------------------- attacks on the roles

def test_agent_cannot_resolve_and_nothing_changes(gw):
    """An agent marks its own unknown action completed by hand (hiding a double charge):
    403 forbidden, and the action is still unknown afterwards."""
    scope, key = unknown_action(gw)
    r = gw.post(f"/v1/actions/{scope}/{key}/resolve", json={"outcome": "completed", "provider_id": "ch_fake"},
                headers=sh.bearer(AGENT))
    assert_problem(r, 403, "forbidden")
    rec = gw.action(scope, key, headers=sh.bearer(OPERATOR)).json()
    assert rec["state"] in UNSETTLED and rec["provider_id"] is None, rec


@pytest.mark.parametrize("auth", [None, f"Bearer {STRANGER}", f"Bearer {AGENT} operator", "Bearer operator",
                                  f"Bearer {OPERATOR[:-1]}", f"Basic {OPERATOR}", "Bearer ops-bob"],
                         ids=["none", "unknown", "token-plus-role", "role-word", "prefix", "basic", "name"])
def test_resolve_without_an_operator_token_is_401(gw, auth):
    """Resolve with no token, an unknown one, or a forged "operator" credential: 401."""
    scope, key = unknown_action(gw)
    h = {"Authorization": auth} if auth else {}
    r = gw.post(f"/v1/actions/{scope}/{key}/resolve", json={"outcome": "released"}, headers=h)
    assert_problem(r, 401, "unauthorized")
    assert gw.action(scope, key, headers=sh.bearer(OPERATOR)).json()["state"] in UNSETTLED


@pytest.mark.parametrize("role", ["none", "stranger"])
def test_refused_proxy_request_sends_nothing(gw, provider, role):
    """A proxied POST without a valid token: 401, nothing reaches the provider, no row."""
    key = new_key()
    r = gw.proxy("POST", "up", "/charges", key=key, json={"amount": 1}, headers=sh.bearer(ROLES[role]))
    assert_problem(r, 401, "unauthorized")
    sh.assert_provider_saw_nothing(provider)
    assert gw.action("up", key, headers=sh.bearer(OPERATOR)).status_code == 404


def test_without_tokens_every_route_is_open(gateway):
    """No tokens_file (loopback only): resolve, the operator's route, needs no token."""
    gw = gateway(server={})
    scope, key, tok = reserve(gw, token=None)
    r = gw.post("/v1/actions/unknown", json={"scope": scope, "key": key, "token": tok})
    assert r.status_code == 200, describe(r)
    r = gw.post(f"/v1/actions/{scope}/{key}/resolve", json={"outcome": "released"})
    assert r.status_code == 200, describe(r)


def test_operator_line_without_a_name(gateway, tmp_path):
    """`TOKEN operator` (no NAME) is an operator too: it may resolve."""
    tokens = sh.write_tokens(tmp_path / "tokens", [AGENT, f"{OPERATOR} operator"])
    gw = gateway(server={"tokens_file": str(tokens)})
    scope, key = unknown_action(gw)
    r = gw.post(f"/v1/actions/{scope}/{key}/resolve", json={"outcome": "released"}, headers=sh.bearer(OPERATOR))
    assert r.status_code == 200 and r.json()["state"] == "released", describe(r)


# ----------------------------------------------------------------------------- metrics_token

@pytest.mark.parametrize("with_tokens", [True, False], ids=["tokens_file", "no-tokens_file"])
def test_metrics_token(gateway, tmp_path, with_tokens):
    """With metrics_token, /metrics is no longer open: the metrics token or an operator's
    gets it; no token or a wrong one gets 401; an agent's 403. /healthz stays open."""
    server = {"metrics_token": METRICS}
    table = {None: 401, "wrong-metrics-token": 401, METRICS: 200}
    if with_tokens:
        server["tokens_file"] = str(sh.write_tokens(tmp_path / "tokens", token_lines()))
        table.update({AGENT: 403, PLAIN: 403, OPERATOR: 200, STRANGER: 401})
    gw = gateway(server=server)
    for token, want in table.items():
        r = gw.get("/metrics", headers=sh.bearer(token))
        if want == 200:
            assert r.status_code == 200 and "once_" in r.text, f"token {token}" + describe(r)
        else:
            assert_problem(r, want, {401: "unauthorized", 403: "forbidden"}[want])
    for path in ("/healthz", "/readyz"):
        r = gw.get(path)
        assert r.status_code == 200, describe(r)


# ----------------------------------------------------------------------------- decide before reading

BIG = 1_000_000     # declared, never sent: within gw's max_body (1 MiB), over small_gw's (64 KiB)


@pytest.mark.parametrize("gateway_name,token,target,status,code", [
    ("gw", None, "/v1/proxy/up/x", 401, "unauthorized"),
    ("gw", STRANGER, "/v1/proxy/up/x", 401, "unauthorized"),
    ("gw", None, "/v1/actions", 401, "unauthorized"),
    ("gw", AGENT, "/v1/actions/s/k/resolve", 403, "forbidden"),
    ("gw", AGENT, "/v1/proxy/nope/x", 404, "unknown_upstream"),
    ("small_gw", AGENT, "/v1/proxy/up/x", 413, "body_too_large"),
    ("small_gw", AGENT, "/v1/actions/complete", 413, "body_too_large"),
    ("small_gw", None, "/v1/hooks/inbox", 413, "body_too_large"),
], ids=["no-token", "unknown-token", "actions-no-token", "agent-resolve", "unknown-upstream",
        "proxy-too-large", "actions-too-large", "hook-too-large"])
def test_decided_from_the_headers(request, provider, gateway_name, token, target, status, code):
    """Headers of a POST declaring a 1,000,000-byte body, and no body at all: the answer
    must come within 2 s (a gateway that waits for the body holds the attacker's
    connection and memory), and nothing is forwarded."""
    gw = request.getfixturevalue(gateway_name)
    headers = dict(sh.bearer(token), **{"Idempotency-Key": new_key(), "Content-Type": "application/json",
                                        "Content-Length": str(BIG), "X-Event-Id": new_key("evt")})
    head = sh.http_request("POST", target, f"127.0.0.1:{gw.port}", headers)
    sock = sh.connect_from(gw.port)
    try:
        t0 = time.monotonic()
        sock.sendall(head)
        buf, how = sh.read_response(sock, 2.0)
        elapsed = time.monotonic() - t0
    finally:
        sock.close()
    assert how == "answer", (f"no complete answer within 2 s to the headers alone ({how} after {elapsed:.2f} s,"
                             f" got {buf[:300]!r})")
    assert_problem(sh.RawAnswer(head, buf, gw.port), status, code)
    sh.assert_provider_saw_nothing(provider)
