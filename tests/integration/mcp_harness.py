"""Helpers of the MCP gateway tests (issue 17, docs/mcp.md) — a module, not tests; used by
tests/integration/test_mcp.py and tests/chaos/test_mcp_chaos.py.

Both ends are the official MCP TypeScript SDK (tests/clients, `npm ci`):
- McpUpstream: tests/clients/mcp_server.mjs --http (McpServer + StreamableHTTPServerTransport)
  as a subprocess on a loopback port, restartable on the same port; its effects file (one
  JSON line per effect) is the yes/no answer of every test: was it done exactly once?
- stdio_command(): the `command = ...` line of an [mcp.NAME] section that makes `once serve`
  spawn mcp_server.mjs --stdio itself.
- run_client / start_client: tests/clients/mcp_client.mjs (Client +
  StreamableHTTPClientTransport) driven by a JSON script; one dict per output line.
- node_or_skip(): skips (with the reason) when node or tests/clients/node_modules is missing,
  as test_streaming.py does for the openai client.

Everything listens on 127.0.0.1 and every wait is bounded.
"""
import atexit
import hashlib
import json
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
SERVER_MJS = CLIENTS / "mcp_server.mjs"
CLIENT_MJS = CLIENTS / "mcp_client.mjs"
SDK_DIR = CLIENTS / "node_modules" / "@modelcontextprotocol" / "sdk"

# The outcomes of docs/mcp.md ("What each outcome means to the model"); a recorded result carries one in _meta.
OUTCOMES = ("completed", "replayed", "in_flight", "unknown", "held", "awaiting_approval", "denied")
AMBIGUOUS = ("unknown", "held")


def node_or_skip():
    """The node binary; skips the test when node or the SDK (npm ci in tests/clients) is missing."""
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed: the MCP tests drive the official MCP TypeScript SDK")
    if not SDK_DIR.is_dir():
        pytest.skip(f"{SDK_DIR} is missing: run `npm ci` in tests/clients (scripts/test does)")
    return node


# --------------------------------------------------------------------------- keys

