#!/usr/bin/python3
"""A fake agent: the `deliver_to` endpoint of a push webhook source in tests.
Python 3 standard library only.

Every POST to a path not under /_agent/ is a *delivery*. It is recorded (with
its headers and body, and the result of checking its Standard Webhooks
signature when the agent knows the secret) before it is answered, and then
answered according to the current fault mode:

    ok (default)         200 {"ok":true}
    fail_first N         the first N deliveries (counted since the last reset
                         or config change of fail_first) answer 500
    always_fail          every delivery answers 500
    hang_first N         the first N deliveries are recorded and then not
                         answered until hang_ms passes (default 120 s) or
                         POST /_agent/release; later ones follow the other modes
    hang                 every delivery hangs that way
    delay_ms N           wait N ms before answering (any mode)
    status N             the status of a failing answer (default 500)
    ok_status N          the status of a successful answer (default 200)

Control endpoints (never recorded):
    GET  /_agent/deliveries  JSON list: seq, path, headers (lower-case names ->
                             value), raw_headers [[name, value]...], body (text)
                             or body_base64, body_sha256, time, answered
                             (status, "hang" or null while running), signature
                             (null: no secret set; true/false), signature_error
    GET  /_agent/stats       {"count","in_flight","max_in_flight","answered":{status:n}}
    GET  /_agent/config      the current mode
    POST /_agent/config      {"fail_first":N,"always_fail":B,"hang_first":N,"hang":B,
                              "hang_ms":N,"delay_ms":N,"status":N,"ok_status":N,"secret":"whsec_..."|null,
                              "tolerance_s":N}; members left out are unchanged;
                             setting fail_first or hang_first restarts their count
    POST /_agent/release     wake every hanging delivery (it is then answered 200)
    POST /_agent/reset       forget deliveries; mode back to ok (secret kept)

Run: /usr/bin/python3 tests/fakes/agent.py --port N [--secret whsec_...] [mode options]
With --port 0 a free port is chosen. The first line on stdout is
"listening on 127.0.0.1:PORT". Listens on 127.0.0.1 only.
"""
import argparse
import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verify_standard(secret, headers, body, tolerance_s=300, now=None):
    """Checks a Standard Webhooks signature: (True, None) or (False, why).

    secret: "whsec_" + base64 of the key; headers: lower-case names -> values.
    Signed content: "{webhook-id}.{webhook-timestamp}.{body}"; the header is a
    space-separated list of "v1,<base64 HMAC-SHA256>"."""
    if not secret.startswith("whsec_"):
        return False, "secret is not whsec_"
    key = base64.b64decode(secret[len("whsec_"):])
    msg_id = headers.get("webhook-id")
    ts = headers.get("webhook-timestamp")
    sig = headers.get("webhook-signature")
    if msg_id is None or ts is None or sig is None:
        return False, "missing webhook-id, webhook-timestamp or webhook-signature"
    if not ts.isdigit():
        return False, f"webhook-timestamp {ts!r} is not digits"
    now = time.time() if now is None else now
    if abs(now - int(ts)) > tolerance_s:
        return False, f"webhook-timestamp {ts} is {now - int(ts):.0f} s from now"
    signed = msg_id.encode() + b"." + ts.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    versions = [item for item in sig.split(" ") if item]
    for item in versions:
        version, _, value = item.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True, None
    return False, f"no v1 signature matched (got {sig!r})"


