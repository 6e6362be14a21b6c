"""The attacker's tests of [auth] (issue 29, docs/auth.md): bearer JWTs that must never get in.

A real authorization server (npm oidc-provider, tests/clients/oidc_issuer.mjs) issues the genuine
tokens; the attacks are built from them (PyJWT signs with the issuer's own private key where the
attack needs a token the issuer could have signed, e.g. expired). Every attack is answered 401 and
nothing is stored or sent: the counting fake provider sees no request and the ledger holds no
action under the key. Each test also sends one genuine request, so it can fail.
Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/security/test_jwt_attacks.py
"""
import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt as pyjwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization

import security_harness as sh
from auth_harness import Issuer, auth_gateway, b64url, fresh_rsa_jwk, issuer_world, jwt_parts, sign
from gateway import Provider, describe, new_key, require_serve
from hooks_harness import wait_until
from mcp_harness import node_or_skip

OPS = "tok-jwt-attacks-operator-7c1e2a9d4b6f"


def charge(g, token, key=None, query=""):
    key = key or new_key()
    headers = {"Idempotency-Key": key}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(f"{g.url}/v1/proxy/demo/charges{query}", json={"amount": 1}, headers=headers, timeout=30), key


def assert_refused(g, provider, token, query=""):
    """401 with an invalid_token challenge, nothing sent, nothing stored."""
    before = len(provider.requests_seen())
    r, key = charge(g, token, query=query)
    assert r.status_code == 401, describe(r)
    assert r.headers["WWW-Authenticate"].startswith(
        f'Bearer resource_metadata="{g.url}/.well-known/oauth-protected-resource"'), r.headers
    assert len(provider.requests_seen()) == before
    s = requests.get(f"{g.url}/v1/actions/demo/{key}", headers={"Authorization": f"Bearer {OPS}"}, timeout=30)
    assert s.status_code == 404, describe(s)
    return r


def accepted(g, token):
    r, _ = charge(g, token)
    assert r.status_code == 200, describe(r)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_serve()
    node_or_skip()
    d = tmp_path_factory.mktemp("jwt")
    issuer = Issuer(d / "issuer")
    provider = Provider()
    tokens = d / "tokens"
    sh.write_tokens(tokens, [f"{OPS} operator ops"])
    g = auth_gateway(d / "gw", issuer.url, upstreams={"demo": {"url": provider.url}}, sources={},
                     server={"tokens_file": str(tokens)})
    try:
        g.start()
        yield g, issuer, provider
        sh.finish(g)
    finally:
        issuer.stop()
        provider.stop()


def genuine(g, issuer):
    """A real token and its claims, as the issuer made them for the gateway."""
    t = issuer.token(g.url)
    return t, jwt_parts(t)


def test_alg_none_is_refused(world):
    g, issuer, provider = world
    token, (hdr, claims) = genuine(g, issuer)
    accepted(g, token)
    for alg in ("none", "None", "NONE"):
        forged = f"{b64url({**hdr, 'alg': alg})}.{b64url(claims)}."
        assert_refused(g, provider, forged)


def test_hs256_signed_with_the_issuers_public_key_is_refused(world):
    """The classic confusion: HMAC keyed with the public key (as PEM, and as the JWK's JSON)."""
    g, issuer, provider = world
    token, (hdr, claims) = genuine(g, issuer)
    pub = [k for k in issuer.jwks["keys"] if k["kid"] == hdr["kid"]][0]
    pem = pyjwt.algorithms.RSAAlgorithm.from_jwk(json.dumps(pub)).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in (pem, json.dumps(pub).encode(), json.dumps(pub, separators=(",", ":")).encode()):
        for alg, h in (("HS256", hashlib.sha256), ("HS512", hashlib.sha512)):
            signing = f"{b64url({**hdr, 'alg': alg})}.{b64url(claims)}"
            sig = base64.urlsafe_b64encode(hmac.new(secret, signing.encode(), h).digest()).rstrip(b"=").decode()
            assert_refused(g, provider, f"{signing}.{sig}")
    accepted(g, token)


def test_a_token_of_another_issuer_is_refused(world, tmp_path):
    """A second, real oidc-provider: its own tokens; then one claiming our issuer's name with its
    own key, under a kid of ours and under its own."""
    g, issuer, provider = world
    other = Issuer(tmp_path / "other")
    try:
        assert_refused(g, provider, other.token(g.url))
        ours = issuer.jwks["keys"][0]["kid"]
        impostor = Issuer(tmp_path / "impostor", issuer=issuer.url, keys=[fresh_rsa_jwk(ours)])
        try:
            assert_refused(g, provider, impostor.token(g.url))
        finally:
            impostor.stop()
        impostor = Issuer(tmp_path / "impostor2", issuer=issuer.url)
        try:
            assert_refused(g, provider, impostor.token(g.url))
        finally:
            impostor.stop()
    finally:
        other.stop()
    accepted(g, issuer.token(g.url))


def test_wrong_audience_expired_and_not_yet_valid_are_refused(world):
    g, issuer, provider = world
    assert_refused(g, provider, issuer.token("http://127.0.0.1:1"))
    _, (hdr, claims) = genuine(g, issuer)
    key = issuer.keys[0]
    now = int(time.time())
    accepted(g, sign({**claims, "iat": now, "exp": now + 300}, key))   # the issuer's own key signs here
    assert_refused(g, provider, sign({**claims, "iat": now - 900, "exp": now - 120}, key))
    assert_refused(g, provider, sign({**claims, "iat": now, "exp": now + 900, "nbf": now + 600}, key))
    no_exp = {k: v for k, v in claims.items() if k != "exp"}
    assert_refused(g, provider, sign(no_exp, key))
    assert_refused(g, provider, sign({**claims, "aud": [g.url + ".evil.example"], "exp": now + 300}, key))
    assert_refused(g, provider, sign({**claims, "iss": issuer.url + "/", "exp": now + 300}, key))