def canonical_json(value):
    """Sorted members, no whitespace, UTF-8 as is (the contract's canonical JSON)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def hashed_key(tool, arguments):
    """The ledger key of a call keyed by nothing but its arguments: TOOL:sha256(canonical)."""
    return f"{tool}:" + hashlib.sha256(canonical_json(arguments).encode()).hexdigest()


# --------------------------------------------------------------------------- JSON lines files

def read_lines(path):
    """The JSON objects of a JSON-lines file (a missing file has none; a torn last line is
    skipped: the writer may be mid-append)."""
    out = []
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


class EffectsFile:
    """The effects (and calls) an upstream wrote, counted per order_id."""

    def __init__(self, effects, calls=None):
        self.effects_path = Path(effects)
        self.calls_path = Path(calls) if calls else None

    def effects(self, order_id=None, tool=None):
        return [e for e in read_lines(self.effects_path)
                if (order_id is None or e.get("order_id") == order_id) and (tool is None or e.get("tool") == tool)]

    def count(self, order_id=None, tool=None):
        return len(self.effects(order_id, tool))

    def calls(self, order_id=None, tool=None):
        if self.calls_path is None:
            raise AssertionError("this upstream keeps no calls file")
        return [c for c in read_lines(self.calls_path)
                if (order_id is None or c.get("order_id") == order_id) and (tool is None or c.get("tool") == tool)]

    def wait_count(self, n, order_id=None, tool=None, timeout=10):
        """Waits until at least n effects are there; returns the count."""
        deadline = time.monotonic() + timeout
        c = self.count(order_id, tool)
        while c < n and time.monotonic() < deadline:
            time.sleep(0.05)
            c = self.count(order_id, tool)
        return c


# --------------------------------------------------------------------------- upstreams

class McpUpstream(EffectsFile):
    """tests/clients/mcp_server.mjs --http in its own process on 127.0.0.1.
    json=True: enableJsonResponse (answers application/json, no streamed progress)."""

    def __init__(self, workdir, json=False, name="mcp"):
        self.node = node_or_skip()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.json = json
        self.name = name
        super().__init__(self.workdir / f"{name}.effects.jsonl", self.workdir / f"{name}.calls.jsonl")
        self.headers_path = self.workdir / f"{name}.headers.jsonl"
        self.port = 0
        self.proc = None
        self.runs = 0
        self.start()

    def start(self, timeout=20):
        """Starts (or restarts, on the same port) the server; waits for `listening PORT`."""
        argv = [self.node, str(SERVER_MJS), "--http", "--port", str(self.port),
                "--effects", str(self.effects_path), "--calls", str(self.calls_path),
                "--headers-log", str(self.headers_path)]
        if self.json:
            argv.append("--json")
        self.runs += 1
        self.stderr_path = self.workdir / f"{self.name}.stderr.{self.runs}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, cwd=CLIENTS)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        line = self.proc.stdout.readline() if sel.select(timeout) else ""
        m = re.match(r"listening (\d+)", line or "")
        if not m:
            self.kill()
            raise RuntimeError(f"mcp_server.mjs did not start (exit {self.proc.returncode}): {line!r}\n"
                               f"{self.stderr()[-3000:]}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_dead(self, timeout=10):
        """Waits for the process to exit by itself (charge_then_die); True when it did."""
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close()

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        self._close()

    def _close(self):
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr.close()

    def restart(self):
        """A new process on the same port (sessions are gone, effects file kept)."""
        self.stop()
        return self.start()

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def requests_seen(self):
        """Every HTTP request the server got: {method, path, session, headers (lower-case),
        body (the parsed JSON of a POST), t}."""
        return read_lines(self.headers_path)

    def posts(self, method=None):
        """The JSON-RPC messages POSTed to the server (of one method, e.g. tools/call)."""
        out = []
        for r in self.requests_seen():
            if r["method"] == "POST" and isinstance(r.get("body"), dict):
                if method is None or r["body"].get("method") == method:
                    out.append(r["body"])
        return out


def stdio_command(workdir, extra=()):
    """(the `command =` value of an [mcp.X] section, EffectsFile): once spawns
    `node mcp_server.mjs --stdio --effects FILE` ("node" looked up in PATH, as the contract says).
    The contract splits the line on blanks without quoting, so every path must be blank-free;
    a config line holds at most 198 characters, and neither the checkout's path nor pytest's
    temporary directories are short everywhere (CI checks out deeper than a laptop does), so the
    server script and the effects file are reached through a short directory under /tmp (a
    symlink to the script; node resolves its imports from the real path). extra: more arguments
    of mcp_server.mjs (--init-delay-ms N, --linger, --pid-file F: a relative F is in the
    gateway's working directory). workdir is kept for the caller's other files."""
    node_or_skip()
    Path(workdir).mkdir(parents=True, exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix="mcp", dir="/tmp"))
    atexit.register(shutil.rmtree, short, True)
    (short / "s.mjs").symlink_to(SERVER_MJS)
    files = EffectsFile(short / "fx.jsonl")
    parts = ["node", str(short / "s.mjs"), "--stdio", "--effects", str(files.effects_path)] + [str(x) for x in extra]
    for p in parts:
        assert not re.search(r"\s", p), f"a blank in {p!r}: `command =` is split on blanks"
    line = " ".join(parts)
    assert len("command = " + line) <= 198, f"the command line is too long for a config line: {line}"
    return line, files


# --------------------------------------------------------------------------- the agent

class ClientRun:
    """One mcp_client.mjs process (see its header for the script format)."""

    def __init__(self, url, steps, token=None, headers=None, sessions=1, timeout_ms=60000, deadline_s=120,
                 delete=True, oauth_client=None, oauth_scope=None):
        """oauth_client: "ID:SECRET" for the SDK's ClientCredentialsProvider (docs/auth.md)."""
        node = node_or_skip()
        self.argv = [node, str(CLIENT_MJS), url, "-", "--sessions", str(sessions), "--timeout-ms", str(timeout_ms),
                     "--deadline-ms", str(int(deadline_s * 1000))]
        if token:
            self.argv += ["--token", token]
        for k, v in (headers or {}).items():
            self.argv += ["--header", f"{k}: {v}"]
        if not delete:
            self.argv.append("--no-delete")
        if oauth_client:
            self.argv += ["--oauth-client", oauth_client]
        if oauth_scope:
            self.argv += ["--oauth-scope", oauth_scope]
        self.steps = steps
        self.deadline_s = deadline_s
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=CLIENTS)
        self.proc.stdin.write(json.dumps(steps))
        self.proc.stdin.close()
        self.proc.stdin = None   # so that communicate() does not touch it again

    def wait(self, timeout=None):
        """Waits for the end; returns the output lines as dicts."""
        try:
            out, err = self.proc.communicate(timeout=timeout or self.deadline_s + 15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"mcp_client.mjs did not finish: {self.argv}\n{out[-3000:]}\n{err[-3000:]}")
        self.returncode = self.proc.returncode
        self.stderr = err
        lines = []
        for ln in out.splitlines():
            try:
                lines.append(json.loads(ln))
            except ValueError:
                raise AssertionError(f"mcp_client.mjs printed a line that is not JSON: {ln!r}\nstderr: {err[-3000:]}")
        self.lines = lines
        return lines

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def describe(self):
        return (f"\n$ {' '.join(self.argv)}\nscript {json.dumps(self.steps)[:800]}"
                f"\nexit {getattr(self, 'returncode', None)}"
                + "".join(f"\n| {json.dumps(x)[:1500]}" for x in getattr(self, "lines", []))
                + (f"\nstderr: {self.stderr[-1500:]}" if getattr(self, "stderr", "") else ""))


