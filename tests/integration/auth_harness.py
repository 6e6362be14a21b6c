"""A real authorization server for the [auth] tests (docs/auth.md): tests/clients/oidc_issuer.mjs
(npm oidc-provider, pinned) on 127.0.0.1, issuing JWT access tokens by client credentials, and a
gateway that accepts them. Used by tests/integration/test_auth_jwt.py and
tests/security/test_jwt_attacks.py.
"""
import base64
import contextlib
import json
import subprocess
import time
from pathlib import Path

import jwt as pyjwt
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway import FakeProcess, Provider, require_serve
from hooks_harness import AgentGateway
from mcp_harness import node_or_skip

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
ISSUER_MJS = CLIENTS / "oidc_issuer.mjs"

SUPPORT_ID, SUPPORT_SECRET = "support-bot", "support-secret-4f1c9a2e7b3d5e60a8c1"
OPS_ID, OPS_SECRET = "ops-bot", "ops-secret-9d8c7b6a5f4e3d2c1b0a"


class Issuer:
    """One oidc_issuer.mjs. clients: [{client_id, client_secret, scope?}]; issuer: the iss it
    signs with (default its own URL); keys: private JWKs (default one fresh RSA key); port: fixed
    (for a restart on the same address)."""

    def __init__(self, workdir, clients=None, issuer=None, keys=None, port=0, alg="RS256", ttl=300, tls=None,
                 ca=None, scope=None):
        """tls: (cert, key) PEM paths to serve HTTPS; ca: the CA file that verifies it (for the
        test's own token requests)."""
        self.node = node_or_skip()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cfg = {"port": port, "alg": alg, "ttl": ttl,
                    "clients": clients if clients is not None else [
                        {"client_id": SUPPORT_ID, "client_secret": SUPPORT_SECRET, "scope": "mcp"},
                        {"client_id": OPS_ID, "client_secret": OPS_SECRET, "scope": "mcp once:operator"}]}
        if issuer:
            self.cfg["issuer"] = issuer
        if keys:
            self.cfg["keys"] = keys
        if scope:
            self.cfg["scope"] = scope   # the scopes the server knows
        if tls:
            self.cfg["tls_cert"], self.cfg["tls_key"] = str(tls[0]), str(tls[1])
        self.verify = str(ca) if ca else True
        self.proc = None
        self.start()

    def start(self, timeout=30):
        path = self.workdir / f"issuer-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(self.cfg))
        self.errf = open(self.workdir / "issuer.stderr", "ab")
        self.proc = subprocess.Popen([self.node, str(ISSUER_MJS), str(path)], stdout=subprocess.PIPE,
                                     stderr=self.errf, cwd=CLIENTS, text=True)
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and not line:
            line = self.proc.stdout.readline()
            if self.proc.poll() is not None:
                break
        assert line, "oidc_issuer.mjs did not start: " + (self.workdir / "issuer.stderr").read_text()[-2000:]
        info = json.loads(line)
        self.port, self.issuer, self.jwks, self.keys = info["port"], info["issuer"], info["jwks"], info["keys"]
        self.cfg["port"] = self.port
        self.cfg["keys"] = self.keys   # a restart keeps the same keys unless told otherwise
        self.url = f"{'https' if self.cfg.get('tls_cert') else 'http'}://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc:
            FakeProcess.stop(self)
        self.proc = None
        self.errf.close()

    def token(self, resource, client_id=SUPPORT_ID, secret=SUPPORT_SECRET, scope="mcp"):
        """A JWT access token for resource, by client credentials."""
        r = requests.post(f"{self.url}/token", auth=(client_id, secret), timeout=30, verify=self.verify,
                          data={"grant_type": "client_credentials", "resource": resource, "scope": scope})
        assert r.status_code == 200, r.text
        return r.json()["access_token"]


def b64url(data):
    if isinstance(data, (dict, list)):
        data = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_parts(token):
    """(header, claims) of a compact JWS, unverified: for building attacks from a real token."""
    h, c, _ = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    return json.loads(base64.urlsafe_b64decode(pad(h))), json.loads(base64.urlsafe_b64decode(pad(c)))


def auth_gateway(workdir, issuer_url, extra=None, auth=None, **kw):
    """An AgentGateway with [auth] issuer = issuer_url (more [auth] keys in auth, more sections
    in extra)."""
    sections = {"auth": {"issuer": issuer_url, **(auth or {})}}
    sections.update(extra or {})
    return AgentGateway(workdir, sections, **kw)


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


@contextlib.contextmanager
def issuer_world(workdir, stop_gateway=None, **gw_kw):
    """A fresh Issuer, a counting fake provider as upstream demo, and a started gateway with [auth]
    on that issuer: yields (gateway, issuer, provider), all stopped at the end (the gateway by
    stop_gateway(g) when given, e.g. the security suite's finish)."""
    require_serve()
    node_or_skip()
    issuer = Issuer(Path(workdir) / "issuer")
    provider = Provider()
    g = auth_gateway(Path(workdir) / "gw", issuer.url, upstreams={"demo": {"url": provider.url}}, sources={},
                     **gw_kw)
    try:
        g.start()
        yield g, issuer, provider
    finally:
        (stop_gateway or (lambda gw: gw.stop()))(g)
        issuer.stop()
        provider.stop()


def fresh_rsa_jwk(kid, **extra):
    """A new private RSA JWK (an attacker's, or a key the issuer rotates in)."""
    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {**json.loads(pyjwt.algorithms.RSAAlgorithm.to_jwk(k)), "kid": kid, **extra}


def sign(claims, key_jwk, alg="RS256", kid=None):
    """A token signed with a private JWK (the issuer's own, or an attacker's)."""
    key = pyjwt.algorithms.RSAAlgorithm.from_jwk(json.dumps(key_jwk))
    return pyjwt.encode(claims, key, algorithm=alg, headers={"kid": kid or key_jwk["kid"]})
