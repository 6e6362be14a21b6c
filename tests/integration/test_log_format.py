"""[server] log_format = text (issue 31): one line per request or event on stderr, for the
journal, which adds the time and the unit; under it (JOURNAL_STREAM set, as systemd sets it)
each line starts with its syslog level. Whatever a peer writes into a logged value (here a
stdio MCP server's stderr, which once logs) cannot split a line, forge one or colour a
terminal: every control, non-ASCII, '\\' and '"' byte is written \\xHH.

Run: ONCE_BIN=build/asan/once ONCE_LEDGER_TOOL=build/asan/ledger_tool \
     /usr/bin/python3 -m pytest -q tests/integration/test_log_format.py
"""
import re
import time

from gateway import Gateway, Provider

LINE = re.compile(r"^(<[346]>)?(info|warn|error|request) ")

# A stdio MCP server that writes a hostile line to its stderr, then answers like a server.
NOISY = r'''import json, sys
sys.stderr.write('calm\rerror forged \x1b[2J "q" \\ \xe9 end\n'); sys.stderr.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m:
        r = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "n", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r if m["method"] == "initialize" else {}}), flush=True)
'''


def wait_for(g, pattern, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, g.stderr(), re.M):
            return
        time.sleep(0.05)
    raise AssertionError(f"no /{pattern}/ within {timeout} s:\n{g.stderr()[-3000:]}")


def test_text_lines_for_requests_and_events(tmp_path, gateways):
    p = Provider()
    try:
        g = Gateway(tmp_path, {"pay": {"url": p.url}}, server={"log_format": "text"})
        gateways.append(g)
        g.start()
        r = g.proxy("POST", "pay", key="k-1", json={"a": 1})
        assert r.status_code == 200, r.text
        wait_for(g, r"^request method=POST route=proxy agent=- scope=pay key_hash=[0-9a-f]+ status=200 "
                    r"outcome=completed upstream_ms=[0-9.]+ ms=[0-9.]+$")
        assert re.search(r"^info once \S+ serving with store ", g.stderr(), re.M), g.stderr()
        for line in g.stderr().splitlines():
            if not line.startswith(("==", "    #")):  # sanitizer reports are checked by the fixture
                assert LINE.match(line) and not line.startswith("<"), line
    finally:
        p.stop()


def test_journal_levels_and_no_forged_lines(tmp_path, gateways, monkeypatch):
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    g = Gateway(tmp_path / "gw", {}, server={"log_format": "text"},
                mcp={"noisy": {"command": f"/usr/bin/python3 {script}"}})
    gateways.append(g)
    g.start()
    wait_for(g, r"^<6>info mcp noisy stderr: ")
    lines = g.stderr().splitlines()
    (noisy,) = [ln for ln in lines if "mcp noisy stderr" in ln]
    assert noisy == (r'<6>info mcp noisy stderr: calm\x0derror forged \x1b[2J \x22q\x22 \x5c \xc3\xa9 end'), noisy
    assert not any(ln.startswith(("error forged", "<3>error forged")) for ln in lines)
    assert any(ln.startswith("<6>info once ") for ln in lines), lines
    for line in lines:
        if not line.startswith(("==", "    #")):
            assert LINE.match(line) and line.startswith("<"), line
