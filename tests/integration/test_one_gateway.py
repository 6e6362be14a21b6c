"""One gateway per port and per SQLite store; a CLI that never creates a store; `make run`
stopped with its parent (issue 13).

- a second `once serve` on a port in use exits 2 with one line naming the address and
  "in use"; the first keeps serving (and one key is still one effect);
- a second `once serve` on the same SQLite file exits 2 naming the store and the first's
  pid; the CLI (ls, show, resolve) still works on the file beside the running gateway;
  once the first stops, a new one starts on the file;
- the CLI on a missing SQLite file (ls, show, hooks ls, hooks show, resolve, gc): exit 2,
  one line naming the path, nothing created;
- scripts/run (what `make run` runs): killing its parent stops the gateway and the fake
  provider.

Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_one_gateway.py
"""
import json
import os
import signal
import socket
import subprocess
import time
import uuid

import pytest
import requests

from gateway import REPO_ROOT, Gateway, _env, describe, free_port, new_key, outcome, require_serve, write_config

RUN_TIMEOUT = 60      # a `once serve` that must refuse to start exits within this


def serve(config_path, cwd, timeout=RUN_TIMEOUT):
    """`once serve --config PATH` expected to exit by itself: the CompletedProcess."""
    return subprocess.run([str(require_serve()), "serve", "--config", str(config_path)], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, env=_env())


def lines_of(p):
    return [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]


def msg_of(line):
    """The message of a log line (JSON lines on stderr), or the line itself."""
    try:
        return json.loads(line).get("msg", line)
    except ValueError:
        return line


# =========================================================================== one gateway per port

def test_second_serve_on_a_busy_port_exits_2_and_the_first_keeps_serving(tmp_path, provider, gateways):
    """A second `once serve` on the first's address (with a store of its own) exits 2 with
    one line naming the address and "in use" — no silent SO_REUSEPORT sharing. The first
    still serves: 8 POSTs of one key make one effect."""
    first = Gateway(tmp_path / "a", {"demo": {"url": provider.url}})
    gateways.append(first)
    first.start()
    other = tmp_path / "b"
    other.mkdir()
    cfg = write_config(other / "once.ini", {"listen": f"127.0.0.1:{first.port}",
                                            "store": f"sqlite:{other / 'once.db'}"},
                       {"demo": {"url": provider.url}})
    p = serve(cfg, other)
    assert p.returncode == 2, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    lines = lines_of(p)
    assert len(lines) == 1, f"expected one line:\n{p.stdout}{p.stderr}"
    msg = msg_of(lines[0])
    assert f"127.0.0.1:{first.port}" in msg and "in use" in msg, lines[0]

    assert first.alive(), first.death_note()
    assert first.healthy()
    before = provider.count()
    key = new_key("port")
    answers = [first.proxy("POST", "demo", "/charges", key=key, json={"n": 1}) for _ in range(8)]
    for r in answers:
        assert r.status_code == 200, describe(r)
    assert [outcome(r) for r in answers] == ["completed"] + ["replayed"] * 7, [outcome(r) for r in answers]
    assert provider.count() == before + 1


# =========================================================================== one gateway per SQLite file

def test_second_serve_on_the_same_sqlite_file_exits_2_naming_the_first(tmp_path, provider, gateways):
    """A second `once serve` on the first's SQLite file (another port; the path also spelt
    with a ./ in it) exits 2 with one line naming the store and the first's pid; the first
    keeps serving."""
    first = Gateway(tmp_path / "a", {"demo": {"url": provider.url}})
    gateways.append(first)
    first.start()
    path = first.store[len("sqlite:"):]
    spellings = [path, os.path.join(os.path.dirname(path), ".", os.path.basename(path))]
    for i, spelt in enumerate(spellings):
        d = tmp_path / f"second{i}"
        d.mkdir()
        cfg = write_config(d / "once.ini", {"listen": f"127.0.0.1:{free_port()}", "store": f"sqlite:{spelt}"},
                           {"demo": {"url": provider.url}})
        p = serve(cfg, d)
        assert p.returncode == 2, f"{spelt}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
        lines = lines_of(p)
        assert len(lines) == 1, f"expected one line:\n{p.stdout}{p.stderr}"
        msg = msg_of(lines[0])
        assert spelt in msg and "served by another once serve" in msg and f"(pid {first.pid})" in msg, lines[0]
    assert first.alive(), first.death_note()
    r = first.proxy("POST", "demo", "/charges", key=new_key("file"), json={"n": 1})
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)


