"""Infrastructure faults: PostgreSQL restarted mid-load; SQLite on a full filesystem
(a 2 MiB tmpfs); the upstream hanging, resetting, answering 5xx; a wall-clock jump
under a live lease (libfaketime)."""
import collections
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from chaoslib import (Gateway, action, answer_of, effects_by_intent, list_actions, new_key, send,
                      start_with_env, wait_settled)
from multinode import Cluster, PgServer, new_schema, with_schema

FAKETIME_LIBS = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"]


def test_postgres_restart_mid_load(tmp_path, provider, gateways, row):
    row("PostgreSQL restarted mid-load (3 nodes): 503 sends nothing, <=1 effect per intent, nothing left pending")
    if shutil.which("pg_ctl") is None and not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        pytest.skip("PostgreSQL is not installed")
    pg = PgServer.start_private()
    try:
        url = with_schema(pg.url, new_schema("chaos"))
        c = Cluster(tmp_path, url, 3, upstreams={"demo": {"url": provider.url, "timeout": "3s", "lease": "3s"}},
                    server={"loop_interval": "300ms"})
        gateways.extend(c.nodes)
        c.start()
        stop = threading.Event()
        lock = threading.Lock()
        first_answers = {}
        all_answers = collections.defaultdict(list)

        def load(i):
            n = 0
            while not stop.is_set():
                k = f"pgr-{i}-{n}"
                n += 1
                r = send(c.nodes[n % 3], k, {"intent": k}, timeout=20)
                with lock:
                    first_answers[k] = answer_of(r)
                    all_answers[k].append(answer_of(r))
                time.sleep(0.02)

        ts = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(6)]
        for t in ts:
            t.start()
        time.sleep(2)
        t_restart = time.monotonic()
        pg.restart()
        restart_s = time.monotonic() - t_restart
        ready_s = c.wait_ready(30)
        time.sleep(2)
        stop.set()
        for t in ts:
            t.join(60)
        keys = list(first_answers)
        tally = collections.Counter(first_answers.values())
        per = effects_by_intent(provider)
        only_503 = [k for k in keys if all(a.startswith("503") for a in all_answers[k])]
        sent_503 = [k for k in only_503 if per[k] > 0]
        dup = {k: n for k, n in per.items() if n > 1}
        ok200 = [k for k in keys if first_answers[k].startswith("200")]
        # every key retried once the leases ran out: nothing is sent a second time
        time.sleep(4)
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            for k, a in zip(keys, ex.map(lambda k: answer_of(send(c.nodes[hash(k) % 3], k, {"intent": k},
                                                                       timeout=20)), keys)):
                all_answers[k].append(a)
        per2 = effects_by_intent(provider)
        dup2 = {k: n for k, n in per2.items() if n > 1}
        pending = [a for a in list_actions(c.nodes[0], status="pending")]
        row.set(store="postgres x3 (restarted)", intents=len(keys), effects=provider.count(), kills=0)
        row.note(f"first answers {dict(tally)}; pg restart {restart_s:.1f} s, all /readyz 200 {ready_s:.1f} s later; "
                 f"503-only keys {len(only_503)} (sent upstream: {len(sent_503)}); pending at end {len(pending)}")
        assert not dup and not dup2, f"more than one effect: {dup or dup2}"
        assert not sent_503, f"answered 503 but sent upstream: {sent_503[:5]}"
        assert all(per2[k] == 1 for k in ok200), "a 200 without exactly one effect"
        assert tally and any(a.startswith("503") or a.startswith("504") or "Error" in a for a in tally), \
            f"the restart was not felt: {tally}"
        assert not pending, f"actions left pending: {[(a['key'], a['state']) for a in pending[:5]]}"
        c.stop_clean()
    finally:
        pg.stop()


