"""Every refusal of the gateway surfaces as a typed error carrying the
problem+json detail, with nothing run and no retry hiding a 4xx: 401, 403
not_allowed / scope_reserved / denied, 202 awaiting approval, 429
limit_exceeded with Retry-After, 409 stale_token / invalid_transition, 404, 400,
503 store_unavailable, and no answer at all.

Run: /usr/bin/python3 -m pytest -q clients/python/tests/test_errors.py
"""
import sqlite3
import time
import urllib.request
import uuid

import pytest

import gateway as harness
from conftest import (AGENT_TOKEN, LIMIT, LIMITED_SCOPE_PREFIX, LIMITED_TOKEN, OPERATOR_TOKEN, new_scope)
from once_client import (AwaitingApproval, BadRequest, Denied, Forbidden, InvalidTransition, LimitExceeded,
                         NotAllowed, NotFound, Once, OnceError, ScopeReserved, StaleToken, StoreUnavailable,
                         TransportError, Unauthorized, intent_key)


class Counter:
    def __init__(self):
        self.n = 0

    def __call__(self, *a, **kw):
        self.n += 1
        return "ran"


def requests_for(provider, path):
    return [r for r in provider.requests_seen() if r["path"].startswith(path)]


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_401_unauthorized(gw, token):
    f = Counter()
    once = Once(gw.url, token)
    with pytest.raises(Unauthorized) as info:
        once.effect(scope=new_scope(), key="k")(f)()
    e = info.value
    assert f.n == 0
    assert e.status == 401 and e.code == "unauthorized" and e.detail, e.problem
    assert e.headers.get("www-authenticate", "").startswith("Bearer")


def test_403_not_allowed_outside_the_grants(gw):
    f = Counter()
    once = Once(gw.url, LIMITED_TOKEN)
    with pytest.raises(NotAllowed) as info:
        once.effect(scope="elsewhere-" + uuid.uuid4().hex[:8], key="k")(f)()
    e = info.value
    assert f.n == 0 and isinstance(e, Forbidden)
    assert e.status == 403 and e.code == "not_allowed" and "limited" in e.detail, e.problem


def test_429_limit_exceeded_with_retry_after(gw):
    once = Once(gw.url, LIMITED_TOKEN)
    scope = LIMITED_SCOPE_PREFIX + uuid.uuid4().hex[:8]
    f = Counter()
    for i in range(LIMIT):
        assert once.effect(scope=scope, key=f"k{i}")(f)() == "ran"
    # A replay costs nothing and is still answered.
    assert once.effect(scope=scope, key="k0")(f)() == "ran" and f.n == LIMIT
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as info:
        once.effect(scope=scope, key="one-too-many", wait=30)(f)()
    assert time.monotonic() - t0 < 10, "a 429 is never retried"
    e = info.value
    assert f.n == LIMIT
    assert e.status == 429 and e.code == "limit_exceeded" and f"{LIMIT}/1h" in e.detail, e.problem
    # Counted in buckets of a sixtieth of the window (docs/agents.md): room comes back
    # within the window plus one bucket.
    assert isinstance(e.retry_after, int) and 0 < e.retry_after <= 3600 + 60, e.headers


def test_403_scope_reserved(gw):
    f = Counter()
    with pytest.raises(ScopeReserved) as info:
        Once(gw.url, AGENT_TOKEN).effect(scope="demo", key="k")(f)()
    assert f.n == 0 and info.value.problem.get("scope") == "demo"


def test_409_stale_token_and_invalid_transition(gw):
    once = Once(gw.url, AGENT_TOKEN)
    scope, key = new_scope(), uuid.uuid4().hex
    res = once.reserve(scope, key)
    assert res.status == "reserved" and res.attempt == 1
    with pytest.raises(StaleToken) as info:
        once.complete(scope, key, "0" * len(res.token), {"x": 1})
    assert info.value.status == 409 and info.value.detail
    once.complete(scope, key, res.token, {"x": 1})
    with pytest.raises(InvalidTransition):
        once.release(scope, key, res.token)
    with pytest.raises(InvalidTransition):
        once.renew(scope, key, res.token)
    again = once.reserve(scope, key)
    assert again.status == "completed" and again.result == {"x": 1}