def test_a_kid_not_in_the_jwks_is_refused(world):
    g, issuer, provider = world
    _, (hdr, claims) = genuine(g, issuer)
    stranger = fresh_rsa_jwk("not-in-the-jwks")
    assert_refused(g, provider, sign(claims, stranger))
    # Our kid, a stranger's key: the signature is what fails.
    assert_refused(g, provider, sign(claims, {**stranger, "kid": hdr["kid"]}))


def test_a_token_in_the_query_string_is_refused(world):
    g, issuer, provider = world
    token, _ = genuine(g, issuer)
    assert_refused(g, provider, None, query=f"?access_token={token}")
    # Even beside a good header: a token in a URL is logged everywhere it passes.
    before = len(provider.requests_seen())
    r, _ = charge(g, token, query=f"?x=1&access_token={token}")
    assert r.status_code == 401 and len(provider.requests_seen()) == before, describe(r)
    accepted(g, token)


def test_a_huge_token_is_refused_before_it_is_parsed(world):
    g, issuer, provider = world
    token, (hdr, claims) = genuine(g, issuer)
    padded = sign({**claims, "pad": "x" * 9000}, issuer.keys[0])   # validly signed, too large
    r = assert_refused(g, provider, padded)
    assert "too_large" in r.json()["detail"], r.json()
    before = len(provider.requests_seen())
    r, _ = charge(g, "A" * 200_000)
    assert r.status_code in (401, 431, 413, 400), describe(r)
    assert len(provider.requests_seen()) == before
    accepted(g, token)


def test_plain_http_to_a_non_loopback_issuer_or_jwks_is_refused_at_start(tmp_path):
    require_serve()
    for auth in ({"issuer": "http://192.0.2.10"}, {"issuer": "https://idp.example",
                                                   "jwks_url": "http://192.0.2.10/jwks"}):
        gw = auth_gateway(tmp_path / f"gw{len(auth)}", auth.pop("issuer"), auth=auth, sources={})
        r = sh.run_once("check-config", gw.config_path)
        assert r.returncode != 0 and "plain http is allowed for a loopback host only" in r.stderr, sh.output_of(r)


class _Discovery(BaseHTTPRequestHandler):
    """A discovery document on loopback that sends the keys' fetch to plain http elsewhere."""
    doc = {}

    def do_GET(self):
        body = json.dumps(self.doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_a_discovered_jwks_uri_over_plain_http_elsewhere_is_not_fetched(tmp_path):
    require_serve()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    iss = f"http://127.0.0.1:{srv.server_address[1]}"
    _Discovery.doc = {"issuer": iss, "jwks_uri": "http://192.0.2.10/jwks"}
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    provider = Provider()
    g = auth_gateway(tmp_path / "gw", iss, upstreams={"demo": {"url": provider.url}}, sources={})
    try:
        g.start()
        wait_until(lambda: "jwks_uri is plain http" in g.stderr(), what="the refusal's log line")
        before = len(provider.requests_seen())
        claims = {"iss": iss, "aud": g.url, "sub": "x", "exp": int(time.time()) + 300}
        r, _ = charge(g, sign(claims, fresh_rsa_jwk("k1")))
        assert r.status_code == 401 and len(provider.requests_seen()) == before, describe(r)
    finally:
        sh.finish(g)
        provider.stop()
        srv.shutdown()


def test_a_jwks_behind_a_certificate_once_does_not_trust_is_refused(tmp_path):
    """An https issuer on 127.0.0.1 with a certificate of a private CA: the loopback exception is for
    plain http only, TLS is verified as everywhere. Trusting the CA (ca_file) makes it work."""
    require_serve()
    node_or_skip()
    pki = sh.PKI(tmp_path / "pki")
    issuer = Issuer(tmp_path / "issuer", tls=(pki.server_cert, pki.server_key), ca=pki.ca_cert)
    provider = Provider()
    try:
        g = auth_gateway(tmp_path / "gw", issuer.url, upstreams={"demo": {"url": provider.url}}, sources={})
        g.start()
        try:
            wait_until(lambda: "cannot fetch the issuer's keys" in g.stderr(), what="the fetch failure's log line")
            before = len(provider.requests_seen())
            r, _ = charge(g, issuer.token(g.url))
            assert r.status_code == 401 and len(provider.requests_seen()) == before, describe(r)
        finally:
            sh.finish(g)
        g2 = auth_gateway(tmp_path / "gw2", issuer.url, auth={"ca_file": str(pki.ca_cert)},
                          upstreams={"demo": {"url": provider.url}}, sources={})
        g2.start()
        try:
            accepted(g2, issuer.token(g2.url))
        finally:
            sh.finish(g2)
    finally:
        issuer.stop()
        provider.stop()


def test_while_the_issuer_is_down_cached_keys_work_and_new_kids_are_refused(tmp_path):
    with issuer_world(tmp_path, stop_gateway=sh.finish) as (g, issuer, provider):
        token, (_, claims) = genuine(g, issuer)
        accepted(g, token)
        issuer.stop()
        accepted(g, token)   # the cached key
        rotated = fresh_rsa_jwk("rotated-while-down")
        before = len(provider.requests_seen())
        r, _ = charge(g, sign(claims, rotated))
        assert r.status_code == 401 and len(provider.requests_seen()) == before, describe(r)
        wait_until(lambda: "cannot fetch the issuer's keys" in g.stderr(), what="the failed refresh's log line")
        assert "rotated-while-down" in g.stderr()
        r, _ = charge(g, sign(claims, rotated))
        assert r.status_code == 401, describe(r)
        accepted(g, token)