def test_second_serve_on_a_symlink_to_the_same_sqlite_file_exits_2(tmp_path, provider, gateways):
    """The same SQLite file under another name (a symlink to it) is the same store: a second
    `once serve` on it must exit 2 too, or two gateways would split one store's traffic."""
    first = Gateway(tmp_path / "a", {"demo": {"url": provider.url}})
    gateways.append(first)
    first.start()
    path = first.store[len("sqlite:"):]
    d = tmp_path / "second"
    d.mkdir()
    link = d / "link.db"
    link.symlink_to(path)
    port = free_port()
    cfg = write_config(d / "once.ini", {"listen": f"127.0.0.1:{port}", "store": f"sqlite:{link}"},
                       {"demo": {"url": provider.url}})
    log = d / "serve.log"
    with open(log, "wb") as f:
        second = subprocess.Popen([str(require_serve()), "serve", "--config", str(cfg)], cwd=d,
                                  stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=_env())
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        serving = False
        while second.poll() is None and time.monotonic() < deadline:
            try:
                serving = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                serving = False
            if serving:
                break
            time.sleep(0.05)
        assert not serving, (f"a second `once serve` on {link} -> {path} serves beside the first (pid {first.pid}) "
                             f"instead of exiting 2:\n{log.read_text(errors='replace')[-2000:]}")
        second.wait(10)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(10)
    out = log.read_text(errors="replace")
    assert second.returncode == 2, f"exit {second.returncode}\n{out}"
    assert f"(pid {first.pid})" in out, out
    assert first.alive(), first.death_note()


def test_cli_works_beside_the_gateway_and_a_new_gateway_starts_after_it_stops(tmp_path, gateways):
    """While `once serve` holds the SQLite file, `once ls`, `show` and `resolve` read and
    settle it (the CLI does not take the gateway's lock); after SIGTERM (exit 0) a new
    `once serve` (another port) starts on the file and sees what the CLI did."""
    first = Gateway(tmp_path / "a", {}, server={"loop_interval": "200ms"})
    gateways.append(first)
    first.start()
    s, k = "agent-" + uuid.uuid4().hex[:8], new_key("cli")
    r = first.post("/v1/actions", json={"scope": s, "key": k})
    assert r.status_code == 201, describe(r)
    tok = r.json()["token"]
    r = first.post("/v1/actions/unknown", json={"scope": s, "key": k, "token": tok, "error": "timeout"})
    assert r.status_code == 200, describe(r)

    ls = first.cli("ls", "--json")
    assert ls.returncode == 0, ls.stderr
    assert [(x["scope"], x["key"]) for x in json.loads(ls.stdout)] == [(s, k)], ls.stdout
    show = first.cli("show", s, k, "--json")
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["state"] in ("unknown", "held"), show.stdout
    res = first.cli("resolve", s, k, "--completed", "--provider-id", "p-7", "--note", "seen at the provider")
    assert res.returncode == 0, (res.stdout, res.stderr)
    rec = first.action(s, k).json()
    assert rec["state"] == "completed" and rec["provider_id"] == "p-7", rec
    assert first.alive(), first.death_note()

    assert first.stop() == 0, first.stderr()[-3000:]
    second = Gateway(tmp_path / "b", {}, store=first.store)
    gateways.append(second)
    second.start()
    rec = second.action(s, k).json()
    assert rec["state"] == "completed" and rec["provider_id"] == "p-7", rec
    r = second.post("/v1/actions", json={"scope": s, "key": k})
    assert r.status_code == 200 and r.json()["status"] == "completed", describe(r)


# =========================================================================== the CLI never creates a store

MISSING_CMDS = [
    ["ls"], ["ls", "--json"], ["show", "pay", "k"], ["hooks", "ls"], ["hooks", "show", "src", "evt-1"],
    ["resolve", "pay", "k", "--released"], ["resolve", "pay", "k", "--completed"], ["gc"],
]


