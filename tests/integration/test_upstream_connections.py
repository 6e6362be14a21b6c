"""Kept-alive upstream connections between calls (src/server/core/outbound.c).

The outbound thread waits in epoll on the sockets curl names and keeps
connections to an upstream open between calls. An upstream that closes an
idle connection must neither make the gateway spin on the closed socket nor
cost the next call anything: it is sent once, on a new connection, and
completes. (Issue 19 tried leaving idle connections in the epoll set: with
the wake-up of one closed by its peer mishandled, once burnt a core while
idle. That change saved too little to keep; the test stays.)

Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_upstream_connections.py
"""
import os
import socket
import threading
import time

import pytest

from gateway import Gateway, describe, new_key, outcome, require_serve

ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
          b'{"ok":true}')


class IdleClosingUpstream:
    """HTTP/1.1 on loopback: answers each request on a kept-alive connection and
    closes the connection once it has been idle for idle_close seconds."""

    def __init__(self, idle_close):
        self.idle_close = idle_close
        self.requests = 0
        self.connections = 0
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        conn.settimeout(self.idle_close)
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)  # socket.timeout: idle too long
                    if not chunk:
                        return
                    buf += chunk
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(rest) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                buf = rest[length:]
                with self.lock:
                    self.requests += 1
                conn.sendall(ANSWER)
        except (socket.timeout, OSError):
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopping = True
        self.sock.close()


def cpu_seconds(pid):
    """User + system CPU of a process so far, from /proc (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def upstream():
    u = IdleClosingUpstream(idle_close=0.2)
    yield u
    u.stop()


def test_an_idle_connection_closed_by_the_upstream(tmp_path, upstream):
    """The upstream closes the connection once idle. The gateway must not spin on the
    closed socket (its CPU while idle stays low), and the next call goes out once, on a
    new connection, and completes."""
    require_serve()
    gw = Gateway(tmp_path, {"up": {"url": upstream.url, "timeout": "5s"}})
    gw.start()
    try:
        r = gw.proxy("POST", "up", "/v1/charges", key=new_key(), json={"amount": 1})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        time.sleep(0.6)  # the upstream has closed the idle connection
        before = cpu_seconds(gw.pid)
        time.sleep(1.0)
        spent = cpu_seconds(gw.pid) - before
        assert spent < 0.5, f"once used {spent:.2f} s of CPU in 1 s of idling after the upstream closed"
        r = gw.proxy("POST", "up", "/v1/charges", key=new_key(), json={"amount": 2})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert upstream.requests == 2, f"the upstream saw {upstream.requests} requests, not 2"
        assert upstream.connections == 2, f"{upstream.connections} connections, not 2 (one closed)"
    finally:
        rc = gw.stop()
    assert rc == 0, gw.stderr()[-3000:]
    assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]


def test_many_calls_on_kept_connections(tmp_path, upstream):
    """Calls one after another within the idle time reuse the connection: one
    connection, every call answered."""
    require_serve()
    gw = Gateway(tmp_path, {"up": {"url": upstream.url, "timeout": "5s"}})
    gw.start()
    try:
        for i in range(20):
            r = gw.proxy("POST", "up", "/v1/charges", key=new_key(), json={"n": i})
            assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert upstream.requests == 20
        assert upstream.connections == 1, f"{upstream.connections} connections for 20 calls in a row"
    finally:
        rc = gw.stop()
    assert rc == 0, gw.stderr()[-3000:]
    assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]
