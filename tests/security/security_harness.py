"""Helpers of the security suite (a module, not tests).

Builds on tests/integration/gateway.py and hooks_harness.py (put on sys.path by
conftest.py): a gateway is a HookGateway (a Gateway that may have sources), so
every test can use its request, CLI and log helpers. Here are only what the
attacks need on top: token files, raw sockets (from a chosen source address,
headers without a body, one byte at a time), the once binary outside `serve`,
and a certificate authority made with the openssl command.
"""
import json
import os
import select
import socket
import stat
import subprocess
import time
from pathlib import Path

import requests

from gateway import (PROVIDER_PY, PYTHON, FakeProcess, Provider, _env, describe, once_bin,
                     parse_raw_response)
from hooks_harness import HookGateway

SECRET = "sk_live_SECRET"            # what once injects upstream; must never leak
INJECTED = f"Authorization: Bearer {SECRET}"

# --------------------------------------------------------------------------- gateways


def launch(workdir, upstreams=None, server=None, sources=None, start=True):
    """A HookGateway in workdir (SQLite store), started unless start is false."""
    gw = HookGateway(workdir, sources or {}, upstreams=upstreams or {}, server=server)
    return gw.start() if start else gw


def finish(gw):
    """Stops gw; it must exit 0 on SIGTERM and no sanitizer may have reported.
    A gateway that was never started is left alone."""
    if gw.proc is None:
        return
    rc = gw.stop()
    assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]
    assert rc == 0, f"once serve did not exit 0 on SIGTERM ({rc}; None: killed):\n{gw.stderr()[-3000:]}"


def write_tokens(path, lines, mode=0o600):
    """A tokens_file of the given lines (TOKEN [ROLE [NAME]]), with the given mode."""
    path = Path(path)
    path.write_text("# once tokens\n" + "".join(f"{ln}\n" for ln in lines))
    os.chmod(path, mode)
    return path


def bearer(token):
    return {"Authorization": f"Bearer {token}"} if token else {}


def file_mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def stored_request(gw, scope, key, headers=None):
    """The `request` member of GET /v1/actions/{scope}/{key} (asserted present)."""
    r = gw.action(scope, key, headers=headers)
    assert r.status_code == 200, describe(r)
    rec = r.json()
    assert isinstance(rec.get("request"), dict), \
        f"the action record has no stored request (member `request`): {json.dumps(rec)[:1500]}"
    return rec["request"]


def header_names(stored):
    """Lower-case names of the headers of a stored request (a list of pairs or an object)."""
    h = stored.get("headers") or []
    if isinstance(h, dict):
        return {k.lower() for k in h}
    return {pair[0].lower() for pair in h}


def assert_provider_saw_nothing(provider, why=""):
    seen = provider.requests_seen()
    assert seen == [], f"the provider received {len(seen)} request(s){why}: " + json.dumps(
        [{k: s.get(k) for k in ("method", "path", "query")} for s in seen])[:1500]
    assert provider.count() == 0


# --------------------------------------------------------------------------- the once binary

def run_once(*args, env=None, cwd=None, timeout=60):
    """`once ARGS` outside serve; a CompletedProcess with text output."""
    argv = [str(once_bin())] + [str(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env(env), cwd=cwd,
                          stdin=subprocess.DEVNULL)


def run_serve(config, *extra, env=None, cwd=None, timeout=20):
    """`once serve --config FILE EXTRA…` expected to exit by itself; killed (and the result
    returncode None) if it is still running after timeout seconds."""
    argv = [str(once_bin()), "serve", "--config", str(config)] + [str(a) for a in extra]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env),
                         cwd=cwd, stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=10)
        return subprocess.CompletedProcess(argv, None, out, err)


def output_of(r):
    return (r.stdout or "") + (r.stderr or "")


# --------------------------------------------------------------------------- raw sockets