@pytest.mark.ci
def test_postgres_restart_first_requests_after_readyz_succeed(tmp_path, provider, gateways, row):
    """PostgreSQL (a private server) restarted under keyed load on two nodes: once /readyz is
    200 on every node, the next 100 requests (new keys, sequential, round-robin over the
    nodes) all answer 200 completed — broken pooled connections are replaced before use,
    not found by failing a request each — and every effect the provider saw has a ledger
    row (completed, unknown or held): nothing was sent without a reservation."""
    row("PostgreSQL restarted under load (2 nodes): the first 100 requests after /readyz is 200 all succeed; "
        "nothing sent without a reservation")
    if shutil.which("pg_ctl") is None and not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        pytest.skip("PostgreSQL is not installed")
    pg = PgServer.start_private()
    try:
        url = with_schema(pg.url, new_schema("chaos"))
        nodes = 2
        c = Cluster(tmp_path, url, nodes, upstreams={"demo": {"url": provider.url, "timeout": "3s", "lease": "3s"}},
                    server={"loop_interval": "300ms"})
        gateways.extend(c.nodes)
        c.start()
        stop = threading.Event()
        lock = threading.Lock()
        load_answers = collections.defaultdict(list)

        def load(i):
            n = 0
            while not stop.is_set():
                k = f"rdy-load-{i}-{n}"
                n += 1
                a = answer_of(send(c.nodes[(i + n) % nodes], k, {"intent": k}, timeout=20))
                with lock:
                    load_answers[k].append(a)
                time.sleep(0.02)

        ts = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(4)]
        for t in ts:
            t.start()
        time.sleep(2)
        t_restart = time.monotonic()
        pg.restart()
        restart_s = time.monotonic() - t_restart
        # the load ran through the outage; the pools keep whatever it left broken
        stop.set()
        ready_s = c.wait_ready(30)
        for t in ts:
            t.join(60)
        after = []
        for i in range(100):
            k = f"rdy-after-{i}"
            after.append((k, answer_of(send(c.nodes[i % nodes], k, {"intent": k}, timeout=20))))
        failed = [(i, k, a) for i, (k, a) in enumerate(after) if a != "200/completed"]

        # calls answered without a record (504) stay pending until their lease ends
        deadline = time.monotonic() + 3 + 0.3 + 15
        pending = list_actions(c.nodes[0], status="pending")
        while pending and time.monotonic() < deadline:
            time.sleep(0.2)
            pending = list_actions(c.nodes[0], status="pending")
        rows = {a["key"]: a["state"] for a in list_actions(c.nodes[0], scope="demo")}
        per = effects_by_intent(provider)
        unreserved = [k for k in per if k not in rows]
        wrong_state = {k: rows[k] for k in per if k in rows and rows[k] not in ("completed", "unknown", "held")}
        dup = {k: n for k, n in per.items() if n > 1}
        sent_503 = [k for k, a in load_answers.items() if all(x.startswith("503") for x in a) and per[k] > 0]
        tally = collections.Counter(a for v in load_answers.values() for a in v)
        row.set(store=f"postgres x{nodes} (restarted)", intents=len(load_answers) + len(after),
                effects=provider.count(), kills=0)
        row.note(f"load answers {dict(tally)}; pg restart {restart_s:.1f} s, all /readyz 200 {ready_s:.1f} s "
                 f"later; the 100 after: {dict(collections.Counter(a for _k, a in after))}; "
                 f"effects without a row {len(unreserved)}")
        assert not failed, f"{len(failed)} of the first 100 requests after /readyz 200 failed: {failed[:5]}"
        assert not unreserved, f"sent without a reservation (no ledger row): {unreserved[:5]}"
        assert not wrong_state, f"an effect whose row says it did not happen: {dict(list(wrong_state.items())[:5])}"
        assert not dup, f"more than one effect: {dup}"
        assert not sent_503, f"answered 503 but sent upstream: {sent_503[:5]}"
        assert not pending, f"actions left pending: {[(a['key'], a['state']) for a in pending[:5]]}"
        assert all(per[k] == 1 for k, _a in after), "a 200 without exactly one effect"
        c.stop_clean()
    finally:
        pg.stop()


