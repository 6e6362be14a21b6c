"""TLS, both ways, with a private CA made by the openssl command in the test:

- the gateway's own listener (and an upstream's listener) serve HTTPS only, with
  `tls_cert`/`tls_key` (`listen_tls_cert`/`listen_tls_key`);
- an https upstream is always verified: with `ca_file` naming its CA it works; without
  it, with another CA, or with a name the certificate does not carry, the answer is 502
  upstream_unreachable, nothing was sent and the key is released;
- mutual TLS: an upstream that requires a client certificate gets `tls_cert`/`tls_key`.
"""
import subprocess

import pytest
import requests

from gateway import assert_problem, describe, free_port, new_key, outcome
import security_harness as sh


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return sh.PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory):
    """Another CA, which signed nothing the providers use."""
    return sh.PKI(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture(scope="module")
def tls_provider_process(pki):
    p = sh.TlsProvider(pki)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def mtls_provider_process(pki):
    p = sh.TlsProvider(pki, require_client_cert=True)
    yield p
    p.stop()


@pytest.fixture
def tls_provider(tls_provider_process):
    tls_provider_process.reset()
    return tls_provider_process


@pytest.fixture
def mtls_provider(mtls_provider_process):
    mtls_provider_process.reset()
    return mtls_provider_process


def charge(gw, upstream="up"):
    key = new_key()
    return key, gw.proxy("POST", upstream, "/v1/charges", key=key, json={"amount": 4200})


def assert_completed(gw, provider, upstream="up"):
    key, r = charge(gw, upstream)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert provider.count() == 1, f"the provider saw {provider.count()} effects, not 1"


def assert_unreachable(gw, provider, upstream="up"):
    """502 upstream_unreachable, nothing reached the provider, the key is released."""
    key, r = charge(gw, upstream)
    assert_problem(r, 502, "upstream_unreachable")
    assert outcome(r) == "released", describe(r)
    sh.assert_provider_saw_nothing(provider, " through a TLS connection that should have failed")
    rec = gw.action(upstream, key)
    assert rec.status_code == 200 and rec.json()["state"] == "released", describe(rec)


def assert_not_plain_http(port):
    """A plain-HTTP request to a TLS port gets no HTTP success."""
    buf, how = sh.exchange_from(port, sh.http_request("GET", "/healthz", f"127.0.0.1:{port}"), timeout=5)
    status = sh.status_of(buf)
    assert status is None or status >= 400, f"plain HTTP answered on the TLS port: {how} {buf[:300]!r}"


# ----------------------------------------------------------------------------- listeners

def test_gateway_serves_https_only(gateway, pki, monkeypatch):
    """[server] tls_cert/tls_key: GET /healthz over HTTPS, verified against the CA; plain
    HTTP on that port gets no answer."""
    gw = gateway(server={"tls_cert": pki.server_cert, "tls_key": pki.server_key}, start=False)
    # Gateway.start polls self.url + /healthz with requests' default verification, which
    # honours REQUESTS_CA_BUNDLE: point it at the test CA and the URL at https.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca_cert))
    gw.url = f"https://127.0.0.1:{gw.port}"
    gw.start()
    r = requests.get(gw.url + "/healthz", verify=str(pki.ca_cert), timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}, describe(r)
    assert_not_plain_http(gw.port)


def test_upstream_listener_serves_https(gateway, pki, provider):
    """[upstream.X] listen_tls_cert/listen_tls_key: the upstream's own listener is HTTPS."""
    port = free_port()
    gateway(upstreams={"up": {"url": provider.url, "listen": f"127.0.0.1:{port}",
                              "listen_tls_cert": pki.server_cert, "listen_tls_key": pki.server_key}})
    r = requests.post(f"https://127.0.0.1:{port}/v1/charges", json={"amount": 1},
                      headers={"Idempotency-Key": new_key()}, verify=str(pki.ca_cert), timeout=30)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert provider.count() == 1
    assert_not_plain_http(port)


def s_client(port, version):
    """Whether `openssl s_client` completes a handshake on port with only version
    (tls1, tls1_1, tls1_2, tls1_3). SECLEVEL=0 lets the client offer the old versions
    at all (Debian's OpenSSL refuses them by default): only the server may say no."""
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", f"-{version}", "-brief"]
    if version in ("tls1", "tls1_1"):
        args += ["-cipher", "DEFAULT@SECLEVEL=0"]
    r = subprocess.run(args, input=b"", capture_output=True, timeout=20)
    out = (r.stdout + r.stderr).decode(errors="replace")
    return r.returncode == 0 and "Protocol version" in out, out


@pytest.mark.parametrize("version,accepted", [("tls1", False), ("tls1_1", False), ("tls1_2", True),
                                              ("tls1_3", True)])
def test_listeners_speak_tls_1_2_and_1_3_only(gateway, pki, provider, monkeypatch, version, accepted):
    """TLS 1.0 and 1.1 are refused (RFC 8996), on the gateway's port and an upstream's own
    listener; 1.2 and 1.3 work. The old build accepted `openssl s_client -tls1_1`."""
    port = free_port()
    gw = gateway(server={"tls_cert": pki.server_cert, "tls_key": pki.server_key},
                 upstreams={"up": {"url": provider.url, "listen": f"127.0.0.1:{port}",
                                   "listen_tls_cert": pki.server_cert, "listen_tls_key": pki.server_key}},
                 start=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca_cert))
    gw.url = f"https://127.0.0.1:{gw.port}"
    gw.start()
    for p in (gw.port, port):
        ok, out = s_client(p, version)
        assert ok == accepted, f"{version} on port {p}: handshake {'done' if ok else 'refused'}\n{out[-1500:]}"


