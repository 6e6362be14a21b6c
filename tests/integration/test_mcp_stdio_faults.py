"""A stdio MCP server that misbehaves (issue 17 review): once, its one client, must neither
hang on it nor give up on it.

- A server that stops reading its stdin (its pipe full, a large tools/call half written):
  once's write waits a bounded time, the call ends unknown (it may have read part of it),
  the gateway stays responsive and stops on SIGTERM, and the server is restarted.
  Before the fix the write blocked for ever on the store's writer thread: every request
  after it hung, and so did the shutdown.
- A server that refuses once's initialize: it is restarted with back-off until it accepts,
  and then serves. Before the fix it stayed unusable (503 for ever) while it ran.

The servers are deliberately broken fixtures (a few lines of Python speaking MCP's stdio
framing), not imitations of a real server: the real SDK server is tested in test_mcp.py.
SQLite only: the store plays no part beyond holding the calls.

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_mcp_stdio_faults.py
"""
import json
import sys
import textwrap
import time

import pytest
import requests

from gateway import Gateway, describe, require_serve

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

# mode deaf: the first process answers initialize, then never reads again; later ones serve.
# mode refuse: the first process refuses initialize (and keeps running); later ones serve.
SERVER = textwrap.dedent('''
    import json, os, sys, time
    mode, state = sys.argv[1], sys.argv[2]
    first = not os.path.exists(state)
    open(state, "a").write("started\\n")
    def send(m):
        sys.stdout.write(json.dumps(m) + "\\n"); sys.stdout.flush()
    for line in sys.stdin:
        m = json.loads(line)
        if m.get("method") == "initialize":
            if first and mode == "refuse":
                send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32603, "message": "not today"}})
                continue
            send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-06-18",
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "broken", "version": "1"}}})
            if first and mode == "deaf":
                time.sleep(3600)   # never reads stdin again
        elif m.get("method") == "tools/call":
            open(state, "a").write("call\\n")
            send({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": "done"}]}})
''')


def start(tmp_path, mode):
    require_serve()
    script = tmp_path / "broken_server.py"
    script.write_text(SERVER)
    state = tmp_path / "state"
    g = Gateway(tmp_path / "gw", {}, server={"shutdown_grace": "2s"},
                mcp={"b": {"command": f"{sys.executable} {script} {mode} {state}", "timeout": "2s"}})
    g.start()
    return g, state


def post(g, body, timeout=30):
    return requests.post(f"{g.url}/v1/mcp/b", data=json.dumps(body), headers=H, timeout=timeout)


def initialize(g, within=15):
    """once answers initialize when the server is up: retried while it (re)starts."""
    until = time.monotonic() + within
    while True:
        r = post(g, INIT)
        if r.status_code == 200 or time.monotonic() > until:
            return r
        time.sleep(0.2)


def call(g, mid, args, timeout=30):
    return post(g, {"jsonrpc": "2.0", "id": mid, "method": "tools/call",
                    "params": {"name": "work", "arguments": args}}, timeout)


def outcome(r):
    return r.json()["result"]["_meta"]["once/outcome"]


def test_a_server_that_stops_reading_does_not_hang_the_gateway(tmp_path):
    g, state = start(tmp_path, "deaf")
    try:
        assert initialize(g).status_code == 200
        t0 = time.monotonic()
        r = call(g, 2, {"blob": "x" * (512 << 10)})   # far past a pipe's 64 KiB: the write stalls
        assert r.status_code == 200, describe(r)
        assert outcome(r) == "unknown", r.text[:500]
        assert time.monotonic() - t0 < 20, "the stalled write was not bounded"
        # The gateway is alive, and the server is restarted: a new call is served. While it
        # restarts a call is refused with nothing sent (502/503), and may be made again.
        assert requests.get(f"{g.url}/healthz", timeout=5).status_code == 200
        until = time.monotonic() + 20
        for attempt in range(1000):
            assert initialize(g).status_code == 200
            r = call(g, 3, {"n": attempt})
            if r.status_code == 200 or time.monotonic() > until:
                break
            assert r.status_code in (502, 503), describe(r)
            time.sleep(0.3)
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert state.read_text().count("started") >= 2
    finally:
        t0 = time.monotonic()
        rc = g.stop(timeout=15)
        assert rc == 0 and time.monotonic() - t0 < 15, f"once did not stop cleanly: {rc}"


def test_a_server_that_refuses_initialize_is_restarted(tmp_path):
    g, state = start(tmp_path, "refuse")
    try:
        r = initialize(g, within=20)
        assert r.status_code == 200, describe(r)
        r = call(g, 2, {"n": 1})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert state.read_text().count("started") >= 2, "the refusing server was never restarted"
        assert "refused initialize" in g.stderr()
    finally:
        g.stop()