@pytest.mark.ci
def test_sqlite_full_filesystem(tmp_path, provider, gateways, row):
    row("SQLite on a full filesystem (2 MiB tmpfs): 503 and nothing sent upstream; recovers when space returns")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {r.stderr.strip() or r.returncode}")
    try:
        g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "3s", "lease": "3s"}},
                    store=f"sqlite:{mnt / 'once.db'}", server={"loop_interval": "300ms"})
        gateways.append(g)
        g.start()
        warm = [new_key("warm") for _ in range(3)]
        for k in warm:
            assert answer_of(send(g, k, {"intent": k})) == "200/completed"
        # fill the filesystem
        filler = mnt / "filler"
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        st = os.statvfs(mnt)
        free_kib = st.f_bavail * st.f_frsize // 1024
        sizes = {p.name: p.stat().st_size // 1024 for p in mnt.iterdir()}
        answers, keys = collections.Counter(), []
        big = "x" * 60000  # the provider echoes it: the outcome needs room
        for i in range(15):
            k = new_key("full")
            keys.append(k)
            answers[answer_of(send(g, k, {"intent": k, "pad": big}))] += 1
        per = effects_by_intent(provider)
        sent_503 = [k for k in keys if per[k] > 0 and action(g, "demo", k) is None]
        n503 = sum(v for a, v in answers.items() if a.startswith("503"))
        effects_full = sum(per[k] for k in keys)
        # space returns
        if filler.exists():
            filler.unlink()
        t0 = time.monotonic()
        rec = None
        while time.monotonic() - t0 < 20:
            k = new_key("back")
            rec = send(g, k, {"intent": k})
            if answer_of(rec) == "200/completed":
                break
            time.sleep(0.5)
        recover_s = time.monotonic() - t0
        # the keys that got 503 were never reserved: their retry goes out now, once
        retried = collections.Counter(answer_of(send(g, k, {"intent": k})) for k in keys)
        per2 = effects_by_intent(provider)
        row.set(store="sqlite on tmpfs", intents=len(keys), effects=sum(per2[k] for k in keys), kills=0)
        row.note(f"tmpfs files KiB {sizes}, free {free_kib} KiB; while full: {dict(answers)}, effects {effects_full}; recovered in {recover_s:.1f} s; "
                 f"retries after: {dict(retried)}")
        assert n503 > 0, f"no 503 while the filesystem was full: {answers}"
        five03 = [k for k in keys]
        assert not sent_503, f"sent upstream without a reservation: {sent_503}"
        assert answer_of(rec) == "200/completed", f"no recovery: {answer_of(rec)}"
        assert all(per2[k] <= 1 for k in five03), {k: per2[k] for k in keys if per2[k] > 1}
        g.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


UPSTREAM_FAULTS = {
    # name: (headers, first answer, effects after retries, released)
    "hang": ({"X-Fake-Hang": "1"}, "504/outcome_unknown", 1, False),
    "reset-after-read": ({"X-Fake-Close": "after-read"}, "504/outcome_unknown", 1, False),
    "reset-mid-response": ({"X-Fake-Close": "mid-response"}, "504/outcome_unknown", 1, False),
    "500": ({"X-Fake-Status": "500"}, "500/unknown", 1, False),
    "502": ({"X-Fake-Status": "502"}, "502/unknown", 1, False),
    "503 (release_on)": ({"X-Fake-Status": "503"}, "503/released", 2, True),
}


@pytest.mark.ci
def test_upstream_faults(store_kind, tmp_path, provider, gateways, row):
    row(f"upstream hanging, resetting, answering 5xx: ambiguous never resent, release_on retried [{store_kind}]")
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "1s", "lease": "7s"}},
                store_kind=store_kind, server={"loop_interval": "300ms"})
    gateways.append(g)
    g.start()
    seen, problems = {}, []
    for name, (headers, expect, effects, released) in UPSTREAM_FAULTS.items():
        k = new_key("up")
        first = answer_of(send(g, k, {"intent": k}, headers=headers))
        retries = [answer_of(send(g, k, {"intent": k})) for _ in range(3)]
        n = effects_by_intent(provider)[k]
        seen[name] = f"{first} then {'/'.join(sorted(set(retries)))} -> {n} sent"
        if first != expect:
            problems.append(f"{name}: first answer {first}, expected {expect}")
        if n != effects:
            problems.append(f"{name}: {n} requests reached the provider, expected {effects}")
        if released and not any(r.endswith("completed") for r in retries):
            problems.append(f"{name}: a released key was not sent again ({retries})")
        if not released and any(r.startswith("200") for r in retries):
            problems.append(f"{name}: an ambiguous outcome answered 200 on retry ({retries})")
    row.set(store=store_kind, intents=len(UPSTREAM_FAULTS), effects=provider.count(), kills=0)
    row.note("; ".join(f"{k}: {v}" for k, v in seen.items()))
    row.note("the 503 row counts the refused attempt too: the fake records every POST")
    assert not problems, problems
    g.stop()


@pytest.mark.ci
def test_clock_jump_does_not_resend_a_live_lease(tmp_path, provider, gateways, row):
    row("wall clock jumps +2h under a live lease (libfaketime): unknown at worst, never a second effect")
    lib = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
    if lib is None:
        pytest.skip("libfaketime is not installed (apt-get install libfaketime)")
    clock = tmp_path / "faketime"
    clock.write_text("+0\n")
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "10s", "lease": "30s"}},
                store_kind="sqlite", server={"loop_interval": "200ms"})
    gateways.append(g)
    asan = os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    start_with_env(g, {"LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(clock), "FAKETIME_NO_CACHE": "1",
                       "FAKETIME_DONT_FAKE_MONOTONIC": "1", "ASAN_OPTIONS": asan + ":verify_asan_link_order=0"})
    k = new_key("clock")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", send(g, k, {"intent": k},
                                                                  headers={"X-Fake-Delay-Ms": "4000"}, timeout=30)))
    t.start()
    assert provider.wait_count(1, timeout=10) == 1
    before = action(g, "demo", k)
    clock.write_text("+7200\n")  # the wall clock of the gateway jumps two hours ahead
    time.sleep(1.0)
    during = action(g, "demo", k)
    retries = [answer_of(send(g, k, {"intent": k})) for _ in range(3)]
    t.join(30)
    first = answer_of(out.get("r"))
    time.sleep(0.5)
    after = [answer_of(send(g, k, {"intent": k})) for _ in range(2)]
    final = action(g, "demo", k)
    n = effects_by_intent(provider)[k]
    row.set(store="sqlite", intents=1, effects=n, kills=0)
    row.note(f"state before jump {before['state']}, 1 s after {during['state']}, final {final['state']}; "
             f"first attempt {first}; retries during the call {','.join(retries)}; after {','.join(after)}")
    assert n == 1, f"{n} effects: the jump turned a live lease into a resend"
    assert not any(r.startswith("200/completed") for r in retries + after)
    g.stop()