class _State:
    def __init__(self, secret=None):
        self.lock = threading.Lock()
        self.secret = secret
        self.tolerance_s = 300
        self.release = threading.Event()
        self.reset()

    def reset(self):
        self.deliveries = []
        self.fail_first = 0
        self.failed = 0
        self.always_fail = False
        self.hang_first = 0
        self.hung = 0
        self.hang = False
        self.hang_ms = 120000
        self.delay_ms = 0
        self.status = 500
        self.ok_status = 200
        self.in_flight = 0
        self.max_in_flight = 0
        self.release = threading.Event()

    def config(self):
        return {"fail_first": self.fail_first, "always_fail": self.always_fail, "hang_first": self.hang_first,
                "hang": self.hang, "hang_ms": self.hang_ms, "delay_ms": self.delay_ms, "status": self.status, "ok_status": self.ok_status,
                "secret": self.secret, "tolerance_s": self.tolerance_s}

    def configure(self, c):
        if "fail_first" in c:
            self.fail_first = int(c["fail_first"])
            self.failed = 0
        if "always_fail" in c:
            self.always_fail = bool(c["always_fail"])
        if "hang_first" in c:
            self.hang_first = int(c["hang_first"])
            self.hung = 0
        if "hang" in c:
            self.hang = bool(c["hang"])
        if "hang_ms" in c:
            self.hang_ms = int(c["hang_ms"])
        if "delay_ms" in c:
            self.delay_ms = int(c["delay_ms"])
        if "status" in c:
            self.status = int(c["status"])
        if "ok_status" in c:
            self.ok_status = int(c["ok_status"])
        if "secret" in c:
            self.secret = c["secret"]
        if "tolerance_s" in c:
            self.tolerance_s = int(c["tolerance_s"])
        if not self.hang and self.hang_first == 0:
            self.release.set()
            self.release = threading.Event()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, state):
        super().__init__(addr, _Handler)
        self.state = state

    def handle_error(self, request, client_address):
        # A gateway killed mid-delivery resets the connection: not an error here.
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAgent/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        st = self.server.state
        if self.path == "/_agent/deliveries":
            with st.lock:
                out = [dict(d) for d in st.deliveries]
            return self._send_json(200, out)
        if self.path == "/_agent/stats":
            with st.lock:
                answered = {}
                for d in st.deliveries:
                    k = str(d["answered"])
                    answered[k] = answered.get(k, 0) + 1
                out = {"count": len(st.deliveries), "in_flight": st.in_flight,
                       "max_in_flight": st.max_in_flight, "answered": answered}
            return self._send_json(200, out)
        if self.path == "/_agent/config":
            with st.lock:
                return self._send_json(200, st.config())
        return self._send_json(404, {"error": "not found"})

    def do_POST(self):
        st = self.server.state
        body = self._body()
        if self.path.startswith("/_agent/"):
            if self.path == "/_agent/config":
                with st.lock:
                    st.configure(json.loads(body or b"{}"))
                    return self._send_json(200, st.config())
            if self.path == "/_agent/release":
                with st.lock:
                    st.release.set()
                    st.release = threading.Event()
                return self._send_json(200, {"released": True})
            if self.path == "/_agent/reset":
                with st.lock:
                    st.release.set()
                    st.reset()
                return self._send_json(200, {"reset": True})
            return self._send_json(404, {"error": "not found"})
        self._deliver(body)

    def _deliver(self, body):
        st = self.server.state
        headers = {k.lower(): v for k, v in self.headers.items()}
        rec = {"path": self.path, "headers": headers, "raw_headers": [[k, v] for k, v in self.headers.items()],
               "body_sha256": hashlib.sha256(body).hexdigest(), "time": time.time(), "answered": None,
               "signature": None, "signature_error": None}
        try:
            rec["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            rec["body_base64"] = base64.b64encode(body).decode()
        with st.lock:
            if st.secret:
                ok, why = verify_standard(st.secret, headers, body, st.tolerance_s)
                rec["signature"], rec["signature_error"] = ok, why
            rec["seq"] = len(st.deliveries) + 1
            st.deliveries.append(rec)
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            hang = False
            if st.hang_first > st.hung:
                st.hung += 1
                hang = True
            elif st.hang:
                hang = True
            if hang:
                status = 200
                release, hang_ms = st.release, st.hang_ms
            elif st.always_fail:
                status = st.status
            elif st.fail_first > st.failed:
                st.failed += 1
                status = st.status
            else:
                status = st.ok_status
            delay_ms = st.delay_ms
        try:
            if hang:
                rec["answered"] = "hang"
                release.wait(hang_ms / 1000.0)
            if delay_ms:
                time.sleep(delay_ms / 1000.0)
            rec["answered"] = status
            self._send_json(status, {"ok": 200 <= status < 300, "seq": rec["seq"]})
        finally:
            with st.lock:
                st.in_flight -= 1


class FakeAgent:
    """In-process use: FakeAgent(port=0).start(); .url; .stop()."""

    def __init__(self, port=0, secret=None):
        self.state = _State(secret)
        self.httpd = _Server(("127.0.0.1", port), self.state)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.state.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--secret", default=None, help="whsec_... to verify webhook-signature with")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--always-fail", action="store_true")
    ap.add_argument("--hang-first", type=int, default=0)
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--hang-ms", type=int, default=120000)
    ap.add_argument("--delay-ms", type=int, default=0)
    args = ap.parse_args()
    agent = FakeAgent(args.port, args.secret)
    agent.state.configure({"fail_first": args.fail_first, "always_fail": args.always_fail,
                           "hang_first": args.hang_first, "hang": args.hang, "hang_ms": args.hang_ms,
                           "delay_ms": args.delay_ms})
    print(f"listening on 127.0.0.1:{agent.port}", flush=True)
    try:
        agent.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