def start_client(url, steps, **kw):
    return ClientRun(url, steps, **kw)


def run_client(url, steps, **kw):
    """Runs the script to its end; returns (lines, run). Fails when a session did not connect."""
    run = ClientRun(url, steps, **kw)
    lines = run.wait()
    connects = [x for x in lines if x.get("op") == "connect"]
    bad = [x for x in connects if x.get("error")]
    assert connects and not bad and run.returncode == 0, "the SDK client could not connect" + run.describe()
    return lines, run


def call(tool, args, meta=None, progress=False, headers=None, timeout_ms=None):
    """A call step of the script."""
    st = {"op": "call", "tool": tool, "args": args}
    if meta is not None:
        st["meta"] = meta
    if progress:
        st["progress"] = True
    if headers:
        st["headers"] = headers
    if timeout_ms is not None:
        st["timeout_ms"] = timeout_ms
    return st


def calls_of(lines):
    return [x for x in lines if x.get("op") == "call"]


def result_of(line, run=None):
    """The CallToolResult of a call line (fails on a JSON-RPC or transport error)."""
    assert "result" in line, f"the call got no result: {line}" + (run.describe() if run else "")
    return line["result"]


def once_meta(result):
    return {k: v for k, v in (result.get("_meta") or {}).items() if k.startswith("once/")}


def outcome_of(result):
    return (result.get("_meta") or {}).get("once/outcome")


def key_of(result):
    return (result.get("_meta") or {}).get("once/key")


def texts(result):
    return [c.get("text") for c in result.get("content") or [] if c.get("type") == "text"]


def without_once_meta(result):
    """The result as the upstream made it: once's _meta members removed (an empty _meta too)."""
    r = dict(result)
    meta = {k: v for k, v in (r.get("_meta") or {}).items() if not k.startswith("once/")}
    if meta:
        r["_meta"] = meta
    else:
        r.pop("_meta", None)
    return r
