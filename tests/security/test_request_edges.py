"""Header and method edges (issue 26, items 2, 3, 6 and 7).

The upstream is lenient_provider.py, a real second server that reads a bare CR as a line
end and answers TRACE by echoing what it received. The prize is the credential once
injects (`Authorization: Bearer sk_live_SECRET`) and the forwarding headers once
promises to drop.

- A bare CR inside a header value, or a folded header line, is answered 400 and never
  forwarded (RFC 9112 2.2 and 5.2): through the proxy, an upstream's own listen port and
  /v1/mcp/NAME. On the old code the provider read `X-Forwarded-For: 10.0.0.1` as a field.
- TRACE and CONNECT get 405 before anything is stored or sent. On the old code TRACE was
  forwarded and the provider's echo carried the injected credential back to the agent.
- Relayed answers (proxy, MCP) carry `Content-Security-Policy: sandbox` and
  `X-Content-Type-Options: nosniff`, so an upstream's HTML never runs on the console's
  origin; the console keeps its own policy.
- A Host that is not host[:port] (`127.0.0.1:PORT@evil.example`), or a second Host, gets
  400; on the old code both passed the DNS-rebinding check.
"""
import pytest

from gateway import Gateway, assert_problem, describe, free_port, new_key, require_serve
from lenient_provider import LenientProvider
import security_harness as sh

DROPPED = {"x-forwarded-for", "x-real-ip"}


@pytest.fixture(scope="module")
def lenient():
    p = LenientProvider().start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def listen_port():
    return free_port()


@pytest.fixture(scope="module")
def gw(tmp_path_factory, lenient, listen_port):
    require_serve()
    g = Gateway(tmp_path_factory.mktemp("edges"), {
        "up": {"url": lenient.url, "header": [sh.INJECTED]},
        "lp": {"url": lenient.url, "header": [sh.INJECTED], "listen": f"127.0.0.1:{listen_port}"},
    }, mcp={"m": {"url": lenient.url + "/mcp", "header": [sh.INJECTED]}})
    g.start()
    yield g
    sh.finish(g)


@pytest.fixture
def provider(lenient):
    return lenient.forget()


def exchange(port, data):
    buf, how = sh.exchange_from(port, data, timeout=15)
    assert how == "answer", f"no answer to {data[:200]!r}: {how}, {buf[:200]!r}"
    return sh.RawAnswer(data, buf, port)


def raw_request(port, method, target, header_block, body=b""):
    """A request whose header block (after Host) is given as raw bytes."""
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + header_block
    if body:
        head += b"Content-Length: %d\r\n" % len(body)
    return head + b"\r\n" + body


def targets(gw, listen_port):
    return [(gw.port, "/v1/proxy/up/v1/messages"), (listen_port, "/v1/messages")]


SMUGGLED = [
    b"X-A: foo\rX-Forwarded-For: 10.0.0.1\r\n",
    b"X-A: foo\rX-Real-IP: 10.0.0.1\r\n",
    b"X-A: foo\r\n X-Forwarded-For: 10.0.0.1\r\n",       # obs-fold
    b"X-A: foo\r\n\tX-Real-IP: 10.0.0.1\r\n",            # obs-fold with a tab
]


@pytest.mark.parametrize("block", SMUGGLED)
def test_bare_cr_and_folded_lines_are_refused(gw, provider, listen_port, block):
    for port, target in targets(gw, listen_port):
        r = exchange(port, raw_request(port, "POST", target, b"Idempotency-Key: " + new_key().encode() + b"\r\n"
                                       + block, b"{}"))
        assert_problem(r, 400, "bad_request")
    assert not DROPPED & set(provider.header_names()), provider.summary()
    provider.assert_saw_nothing()


@pytest.mark.parametrize("block", SMUGGLED[:3])
def test_bare_cr_through_mcp_is_refused(gw, provider, block):
    msg = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    r = exchange(gw.port, raw_request(gw.port, "POST", "/v1/mcp/m",
                                      b"Content-Type: application/json\r\nAccept: application/json, "
                                      b"text/event-stream\r\n" + block, msg))
    assert_problem(r, 400, "bad_request")
    assert not DROPPED & set(provider.header_names()), provider.summary()