def test_404_and_400(gw):
    once = Once(gw.url, AGENT_TOKEN)
    with pytest.raises(NotFound) as info:
        once.get(new_scope(), "nothing-here")
    assert info.value.code == "not_found"
    f = Counter()
    with pytest.raises(BadRequest) as info:
        once.effect(scope="bad scope!", key="k")(f)()
    assert info.value.code == "invalid_scope" and f.n == 0
    with pytest.raises(BadRequest) as info:
        once.effect(scope=new_scope(), key="é" * 3)(f)()
    assert info.value.code == "invalid_key" and f.n == 0


def test_approval_answers_carry_the_record(gw, provider):
    """appr's POST /pay* waits for a person: through the actions API (actions_api = yes)
    the same key is AwaitingApproval, then Denied with the operator's note."""
    key = "pay-" + uuid.uuid4().hex[:12]
    r = gw.request("POST", "/v1/proxy/appr/pay", key=key, json={"amount": 5},
                   headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert r.status_code == 202, harness.describe(r)
    once = Once(gw.url, AGENT_TOKEN)
    f = Counter()
    with pytest.raises(AwaitingApproval) as info:
        once.effect(scope="appr", key=key)(f)()
    e = info.value
    assert f.n == 0 and e.status == 202 and e.scope == "appr" and e.key == key
    assert e.record["state"] == "awaiting_approval" and e.record["waits_for"] == "approval", e.record
    d = gw.post(f"/v1/actions/appr/{key}/deny", json={"note": "too much"},
                headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    assert d.status_code == 200, harness.describe(d)
    with pytest.raises(Denied) as info:
        once.effect(scope="appr", key=key)(f)()
    e = info.value
    assert f.n == 0 and e.status == 403 and e.code == "denied" and e.note == "too much"
    assert e.record["state"] == "denied" and e.record["decided_by"] == "alice", e.record
    assert not requests_for(provider, "/pay")


def test_503_store_unavailable(gw):
    """The SQLite store locked by another writer past its busy timeout: 503, nothing ran."""
    if gw.store_kind != "sqlite":
        pytest.skip("the store is made unavailable by locking the SQLite file")
    path = gw.store[len("sqlite:"):]
    lock = sqlite3.connect(path, timeout=30, isolation_level=None)
    f = Counter()
    try:
        lock.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable) as info:
            Once(gw.url, AGENT_TOKEN, timeout=60).effect(scope=new_scope(), key="k")(f)()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    e = info.value
    assert f.n == 0 and e.status == 503 and e.code == "store_unavailable" and e.detail, e.problem


def test_no_answer_is_a_transport_error():
    once = Once(f"http://127.0.0.1:{harness.closed_port()}", AGENT_TOKEN, timeout=5)
    f = Counter()
    with pytest.raises(TransportError) as info:
        once.effect(scope="s", key="k")(f)()
    assert f.n == 0 and info.value.status is None and isinstance(info.value, OnceError)


def test_proxy_headers_through_the_gateway(gw, provider):
    once = Once(gw.url, AGENT_TOKEN)
    tag = uuid.uuid4().hex
    key = intent_key("proxy", tag)
    from once_client import outcome
    seen = []
    for _ in range(3):
        req = urllib.request.Request(once.proxy_url("demo", f"/charges/{tag}"), data=b'{"amount":1}', method="POST",
                                     headers=dict(once.proxy_headers(key, wait=5),
                                                  **{"Content-Type": "application/json"}))
        with urllib.request.urlopen(req, timeout=30) as r:
            seen.append((r.status, outcome(r.headers), r.read()))
    assert [s[1] for s in seen] == ["completed", "replayed", "replayed"]
    assert seen[0][2] == seen[1][2] == seen[2][2]
    assert sum(1 for e in provider.effects() if e["path"] == f"/charges/{tag}") == 1
    assert once.proxy_headers(key, wait=5)["Prefer"] == "wait=5"
    assert once.proxy_headers(key)["Authorization"] == f"Bearer {AGENT_TOKEN}"
