"""Headers: what is kept in the stored request, and what a client may not tell the
upstream about where the request came from.

- The stored request (GET /v1/actions/{scope}/{key} -> request, `once show --json`)
  never holds Authorization, Proxy-Authorization, Cookie, X-Api-Key, Api-Key or a
  header named in [server] redact_headers, whatever their case. They are still
  forwarded (they are the agent's own credentials for the provider).
- X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto, Forwarded and X-Real-IP sent by
  the client are not passed on: the provider must not trust a client's say-so.
"""
import json

import pytest

from gateway import describe, new_key, outcome
import security_harness as sh

# name as sent (odd case on purpose) -> a value that must never be stored
CREDENTIALS = {
    "AUTHORIZATION": "Bearer agent-own-cred-7f3a",
    "cookie": "session=agent-cookie-91bd",
    "x-API-key": "agent-xapikey-2c44",
    "API-KEY": "agent-apikey-5e18",
    "x-custom-SECRET": "agent-custom-secret-a0b9",
    "X-Second-Secret": "agent-second-secret-66d2",
}
NOT_FORWARDED = {"Proxy-Authorization": "Basic agent-proxy-cred-3d70"}   # hop-by-hop: neither
KEPT = {"X-Trace": "trace-keep-4242"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider_process):
    """No tokens_file (so Authorization is the agent's own); two headers to redact."""
    g = sh.launch(tmp_path_factory.mktemp("headers"), upstreams={"up": {"url": provider_process.url}},
                  server={"redact_headers": "X-Custom-Secret, x-second-secret"})
    yield g
    sh.finish(g)


def test_credentials_are_forwarded_but_never_stored(gw, provider):
    """An agent's credentials go to the provider but are not written to the ledger, where
    every operator (and `once show`) could read them; X-Trace is kept."""
    key = new_key()
    headers = dict(CREDENTIALS, **NOT_FORWARDED, **KEPT)
    # X-Fake-Body-Size: the provider answers padding instead of echoing the request,
    # so that the stored *response* cannot carry the values either.
    headers["X-Fake-Body-Size"] = "64"
    r = gw.proxy("POST", "up", "/v1/messages", key=key, json={"to": "ada"}, headers=headers)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)

    got = provider.effects()[0]["headers"]
    for name, value in dict(CREDENTIALS, **KEPT).items():
        assert got.get(name.lower()) == value, f"{name} was not forwarded: {got}"

    secret_values = list(CREDENTIALS.values()) + list(NOT_FORWARDED.values())
    redacted = {n.lower() for n in list(CREDENTIALS) + list(NOT_FORWARDED)}
    record = gw.action("up", key).json()
    stored = sh.stored_request(gw, "up", key)
    names = sh.header_names(stored)
    assert not (names & redacted), f"stored request keeps {sorted(names & redacted)}: {stored}"
    assert "x-trace" in names, f"a harmless header was dropped: {stored}"
    text = json.dumps(record)
    leaked = [v for v in secret_values if v in text]
    assert not leaked, f"the action record holds {leaked}: {text[:2000]}"

    shown = gw.cli("show", "up", key, "--json")
    assert shown.returncode == 0, shown.stderr
    leaked = [v for v in secret_values if v in shown.stdout]
    assert not leaked, f"`once show --json` prints {leaked}: {shown.stdout[:2000]}"
    shown_request = json.loads(shown.stdout).get("request")
    assert isinstance(shown_request, dict) and "x-trace" in sh.header_names(shown_request), \
        f"`once show --json` has no stored request with X-Trace: {shown.stdout[:2000]}"


@pytest.mark.parametrize("name,value", [
    ("X-Forwarded-For", "6.6.6.6"),
    ("X-Forwarded-Host", "evil.example"),
    ("X-Forwarded-Proto", "gopher"),
    ("Forwarded", "for=6.6.6.6;host=evil.example;proto=gopher"),
    ("X-Real-IP", "6.6.6.6"),
    ("x-forwarded-for", "6.6.6.6"),
])
def test_client_forwarding_headers_are_not_passed_on(gw, provider, name, value):
    """A client claims to be someone else (an allow-listed IP, another host): the claim
    does not reach the provider."""
    r = gw.proxy("POST", "up", "/v1/messages", key=new_key(), json={}, headers={name: value})
    assert r.status_code == 200, describe(r)
    got = provider.effects()[0]["headers"]
    passed = {k: v for k, v in got.items() if value in v}
    assert not passed, f"{name}: {value} was passed on: {passed}"
