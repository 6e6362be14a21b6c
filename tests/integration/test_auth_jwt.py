"""Access tokens from an identity provider (issue 29, docs/auth.md): once as an OAuth 2.1
resource server. A real authorization server (npm oidc-provider, tests/clients/oidc_issuer.mjs)
issues JWT access tokens by client credentials; once accepts them beside tokens_file, the agent is
the token's claim (sub: the client id) under its [agent.NAME] section, and the official MCP SDK
client finds the issuer from once's 401 and metadata alone.
Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_auth_jwt.py
"""
import subprocess
import time
import uuid

import pytest
import requests

from auth_harness import (OPS_ID, OPS_SECRET, SUPPORT_ID, SUPPORT_SECRET, Issuer, auth_gateway, bearer,
                          fresh_rsa_jwk, issuer_world, jwt_parts, sign)
from hooks_harness import wait_until
from gateway import Provider, _env, assert_problem, describe, new_key, once_bin, require_serve
from mcp_harness import McpUpstream, call, node_or_skip, once_meta, result_of, run_client

STATIC_OPS = "tok-static-operator-3e5a7c9b1d2f4e6a"   # tokens_file: operator alice
ALICE_SECRET = "alice-client-secret-5d4c3b2a1f0e9d8c"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_serve()
    node_or_skip()
    d = tmp_path_factory.mktemp("auth")
    issuer = Issuer(d / "issuer", clients=[
        {"client_id": SUPPORT_ID, "client_secret": SUPPORT_SECRET, "scope": "mcp"},
        {"client_id": OPS_ID, "client_secret": OPS_SECRET, "scope": "mcp once:operator"},
        {"client_id": "alice", "client_secret": ALICE_SECRET, "scope": "mcp"}])
    demo, other = Provider(), Provider()
    shop = McpUpstream(d / "shop", json=True, name="shop")
    tokens = d / "tokens"
    tokens.write_text(f"{STATIC_OPS} operator alice\n")
    tokens.chmod(0o600)
    g = auth_gateway(d / "gw", issuer.url,
                     extra={"mcp.shop": {"url": shop.url},
                            "agent.support-bot": {"allow": ["demo: *", "mcp.shop: charge, lookup", "actions: *"]}},
                     upstreams={"demo": {"url": demo.url}, "other": {"url": other.url}},
                     sources={}, server={"tokens_file": str(tokens)})
    try:
        g.start()
        yield g, issuer, demo, other, shop
        g.stop()
    finally:
        issuer.stop()
        demo.stop()
        other.stop()
        shop.stop()


def charge(g, token, upstream="demo", key=None):
    return requests.post(f"{g.url}/v1/proxy/{upstream}/charges", json={"amount": 1}, timeout=30,
                         headers={**bearer(token), "Idempotency-Key": key or new_key()})


def test_the_protected_resource_metadata_names_the_issuer(world):
    g, issuer, *_ = world
    r = requests.get(f"{g.url}/.well-known/oauth-protected-resource", timeout=30)
    assert r.status_code == 200, describe(r)
    doc = r.json()
    assert doc["resource"] == g.url and doc["authorization_servers"] == [issuer.url], doc
    assert doc["bearer_methods_supported"] == ["header"] and "once:operator" in doc["scopes_supported"], doc
    r = requests.get(f"{g.url}/.well-known/oauth-protected-resource/v1/mcp/shop", timeout=30)
    assert r.status_code == 200 and r.json()["resource"] == f"{g.url}/v1/mcp/shop", describe(r)
    for path in ["/v1/mcp/nope", "/v1/mcp/demo"]:   # no MCP server of that name (demo is an upstream)
        assert_problem(requests.get(f"{g.url}/.well-known/oauth-protected-resource{path}", timeout=30), 404,
                       "not_found")


