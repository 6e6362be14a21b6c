"""Slow and greedy clients: a per-client-address connection cap and a whole-request
deadline.

- `max_connections_per_loopback_client = 3`: a fourth connection from 127.0.0.1 is
  closed at once without an answer, while another address (127.0.0.2) is still
  served, and a slot freed is a slot usable again. Loopback is uncapped by default.
- `request_timeout = 2s`: a client that trickles its headers or its body, one byte
  every 0.3 s (active, so an idle timeout never fires), is disconnected once the
  whole request is 2 s late (4 s slack for a loaded machine) and nothing is forwarded.
"""
import time

from gateway import describe, new_key
import security_harness as sh

CAP = 3
TRICKLE = 0.3           # seconds between bytes
DEADLINE = 2.0
SLACK = 4.0


def healthz(port):
    return sh.http_request("GET", "/healthz", f"127.0.0.1:{port}")


def assert_served(port, source, what):
    buf, how = sh.exchange_from(port, healthz(port), source=source, timeout=5)
    assert how == "answer" and sh.status_of(buf) == 200, f"{what}: {how} {buf[:300]!r}"


def served_within(port, source, seconds):
    """True once a request from source is answered 200 (retried for up to seconds)."""
    deadline = time.monotonic() + seconds
    while True:
        buf, how = sh.exchange_from(port, healthz(port), source=source, timeout=2)
        if how == "answer" and sh.status_of(buf) == 200:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def hold_idle(port, n, source=None, within=5.0):
    """n connections that send nothing, kept open. Each must still be open once the
    server had time to accept (and, were it over a cap, close) them all; tried again
    for up to `within` seconds, as a connection that just closed (the start-up /healthz
    poll's) may still be counted for a moment."""
    deadline = time.monotonic() + within
    while True:
        socks = [sh.connect_from(port, source) for _ in range(n)]
        time.sleep(0.3)
        closed = [i for i, s in enumerate(socks) if server_closed(s)]
        if not closed:
            return socks
        close_all(socks)
        if time.monotonic() >= deadline:
            raise AssertionError(f"the server keeps closing idle connection(s) {closed} of {n} from {source}")
        time.sleep(0.2)


def server_closed(sock):
    """True when the server has closed sock (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def close_all(socks):
    for s in socks:
        s.close()


# ----------------------------------------------------------------------------- connection cap

def test_connection_cap_per_loopback_client(gateway):
    """Three idle connections from 127.0.0.1 hold its whole allowance: a fourth is closed
    without an answer; 127.0.0.2 is served; closing one of the three frees a slot."""
    gw = gateway(server={"max_connections_per_loopback_client": CAP})
    held = hold_idle(gw.port, CAP, source="127.0.0.1")
    try:
        t0 = time.monotonic()
        buf, how = sh.exchange_from(gw.port, healthz(gw.port), source="127.0.0.1", timeout=3)
        assert how in ("eof", "reset", "send-failed") and not buf.startswith(b"HTTP/"), \
            f"a 4th connection from 127.0.0.1 was not closed without an answer: {how} {buf[:300]!r}"
        assert time.monotonic() - t0 < 3, "the 4th connection was not closed at once"
        assert_served(gw.port, "127.0.0.2", "a request from 127.0.0.2 while 127.0.0.1 is at its cap")
        held.pop().close()
        assert served_within(gw.port, "127.0.0.1", 5), "a slot freed by 127.0.0.1 could not be used again"
    finally:
        close_all(held)


def test_loopback_is_uncapped_by_default(gateway):
    """Without the setting, one loopback host may run many agents: 40 idle connections
    from 127.0.0.1 and a 41st request is still served."""
    gw = gateway()
    held = hold_idle(gw.port, 40, source="127.0.0.1")
    try:
        assert_served(gw.port, "127.0.0.1", "the 41st connection from 127.0.0.1")
    finally:
        close_all(held)


# ----------------------------------------------------------------------------- request deadline

def trickled(gw, head, body=b""):
    """Sends head at once and then body one byte per TRICKLE seconds (or, without a body,
    head itself byte by byte). Returns (seconds from the first byte, bytes sent of what
    was trickled, how it ended, what the server sent)."""
    sock = sh.connect_from(gw.port)
    try:
        t0 = time.monotonic()
        limit = t0 + DEADLINE + SLACK + 4       # give up well after the allowed time
        if body:
            sock.sendall(head)
            slow = body
        else:
            slow = head
        sent, how, got = sh.trickle(sock, slow, TRICKLE, limit)
        return time.monotonic() - t0, sent, len(slow), how, got
    finally:
        sock.close()


def assert_cut_off(elapsed, sent, total, how, got, what):
    assert how == "closed", f"{what}: still connected after {elapsed:.1f} s ({sent}/{total} bytes sent)"
    assert elapsed <= DEADLINE + SLACK, f"{what}: disconnected only after {elapsed:.1f} s"
    assert sent < total, f"{what}: the whole request got through"
    status = sh.status_of(got)
    assert status is None or status >= 400, f"{what}: answered {got[:300]!r}"


def test_trickled_headers_are_cut_off(gateway):
    """The headers of a GET, one byte every 0.3 s (about 25 s in all): disconnected once
    request_timeout (2 s) has passed, however active the client is."""
    gw = gateway(server={"request_timeout": "2s"})
    head = sh.http_request("GET", "/healthz", f"127.0.0.1:{gw.port}", {"X-Pad": "a" * 40})
    assert_cut_off(*trickled(gw, head), "trickled headers")
    assert gw.healthy()


def test_trickled_body_is_cut_off(gateway, provider):
    """A proxied POST declaring a 10,000-byte body sent one byte every 0.3 s: disconnected
    in time, nothing forwarded, no action left behind."""
    gw = gateway(upstreams={"up": {"url": provider.url}}, server={"request_timeout": "2s"})
    key = new_key()
    body = b"x" * 10_000
    head = sh.http_request("POST", "/v1/proxy/up/x", f"127.0.0.1:{gw.port}",
                           {"Idempotency-Key": key, "Content-Type": "application/octet-stream",
                            "Content-Length": str(len(body))})
    assert_cut_off(*trickled(gw, head, body), "trickled body")
    sh.assert_provider_saw_nothing(provider)
    r = gw.action("up", key)
    assert r.status_code == 404, "a trickled request left an action" + describe(r)


def test_a_prompt_request_is_unaffected(gateway, provider):
    """request_timeout = 2s does not touch a request that arrives in time (even one whose
    upstream call takes longer than that)."""
    gw = gateway(upstreams={"up": {"url": provider.url}}, server={"request_timeout": "2s"})
    r = gw.proxy("POST", "up", "/x", key=new_key(), json={"a": 1}, headers={"X-Fake-Delay-Ms": "2500"})
    assert r.status_code == 200, describe(r)
