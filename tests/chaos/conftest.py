"""Fixtures and the results table of the chaos suite (tests/chaos).

Every test takes the `row` fixture and states its requirement and evidence
(intents, provider effects, deliveries, kills, ...). Its verdict comes from
the test's outcome: passed -> "yes", failed -> "no" (with the first line of
the failure), skipped -> "no (not run: reason)" — never a fake yes. Rows are
appended to build/chaos-rows.jsonl as they finish; at the end of the session
the table is printed (pytest_terminal_summary) and written, bench-style, to
build/chaos-results.txt.

Run through scripts/chaos (builds build/fault with -DONCE_FAULT_INJECTION=ON,
starts PostgreSQL, sets ONCE_BIN and ONCE_TEST_PG_URL).
"""
import json
import os
import signal
import time

import pytest

import chaoslib  # noqa: F401  (puts tests/integration on sys.path)
from chaoslib import REPO_ROOT, Agent, Provider

BUILD = REPO_ROOT / "build"
ROWS_FILE = BUILD / "chaos-rows.jsonl"
RESULTS_FILE = BUILD / "chaos-results.txt"
TEST_TIMEOUT = int(os.environ.get("ONCE_CHAOS_TEST_TIMEOUT", "240"))  # seconds per test

_rows = []
_t0 = time.monotonic()


def pytest_configure(config):
    config.addinivalue_line("markers", "ci: the fixed representative subset run by scripts/chaos --ci")
    BUILD.mkdir(exist_ok=True)
    if not hasattr(config, "workerinput"):
        ROWS_FILE.write_text("")


class Row:
    """One line of the table: requirement, verdict (from the test outcome), evidence."""

    ORDER = ("store", "intents", "effects", "events", "accepted", "deliveries", "kills")

    def __init__(self, nodeid):
        self.nodeid = nodeid
        self.requirement = nodeid
        self.counts = {}
        self.notes = []
        self.verdict = None
        self.failure = None
        self.t0 = time.monotonic()
        self.seconds = None

    def __call__(self, requirement):
        self.requirement = requirement
        return self

    def set(self, **counts):
        self.counts.update(counts)
        return self

    def note(self, text):
        self.notes.append(str(text))
        return self

    def evidence(self):
        keys = [k for k in self.ORDER if k in self.counts] + [k for k in self.counts if k not in self.ORDER]
        parts = [f"{k}={self.counts[k]}" for k in keys]
        text = " ".join(parts)
        if self.notes:
            text += ("; " if text else "") + "; ".join(self.notes)
        if self.failure:
            text += ("; " if text else "") + "FAILED: " + self.failure
        return text


@pytest.fixture
def row(request):
    r = Row(request.node.nodeid)
    request.node._chaos_row = r
    return r


def _first_error_line(rep):
    text = getattr(rep, "longreprtext", "") or str(rep.longrepr)
    for line in text.splitlines():
        if line.startswith("E "):
            return line[2:].strip()[:240]
    return (text.strip().splitlines() or [""])[-1][:240]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    r = getattr(item, "_chaos_row", None)
    if r is None:
        if rep.when == "setup" and rep.skipped:
            # skipped before the row fixture ran (e.g. no PostgreSQL): still a row
            r = Row(item.nodeid)
            item._chaos_row = r
        else:
            return
    if rep.skipped and r.verdict is None:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reason = reason.replace("Skipped: ", "")
        r.verdict = f"no (not run: {reason})"
    elif rep.failed:
        r.verdict = "no"
        if r.failure is None:
            r.failure = (f"[{rep.when}] " if rep.when != "call" else "") + _first_error_line(rep)
    elif rep.when == "call" and rep.passed and r.verdict is None:
        r.verdict = "yes"
    if rep.when == "teardown":
        r.seconds = time.monotonic() - r.t0
        if r.verdict is None:
            r.verdict = "no"
        _rows.append(r)
        with open(ROWS_FILE, "a") as f:
            f.write(json.dumps({"test": r.nodeid, "requirement": r.requirement, "ok": r.verdict,
                                "evidence": r.evidence(), "seconds": round(r.seconds, 1)}) + "\n")


class _Timeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Every scenario is bounded in time (pytest-timeout is not installed): SIGALRM."""
    def on_alarm(signum, frame):
        raise _Timeout(f"scenario exceeded {TEST_TIMEOUT} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _table(rows):
    w_req = min(max([len("requirement")] + [len(r.requirement) for r in rows]), 90)
    w_ok = max([len("ok")] + [len(r.verdict) for r in rows])
    lines = [f"{'requirement':<{w_req}}  {'ok':<{w_ok}}  {'s':>6}  evidence",
             f"{'-' * w_req}  {'-' * w_ok}  {'-' * 6}  {'-' * 40}"]
    for r in rows:
        lines.append(f"{r.requirement[:w_req]:<{w_req}}  {r.verdict:<{w_ok}}  {r.seconds or 0:6.1f}  {r.evidence()}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _rows:
        return
    total = time.monotonic() - _t0
    yes = sum(1 for r in _rows if r.verdict == "yes")
    head = (f"once chaos suite: {len(_rows)} scenarios, {yes} yes, {len(_rows) - yes} no, "
            f"{total:.1f} s; binary {os.environ.get('ONCE_BIN', 'build/once')}; "
            f"PostgreSQL {'yes' if os.environ.get('ONCE_TEST_PG_URL') else 'no'}; "
            f"selection {os.environ.get('ONCE_CHAOS_SELECTION', 'all')}")
    lines = _table(_rows)
    terminalreporter.write_sep("=", "chaos: the retry-safety checklist")
    terminalreporter.write_line(head)
    for ln in lines:
        terminalreporter.write_line(ln)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    RESULTS_FILE.write_text(f"# {stamp}\n# {head}\n" + "\n".join(lines) + "\n")
    terminalreporter.write_line(f"(written to {RESULTS_FILE})")


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_schemas():
    yield
    from gateway import drop_pg_schemas
    drop_pg_schemas()


# --------------------------------------------------------------------------- fixtures

@pytest.fixture
def provider():
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def agent():
    a = Agent()
    yield a
    a.stop()


@pytest.fixture
def gateways():
    """A list the test appends its gateways to: every one still alive is killed at the end,
    and none may have a sanitizer report."""
    gws = []
    yield gws
    reports = []
    for g in gws:
        if g.alive():
            g.kill()
        rep = g.sanitizer_reports()
        if rep:
            reports.append(f"{g.url}: {rep}\n{g.stderr(all_runs=True)[-3000:]}")
    assert not reports, "\n".join(reports)


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request):
    from gateway import NO_PG_REASON, pg_base_url
    if request.param == "postgres" and not pg_base_url():
        pytest.skip(NO_PG_REASON)
    return request.param