def test_a_401_points_to_the_metadata(world):
    g, *_ = world
    r = requests.post(f"{g.url}/v1/mcp/shop", json={}, timeout=30)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == \
        f'Bearer resource_metadata="{g.url}/.well-known/oauth-protected-resource/v1/mcp/shop"'
    r = charge(g, "not-a-token")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == \
        f'Bearer resource_metadata="{g.url}/.well-known/oauth-protected-resource", error="invalid_token"'


def test_a_jwt_acts_as_its_agent_and_is_never_forwarded(world):
    g, issuer, demo, *_ = world
    token = issuer.token(g.url)
    key = new_key()
    before = demo.count()
    r = charge(g, token, key=key)
    assert r.status_code == 200, describe(r)
    assert demo.count() == before + 1
    seen = demo.requests_seen()[-1]
    assert "authorization" not in seen["headers"] and token not in str(seen), seen
    r = requests.get(f"{g.url}/v1/actions/demo/{key}", headers=bearer(STATIC_OPS), timeout=30)
    assert r.status_code == 200 and r.json()["agent"] == SUPPORT_ID, describe(r)
    assert any(line.get("agent") == SUPPORT_ID for line in g.log_lines()), g.stderr()[-2000:]


def test_the_agents_grants_apply_to_a_jwt_as_to_a_static_token(world):
    g, issuer, _, other, _ = world
    token = issuer.token(g.url)
    before = len(other.requests_seen())
    assert_problem(charge(g, token, upstream="other"), 403, "not_allowed")
    assert len(other.requests_seen()) == before


def test_operator_scope_makes_an_operator_and_its_lack_is_insufficient_scope(world):
    g, issuer, *_ = world
    agent = issuer.token(g.url)
    r = requests.get(f"{g.url}/v1/agents", headers=bearer(agent), timeout=30)
    assert_problem(r, 403, "insufficient_scope")
    assert r.headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="once:operator"'
    ops = issuer.token(g.url, client_id=OPS_ID, secret=OPS_SECRET, scope="mcp once:operator")
    r = requests.get(f"{g.url}/v1/agents", headers=bearer(ops), timeout=30)
    assert r.status_code == 200, describe(r)
    # The static operator's token keeps working beside the JWTs.
    assert requests.get(f"{g.url}/v1/agents", headers=bearer(STATIC_OPS), timeout=30).status_code == 200


def test_a_jwt_cannot_take_the_name_of_a_static_token_of_the_other_role(world):
    """tokens_file names operator alice: a JWT whose agent claim is alice (an agent's token) is
    refused, as a tokens_file line would be, so the ledger and log never mix the two."""
    g, issuer, demo, *_ = world
    before = demo.count()
    r = charge(g, issuer.token(g.url, client_id="alice", secret=ALICE_SECRET))
    assert_problem(r, 403, "forbidden")
    assert demo.count() == before


def test_a_token_for_another_mcp_server_resource_is_refused(world):
    """A token whose aud is one MCP server's resource is good there, not for the gateway as a whole."""
    g, issuer, demo, *_ = world
    token = issuer.token(f"{g.url}/v1/mcp/shop")
    r = charge(g, token)
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"], describe(r)


def test_the_mcp_sdk_client_finds_the_issuer_and_calls_through_the_ledger(world):
    """The official SDK's ClientCredentialsProvider, given the gateway's MCP URL and its client
    credentials only: 401 -> metadata -> oidc-provider -> token -> tools/call, recorded as the
    token's agent; the MCP server never sees the token."""
    g, issuer, _, _, shop = world
    order = f"o-{uuid.uuid4().hex[:8]}"
    lines, run = run_client(f"{g.url}/v1/mcp/shop", [call("charge", {"order_id": order, "amount": 5})],
                            oauth_client=f"{SUPPORT_ID}:{SUPPORT_SECRET}", oauth_scope="mcp")
    res = result_of([x for x in lines if x.get("op") == "call"][0], run)
    assert not res.get("isError"), res
    meta = once_meta(res)
    assert shop.count(order_id=order) == 1
    key = meta["once/key"]
    r = requests.get(f"{g.url}/v1/actions/shop/{key}", headers=bearer(STATIC_OPS), timeout=30)
    assert r.status_code == 200 and r.json()["agent"] == SUPPORT_ID, describe(r)
    for seen in shop.requests_seen():
        assert "authorization" not in seen["headers"], seen


