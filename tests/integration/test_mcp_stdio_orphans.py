"""A stdio MCP server ends with the gateway that spawned it, however the gateway ends (issue 26).

`once serve` spawns `command = ...` itself. Stopped with SIGTERM it ends its servers; killed
with SIGKILL it cannot, and a server that does not exit at the end of its stdin (one with work
of its own: here mcp_server.mjs --linger) lived on, an orphan holding whatever it holds, and a
restarted once spawned a second one beside it. Now the kernel ends it (a parent-death signal):
it is gone within 2 s of the gateway's SIGKILL, and a restarted once runs exactly one server.

The server's pid comes from the server itself (--pid-file), and every process of this test's
server is found by its effects file, unique to the test, in /proc/PID/cmdline, so the process
that matters is the one checked (`command =` runs the program directly, not through a shell).

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_mcp_stdio_orphans.py
Everything listens on 127.0.0.1; every wait is bounded.
"""
import os
import signal
import time
from pathlib import Path

import requests

from gateway import Gateway, describe, require_serve
from mcp_harness import stdio_command

READY_S = 40      # the gateway up and its stdio server initialized (ASan, 2 shared cores)
GONE_S = 2.0      # the bound: the server is gone this soon after the gateway's SIGKILL


def alive(pid):
    """Is pid a live process (a zombie is dead: it only waits to be reaped)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def servers_of(marker):
    """The live processes whose command line holds marker (this test's effects file)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and alive(int(d.name)):
            out.append(int(d.name))
    return out


def wait_ready(g, timeout=READY_S):
    """/readyz is 200 once the stdio server answered initialize."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = requests.get(f"{g.url}/readyz", timeout=10)
        if last.status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the gateway never became ready" + describe(last))


def wait_pid(path, other_than=None, timeout=READY_S):
    """The pid the server wrote (a new one when other_than is given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = Path(path).read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit() and int(text) != other_than:
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"no (new) pid in {path}")


def test_stdio_server_ends_with_a_killed_gateway(tmp_path):
    require_serve()
    cmd, files = stdio_command(tmp_path / "stdio", ["--linger", "--pid-file", "server.pid"])
    marker = str(files.effects_path)
    g = Gateway(tmp_path / "gw", {}, mcp={"local": {"command": cmd, "timeout": "20s"}})
    pid_file = g.workdir / "server.pid"
    try:
        g.start()
        wait_ready(g)
        pid = wait_pid(pid_file)
        assert alive(pid) and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert servers_of(marker) == [pid], "one server, spawned by the gateway"

        g.kill()
        t0 = time.monotonic()
        while alive(pid) and time.monotonic() - t0 < GONE_S:
            time.sleep(0.02)
        assert not alive(pid), (f"the stdio server (pid {pid}) outlived the gateway's SIGKILL by "
                                f"{GONE_S} s\n{g.stderr()[-2000:]}")

        # A restarted gateway finds no server of its predecessor: it runs exactly its own.
        g.start()
        wait_ready(g)
        new = wait_pid(pid_file, other_than=pid)
        assert servers_of(marker) == [new], f"servers running after the restart: {servers_of(marker)}"
        rc = g.stop()
        assert rc == 0 and not g.sanitizer_reports(), f"exit {rc}\n{g.stderr()[-4000:]}"
        assert not alive(new), "a stopped gateway left its server running"
    finally:
        g.stop()
        for p in servers_of(marker):   # an orphan left by a failure must not outlive the test
            os.kill(p, signal.SIGKILL)
