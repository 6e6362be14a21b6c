"""systemd's Type=notify (issue 31): `once serve` sends READY=1 to NOTIFY_SOCKET only once /readyz
answers 200 (here a stdio MCP server answers initialize late, so the gateway listens well
before it is ready), STOPPING=1 when SIGTERM starts the drain; a SIGTERM before it is ready
stops it without READY=1; a start that fails sends nothing. The socket is an AF_UNIX datagram
socket the test holds, as systemd would. tests/package does the same with the installed
package as the user once.

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_notify.py
"""
import signal
import socket
import subprocess
import time

import requests

from gateway import Gateway, _env, once_bin

SLOW = r'''import json, sys, time
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        time.sleep(float(sys.argv[1]))
        r = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "slow", "version": "1"}}
    else:
        r = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
'''
WAIT_S = 40  # ASan on two shared cores


class Notify:
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.got = []

    def poll(self, timeout):
        self.sock.settimeout(timeout)
        try:
            self.got.append(self.sock.recv(4096).decode())
            return self.got[-1]
        except socket.timeout:
            return None

    def states(self):
        return [ln for m in self.got for ln in m.splitlines() if not ln.startswith("STATUS=")]


def slow_gateway(tmp_path, delay_s):
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    return Gateway(tmp_path / "gw", {}, mcp={"slow": {"command": f"/usr/bin/python3 {script} {delay_s}"}})


def test_ready_only_when_readyz_answers_200_then_stopping(tmp_path, gateways, monkeypatch):
    n = Notify(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(n.path))
    g = slow_gateway(tmp_path, 2)
    gateways.append(g)
    g.start()  # /healthz answers: it listens
    starting, deadline = 0, time.monotonic() + WAIT_S
    while time.monotonic() < deadline and n.poll(0.001) is None:
        r = requests.get(f"{g.url}/readyz", timeout=10)
        if r.status_code == 503:
            assert r.json()["code"] == "mcp_starting", r.text
            starting += 1
        time.sleep(0.02)
    assert n.states() == ["READY=1"], n.got
    assert "STATUS=0 upstreams, 1 MCP server" in n.got[0], n.got
    assert starting > 0, "READY=1 before /readyz ever waited for the MCP server"
    assert requests.get(f"{g.url}/readyz", timeout=10).status_code == 200
    g.proc.send_signal(signal.SIGTERM)
    assert n.poll(WAIT_S) is not None, n.got
    assert n.states() == ["READY=1", "STOPPING=1"], n.got
    assert g.wait(WAIT_S) == 0


def test_sigterm_before_ready_stops_without_ready(tmp_path, gateways, monkeypatch):
    n = Notify(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(n.path))
    g = slow_gateway(tmp_path, 30)
    gateways.append(g)
    g.start()
    assert requests.get(f"{g.url}/readyz", timeout=10).status_code == 503
    g.proc.send_signal(signal.SIGTERM)
    assert g.wait(WAIT_S) == 0, g.stderr()[-3000:]
    n.poll(1)
    assert n.states() == ["STOPPING=1"], n.got


def test_a_failed_start_sends_nothing(tmp_path):
    n = Notify(tmp_path / "notify")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ini = tmp_path / "once.ini"
        ini.write_text(f"[server]\nlisten = 127.0.0.1:{port}\nstore = sqlite:{tmp_path}/o.db\n")
        r = subprocess.run([str(once_bin()), "serve", "--config", str(ini)], capture_output=True, text=True,
                           timeout=WAIT_S, env=_env({"NOTIFY_SOCKET": str(n.path)}))
    assert r.returncode == 2, r.stderr
    assert n.poll(0.5) is None, n.got