# ----------------------------------------------------------------------------- https upstreams

def test_https_upstream_with_its_ca(gateway, pki, tls_provider):
    """ca_file names the CA that signed the upstream's certificate: the call is made."""
    gw = gateway(upstreams={"up": {"url": tls_provider.url, "ca_file": pki.ca_cert}})
    assert_completed(gw, tls_provider)


def test_https_upstream_without_ca_file_is_refused(gateway, tls_provider):
    """No ca_file: the private CA is not trusted (verification is never off by default)."""
    gw = gateway(upstreams={"up": {"url": tls_provider.url}})
    assert_unreachable(gw, tls_provider)


def test_https_upstream_with_another_ca_is_refused(gateway, other_pki, tls_provider):
    """ca_file names a CA that did not sign the upstream's certificate."""
    gw = gateway(upstreams={"up": {"url": tls_provider.url, "ca_file": other_pki.ca_cert}})
    assert_unreachable(gw, tls_provider)


def test_https_upstream_with_the_wrong_name_is_refused(gateway, pki, tls_provider):
    """The certificate is for IP 127.0.0.1; the URL says localhost: refused, CA or not."""
    gw = gateway(upstreams={"up": {"url": f"https://localhost:{tls_provider.port}", "ca_file": pki.ca_cert}})
    assert_unreachable(gw, tls_provider)


def test_mutual_tls_with_a_client_certificate(gateway, pki, mtls_provider):
    """The upstream requires a client certificate; tls_cert/tls_key provide it."""
    gw = gateway(upstreams={"up": {"url": mtls_provider.url, "ca_file": pki.ca_cert,
                                   "tls_cert": pki.client_cert, "tls_key": pki.client_key}})
    assert_completed(gw, mtls_provider)


def test_a_reused_handle_does_not_carry_a_client_certificate(gateway, pki, mtls_provider):
    """The gateway reuses curl handles from call to call. Two upstreams on the same mTLS
    provider, one with a client certificate and one without: after calls through the first,
    a call through the second must reach the provider without any certificate (no handle
    option, connection or resumed TLS session of the first carried over), so the provider
    acts on nothing more."""
    gw = gateway(upstreams={
        "withcert": {"url": mtls_provider.url, "ca_file": pki.ca_cert,
                     "tls_cert": pki.client_cert, "tls_key": pki.client_key},
        "nocert": {"url": mtls_provider.url, "ca_file": pki.ca_cert}})
    for _ in range(3):
        key, r = charge(gw, "withcert")
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert mtls_provider.count() == 3
    key, r = charge(gw, "nocert")
    assert outcome(r) != "completed", describe(r)
    assert mtls_provider.count() == 3, "a call without a client certificate was accepted by the provider"
    key, r = charge(gw, "withcert")
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)


def test_mutual_tls_without_a_client_certificate(gateway, pki, mtls_provider):
    """The same upstream without tls_cert/tls_key: the provider refuses the connection and
    acts on nothing. Under TLS 1.3 the server checks the client's certificate only after
    the client finished its handshake and wrote the request, so from the gateway's side the
    request went out and the connection then failed: once cannot tell that from a server
    that failed mid-call, so the action is unknown (never resent), not released."""
    gw = gateway(upstreams={"up": {"url": mtls_provider.url, "ca_file": pki.ca_cert}})
    key, r = charge(gw, "up")
    assert_problem(r, 504, "outcome_unknown")
    assert outcome(r) == "unknown", describe(r)
    sh.assert_provider_saw_nothing(mtls_provider, " without a client certificate")
    rec = gw.action("up", key)
    assert rec.status_code == 200 and rec.json()["state"] in ("unknown", "held"), describe(rec)