def test_without_tokens_file_auth_is_authentication(tmp_path):
    """[auth] alone counts as authentication: a non-loopback listen address is allowed (the
    check of docs/security.md), and a request without a token is 401."""
    require_serve()
    (tmp_path / "once.ini").write_text("[server]\nlisten = 0.0.0.0:7999\n\n[auth]\nissuer = https://idp.example\n"
                                       "audience = https://once.example\n")
    r = subprocess.run([str(once_bin()), "check-config", str(tmp_path / "once.ini")], capture_output=True, text=True,
                       env=_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    (tmp_path / "two.ini").write_text("[server]\nlisten = 0.0.0.0:7999\n\n[auth]\nissuer = https://idp.example\n")
    r = subprocess.run([str(once_bin()), "check-config", str(tmp_path / "two.ini")], capture_output=True, text=True,
                       env=_env(), timeout=60)
    assert r.returncode != 0 and "audience" in r.stderr, r.stderr


def test_a_rotated_in_kid_is_fetched_and_then_accepted(tmp_path):
    """The issuer publishes a new key: the first token under its kid is refused while once fetches
    the JWKS again (the request never waits for the issuer), the next one is accepted."""
    with issuer_world(tmp_path) as (g, issuer, _):
        _, claims = jwt_parts(issuer.token(g.url))
        new = fresh_rsa_jwk("rotated-in", alg="RS256", use="sig")
        issuer.stop()
        issuer.cfg["keys"] = issuer.keys + [new]
        issuer.start()
        token = sign({**claims, "exp": int(time.time()) + 300}, new)
        r = charge(g, token)
        assert r.status_code == 401, describe(r)
        wait_until(lambda: "2 signing key(s)" in g.stderr(), what="the refreshed key set")
        r = charge(g, token)
        assert r.status_code == 200, describe(r)


def test_closed_agents_and_required_scopes_apply_to_jwts(tmp_path):
    """agents = closed: a token whose agent has no [agent.NAME] section is refused (403), as a
    tokens_file line would be at load; required_scopes: a token without them is 403
    insufficient_scope, naming them. Nothing is sent either way."""
    require_serve()
    node_or_skip()
    issuer = Issuer(tmp_path / "issuer", clients=[
        {"client_id": SUPPORT_ID, "client_secret": SUPPORT_SECRET, "scope": "mcp tools"},
        {"client_id": "stranger", "client_secret": "stranger-secret-0a1b2c3d4e5f6a7b", "scope": "mcp tools"}],
        scope="mcp tools once:operator")
    provider = Provider()
    g = auth_gateway(tmp_path / "gw", issuer.url, auth={"required_scopes": "mcp tools"},
                     extra={"agent.support-bot": {"allow": ["demo: *"]}},
                     upstreams={"demo": {"url": provider.url}}, sources={}, server={"agents": "closed"})
    try:
        g.start()
        ok = issuer.token(g.url, scope="mcp tools")
        assert charge(g, ok).status_code == 200
        before = len(provider.requests_seen())
        r = charge(g, issuer.token(g.url, client_id="stranger", secret="stranger-secret-0a1b2c3d4e5f6a7b",
                                   scope="mcp tools"))
        assert_problem(r, 403, "forbidden")
        assert "agents = closed" in r.json()["detail"]
        r = charge(g, issuer.token(g.url, scope="mcp"))
        assert_problem(r, 403, "insufficient_scope")
        assert r.headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="mcp tools"'
        assert len(provider.requests_seen()) == before
    finally:
        g.stop()
        issuer.stop()
        provider.stop()