def test_plain_headers_still_pass(gw, provider, listen_port):
    """A tab inside a value is legal and forwarded; so are ordinary fields."""
    for port, target in targets(gw, listen_port):
        r = exchange(port, raw_request(port, "GET", target, b"X-Note: a\tb\r\nX-Trace: t-1\r\n"))
        assert r.status_code == 200, describe(r)
    assert len(provider.seen()) == 2


@pytest.mark.parametrize("method", ["TRACE", "CONNECT"])
def test_trace_and_connect_are_refused(gw, provider, listen_port, method):
    for port, target in targets(gw, listen_port) + [(gw.port, "/v1/actions/up/k"), (gw.port, "/healthz")]:
        r = exchange(port, sh.http_request(method, target, f"127.0.0.1:{port}", {"Idempotency-Key": new_key()}))
        assert_problem(r, 405, "method_not_allowed")
        assert "TRACE" not in r.headers.get("Allow", "TRACE"), describe(r)
        assert sh.SECRET.encode() not in r.content
    provider.assert_saw_nothing(secrets=[sh.SECRET])


def test_connect_authority_form_is_refused(gw, provider, listen_port):
    for port in (gw.port, listen_port):
        r = exchange(port, sh.http_request("CONNECT", f"127.0.0.1:{provider.port}", f"127.0.0.1:{provider.port}"))
        assert r.status_code in (400, 405), describe(r)
    provider.assert_saw_nothing(secrets=[sh.SECRET])


def test_relayed_answers_are_sandboxed(gw, provider, listen_port):
    for port, target in targets(gw, listen_port):
        r = exchange(port, sh.http_request("GET", target, f"127.0.0.1:{port}"))
        assert r.status_code == 200, describe(r)
        assert r.headers.get("Content-Security-Policy") == "sandbox", describe(r)
        assert r.headers.get("X-Content-Type-Options") == "nosniff", describe(r)
    # a keyed call, recorded and then replayed from the ledger: sandboxed both times
    key = new_key()
    for _ in range(2):
        r = gw.proxy("POST", "up", "/v1/messages", key=key, json={})
        assert r.status_code == 200 and r.headers.get("Content-Security-Policy") == "sandbox", describe(r)
    # MCP answers are relayed too
    r = gw.post("/v1/mcp/m", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Accept": "application/json, text/event-stream"})
    assert r.headers.get("Content-Security-Policy") == "sandbox", describe(r)
    # the console keeps its own policy
    c = gw.get("/console")
    assert c.status_code == 200 and "sandbox" not in c.headers.get("Content-Security-Policy", ""), describe(c)
    assert "default-src" in c.headers.get("Content-Security-Policy", ""), describe(c)


@pytest.mark.parametrize("host", [
    "127.0.0.1:{port}@evil.example", "evil.example@127.0.0.1:{port}", "127.0.0.1:{port}/x", "127.0.0.1:{port}:80",
    "127.0.0.1:", "127.0.0.1:99999", "[::1", "127.0.0.1 :{port}", "",
])
def test_host_that_is_not_host_port_is_refused(gw, provider, host):
    h = host.format(port=gw.port)
    data = f"GET /v1/proxy/up/x HTTP/1.1\r\nHost: {h}\r\n\r\n".encode()
    r = exchange(gw.port, data)
    assert_problem(r, 400, "bad_request")
    provider.assert_saw_nothing(secrets=[sh.SECRET])


def test_second_host_is_refused(gw, provider):
    data = (f"GET /v1/proxy/up/x HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nHost: evil.example\r\n\r\n").encode()
    assert_problem(exchange(gw.port, data), 400, "bad_request")
    provider.assert_saw_nothing(secrets=[sh.SECRET])


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "127.0.0.1", "LOCALHOST"])
def test_good_hosts_pass(gw, provider, host):
    data = f"GET /v1/proxy/up/x HTTP/1.1\r\nHost: {host.format(port=gw.port)}\r\n\r\n".encode()
    r = exchange(gw.port, data)
    assert r.status_code == 200, describe(r)
