#!/usr/bin/python3
"""A fake provider (the upstream of once in tests), Python 3 standard library only.

It records every *effect* it accepts (any non-GET/HEAD/OPTIONS request to a path
not under /_fake/) and can inject a fault into each request, chosen by request
headers so that a test can ask for it through the gateway:

    X-Fake-Delay-Ms: N        record the effect, then wait N ms before answering
    X-Fake-Status: N          answer with status N (default 200; the body stays JSON)
    X-Fake-Close: after-read  record the effect, then close the socket without answering
    X-Fake-Close: before-effect
                              close the socket without answering and without recording
    X-Fake-Close: mid-response
                              record, send the status line, headers and half the body, close
    X-Fake-Hang: 1            record, then never answer (until the provider stops)
    X-Fake-Body-Size: N       answer a JSON body of exactly N bytes (a padded echo)
    X-Fake-Echo-Body: 1       answer the request body itself as application/octet-stream
    X-Fake-Header: Name: v    add a header to the answer (may repeat)
    X-Fake-Stall-Ms: N        wait N ms before anything else (before the effect is recorded;
                              with X-Fake-Close: before-effect the effect is then never recorded)
    X-Fake-Total-Tokens: N    usage.total_tokens of a chat completion (default 123)

Streamed answers: an effect whose JSON body has "stream": true, to a path ending in
/chat/completions (OpenAI chat), /responses (OpenAI Responses) or /messages (Anthropic), is
answered as text/event-stream in HTTP/1.1 chunks, one event per chunk, in that provider's
shape, ending with its final event ([DONE], response.completed, message_stop). Each content
event says "generation N, part I". Usage is in the final events (for chat only with
"stream_options": {"include_usage": true}, as OpenAI does), totalling X-Fake-Total-Tokens.
    X-Fake-Stream-Frames: N     content events (default 5)
    X-Fake-Stream-Gap-Ms: N     wait N ms before each content event after the first
    X-Fake-Stream-Frame-Bytes: N  pad each content event's text to N bytes
    X-Fake-Stream-Cut-After: K  send K content events, then close the connection without the
                                final event and without the last chunk (a cut stream)
    X-Fake-Stream-No-Final: 1   leave the final event out, but end the chunked body cleanly
The effect record gets stream_first_sent / stream_last_sent (time.time() when the first and
the last event were written) and stream_bytes (the body bytes sent).

Chat completions: an effect to a path ending in /chat/completions is answered like an LLM
API, {"id":"chatcmpl-N","object":"chat.completion","choices":[{"message":{"content":
"generation N ..."}}],"usage":{"prompt_tokens","completion_tokens","total_tokens"}}, so each
generation differs (a replay is recognisable) and total_tokens is what it "cost".

The same faults can be queued for the next effects with POST /_fake/faults
{"faults":[{"delay_ms":..,"status":..,"close":..,"hang":..,"body_size":..}, ...]}
(for callers that cannot set headers); a queued fault is used instead of the headers.

Every answer to an effect is JSON {"id":"eff_N","echo":{method,path,query,headers,body}}
with Content-Type: application/json and X-Provider-Request: N (N counts effects from 1).
Safe requests (GET/HEAD/OPTIONS) are answered the same way with "id": null, and are
only kept in the request log.

Native mode (--native): like Stripe, the provider dedupes on Idempotency-Key (or
--key-header NAME). A repeated key gets the first answer again (same status, headers
and body, plus Idempotent-Replayed: true) and no new effect; a repeated key whose
first request is still being processed gets 409. The stored answer is decided when
the effect is recorded, so a first request that was closed or hung still leaves
the answer that a retry gets.

Lookup endpoints (for reconciliation: "did this effect happen?"; never effects, not in
/_fake/requests, logged in /_fake/lookups):
    GET /v1/lookup?ref=V[&by=B]   {"data":[{"id":"eff_N","seq":N,"object":"effect",
                                  "method","path","status":"succeeded"}]} for every effect
                                  matching V, else {"data":[]}
    GET /v1/effects/REF[?by=B]    200 {"id":"eff_N",...} for the first match, else 404
  B says what V is compared with: "key" (default: the effect's --key-header header),
  "json:/pointer" (a string or integer in the effect's JSON body), or "header:Name".
  Lookup faults: a query parameter fake_status=N answers N; POST /_fake/lookup-mode
  {"status":N,"close":bool,"delay_ms":N,"body":str} applies to every lookup until reset
  or {} is posted; POST /_fake/lookup-faults {"faults":[{...}, ...]} queues one-shot
  faults (same members) used before the mode. A fault "status" answers
  {"error":"injected"} with that status; "body" replaces the answer body; "close"
  closes without an answer.

Control endpoints (never recorded as effects):
    GET  /_fake/effects    JSON list of effects: seq, id, method, path, query, headers
                           (lower-case names), raw_headers, body or body_base64,
                           idempotency_key, time
    GET  /_fake/count      {"count": N}
    GET  /_fake/requests   every request seen except /_fake/ ones (effects and safe ones)
    GET  /_fake/stats      {"count","requests","in_flight","max_in_flight","native_replays",
                           "lookups"}
    GET  /_fake/lookups    every lookup: method, path, query, headers (lower-case), time, status
    POST /_fake/reset      forget everything (effects, requests, native keys, queued faults)
    POST /_fake/faults     queue faults, see above
    POST /_fake/lookup-mode, /_fake/lookup-faults   lookup faults, see above

Run: /usr/bin/python3 tests/fakes/provider.py --port N [--native] [--key-header NAME]
           [--tls-cert PEM --tls-key PEM [--tls-ca PEM] [--require-client-cert]]
With --port 0 a free port is chosen. With --tls-cert/--tls-key it serves HTTPS only (the TLS
handshake runs in the connection's own thread); --tls-ca names the CA that client
certificates are checked against, and --require-client-cert refuses a handshake without one
(mutual TLS). Without these flags nothing changes. Either way the first line on stdout is
"listening on 127.0.0.1:PORT". Import: FakeProvider(port=0, native=False).start().
"""
import argparse
import base64
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class _State:
    def __init__(self, native, key_header):
        self.native = native
        self.key_header = key_header.lower()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.reset()

    def reset(self):
        with getattr(self, "lock", threading.Lock()):
            self.effects = []
            self.requests = []
            self.native_keys = {}  # key -> {"done": bool, "answer": (status, headers, body)}
            self.faults = []
            self.in_flight = 0
            self.max_in_flight = 0
            self.native_replays = 0
            self.lookups = []
            self.lookup_faults = []
            self.lookup_mode = {}


