"""The order of durability, read off the real syscalls (SQLite store).

once commits a batch without syncing it and a syncer fdatasyncs the WAL
before anyone hears (src/store/sqlite_store.c). The two rules of docs/guarantees.md §2
(reserve first, record before reply), as the kernel sees them under strace:

- the reservation's WAL frames are fdatasynced before the first byte goes
  to the upstream;
- the outcome's WAL frames are fdatasynced before the caller's socket gets
  the answer.

strace -f attaches to every thread of a running gateway; requests go one at
a time, so each send is preceded by the writes of its own commit. An event
is placed where strace reports it: a send at its entry, an fdatasync at its
return (a thread stopped at a syscall's exit cannot go on to wake another
until strace lets it, so the order strace prints is the causal order).

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_durability_order.py
"""
import re
import shutil
import signal
import subprocess
import time

import pytest

from gateway import Gateway, describe, new_key, outcome, require_serve

REQUESTS = 5

# "PID call(FD<what>, ..." (what: a path, or TCP:[a:p->b:q], which holds a
# ">" of its own) or "PID <... call resumed> ...".
LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\((\d+)<(.+?)>(?=[,)]))(.*)$")


@pytest.fixture
def gw(tmp_path, provider):
    require_serve()
    # The background loops commit too (leases, sweeps): slowed down, so that
    # the only commits while the requests run are theirs.
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "5s"}},
                server={"loop_interval": "60s"})
    g.start()
    yield g
    if g.alive():
        g.stop()
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


def parse(trace, gw_port, up_port):
    """The events in order: ("W", n) a WAL write, ("S", n) a WAL fdatasync
    returned, ("U", n) a send to the upstream, ("C", n) an answer sent to a
    client."""
    events = []
    pending = {}  # pid -> the fd description of an unfinished fdatasync
    for n, line in enumerate(trace.splitlines()):
        m = LINE.match(line)
        if not m:
            continue
        pid, resumed, call, _fd, desc, rest = m.groups()
        if resumed:
            if resumed == "fdatasync" and pending.pop(pid, None) and re.search(r"\)\s*= 0", rest):
                events.append(("S", n))
            continue
        if call == "fdatasync" and desc.endswith("-wal"):
            if "<unfinished" in rest:
                pending[pid] = desc
            elif re.search(r"\)\s*= 0", rest):
                events.append(("S", n))
        elif call == "pwrite64" and desc.endswith("-wal"):
            events.append(("W", n))
        elif call in ("sendto", "sendmsg", "writev", "write", "send") and desc.startswith("TCP:"):
            if f"->127.0.0.1:{up_port}]" in desc and '"POST ' in rest:
                events.append(("U", n))
            elif desc.startswith(f"TCP:[127.0.0.1:{gw_port}->") and '"HTTP/1.1 ' in rest:
                events.append(("C", n))
    return events


def check_order(events, kind):
    """From the first upstream send on (before it, the client sockets carry
    the /healthz answers of the attach loop), every event of kind comes after
    an fdatasync that follows the last WAL write before it; returns how many
    there were."""
    seen = 0
    last_w = last_s = -1
    first_u = next(i for i, (k, _n) in enumerate(events) if k == "U")
    for i, (k, _n) in enumerate(events):
        if kind == "C" and k == "C" and i < first_u:
            continue
        if k == "W":
            last_w = i
        elif k == "S":
            last_s = i
        elif k == kind:
            seen += 1
            assert last_w >= 0, f"{kind} #{seen}: no WAL write before it"
            assert last_s > last_w, f"{kind} #{seen}: sent before the WAL write at event {last_w} was fdatasynced"
    return seen


def test_durable_before_upstream_and_before_answer(gw, provider, tmp_path):
    if not shutil.which("strace"):
        pytest.fail("strace is not installed (scripts/deps --test installs it)")
    out = tmp_path / "strace.txt"
    st = subprocess.Popen(["strace", "-f", "-qq", "-yy", "-s", "24", "-o", str(out),
                           "-e", "trace=pwrite64,fdatasync,sendto,sendmsg,writev,write",
                           "-p", str(gw.pid)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    try:
        # strace is attached to every thread once a traced write shows up.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gw.get("/healthz")
            if out.exists() and "write" in out.read_text(errors="replace"):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"strace did not attach: {st.stderr.read1().decode(errors='replace') if st.poll() is not None else ''}")
        for _ in range(REQUESTS):
            r = gw.proxy("POST", "demo", key=new_key("order"), json={"amount": 1})
            assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        assert provider.count() == REQUESTS  # conftest's provider: one per module, this module's only test
    finally:
        st.send_signal(signal.SIGINT)
        st.wait(timeout=30)
    up_port = int(provider.url.rsplit(":", 1)[1])
    events = parse(out.read_text(errors="replace"), gw.port, up_port)
    kinds = "".join(k for k, _ in events)
    assert "W" in kinds and "S" in kinds and "U" in kinds, f"no WAL writes, syncs or upstream sends traced: {kinds[:200]}"
    assert check_order(events, "U") == REQUESTS, kinds
    assert check_order(events, "C") >= REQUESTS, kinds
