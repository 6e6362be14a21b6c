"""Fixtures for black-box tests of the `once` binary.

The binary comes from $ONCE_BIN (default build/once under the repository
root); rows are put into stores with the ledger_tool example program, from
$ONCE_LEDGER_TOOL (default: beside the once binary), so the tests never
depend on the store's internal schema.
"""
import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Generous: sanitizer builds are slow and the machine is shared.
TIMEOUT = 120


def _resolve(env_name, default):
    value = os.environ.get(env_name)
    if not value:
        return default
    path = Path(value)
    if not path.is_absolute():
        # Relative to where pytest was started, falling back to the repo root.
        path = path.resolve() if path.exists() else REPO_ROOT / path
    return path


@pytest.fixture(scope="session")
def once_bin():
    path = _resolve("ONCE_BIN", REPO_ROOT / "build" / "once")
    if not path.is_file():
        pytest.fail(f"once binary not found at {path}: build it or set ONCE_BIN")
    return path


@pytest.fixture(scope="session")
def ledger_tool_bin(once_bin):
    path = _resolve("ONCE_LEDGER_TOOL", once_bin.parent / "ledger_tool")
    if not path.is_file():
        pytest.fail(f"ledger_tool not found at {path}: build it or set ONCE_LEDGER_TOOL")
    return path


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_schemas():
    """The PostgreSQL schemas the tests made are dropped at the end."""
    yield
    from gateway import drop_pg_schemas
    drop_pg_schemas()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def store_kind(request):
    """The store under test: "sqlite" (a file) or "postgres" (a schema of its own on
    $ONCE_TEST_PG_URL; skipped with a reason when that is not set). Module scope, so that
    a module's shared gateway runs once per store kind."""
    from gateway import NO_PG_REASON, pg_base_url
    if request.param == "postgres" and not pg_base_url():
        pytest.skip(NO_PG_REASON)
    return request.param


@pytest.fixture(scope="module")
def provider():
    """The fake provider (tests/fakes/provider.py), one per test module; modules
    that need a fresh one per test define their own."""
    from gateway import Provider
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def gateways():
    """Gateways a test made: stopped at the end (SIGTERM, must exit 0), no sanitizer reports."""
    made = []
    yield made
    problems = []
    for g in made:
        if g.alive():
            rc = g.stop()
            if rc != 0:
                problems.append(f"{g.url} exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}")
        reports = g.sanitizer_reports()
        if reports:
            problems.append(f"{g.url}: {reports}\n{g.stderr(all_runs=True)[-6000:]}")
    assert not problems, "\n".join(problems)


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "ledger.db"


@pytest.fixture
def store(store_kind, store_path, ledger_tool_bin):
    """A URL of a fresh, empty store, made as a gateway makes it (the CLI reads stores but
    never creates one): an SQLite file in a temporary directory, or a fresh PostgreSQL
    schema (see store_kind)."""
    if store_kind == "sqlite":
        url = f"sqlite:{store_path}"
    else:
        from gateway import store_url
        url = store_url("postgres", store_path.parent)
    LedgerTool(ledger_tool_bin, url).run("expire", url, "0")
    return url


def _clean_env(extra=None):
    env = dict(os.environ)
    env.pop("ONCE_STORE", None)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    if extra:
        env.update(extra)
    return env


class Cli:
    """Runs the once binary in a scratch directory with a clean environment."""

    def __init__(self, binary, cwd):
        self.binary = binary
        self.cwd = cwd

    def __call__(self, *args, env=None, input=None):
        argv = [str(self.binary)] + [a if isinstance(a, bytes) else str(a) for a in args]
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env=_clean_env(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


@pytest.fixture
def cli(once_bin, tmp_path):
    """cli(*args, env=None) -> CompletedProcess with text stdout/stderr."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    return Cli(once_bin, workdir)


class LedgerTool:
    """Puts actions into a store through libonce (examples/ledger_tool.c)."""

    def __init__(self, binary, store):
        self.binary = binary
        self.store = store

    def run(self, *args, check=True):
        argv = [str(self.binary)] + [a if isinstance(a, bytes) else str(a) for a in args]
        r = subprocess.run(argv, env=_clean_env(), capture_output=True, timeout=TIMEOUT)
        if check and r.returncode != 0:
            raise AssertionError(
                f"ledger_tool {args!r} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
            )
        return r

    def reserve(self, scope, key, lease_ms=None, retention_ms=None, fingerprint=None):
        """Returns (status, token or None, attempt)."""
        args = ["reserve", self.store, scope, key]
        if lease_ms is not None:
            args += ["--lease-ms", lease_ms]
        if retention_ms is not None:
            args += ["--retention-ms", retention_ms]
        if fingerprint is not None:
            args += ["--fingerprint", fingerprint]
        out = self.run(*args).stdout.decode().split()
        assert len(out) == 3, out
        status, token, attempt = out
        return status, (None if token == "-" else token), int(attempt)

    def reserve_many(self, scope, prefix, count, retention_ms=None):
        """Reserves prefix-00000 .. prefix-(count-1) in one process; returns the keys."""
        args = ["reserve", self.store, scope, prefix, "--count", count]
        if retention_ms is not None:
            args += ["--retention-ms", retention_ms]
        lines = self.run(*args).stdout.decode().splitlines()
        assert len(lines) == count
        assert all(line.startswith("reserved ") for line in lines)
        return [f"{prefix}-{i:05d}" for i in range(count)]

    def complete(self, scope, key, token, status=200, body="ok", provider_id=None, headers=None):
        args = ["complete", self.store, scope, key, token, status, body]
        if provider_id is not None:
            args.append(provider_id)
        if headers is not None:
            args += ["--headers", headers]
        self.run(*args)

    def release(self, scope, key, token, error=None):
        self.run("release", self.store, scope, key, token, *([error] if error else []))

    def mark_unknown(self, scope, key, token, error=None):
        self.run("unknown", self.store, scope, key, token, *([error] if error else []))

    def hold(self, scope, key, reason):
        self.run("hold", self.store, scope, key, reason)

    # Rows in each state, for tests that need one.
    def make_pending(self, scope, key, **kw):
        status, token, _ = self.reserve(scope, key, **kw)
        assert status == "reserved"
        return token

    def make_completed(self, scope, key, body="ok", provider_id=None, **kw):
        token = self.make_pending(scope, key, **kw)
        self.complete(scope, key, token, body=body, provider_id=provider_id)
        return token

    def make_released(self, scope, key, error=None, **kw):
        token = self.make_pending(scope, key, **kw)
        self.release(scope, key, token, error)
        return token

    def make_unknown(self, scope, key, error="timeout", **kw):
        token = self.make_pending(scope, key, **kw)
        self.mark_unknown(scope, key, token, error)
        return token

    def make_held(self, scope, key, reason="no lookup configured", **kw):
        token = self.make_unknown(scope, key, **kw)
        self.hold(scope, key, reason)
        return token


@pytest.fixture
def ledger(ledger_tool_bin, store):
    return LedgerTool(ledger_tool_bin, store)


def pytest_configure(config):
    config.addinivalue_line("markers", "protocol_only: an MCP protocol test, run on SQLite only (test_mcp.py)")
