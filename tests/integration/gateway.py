"""Helpers for black-box tests of `once serve` (a module, not tests).

- Provider: the fake provider (tests/fakes/provider.py) as a subprocess on a
  free loopback port, with its control endpoints as methods.
- Gateway: writes an INI config into a temporary directory, starts
  `$ONCE_BIN serve --config PATH` (ONCE_BIN defaults to build/once under the
  repository root) with stderr captured to a file, waits for GET /healthz,
  stops it with SIGTERM (SIGKILL after a timeout), kills it, restarts it on the
  same store, and has small request helpers.
- Stores: Gateway(store_kind="sqlite") puts the store in a file in its workdir;
  store_kind="postgres" in a PostgreSQL schema of its own on $ONCE_TEST_PG_URL
  (skipped when unset). The suites take the kind from conftest's store_kind
  fixture, which runs them on both.

Everything listens on 127.0.0.1 only and every wait is bounded.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
PROVIDER_PY = REPO_ROOT / "tests" / "fakes" / "provider.py"
PYTHON = "/usr/bin/python3"
HTTP_TIMEOUT = 30          # default timeout of one request made by the tests
START_TIMEOUT = 10         # /healthz must answer 200 within this after start
STOP_TIMEOUT = 20          # SIGTERM -> exit within this, else SIGKILL and fail

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "ERROR: ThreadSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")


def once_bin():
    """The once binary: $ONCE_BIN (relative to the cwd or the repo root) or build/once."""
    value = os.environ.get("ONCE_BIN")
    if not value:
        return REPO_ROOT / "build" / "once"
    path = Path(value)
    if not path.is_absolute():
        path = path.resolve() if path.exists() else REPO_ROOT / path
    return path


_serve_checked = {}


def require_serve():
    """Fails the calling test (never skips) when the binary is missing or lacks `serve`."""
    binary = once_bin()
    if binary in _serve_checked:
        ok, why = _serve_checked[binary]
    else:
        if not binary.is_file():
            ok, why = False, f"once binary not found at {binary}: build it or set ONCE_BIN"
        else:
            try:
                r = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True,
                                   timeout=30, env=_env())
                ok = r.returncode == 0
                why = (f"`{binary} serve --help` exited {r.returncode}: the binary has no working "
                       f"`serve` yet\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
            except subprocess.TimeoutExpired:
                ok, why = False, f"`{binary} serve --help` did not exit within 30 s"
        _serve_checked[binary] = (ok, why)
    if not ok:
        pytest.fail(why, pytrace=False)
    return binary


def _env(extra=None):
    env = dict(os.environ)
    env.pop("ONCE_STORE", None)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    if extra:
        env.update(extra)
    return env


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port():
    """A loopback port with nothing listening (connect is refused)."""
    return free_port()


# --------------------------------------------------------------------------- stores

STORE_KINDS = ("sqlite", "postgres")
PG_URL_ENV = "ONCE_TEST_PG_URL"
NO_PG_REASON = (f"{PG_URL_ENV} is not set: no PostgreSQL to test against "
                "(scripts/test starts one with scripts/pg)")

# Schemas made by store_url, dropped at the end of the session (conftest.py).
pg_schemas_made = []


def pg_base_url():
    """$ONCE_TEST_PG_URL (a postgres:// URL without once_schema), or None."""
    return os.environ.get(PG_URL_ENV) or None


def store_url(kind, workdir):
    """A fresh store of the given kind: an SQLite file in workdir, or a PostgreSQL
    schema of its own (created by the store on open). Skips without a PostgreSQL."""
    if kind == "sqlite":
        return f"sqlite:{Path(workdir) / 'once.db'}"
    if kind != "postgres":
        raise ValueError(f"unknown store kind {kind!r}")
    base = pg_base_url()
    if not base:
        pytest.skip(NO_PG_REASON)
    schema = f"t_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    pg_schemas_made.append(schema)
    return f"{base}{'&' if '?' in base else '?'}once_schema={schema}"


def drop_pg_schemas():
    """Drops the schemas store_url made (best effort: the server may be throwaway)."""
    base = pg_base_url()
    names, pg_schemas_made[:] = list(pg_schemas_made), []
    if not base or not names:
        return
    import glob
    psql = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql")) or ["psql"]
    sql = "SET client_min_messages = warning;\n" + "".join(
        f"DROP SCHEMA IF EXISTS {n} CASCADE;\n" for n in names)
    try:
        subprocess.run([psql[-1], "-q", "-X", "-d", base], input=sql, text=True, capture_output=True,
                       timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        pass


def new_key(prefix="k"):
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


# --------------------------------------------------------------------------- provider

class FakeProcess:
    """A fake from tests/fakes/ in its own process: started with argv, it prints
    "listening on HOST:PORT" first. Provider and the hooks harness's Agent."""

    def __init__(self, argv, what):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._readline(10)
        m = re.match(r"listening on (\S+):(\d+)", line or "")
        if not m:
            self.proc.kill()
            raise RuntimeError(f"{what} did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.host, self.port = m.group(1), int(m.group(2))

    def _readline(self, timeout):
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return None
        return self.proc.stdout.readline()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Provider(FakeProcess):
    """tests/fakes/provider.py in its own process."""

    def __init__(self, native=False, key_header=None):
        argv = [PYTHON, str(PROVIDER_PY), "--port", "0"]
        if native:
            argv.append("--native")
        if key_header:
            argv += ["--key-header", key_header]
        super().__init__(argv, "fake provider")
        self.url = f"http://{self.host}:{self.port}"
        self.native = native

    def _get(self, path):
        r = requests.get(self.url + path, timeout=10)
        r.raise_for_status()
        return r.json()

    def effects(self):
        return self._get("/_fake/effects")

    def requests_seen(self):
        return self._get("/_fake/requests")

    def count(self):
        return self._get("/_fake/count")["count"]

    def stats(self):
        return self._get("/_fake/stats")

    def reset(self):
        requests.post(self.url + "/_fake/reset", timeout=10).raise_for_status()

    def queue_faults(self, *faults):
        requests.post(self.url + "/_fake/faults", json={"faults": list(faults)}, timeout=10).raise_for_status()

    def wait_count(self, n, timeout=10):
        """Waits until the provider saw at least n effects; returns the count."""
        deadline = time.monotonic() + timeout
        c = self.count()
        while c < n and time.monotonic() < deadline:
            time.sleep(0.02)
            c = self.count()
        return c


# --------------------------------------------------------------------------- config

def _ini_value(v):
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        return ",".join(str(x) for x in v)
    return str(v)


def write_config(path, server, upstreams, mcp=None):
    """server: dict; upstreams: {name: dict}; mcp: {name: dict}, written as [mcp.NAME]
    sections after the upstreams (MCP servers, docs/mcp.md; keys such as key.TOOL as given).
    A list value of strings repeats the line (e.g. header = [...]); a list of ints is
    written comma-separated."""
    lines = ["[server]"]
    for k, v in server.items():
        if v is None:
            continue
        lines.append(f"{k} = {_ini_value(v)}")
    sections = [(f"upstream.{name}", up) for name, up in upstreams.items()]
    sections += [(f"mcp.{name}", m) for name, m in (mcp or {}).items()]
    for section, items in sections:
        lines.append("")
        lines.append(f"[{section}]")
        for k, v in items.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)) and not all(isinstance(x, int) for x in v):
                for item in v:
                    lines.append(f"{k} = {item}")
            else:
                lines.append(f"{k} = {_ini_value(v)}")
    Path(path).write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- gateway

class Gateway:
    """One `once serve` on a config of its own in workdir; restartable on the same store."""

    def __init__(self, workdir, upstreams, server=None, port=None, store_kind="sqlite", store=None, mcp=None):
        """store_kind: "sqlite" (a file in workdir) or "postgres" (a schema of its own on
        $ONCE_TEST_PG_URL); store: an explicit store URL instead; mcp: {name: dict} of
        [mcp.NAME] sections (see write_config)."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.store_kind = store_kind
        self.store = store or store_url(store_kind, self.workdir)
        self.server_cfg = {
            "listen": f"127.0.0.1:{self.port}",
            "store": self.store,
            "max_body": "1MiB",
            "lease": "30s",
            "retention": "24h",
            "loop_interval": "1s",
            "shutdown_grace": "30s",
        }
        if server:
            self.server_cfg.update(server)
        self.upstreams = upstreams
        self.mcp = mcp or {}
        self.config_path = self.workdir / "once.ini"
        write_config(self.config_path, self.server_cfg, self.upstreams, self.mcp)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self._terminated = False
        self.runs = 0
        self.stderr_path = None
        self.stderr_paths = []
        self.exit_codes = []

    # ---- process

    def start(self, timeout=START_TIMEOUT):
        binary = require_serve()
        self._terminated = False
        self.runs += 1
        self.stderr_path = self.workdir / f"stderr.{self.runs}.log"
        self.stderr_paths.append(self.stderr_path)
        self._stderr_file = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([str(binary), "serve", "--config", str(self.config_path)],
                                     stdin=subprocess.DEVNULL, stdout=self._stderr_file,
                                     stderr=self._stderr_file, cwd=self.workdir, env=_env())
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._close_stderr()
                pytest.fail(f"once serve exited with {self.proc.returncode} during start-up:\n"
                            f"{self.stderr()[-4000:]}", pytrace=False)
            try:
                r = requests.get(self.url + "/healthz", timeout=1)
                if r.status_code == 200:
                    return self
                last = f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as e:
                last = repr(e)
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"once serve: GET /healthz not 200 within {timeout} s (last: {last}):\n"
                    f"{self.stderr()[-4000:]}", pytrace=False)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def death_note(self):
        """Why the server is gone: its exit status and the end of its stderr."""
        rc = self.proc.poll() if self.proc is not None else None
        how = (f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited {rc}")
        if "signal 15" in self.stderr() and not self._terminated:
            how += " after a SIGTERM that this test did not send (another process signalled it)"
        return f"once serve (pid {self.proc.pid}) is gone: {how}\n{self.stderr()[-4000:]}"

    def _close_stderr(self):
        f = getattr(self, "_stderr_file", None)
        if f is not None and not f.closed:
            f.close()

    def terminate(self):
        """Sends SIGTERM and returns at once."""
        self._terminated = True
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout=STOP_TIMEOUT):
        """Waits for the process; returns its exit code or None on timeout."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close_stderr()
        self.exit_codes.append(rc)
        return rc

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait; SIGKILL if it does not exit in time. Returns the exit code
        (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self._close_stderr()
                return self.proc.returncode
            return None
        self.terminate()
        rc = self.wait(timeout)
        if rc is None:
            self.proc.kill()
            self.proc.wait(10)
            self._close_stderr()
            self.exit_codes.append("killed")
        return rc

    def kill(self):
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close_stderr()

    def restart(self):
        """A new process on the same config and store (after stop or kill)."""
        if self.alive():
            self.stop()
        return self.start()

    def stderr(self, all_runs=False):
        paths = self.stderr_paths if all_runs else self.stderr_paths[-1:]
        out = []
        for p in paths:
            try:
                out.append(Path(p).read_text(errors="replace"))
            except FileNotFoundError:
                pass
        return "".join(out)

    def sanitizer_reports(self):
        text = self.stderr(all_runs=True)
        return [m for m in SANITIZER_MARKERS if m in text]

    def log_lines(self):
        """The JSON objects among the lines of the current run's stderr."""
        out = []
        for line in self.stderr().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def threads(self):
        """Threads: from /proc/PID/status."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        raise AssertionError("no Threads: line")

    # ---- CLI on the same store

    def cli(self, *args, timeout=60):
        argv = [str(once_bin()), "--store", self.store] + [str(a) for a in args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env(),
                              cwd=self.workdir)

    # ---- HTTP

    def request(self, method, path, *, key=None, headers=None, timeout=HTTP_TIMEOUT, base=None, **kw):
        h = dict(headers or {})
        if key is not None:
            h["Idempotency-Key"] = key
        return requests.request(method, (base or self.url) + path, headers=h, timeout=timeout, **kw)

    def proxy(self, method, upstream, path="/charges", **kw):
        return self.request(method, f"/v1/proxy/{upstream}{path}", **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def action(self, scope, key, **kw):
        from urllib.parse import quote
        return self.get(f"/v1/actions/{quote(scope, safe='')}/{quote(key, safe='')}", **kw)

    def raw(self, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT, port=None):
        """A request whose path is sent exactly as given (requests re-quotes bad escapes)."""
        return raw_http(port or self.port, method, path, body=body, headers=headers, timeout=timeout)

    def healthy(self):
        try:
            return requests.get(self.url + "/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


# --------------------------------------------------------------------------- raw http

class RawResponse:
    """Enough of requests.Response for the assertions here."""

    def __init__(self, method, url, req_headers, req_body, status, headers, content):
        self.status_code = status
        self.headers = requests.structures.CaseInsensitiveDict(headers)
        self.content = content
        self.request = requests.Request(method, url, headers=req_headers, data=req_body)
        self.request.body = req_body

    @property
    def text(self):
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.content)


def raw_http(port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT):
    import http.client
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers = dict(headers or {}, **{"Content-Type": "application/json"})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        # A Host the caller gives replaces http.client's own: one Host only (a
        # second is refused, as RFC 9112 3.2 says).
        own_host = any(k.lower() == "host" for k in (headers or {}))
        conn.putrequest(method, path, skip_host=own_host, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        content = resp.read()
        return RawResponse(method, f"http://127.0.0.1:{port}{path}", headers or {}, body, resp.status,
                           resp.getheaders(), content)
    finally:
        conn.close()


# --------------------------------------------------------------------------- assertions

def describe(r):
    """The exchange, for assertion messages."""
    req = r.request
    body = req.body
    if isinstance(body, bytes):
        body = body[:300]
    elif isinstance(body, str):
        body = body[:300]
    return (f"\n>>> {req.method} {req.url}\n>>> headers {dict(req.headers)}\n>>> body {body!r}"
            f"\n<<< {r.status_code} {dict(r.headers)}\n<<< {r.content[:600]!r}")


def assert_problem(r, status, code):
    """A problem+json answer with the given status and code; returns the JSON."""
    assert r.status_code == status, f"expected {status} {code}" + describe(r)
    ctype = r.headers.get("Content-Type", "")
    assert ctype.split(";")[0].strip().lower() == "application/problem+json", \
        f"Content-Type {ctype!r}, not application/problem+json" + describe(r)
    try:
        j = r.json()
    except ValueError:
        raise AssertionError("problem body is not JSON" + describe(r))
    assert isinstance(j, dict), describe(r)
    assert j.get("code") == code, f"code {j.get('code')!r} != {code!r}" + describe(r)
    assert j.get("status") == status, f"problem member status {j.get('status')!r} != {status}" + describe(r)
    assert isinstance(j.get("title"), str) and j["title"], "problem without a title" + describe(r)
    assert "type" in j, "problem without a type" + describe(r)
    return j


def outcome(r):
    return r.headers.get("Once-Outcome")


RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def is_time(v):
    return isinstance(v, str) and bool(RFC3339_MS.match(v))


def raw_exchange(port, data, *, read_timeout=5.0, shut_write=False, host="127.0.0.1"):
    """Sends data on a fresh connection, reads until the server closes or read_timeout
    passes without data. Returns (bytes read, closed_by_server)."""
    s = socket.create_connection((host, port), timeout=5)
    try:
        if data:
            s.sendall(data)
        if shut_write:
            s.shutdown(socket.SHUT_WR)
        s.settimeout(read_timeout)
        buf = b""
        closed = False
        deadline = time.monotonic() + max(read_timeout, 1) * 3
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            buf += chunk
        return buf, closed
    finally:
        s.close()


def parse_raw_response(buf):
    """(status, headers dict lower-case, body) of the first HTTP response in buf, or None."""
    if not buf.startswith(b"HTTP/"):
        return None
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        if b":" in ln:
            k, v = ln.split(b":", 1)
            headers[k.strip().lower().decode()] = v.strip().decode(errors="replace")
    n = headers.get("content-length")
    if n is not None and n.isdigit():
        body = body[: int(n)]
    return status, headers, body


def thread_sampler(gw, stop_event, samples, period=0.05):
    """Appends gw.threads() to samples every period until stop_event is set."""
    while not stop_event.is_set():
        try:
            samples.append(gw.threads())
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(period)


__all__ = [n for n in dir(sys.modules[__name__]) if not n.startswith("_")]
