"""Webhook events for operators (issue 18): GET /v1/events?source=&status=&limit=&after= and
POST /v1/events/{source}/{event_id}/redeliver — what the console shows and the button it
offers for dead events. Operator only: an agent token gets 403 and changes nothing.

Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_events_api.py
"""
import time
import urllib.parse

import pytest
import requests

from gateway import assert_problem, closed_port, describe, require_serve
from hooks_harness import HookGateway

AGENT = "tok-agent-1a2b3c4d5e6f7a8b"
OPERATOR = "tok-oper-9f8e7d6c5b4a3f2e"
OPER = {"Authorization": f"Bearer {OPERATOR}"}
AG = {"Authorization": f"Bearer {AGENT}"}


@pytest.fixture
def gw(tmp_path, store_kind):
    """Two sources: `dead` pushes to a closed port and gives up after one attempt, `inbox`
    is pulled; tokens for an agent and an operator."""
    require_serve()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{AGENT} agent bot\n{OPERATOR} operator alice\n")
    tokens.chmod(0o600)
    base = {"verify": "none", "insecure": True, "event_id": "header:X-Event-Id"}
    sources = {
        "dead": dict(base, deliver_to=f"http://127.0.0.1:{closed_port()}/in", max_attempts=1,
                     retry_base="50ms", retry_cap="100ms"),
        "inbox": dict(base),
    }
    g = HookGateway(tmp_path / "gw", sources, server={"tokens_file": str(tokens), "loop_interval": "200ms"},
                    store_kind=store_kind)
    g.start()
    yield g
    rc = g.stop()
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]
    assert rc == 0, g.stderr()[-3000:]


def post(g, source, event_id, body=b'{"n":1}'):
    r = g.hook(source, body, {"X-Event-Id": event_id, "Content-Type": "application/json"})
    assert r.status_code == 200, describe(r)


def events(g, query="", headers=OPER):
    return requests.get(f"{g.url}/v1/events{query}", headers=headers, timeout=30)


def wait_dead(g, n, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        r = events(g, "?source=dead&status=dead")
        assert r.status_code == 200, describe(r)
        items = r.json()["items"]
        if len(items) >= n or time.monotonic() > deadline:
            return items
        time.sleep(0.1)


def test_list_filters_and_pages(gw):
    for i in range(3):
        post(gw, "dead", f"d-{i}")
    for i in range(4):
        post(gw, "inbox", f"i-{i}")
    dead = wait_dead(gw, 3)
    assert sorted(e["event_id"] for e in dead) == ["d-0", "d-1", "d-2"], dead
    for e in dead:
        assert e["source"] == "dead" and e["state"] == "dead" and e["attempt"] == 1, e
        assert e["error"], e
        assert "receipt" not in e, "a listing must not hand out receipts"
    r = events(gw, "?source=inbox&status=pending")
    assert [e["event_id"] for e in r.json()["items"]] == ["i-0", "i-1", "i-2", "i-3"], r.json()
    # paging: 2 + 2 + ... over every source, in arrival order, no repeats
    seen, after = [], None
    for _ in range(10):
        r = events(gw, "?limit=2" + (f"&after={urllib.parse.quote(after)}" if after else ""))
        assert r.status_code == 200, describe(r)
        j = r.json()
        assert len(j["items"]) <= 2
        seen += [(e["source"], e["event_id"]) for e in j["items"]]
        after = j["next"]
        if not after:
            break
    assert len(seen) == 7 and len(set(seen)) == 7, seen
    assert events(gw, "?source=nobody").json() == {"items": [], "next": None}


def test_redeliver_a_dead_event(gw):
    post(gw, "dead", "x/1")  # a '/' in the id: the path segment is percent-encoded
    wait_dead(gw, 1)
    r = requests.post(f"{gw.url}/v1/events/dead/{urllib.parse.quote('x/1', safe='')}/redeliver", headers=OPER,
                      timeout=30)
    assert r.status_code == 200, describe(r)
    j = r.json()
    assert j["event_id"] == "x/1" and j["state"] in ("pending", "dead"), j
    # it was tried again (the port is still closed: dead again, after a second attempt)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        e = events(gw, "?source=dead").json()["items"][0]
        if e["attempt"] == 2 and e["state"] == "dead":
            break
        time.sleep(0.1)
    assert e["attempt"] == 2 and e["state"] == "dead", e


def test_operator_only_and_bad_input(gw):
    post(gw, "dead", "d-1")
    wait_dead(gw, 1)
    assert_problem(events(gw, headers=AG), 403, "forbidden")
    assert_problem(events(gw, headers={}), 401, "unauthorized")
    r = requests.post(f"{gw.url}/v1/events/dead/d-1/redeliver", headers=AG, timeout=30)
    assert_problem(r, 403, "forbidden")
    assert events(gw, "?source=dead").json()["items"][0]["attempt"] == 1, "an agent's redeliver changed it"
    assert_problem(events(gw, "?status=lost"), 400, "invalid_request")
    assert_problem(events(gw, "?limit=0"), 400, "invalid_request")
    assert_problem(events(gw, "?limit=1001"), 400, "invalid_request")
    assert_problem(events(gw, "?limit=x"), 400, "invalid_request")
    assert_problem(events(gw, "?after=zz"), 400, "invalid_request")
    assert_problem(events(gw, "?source=%ZZ"), 400, "invalid_request")
    r = requests.post(f"{gw.url}/v1/events/dead/nope/redeliver", headers=OPER, timeout=30)
    assert_problem(r, 404, "not_found")
    r = requests.get(f"{gw.url}/v1/events/dead/d-1/redeliver", headers=OPER, timeout=30)
    assert_problem(r, 405, "method_not_allowed")
