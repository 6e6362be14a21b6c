"""The attacker: a real second HTTP server on 127.0.0.1 that records everything.

An attack test points a trick at this server (a request target that would make once
forward to it, a redirect of the upstream URL, ...) and then asserts that it saw
nothing: no connection, no request, and none of the secrets once injects.

Attacker().start() listens on a free loopback port in a thread of its own; every
accepted connection is recorded (peer address, the raw bytes it sent), and every
request on it is parsed (method, target, headers, body) and answered 200 with a
small JSON body. Only the standard library; every read is bounded in time.
"""
import re
import socket
import threading
import time

READ_TIMEOUT = 5.0          # a connection silent this long is closed
MAX_REQUEST = 4 * 1024 * 1024


class Attacker:
    def __init__(self, host="127.0.0.1"):
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []
        self.connections = []   # {"peer": (ip, port), "raw": bytearray}
        self.requests = []      # {"method", "target", "version", "headers": [(name, value)], "body"}

    # ---- life

    def start(self):
        t = threading.Thread(target=self._accept_loop, name="attacker-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def forget(self):
        """Forgets every connection and request seen so far (a module-scoped server shared by tests)."""
        with self._lock:
            self.requests.clear()
            self.connections.clear()
        return self

    def stop(self):
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self._sock.close()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, peer = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            record = {"peer": peer, "raw": bytearray()}
            with self._lock:
                self.connections.append(record)
            t = threading.Thread(target=self._serve, args=(conn, record), name="attacker-conn", daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn, record):
        conn.settimeout(0.2)
        buf = b""
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            while not self._stop.is_set() and time.monotonic() < deadline and len(buf) < MAX_REQUEST:
                try:
                    chunk = conn.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    return
                deadline = time.monotonic() + READ_TIMEOUT
                with self._lock:
                    record["raw"] += chunk
                buf += chunk
                while True:
                    req, buf = self._parse(buf)
                    if req is None:
                        break
                    with self._lock:
                        self.requests.append(req)
                    conn.sendall(self._answer(req))
        except OSError:
            pass
        finally:
            conn.close()

    # ---- how a request is read and answered (a subclass may read the way a given provider does)

    def _parse(self, buf):
        return _parse_one(buf)

    def _answer(self, req):
        body = b'{"attacker":"got it"}'
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    # ---- what was seen

    def raw(self):
        """Every byte every connection sent, concatenated."""
        with self._lock:
            return b"".join(bytes(c["raw"]) for c in self.connections)

    def summary(self):
        with self._lock:
            conns = [(c["peer"], bytes(c["raw"][:300])) for c in self.connections]
        return f"the attacker on port {self.port} saw {len(conns)} connection(s): {conns!r}"

    def assert_saw_nothing(self, secrets=(), grace=0.1):
        """No connection at all (after waiting grace seconds for stragglers), and none of
        the secrets in anything it received."""
        time.sleep(grace)
        raw = self.raw()
        for s in secrets:
            s = s.encode() if isinstance(s, str) else s
            assert s not in raw, f"the secret {s!r} reached the attacker; " + self.summary()
        with self._lock:
            n = len(self.connections)
        assert n == 0, self.summary()


def _parse_one(buf, line_end=rb"\r\n"):
    """(request dict, rest) for the first complete request in buf, or (None, buf). line_end:
    the regular expression a header line ends with (a lenient reader takes a bare CR too)."""
    head, sep, rest = buf.partition(b"\r\n\r\n")
    if not sep:
        return None, buf
    lines = re.split(line_end, head)
    parts = lines[0].decode("latin-1").split(" ")
    headers = []
    for ln in lines[1:]:
        name, _, value = ln.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    length = 0
    for name, value in headers:
        if name.lower() == "content-length" and value.isdigit():
            length = int(value)
    if len(rest) < length:
        return None, buf
    req = {"method": parts[0], "target": parts[1] if len(parts) > 1 else "",
           "version": parts[2] if len(parts) > 2 else "", "headers": headers, "body": rest[:length],
           "head": head + b"\r\n\r\n"}
    return req, rest[length:]
