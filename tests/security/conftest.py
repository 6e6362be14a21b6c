"""Fixtures of the security suite: black-box attacks on the real `once serve`.

The helpers of tests/integration (gateway.py, hooks_harness.py) are reused, not
copied: that directory is put on sys.path here. The suite's own helpers are in
security_harness.py; the attacker's server in attacker.py.

Run: cd /work/main && ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/security
Everything listens on loopback only and every wait is bounded.
"""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for extra in (HERE.parent / "integration", HERE):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from attacker import Attacker  # noqa: E402
from gateway import Provider, drop_pg_schemas, require_serve  # noqa: E402
import security_harness as sh  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_schemas():
    """The PostgreSQL schemas made by store_url are dropped at the end."""
    yield
    drop_pg_schemas()


@pytest.fixture(scope="module")
def provider_process():
    """One fake provider process per module (tests/fakes/provider.py)."""
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def provider(provider_process):
    """The module's fake provider, with everything it saw forgotten before the test."""
    provider_process.reset()
    return provider_process


@pytest.fixture
def attacker():
    """A second, real HTTP server on 127.0.0.1 that records all it receives."""
    a = Attacker().start()
    yield a
    a.stop()


@pytest.fixture
def gateway(tmp_path):
    """gateway(upstreams=None, server=None, sources=None, name=None, start=True) -> a
    HookGateway in a directory of its own, started unless start is false; stopped at the
    end of the test (exit 0 and no sanitizer report required)."""
    require_serve()
    made = []

    def make(upstreams=None, server=None, sources=None, name=None, start=True):
        gw = sh.launch(tmp_path / (name or f"gw{len(made)}"), upstreams=upstreams, server=server,
                       sources=sources, start=start)
        made.append(gw)
        return gw

    yield make
    for gw in made:
        sh.finish(gw)