@pytest.mark.parametrize("cmd", MISSING_CMDS, ids=" ".join)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_cli_on_a_missing_sqlite_file_exits_2_and_creates_nothing(cli, tmp_path, cmd, how):
    """`--store sqlite:PATH` (or $ONCE_STORE) naming a file that does not exist, in a folder
    that does: exit 2, one line naming the path, and no file is created there (no database,
    -wal, -shm or .lock) nor in the working directory."""
    d = tmp_path / "stores"
    d.mkdir()
    path = d / "typo.db"
    if how == "option":
        r = cli(*cmd, "--store", f"sqlite:{path}")
    else:
        r = cli(*cmd, env={"ONCE_STORE": f"sqlite:{path}"})
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.stdout == "", r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and "no store" in lines[0], lines[0]
    assert list(d.iterdir()) == [], f"created {list(d.iterdir())}"
    assert list(cli.cwd.iterdir()) == [], f"created {list(cli.cwd.iterdir())}"


# =========================================================================== make run

MAKE_RUN_PORTS = (7600, 7700)


def _port_busy(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _group(pgid):
    """The pids of the live processes in process group pgid (zombies excluded)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(d))
    return out


def test_make_run_killed_by_its_parent_pid_stops_gateway_and_provider(tmp_path):
    """scripts/run (what `make run` runs) under a parent shell, as make would run it: once
    the gateway answers on 127.0.0.1:7600 (the fake provider is on 7700), SIGTERM to the
    parent alone — as `kill PID` of a backgrounded `make run` does — and within 30 s nothing
    listens on 7600 or 7700. The store is put in a temporary directory with ONCE_STORE."""
    binary = require_serve()
    busy = [p for p in MAKE_RUN_PORTS if _port_busy(p)]
    if busy:
        pytest.skip(f"127.0.0.1 port(s) {busy} in use: scripts/run needs 7600 and 7700")
    repo_db = REPO_ROOT / "once.db"
    repo_db_existed = repo_db.exists()
    env = _env({"ONCE_STORE": f"sqlite:{tmp_path / 'once.db'}"})
    log = open(tmp_path / "run.log", "wb")
    parent = subprocess.Popen(["sh", "-c", f"bash scripts/run '{binary.parent}'; :"], cwd=REPO_ROOT, env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        up = False
        while time.monotonic() < deadline and parent.poll() is None:
            try:
                up = requests.get("http://127.0.0.1:7600/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                up = False
            if up:
                break
            time.sleep(0.1)
        assert up, f"scripts/run: no /healthz on 7600 within 60 s:\n{(tmp_path / 'run.log').read_text()[-3000:]}"
        assert _listening(7700), "the fake provider is not on 7700"
        r = requests.post("http://127.0.0.1:7600/v1/proxy/demo/v1/messages", data=b'{"to":"ada"}',
                          headers={"Idempotency-Key": new_key("run")}, timeout=30)
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert (tmp_path / "once.db").exists(), "ONCE_STORE was not used"

        os.kill(parent.pid, signal.SIGTERM)  # the parent only, like `kill %1` of `make run &`
        parent.wait(30)
        deadline = time.monotonic() + 30
        left = list(MAKE_RUN_PORTS)
        while left and time.monotonic() < deadline:
            left = [p for p in left if _listening(p)]
            if left:
                time.sleep(0.1)
        assert not left, (f"port(s) {left} still listened on 30 s after the parent of scripts/run was killed:\n"
                          f"{(tmp_path / 'run.log').read_text()[-3000:]}")
        # and the processes are gone, not only their listening sockets
        rest = _group(parent.pid)
        while rest and time.monotonic() < deadline + 10:
            time.sleep(0.1)
            rest = _group(parent.pid)
        assert not rest, f"still running after the parent was killed: {rest}"
    finally:
        # whatever is left of the process group this test started
        try:
            os.killpg(parent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if parent.poll() is None:
            parent.wait(10)
        log.close()
    if not repo_db_existed:
        assert not repo_db.exists(), "scripts/run created once.db in the repository despite ONCE_STORE"
