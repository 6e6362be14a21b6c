"""A stdio MCP server is ready when the gateway says it is (issue 26).

`once serve` spawns `command = ...` and initializes it itself. Before the fix, /readyz answered
200 as soon as the store did, and an agent's request that came while the server was starting
or restarting got 503 "starting or restarting" at once; the official SDK client does not retry
`initialize`, so its connect() failed right after /readyz said ready, and again right after
the server died and was being restarted. Now:
- /readyz answers 503 `mcp_starting` (naming the server, nothing more) until every stdio
  server has answered once's initialize;
- an agent's request that finds a stdio server (re)starting waits for it, up to the server's
  `timeout`: an initialize, a pass-through request, a tools/call; only then 503.

The server answers initialize late on purpose (mcp_server.mjs --init-delay-ms), so that the
window the old code failed in is wide, not a matter of luck. The agent is the official SDK
client (tests/clients/mcp_client.mjs) where the issue is about it, plain POSTs elsewhere.

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_mcp_stdio_ready.py
Everything listens on 127.0.0.1; every wait is bounded.
"""
import json
import os
import signal
import threading
import time
from pathlib import Path

import requests

from gateway import Gateway, assert_problem, describe, require_serve
from mcp_harness import call, calls_of, outcome_of, result_of, run_client, stdio_command

INIT_DELAY_MS = 1500   # how late the server answers initialize
READY_S = 40           # bound on the gateway's start with its server (ASan, 2 shared cores)
PROTO = "2025-06-18"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": PROTO, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def start(tmp_path, delay_ms=INIT_DELAY_MS, timeout="30s"):
    require_serve()
    cmd, files = stdio_command(tmp_path / "stdio", ["--init-delay-ms", delay_ms, "--pid-file", "server.pid"])
    g = Gateway(tmp_path / "gw", {}, mcp={"slow": {"command": cmd, "timeout": timeout}})
    g.start()
    return g, files


def wait_readyz(g, timeout=READY_S):
    """Polls /readyz until 200; returns the answers that came before it."""
    before = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = requests.get(f"{g.url}/readyz", timeout=10)
        if r.status_code == 200:
            return before
        before.append(r)
        time.sleep(0.02)
    raise AssertionError("/readyz never answered 200" + (describe(before[-1]) if before else ""))


def server_pid(g, other_than=None, timeout=READY_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = (g.workdir / "server.pid").read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit() and int(text) != other_than:
            return int(text)
        time.sleep(0.02)
    raise AssertionError("the stdio server wrote no (new) pid")


def stop_clean(g):
    """Stops the gateway: a clean exit, and nothing the sanitizers reported."""
    rc = g.stop()
    assert rc == 0 and not g.sanitizer_reports(), f"exit {rc}\n{g.stderr()[-4000:]}"


def post(g, body, timeout=60):
    return requests.post(f"{g.url}/v1/mcp/slow", data=json.dumps(body), headers=H, timeout=timeout)


def tools_call(mid, order_id):
    return {"jsonrpc": "2.0", "id": mid, "method": "tools/call",
            "params": {"name": "charge", "arguments": {"order_id": order_id, "amount": 5}}}


def agent_charges(g, order_id):
    """The SDK agent connects and charges; returns the call line (fails when it cannot connect)."""
    lines, run = run_client(f"{g.url}/v1/mcp/slow", [call("charge", {"order_id": order_id, "amount": 5})],
                            deadline_s=60)
    [c] = calls_of(lines)
    return result_of(c, run), run


def test_sdk_client_connects_the_moment_readyz_is_200(tmp_path):
    g, files = start(tmp_path)
    try:
        before = wait_readyz(g)
        result, run = agent_charges(g, "ready-1")
        assert outcome_of(result) == "completed", run.describe()
        assert files.count("ready-1") == 1
        # /readyz said why it was not ready: the server's name, nothing of its command.
        assert before, "/readyz was 200 before the stdio server answered initialize"
        r = before[0]
        assert_problem(r, 503, "mcp_starting")
        detail = r.json()["detail"]
        assert "'slow'" in detail and "node" not in detail and "mcp_server" not in detail, detail
        stop_clean(g)
    finally:
        g.stop()


def test_sdk_client_waits_for_a_restarting_stdio_server(tmp_path):
    g, files = start(tmp_path)
    try:
        wait_readyz(g)
        pid = server_pid(g)
        os.kill(pid, signal.SIGKILL)    # the server dies; once restarts it (0.5 s, then its late initialize)
        t0 = time.monotonic()
        result, run = agent_charges(g, "restart-1")
        assert outcome_of(result) == "completed", run.describe()
        assert files.count("restart-1") == 1
        assert time.monotonic() - t0 >= INIT_DELAY_MS / 1000, "the agent did not have to wait: no race tested"
        assert server_pid(g, other_than=pid) != pid
        assert requests.get(f"{g.url}/readyz", timeout=10).status_code == 200, "readiness flaps on a restart"
        stop_clean(g)
    finally:
        g.stop()


def test_requests_wait_for_a_restarting_stdio_server(tmp_path):
    """A tools/call and a pass-through request (tools/list) that arrive while the server
    restarts wait for it and are served: the call runs once, nothing is released or unknown."""
    g, files = start(tmp_path)
    try:
        wait_readyz(g)
        assert post(g, INIT).status_code == 200
        pid = server_pid(g)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)                  # once has seen it die: the requests find it restarting
        answers = {}

        def send(name, body):
            t0 = time.monotonic()
            answers[name] = (post(g, body), time.monotonic() - t0)

        threads = [threading.Thread(target=send, args=("call", tools_call(2, "restart-2"))),
                   threading.Thread(target=send, args=("list", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        r, waited = answers["call"]
        assert r.status_code == 200, describe(r)
        assert r.json()["result"]["_meta"]["once/outcome"] == "completed", describe(r)
        assert waited >= 1.0, f"answered in {waited:.2f} s: the server was not restarting"
        r, _ = answers["list"]
        assert r.status_code == 200 and "charge" in [t["name"] for t in r.json()["result"]["tools"]], describe(r)
        assert files.count("restart-2") == 1
        stop_clean(g)
    finally:
        g.stop()


def test_a_server_not_ready_within_its_timeout_is_503_after_the_timeout(tmp_path):
    """The wait is bounded by the server's timeout: then 503 with Retry-After, nothing sent."""
    g, files = start(tmp_path, delay_ms=6000, timeout="1s")
    try:
        r = requests.get(f"{g.url}/readyz", timeout=10)
        assert_problem(r, 503, "mcp_starting")
        for body in (INIT, tools_call(2, "late-1")):
            t0 = time.monotonic()
            r = post(g, body)
            waited = time.monotonic() - t0
            assert r.status_code == 503, describe(r)
            assert r.headers.get("Retry-After"), describe(r)
            assert 0.8 <= waited < 10, f"answered after {waited:.2f} s, not after the 1 s timeout"
        assert_problem(r, 503, "upstream_unavailable")
        wait_readyz(g)
        r = post(g, tools_call(3, "late-1"))   # nothing was sent or kept: the retry runs it
        assert r.status_code == 200 and r.json()["result"]["_meta"]["once/outcome"] == "completed", describe(r)
        assert files.count("late-1") == 1
        stop_clean(g)
    finally:
        g.stop()
