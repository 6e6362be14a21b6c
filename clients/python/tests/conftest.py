"""Fixtures for the Python client's tests: the real `once serve` on a free
loopback port (the repo's harness, tests/integration/gateway.py), the fake
provider that counts effects, and tokens for an operator, an agent with full
reach and an agent with grants and a limit.

ONCE_BIN: the binary (default build/asan/once under the repository root).
ONCE_TEST_PG_URL: when set, every gateway test runs on PostgreSQL too.
"""
import json
import os
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent                 # clients/python
REPO_ROOT = HERE.parents[2]
sys.path.insert(0, str(PACKAGE_ROOT))      # once_client from the source tree
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

os.environ.setdefault("ONCE_BIN", str(REPO_ROOT / "build" / "asan" / "once"))

import gateway as harness  # noqa: E402  (tests/integration/gateway.py)

OPERATOR_TOKEN = "op-" + uuid.uuid4().hex
AGENT_TOKEN = "agent-" + uuid.uuid4().hex           # agent "bot": no section, full reach
LIMITED_TOKEN = "limited-" + uuid.uuid4().hex       # agent "limited": [agent.limited]
LIMITED_SCOPE_PREFIX = "lim-"
LIMIT = 2                                           # new reservations per hour for "limited"
LEASE_S = 1.0                                       # the clients' lease in the lease tests


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_schemas():
    yield
    harness.drop_pg_schemas()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def store_kind(request):
    if request.param == "postgres" and not harness.pg_base_url():
        pytest.skip(harness.NO_PG_REASON)
    return request.param


@pytest.fixture(scope="module")
def provider():
    p = harness.Provider()
    yield p
    p.stop()


AGENT_SECTIONS = f"""
[agent.limited]
allow = actions: {LIMITED_SCOPE_PREFIX}*
limit = actions {LIMIT}/1h
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    """One gateway per module and store kind, with tokens and an approval upstream
    (appr: POST /pay* waits for a person; actions_api = yes, so the actions API
    sees its rows)."""
    harness.require_serve()
    workdir = tmp_path_factory.mktemp("pyclient")
    tokens = workdir / "tokens"
    tokens.write_text(f"{OPERATOR_TOKEN} operator alice\n{AGENT_TOKEN} agent bot\n"
                      f"{LIMITED_TOKEN} agent limited\n")
    tokens.chmod(0o600)
    g = harness.Gateway(workdir,
                        {"demo": {"url": provider.url},
                         "appr": {"url": provider.url, "approve": "POST /pay*", "actions_api": True}},
                        server={"loop_interval": "200ms", "tokens_file": str(tokens), "lease": "10s"},
                        store_kind=store_kind)
    with open(g.config_path, "a") as f:
        f.write(AGENT_SECTIONS)
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


@pytest.fixture(autouse=True)
def _alive(request):
    yield
    if "gw" in request.fixturenames:
        g = request.getfixturevalue("gw")
        assert g.alive(), g.death_note()


def new_scope(prefix="py"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Effects:
    """The effect the tests' functions perform: a POST to the fake provider at
    /effects/{tag}, counted there (never by the client under test)."""

    def __init__(self, provider):
        self.provider = provider

    def perform(self, tag, payload=None):
        req = urllib.request.Request(f"{self.provider.url}/effects/{tag}",
                                     data=json.dumps(payload or {}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["id"]

    def count(self, tag):
        return sum(1 for e in self.provider.effects() if e["path"] == f"/effects/{tag}")


@pytest.fixture
def effects(provider):
    return Effects(provider)


def wait_state(client, scope, key, states, timeout=20):
    """Polls the record until its state is one of states; returns the record."""
    deadline = time.monotonic() + timeout
    rec = client.get(scope, key)
    while rec["state"] not in states and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = client.get(scope, key)
    assert rec["state"] in states, rec
    return rec