def http_request(method, target, host, headers=None, body=b""):
    """The bytes of one HTTP/1.1 request, target and headers sent exactly as given."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def connect_from(port, source=None, timeout=5):
    """A TCP connection to 127.0.0.1:port, from the source address given (e.g. 127.0.0.2)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(sock, timeout):
    """Reads one HTTP response (headers and a Content-Length body) within timeout seconds.
    Returns (bytes read, how the read ended: "answer" | "eof" | "reset" | "timeout")."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf, "timeout"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return buf, "timeout"
        except ConnectionResetError:
            return buf, "reset"
        if not chunk:
            return buf, "eof"
        buf += chunk
        parsed = parse_raw_response(buf)
        if parsed is not None and b"\r\n\r\n" in buf:
            status, headers, body = parsed
            n = headers.get("content-length")
            if n is None or (n.isdigit() and len(body) >= int(n)):
                return buf, "answer"


def exchange_from(port, data, source=None, timeout=5):
    """Sends data on a new connection (from source) and reads one answer.
    Returns (bytes read, how it ended: "answer" | "eof" | "reset" | "timeout" |
    "refused" | "send-failed")."""
    try:
        s = connect_from(port, source, timeout)
    except ConnectionRefusedError:
        return b"", "refused"
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return b"", "send-failed"
        return read_response(s, timeout)
    finally:
        s.close()


def status_of(buf):
    parsed = parse_raw_response(buf)
    return parsed[0] if parsed else None


class RawAnswer:
    """A raw answer shaped enough like requests.Response for assert_problem and describe."""

    def __init__(self, request_bytes, buf, port):
        parsed = parse_raw_response(buf)
        assert parsed is not None, f"no HTTP answer to {request_bytes[:300]!r}; got {buf[:300]!r}"
        self.status_code, headers, self.content = parsed
        self.headers = requests.structures.CaseInsensitiveDict(headers)
        line = request_bytes.split(b"\r\n", 1)[0].decode("latin-1")
        req = requests.Request(line.split(" ")[0], f"http://127.0.0.1:{port} [{line}]")
        req.headers = {}
        req.body = request_bytes[:300]
        self.request = req

    @property
    def text(self):
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.content)


def trickle(sock, data, interval, deadline):
    """Sends data one byte every interval seconds until all is sent, the server closes
    the connection or deadline (monotonic) passes. Returns (bytes sent, what ended it:
    "sent" | "closed" | "deadline", bytes the server sent meanwhile)."""
    got = b""
    for i in range(len(data)):
        if time.monotonic() >= deadline:
            return i, "deadline", got
        try:
            sock.sendall(data[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            return i, "closed", got
        end = time.monotonic() + interval
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                break
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return i + 1, "closed", got
            if not chunk:
                return i + 1, "closed", got
            got += chunk
    return len(data), "sent", got


# --------------------------------------------------------------------------- TLS

class PKI:
    """A private CA and certificates made with the openssl command in a directory:
    server.pem/server.key for IP:127.0.0.1 (serverAuth) and client.pem/client.key
    (clientAuth), both signed by ca.pem."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_cert, self.ca_key = self.dir / "ca.pem", self.dir / "ca.key"
        self._openssl("req", "-x509", "-new", *self._ec(self.ca_key), "-out", self.ca_cert, "-days", "2",
                      "-subj", "/CN=once security test CA",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.server_cert, self.server_key = self._leaf("server", "/CN=127.0.0.1", [
            "subjectAltName=IP:127.0.0.1", "extendedKeyUsage=serverAuth"])
        self.client_cert, self.client_key = self._leaf("client", "/CN=once gateway", [
            "extendedKeyUsage=clientAuth"])

    @staticmethod
    def _ec(key_path):
        return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key_path]

    def _openssl(self, *args):
        r = subprocess.run(["openssl"] + [str(a) for a in args], capture_output=True, text=True, timeout=60,
                           cwd=self.dir)
        assert r.returncode == 0, f"openssl {' '.join(map(str, args))} failed: {r.stderr}"

    def _leaf(self, name, subject, extensions):
        key, csr, cert, ext = (self.dir / f"{name}.{x}" for x in ("key", "csr", "pem", "ext"))
        ext.write_text("\n".join(["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature",
                                  "subjectKeyIdentifier=hash", "authorityKeyIdentifier=keyid,issuer"]
                                 + extensions) + "\n")
        self._openssl("req", "-new", *self._ec(key), "-out", csr, "-subj", subject)
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key,
                      "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "2",
                      "-out", cert, "-extfile", ext)
        os.chmod(key, 0o600)
        return cert, key


class TlsProvider(Provider):
    """The fake provider serving HTTPS with the PKI's server certificate (and, with
    require_client_cert, refusing clients without a certificate from the PKI's CA).
    Its control endpoints are reached over HTTPS with the PKI's own client certificate."""

    def __init__(self, pki, require_client_cert=False):
        argv = [PYTHON, str(PROVIDER_PY), "--port", "0", "--tls-cert", str(pki.server_cert),
                "--tls-key", str(pki.server_key), "--tls-ca", str(pki.ca_cert)]
        if require_client_cert:
            argv.append("--require-client-cert")
        FakeProcess.__init__(self, argv, "TLS fake provider")
        self.url = f"https://127.0.0.1:{self.port}"
        self.native = False
        # Per request, not on a Session: requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE
        # from the environment override a Session's verify.
        self._tls = {"verify": str(pki.ca_cert), "cert": (str(pki.client_cert), str(pki.client_key))}

    def _get(self, path):
        r = requests.get(self.url + path, timeout=10, **self._tls)
        r.raise_for_status()
        return r.json()

    def reset(self):
        requests.post(self.url + "/_fake/reset", timeout=10, **self._tls).raise_for_status()