def _body_json(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 2048

    def __init__(self, addr, state, ssl_context=None):
        self.state = state
        self.ssl_context = ssl_context
        super().__init__(addr, _Handler)

    def finish_request(self, request, client_address):
        if self.ssl_context is None:
            return super().finish_request(request, client_address)
        # HTTPS: the handshake runs here, in the connection's own thread, so that a client
        # that stalls or fails it (no client certificate, an untrusted CA) blocks no one.
        request.settimeout(10)
        try:
            conn = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            conn.settimeout(None)
            super().finish_request(conn, client_address)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        # A client (the gateway) that goes away mid-answer is normal in fault tests.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, BrokenPipeError, socket.timeout, TimeoutError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


def _server_ssl_context(tls_cert, tls_key, tls_ca=None, require_client_cert=False):
    """The TLS context of an HTTPS fake provider, or None for plain HTTP."""
    if not tls_cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_cert, tls_key)
    if tls_ca:
        ctx.load_verify_locations(tls_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    elif require_client_cert:
        raise ValueError("--require-client-cert needs --tls-ca")
    return ctx


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeProvider/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    # --- plumbing -----------------------------------------------------------

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    break
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _send(self, status, headers, body, head_only=False):
        self.send_response(status)
        have_len = False
        for name, value in headers:
            if name.lower() == "content-length":
                have_len = True
            self.send_header(name, value)
        if not have_len:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head_only:
            self.wfile.write(body)
        self.wfile.flush()

    def _abort(self):
        """Close the connection without (finishing) an answer."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    # --- control ------------------------------------------------------------

    def _control(self, method, path, body):
        st = self.server.state
        if method == "GET" and path == "/_fake/effects":
            with st.lock:
                data = list(st.effects)
            return self._send(200, [("Content-Type", "application/json")], _body_json(data))
        if method == "GET" and path == "/_fake/requests":
            with st.lock:
                data = list(st.requests)
            return self._send(200, [("Content-Type", "application/json")], _body_json(data))
        if method == "GET" and path == "/_fake/count":
            with st.lock:
                n = len(st.effects)
            return self._send(200, [("Content-Type", "application/json")], _body_json({"count": n}))
        if method == "GET" and path == "/_fake/stats":
            with st.lock:
                data = {
                    "count": len(st.effects),
                    "requests": len(st.requests),
                    "in_flight": st.in_flight,
                    "max_in_flight": st.max_in_flight,
                    "native_replays": st.native_replays,
                    "lookups": len(st.lookups),
                }
            return self._send(200, [("Content-Type", "application/json")], _body_json(data))
        if method == "GET" and path == "/_fake/lookups":
            with st.lock:
                data = list(st.lookups)
            return self._send(200, [("Content-Type", "application/json")], _body_json(data))
        if method == "POST" and path in ("/_fake/lookup-mode", "/_fake/lookup-faults"):
            try:
                doc = json.loads(body or b"{}")
                assert isinstance(doc, dict)
                if path == "/_fake/lookup-faults":
                    faults = doc.get("faults", [])
                    assert isinstance(faults, list) and all(isinstance(f, dict) for f in faults)
            except Exception:
                return self._send(400, [("Content-Type", "application/json")], b'{"error":"bad lookup faults"}')
            with st.lock:
                if path == "/_fake/lookup-mode":
                    st.lookup_mode = doc
                else:
                    st.lookup_faults.extend(faults)
            return self._send(200, [("Content-Type", "application/json")], _body_json({"ok": True}))
        if method == "POST" and path == "/_fake/reset":
            st.reset()
            return self._send(200, [("Content-Type", "application/json")], _body_json({"ok": True}))
        if method == "POST" and path == "/_fake/faults":
            try:
                faults = json.loads(body or b"{}").get("faults", [])
                assert isinstance(faults, list)
            except Exception:
                return self._send(400, [("Content-Type", "application/json")], b'{"error":"bad faults"}')
            with st.lock:
                st.faults.extend(faults)
            return self._send(200, [("Content-Type", "application/json")], _body_json({"queued": len(faults)}))
        return self._send(404, [("Content-Type", "application/json")], b'{"error":"no such control"}')

    # --- requests -----------------------------------------------------------

    # --- lookups ------------------------------------------------------------

    @staticmethod
    def _matches(rec, by, ref, key_header):
        if by in ("", "key"):
            return rec.get("idempotency_key") == ref
        if by.startswith("header:"):
            return rec["headers"].get(by[7:].lower()) == ref
        if by.startswith("json:"):
            try:
                doc = json.loads(rec.get("body") or "")
            except ValueError:
                return False
            for tok in by[5:].split("/")[1:] if by[5:] else []:
                tok = tok.replace("~1", "/").replace("~0", "~")
                if isinstance(doc, dict) and tok in doc:
                    doc = doc[tok]
                elif isinstance(doc, list) and tok.isdigit() and int(tok) < len(doc):
                    doc = doc[int(tok)]
                else:
                    return False
            if isinstance(doc, bool) or not isinstance(doc, (str, int)):
                return False
            return str(doc) == ref
        return False

    def _lookup(self, method, path, query):
        st = self.server.state
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if path == "/v1/lookup":
            ref, single = params.get("ref"), False
        else:
            ref, single = urllib.parse.unquote(path[len("/v1/effects/"):]), True
        by = params.get("by", "key")
        lower = {k.lower(): v for k, v in self.headers.items()}
        entry = {"method": method, "path": path, "query": query, "headers": lower, "time": time.time(),
                 "ref": ref, "by": by}
        with st.lock:
            fault = st.lookup_faults.pop(0) if st.lookup_faults else dict(st.lookup_mode)
            matches = [e for e in st.effects if ref is not None and self._matches(e, by, ref, st.key_header)]
            st.lookups.append(entry)
        if "fake_status" in params:
            fault = dict(fault, status=int(params["fake_status"]))
        if fault.get("delay_ms"):
            if st.stopping.wait(int(fault["delay_ms"]) / 1000.0):
                return self._abort()
        if fault.get("close"):
            entry["status"] = "closed"
            return self._abort()
        items = [{"id": e["id"], "seq": e["seq"], "object": "effect", "method": e["method"],
                  "path": e["path"], "status": "succeeded"} for e in matches]
        if fault.get("status"):
            status, rbody = int(fault["status"]), _body_json({"error": "injected"})
        elif single:
            status = 200 if items else 404
            rbody = _body_json(items[0] if items else {"error": {"type": "not_found", "ref": ref}})
        else:
            status, rbody = 200, _body_json({"object": "list", "data": items})
        if "body" in fault:
            rbody = fault["body"].encode() if isinstance(fault["body"], str) else _body_json(fault["body"])
        entry["status"] = status
        return self._send(status, [("Content-Type", "application/json"), ("X-Provider-Request", "lookup")],
                          rbody, head_only=method == "HEAD")

    def _faults_from_headers(self):
        h = self.headers
        return {
            "delay_ms": int(h.get("X-Fake-Delay-Ms") or 0),
            "status": int(h.get("X-Fake-Status") or 200),
            "close": (h.get("X-Fake-Close") or "").strip().lower(),
            "hang": (h.get("X-Fake-Hang") or "").strip() not in ("", "0"),
            "body_size": int(h["X-Fake-Body-Size"]) if h.get("X-Fake-Body-Size") else None,
            "echo_body": (h.get("X-Fake-Echo-Body") or "").strip() not in ("", "0"),
            "headers": [v.split(":", 1) for v in h.get_all("X-Fake-Header", []) if ":" in v],
            "stall_ms": int(h.get("X-Fake-Stall-Ms") or 0),
            "total_tokens": int(h.get("X-Fake-Total-Tokens") or 123),
            "stream_frames": int(h.get("X-Fake-Stream-Frames") or 5),
            "stream_gap_ms": int(h.get("X-Fake-Stream-Gap-Ms") or 0),
            "stream_frame_bytes": int(h.get("X-Fake-Stream-Frame-Bytes") or 0),
            "stream_cut_after": int(h["X-Fake-Stream-Cut-After"]) if h.get("X-Fake-Stream-Cut-After") else None,
            "stream_no_final": (h.get("X-Fake-Stream-No-Final") or "").strip() not in ("", "0"),
        }

    def _handle(self):
        st = self.server.state
        method = self.command
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path, split.query
        body = self._read_body()
        if path.startswith("/_fake/"):
            return self._control(method, path, body)
        if method in ("GET", "HEAD", "POST") and (path == "/v1/lookup" or path.startswith("/v1/effects/")):
            return self._lookup(method, path, query)

        faults = self._faults_from_headers()
        if faults["stall_ms"] > 0 and st.stopping.wait(faults["stall_ms"] / 1000.0):
            return self._abort()
        is_effect = method not in SAFE_METHODS
        if is_effect:
            with st.lock:
                if st.faults:
                    q = st.faults.pop(0)
                    faults.update({k: v for k, v in q.items() if k in faults})
                    faults["hang"] = bool(faults["hang"])
        if faults["close"] == "before-effect":
            return self._abort()

        raw_headers = [[k, v] for k, v in self.headers.items()]
        lower = {}
        for k, v in self.headers.items():
            lower[k.lower()] = v if k.lower() not in lower else lower[k.lower()] + ", " + v
        key = lower.get(st.key_header)
        rec = {
            "method": method,
            "path": path,
            "query": query,
            "headers": lower,
            "raw_headers": raw_headers,
            "idempotency_key": key,
            "time": time.time(),
        }
        try:
            rec["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            rec["body"] = None
            rec["body_base64"] = base64.b64encode(body).decode()

        native_entry = None
        with st.lock:
            st.requests.append(rec)
            if is_effect and st.native and key is not None:
                prev = st.native_keys.get(key)
                if prev is not None:
                    if not prev["done"]:
                        busy = True
                    else:
                        busy = False
                        st.native_replays += 1
                    answer = prev["answer"]
                else:
                    busy = None
            else:
                busy = None
            if busy is None:
                seq = None
                if is_effect:
                    seq = len(st.effects) + 1
                    rec["seq"] = seq
                    rec["id"] = f"eff_{seq}"
                    st.effects.append(rec)
                    if st.native and key is not None:
                        native_entry = {"done": False, "answer": None}
                        st.native_keys[key] = native_entry
                st.in_flight += 1
                st.max_in_flight = max(st.max_in_flight, st.in_flight)
        if busy is True:
            return self._send(409, [("Content-Type", "application/json")],
                              _body_json({"error": {"type": "idempotency_error",
                                                    "message": "a request with this key is in progress"}}),
                              head_only=method == "HEAD")
        if busy is False:
            status, headers, rbody = answer
            return self._send(status, headers + [("Idempotent-Replayed", "true")], rbody,
                              head_only=method == "HEAD")

        try:
            shape = self._stream_shape(rec, body) if seq is not None else None
            if shape:
                return self._stream(rec, seq, faults, shape, json.loads(body))
            status, headers, rbody = self._answer(rec, seq, faults, body)
            if native_entry is not None:
                # The effect is performed and its answer decided now; only a plain delay
                # keeps the key "in progress" (a closed or hung answer is done already).
                performed = faults["hang"] or faults["close"] in ("after-read", "mid-response")
                with st.lock:
                    native_entry["answer"] = (status, headers, rbody)
                    native_entry["done"] = performed
            if faults["hang"]:
                st.stopping.wait()
                return self._abort()
            if faults["delay_ms"] > 0:
                if st.stopping.wait(faults["delay_ms"] / 1000.0):
                    return self._abort()
            if faults["close"] == "after-read":
                return self._abort()
            if faults["close"] == "mid-response":
                self.send_response(status)
                for n, v in headers:
                    self.send_header(n, v)
                self.send_header("Content-Length", str(len(rbody)))
                self.end_headers()
                self.wfile.write(rbody[: max(1, len(rbody) // 2)])
                self.wfile.flush()
                return self._abort()
            self._send(status, headers, rbody, head_only=method == "HEAD")
        finally:
            if native_entry is not None:
                with st.lock:
                    native_entry["done"] = True
            with st.lock:
                st.in_flight = max(0, st.in_flight - 1)

    @staticmethod
    def _stream_shape(rec, body):
        """The provider shape of a streamed request, or None."""
        try:
            doc = json.loads(body or b"null")
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("stream") is not True:
            return None
        for suffix, shape in (("/chat/completions", "chat"), ("/responses", "responses"), ("/messages", "anthropic")):
            if rec["path"].endswith(suffix):
                return shape
        return None

    @staticmethod
    def _stream_events(seq, faults, shape, doc):
        """The (name, data) events of a streamed answer, content events marked."""
        total = faults["total_tokens"]
        prompt = total // 3
        pad = faults["stream_frame_bytes"]
        texts = []
        for i in range(faults["stream_frames"]):
            t = f"generation {seq}, part {i + 1}. "
            texts.append(t + "x" * max(0, pad - len(t)))
        cid = f"chatcmpl-{seq}"
        if shape == "chat":
            ev = [(None, {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake",
                          "choices": [{"index": 0, "delta": {"role": "assistant", "content": t},
                                       "finish_reason": None}]}, True) for t in texts]
            ev.append((None, {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake",
                              "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, False))
            if (doc.get("stream_options") or {}).get("include_usage"):
                ev.append((None, {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake",
                                  "choices": [], "usage": {"prompt_tokens": prompt,
                                                           "completion_tokens": total - prompt,
                                                           "total_tokens": total}}, False))
            ev.append((None, "[DONE]", False))
            return ev
        if shape == "responses":
            rid = f"resp_{seq}"
            ev = [("response.created", {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
                   False)]
            ev += [("response.output_text.delta", {"type": "response.output_text.delta", "delta": t}, True)
                   for t in texts]
            ev.append(("response.completed", {"type": "response.completed", "response": {
                "id": rid, "status": "completed",
                "usage": {"input_tokens": prompt, "output_tokens": total - prompt, "total_tokens": total}}}, False))
            return ev
        mid = f"msg_{seq}"
        ev = [("message_start", {"type": "message_start", "message": {"id": mid, "usage": {
            "input_tokens": prompt, "output_tokens": 1}}}, False)]
        ev += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": t}}, True) for t in texts]
        ev.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                     "usage": {"output_tokens": total - prompt}}, False))
        ev.append(("message_stop", {"type": "message_stop"}, False))
        return ev

    def _stream(self, rec, seq, faults, shape, doc):
        """Answers an event stream in chunks, one event each; cut on request."""
        st = self.server.state
        self.send_response(faults["status"])
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Provider-Request", str(seq))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        sent = 0
        content = 0
        cut = faults["stream_cut_after"]
        events = self._stream_events(seq, faults, shape, doc)
        if faults["stream_no_final"]:
            events = events[:-1]
        for name, data, is_content in events:
            if is_content:
                if cut is not None and content >= cut:
                    return self._abort()
                if content > 0 and faults["stream_gap_ms"] > 0 and st.stopping.wait(faults["stream_gap_ms"] / 1000.0):
                    return self._abort()
                content += 1
            elif cut is not None and content >= cut:
                return self._abort()
            frame = (f"event: {name}\n" if name else "") + "data: " + (
                data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))) + "\n\n"
            raw = frame.encode()
            try:
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()
            except OSError:
                return self._abort()
            sent += len(raw)
            now = time.time()
            with st.lock:
                rec.setdefault("stream_first_sent", now)
                rec["stream_last_sent"] = now
                rec["stream_bytes"] = sent
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            return self._abort()

    def _answer(self, rec, seq, faults, body):
        status = faults["status"]
        headers = [("Content-Type", "application/json"),
                   ("X-Provider-Request", str(seq) if seq is not None else "safe")]
        for name, value in faults["headers"]:
            headers.append((name.strip(), value.strip()))
        if faults["echo_body"]:
            headers[0] = ("Content-Type", "application/octet-stream")
            return status, headers, body
        echo = {
            "method": rec["method"],
            "path": rec["path"],
            "query": rec["query"],
            "headers": rec["headers"],
            "body": rec.get("body"),
        }
        obj = {"id": rec.get("id"), "echo": echo}
        if seq is not None and rec["path"].endswith("/chat/completions"):
            total = faults.get("total_tokens", 123)
            prompt = total // 3
            obj = {"id": f"chatcmpl-{seq}", "object": "chat.completion", "provider_effect": rec.get("id"),
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant",
                                            "content": f"generation {seq}: a fresh plan"}}],
                   "usage": {"prompt_tokens": prompt, "completion_tokens": total - prompt,
                             "total_tokens": total}}
        rbody = _body_json(obj)
        n = faults["body_size"]
        if n is not None:
            base = _body_json({"id": rec.get("id"), "pad": ""})
            if n >= len(base):
                rbody = _body_json({"id": rec.get("id"), "pad": "x" * (n - len(base))})
            else:
                headers[0] = ("Content-Type", "application/octet-stream")
                rbody = b"x" * n
        if status in (204, 304) or 100 <= status < 200:
            rbody = b""
        return status, headers, rbody

    def handle_one_request(self):
        # Like the base class, but every method goes to _handle.
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.send_error(414)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self._handle()
            try:
                self.wfile.flush()
            except (OSError, ValueError):
                pass
        except (socket.timeout, TimeoutError, ConnectionError):
            self.close_connection = True


class FakeProvider:
    """An in-process fake provider: FakeProvider(port=0, native=False).start()."""

    def __init__(self, port=0, native=False, key_header="Idempotency-Key", host="127.0.0.1",
                 tls_cert=None, tls_key=None, tls_ca=None, require_client_cert=False):
        self.state = _State(native, key_header)
        ctx = _server_ssl_context(tls_cert, tls_key, tls_ca, require_client_cert)
        self.server = _Server((host, port), self.state, ctx)
        self.host = host
        self.port = self.server.server_address[1]
        self.url = f"{'https' if ctx else 'http'}://{host}:{self.port}"
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.state.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # in-process views of the control endpoints
    def effects(self):
        with self.state.lock:
            return list(self.state.effects)

    def count(self):
        with self.state.lock:
            return len(self.state.effects)

    def reset(self):
        self.state.reset()


def main(argv=None):
    ap = argparse.ArgumentParser(description="A fake provider with fault injection for once's tests.")
    ap.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--native", action="store_true", help="dedupe on the idempotency key like Stripe")
    ap.add_argument("--key-header", default="Idempotency-Key", help="the native mode's key header")
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain)")
    ap.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    ap.add_argument("--tls-ca", help="PEM CA that client certificates must be signed by")
    ap.add_argument("--require-client-cert", action="store_true",
                    help="mutual TLS: refuse clients without a certificate signed by --tls-ca")
    args = ap.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    if (args.tls_ca or args.require_client_cert) and not args.tls_cert:
        ap.error("--tls-ca and --require-client-cert need --tls-cert")
    if args.require_client_cert and not args.tls_ca:
        ap.error("--require-client-cert needs --tls-ca")
    prov = FakeProvider(port=args.port, native=args.native, key_header=args.key_header, host=args.host,
                        tls_cert=args.tls_cert, tls_key=args.tls_key, tls_ca=args.tls_ca,
                        require_client_cert=args.require_client_cert)
    print(f"listening on {prov.host}:{prov.port}", flush=True)
    import signal

    def _term(signum, frame):
        prov.state.stopping.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    try:
        prov.server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        prov.state.stopping.set()
        prov.server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
