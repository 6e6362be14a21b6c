"""Reconciliation, end to end against the real binary and the fake provider.

An UNKNOWN action (the gateway sent it and lost the answer) is settled by
asking the provider (`lookup = METHOD PATH`), never by sending it again:
found -> completed with the lookup's answer (retries replay it), absent ->
released (the next attempt sends), anything else -> looked up again with a
doubling backoff and held after `lookup_attempts`. Upstreams without a lookup
hold their unknown actions at once; upstreams with `forward_key_as` resend,
because the provider dedupes natively.

Unknown actions are made deterministically with the fake provider's faults:
`X-Fake-Close: after-read` (the provider recorded the effect, then closed) and
`X-Fake-Close: before-effect` (closed without recording), and by SIGKILLing the
gateway in the middle of a slow call.
"""
import time

import pytest

from gateway import assert_problem, describe, outcome
from reconcile_harness import (Gateway, Provider, action, list_actions, lookup_mode, lookup_upstream, lookups,
                               new_key, queue_lookup_faults, reconcile_count, send_in_background, show,
                               trail_lines, upstream, wait_lookups, wait_state)

SECRET = "Authorization: Bearer sk_test_lookup"


@pytest.fixture
def prov():
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def native_prov():
    p = Provider(native=True)
    yield p
    p.stop()


def _gateway(tmp_path, store_kind, upstreams, **kw):
    gw = Gateway(tmp_path / "gw", upstreams, store_kind=store_kind, **kw)
    gw.start()
    return gw


@pytest.fixture
def gws(tmp_path, store_kind):
    """Starts gateways on demand; stops them and checks for sanitizer reports."""
    made = []

    def make(upstreams, **kw):
        gw = _gateway(tmp_path / f"g{len(made)}", store_kind, upstreams, **kw)
        made.append(gw)
        return gw

    yield make
    for gw in made:
        gw.stop()
        assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]


def _charge(gw, scope, key, headers=None, **body):
    body = dict({"ref": key, "amount": 2000, "currency": "eur"}, **body)
    return gw.proxy("POST", scope, "/charges", key=key, json=body, headers=headers or {})


def _assert_unknown_answer(r):
    assert r.status_code == 504, describe(r)
    assert outcome(r) == "unknown", describe(r)
    assert r.json()["code"] == "outcome_unknown", describe(r)


# --------------------------------------------------------------------------- found / absent

def test_crash_after_accept_is_reconciled_to_completed_and_replayed(prov, gws):
    gw = gws({"pay": lookup_upstream(prov, header=SECRET)})
    key = new_key("pay")
    r = _charge(gw, "pay", key, headers={"X-Fake-Close": "after-read"})
    _assert_unknown_answer(r)
    assert prov.count() == 1

    rec = wait_state(gw, "pay", key, ("completed", "released", "held"))
    assert rec["state"] == "completed", rec
    assert rec["provider_id"] == "eff_1", rec
    assert rec["attempt"] == 1, rec
    assert len(rec["trail"]) == 1 and rec["trail"][0].endswith("lookup 1: found eff_1"), rec["trail"]
    assert rec["response"]["status"] == 200, rec
    assert '"id":"eff_1"' in rec["response"]["body"], rec

    # The retry replays what the lookup learnt; nothing is sent again.
    r2 = _charge(gw, "pay", key)
    assert r2.status_code == 200, describe(r2)
    assert r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert outcome(r2) == "replayed", describe(r2)
    assert r2.json()["data"][0]["id"] == "eff_1", describe(r2)
    assert prov.count() == 1, prov.effects()

    # One lookup, with the upstream's credentials and nothing of the client's.
    seen = lookups(prov)
    assert len(seen) == 1, seen
    lk = seen[0]
    assert lk["method"] == "GET" and lk["path"] == "/v1/lookup", lk
    assert lk["ref"] == key and lk["by"] == "json:/ref", lk
    assert lk["headers"].get("authorization") == "Bearer sk_test_lookup", lk
    assert "x-fake-close" not in lk["headers"] and "idempotency-key" not in lk["headers"], lk

    assert reconcile_count(gw, "pay", "found") == 1
    assert reconcile_count(gw, "pay", "absent") == 0
    assert reconcile_count(gw, "pay", "error") == 0

    rc, out, err = show(gw, "pay", key)
    assert rc == 0, err
    assert "state: completed" in out and "provider_id: eff_1" in out, out
    lines = trail_lines(out)
    assert len(lines) == 1 and lines[0].endswith("lookup 1: found eff_1"), out


def test_lookups_counter_counts_the_successful_lookup(prov, gws):
    """"lookups" is how many times the provider was asked. A lookup that found the
    action on the first try is one lookup (the trail says "lookup 1")."""
    gw = gws({"pay": lookup_upstream(prov)})
    key = new_key("pay")
    _assert_unknown_answer(_charge(gw, "pay", key, headers={"X-Fake-Close": "after-read"}))
    rec = wait_state(gw, "pay", key, "completed")
    assert len(lookups(prov)) == 1
    assert rec["lookups"] == 1, f"one lookup was made (trail {rec['trail']}), the record says {rec['lookups']}"


def test_provider_never_got_it_is_released_and_the_retry_sends_once(prov, gws):
    gw = gws({"pay": lookup_upstream(prov)})
    key = new_key("pay")
    r = _charge(gw, "pay", key, headers={"X-Fake-Close": "before-effect"})
    _assert_unknown_answer(r)
    assert prov.count() == 0

    rec = wait_state(gw, "pay", key, ("completed", "released", "held"))
    assert rec["state"] == "released", rec
    assert rec["provider_id"] is None and rec["response"] is None, rec
    assert len(rec["trail"]) == 1 and "lookup 1: absent" in rec["trail"][0], rec["trail"]
    assert reconcile_count(gw, "pay", "absent") == 1

    r2 = _charge(gw, "pay", key)
    assert r2.status_code == 200, describe(r2)
    assert outcome(r2) == "completed", describe(r2)
    assert r2.headers.get("Idempotent-Replayed") is None, describe(r2)
    assert r2.json()["id"] == "eff_1", describe(r2)
    assert action(gw, "pay", key)["attempt"] == 2

    r3 = _charge(gw, "pay", key)
    assert r3.status_code == 200 and r3.headers.get("Idempotent-Replayed") == "true", describe(r3)
    assert r3.json()["id"] == "eff_1", describe(r3)
    effects = prov.effects()
    assert len(effects) == 1, effects
    assert key in effects[0]["body"], effects


def test_lookup_by_header_with_404_absent(prov, gws):
    """{header:Name} in the lookup path, a single-object lookup (found: json:/id) and
    absent = 404."""
    gw = gws({"ord": upstream(prov,
                              lookup="GET /v1/effects/{header:X-Order-Ref}?by=header:X-Order-Ref",
                              lookup_found="json:/id", lookup_absent="404", lookup_backoff="200ms")})
    k_found, k_absent = new_key("o"), new_key("o")
    ref_found, ref_absent = "ord/" + new_key("r"), "ord " + new_key("r")  # '/' and ' ' are escaped
    _assert_unknown_answer(gw.proxy("POST", "ord", "/orders", key=k_found, json={"sku": "a"},
                                    headers={"X-Order-Ref": ref_found, "X-Fake-Close": "after-read"}))
    _assert_unknown_answer(gw.proxy("POST", "ord", "/orders", key=k_absent, json={"sku": "b"},
                                    headers={"X-Order-Ref": ref_absent, "X-Fake-Close": "before-effect"}))
    a = wait_state(gw, "ord", k_found, ("completed", "released", "held"))
    b = wait_state(gw, "ord", k_absent, ("completed", "released", "held"))
    assert a["state"] == "completed" and a["provider_id"] == "eff_1", a
    assert b["state"] == "released", b
    assert "absent (status 404)" in b["trail"][0], b["trail"]
    refs = sorted(lk["ref"] for lk in lookups(prov))
    assert refs == sorted([ref_found, ref_absent]), lookups(prov)

    r = gw.proxy("POST", "ord", "/orders", key=k_found, json={"sku": "a"}, headers={"X-Order-Ref": ref_found})
    assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert r.json()["id"] == "eff_1"
    r = gw.proxy("POST", "ord", "/orders", key=k_absent, json={"sku": "b"}, headers={"X-Order-Ref": ref_absent})
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert prov.count() == 2


# --------------------------------------------------------------------------- failures

def test_failing_lookups_back_off_doubling_and_hold_after_n(prov, gws):
    gw = gws({"pay": lookup_upstream(prov, lookup_backoff="300ms", lookup_attempts=4)})
    lookup_mode(prov, status=500)
    key = new_key("pay")
    _assert_unknown_answer(_charge(gw, "pay", key, headers={"X-Fake-Close": "after-read"}))

    rec = wait_state(gw, "pay", key, ("held", "completed", "released"), timeout=30)
    assert rec["state"] == "held", rec
    seen = lookups(prov)
    assert len(seen) == 4, seen
    assert rec["lookups"] == 4, rec
    assert len(rec["trail"]) == 4, rec["trail"]
    for i, line in enumerate(rec["trail"], 1):
        assert f"lookup {i}: status 500" in line, rec["trail"]
    assert "held after 4 lookups" in rec["trail"][-1], rec["trail"]
    assert "held after 4 lookups" in rec["error"] and "status 500" in rec["error"], rec

    # 300 ms, then 600 ms, then 1200 ms between lookups (the reconciler polls every 0.5 s,
    # so each gap may be up to ~0.5 s longer, never shorter).
    times = [lk["time"] for lk in seen]
    gaps = [b - a for a, b in zip(times, times[1:])]
    for gap, want in zip(gaps, (0.3, 0.6, 1.2)):
        assert gap >= want - 0.05, f"gaps {gaps}: a lookup came before its backoff"
    assert gaps[2] > gaps[0], f"gaps {gaps}: the backoff did not grow"

    assert reconcile_count(gw, "pay", "error") == 3
    assert reconcile_count(gw, "pay", "held") == 1
    assert reconcile_count(gw, "pay", "found") == 0

    # Held: a retry is refused and nothing is sent; no more lookups.
    r = _charge(gw, "pay", key)
    j = assert_problem(r, 409, "outcome_unknown")
    assert j.get("state") == "held", j
    time.sleep(1.2)
    assert len(lookups(prov)) == 4
    assert prov.count() == 1

    rc, out, err = show(gw, "pay", key)
    assert rc == 0, err
    assert "state: held" in out and "lookups: 4" in out, out
    assert len(trail_lines(out)) == 4, out


def test_lookup_errors_then_found(prov, gws):
    """A 500 and a dropped connection are retried; the third lookup finds it."""
    gw = gws({"pay": lookup_upstream(prov, lookup_backoff="100ms", lookup_attempts=5)})
    queue_lookup_faults(prov, {"status": 503}, {"close": True})
    key = new_key("pay")
    _assert_unknown_answer(_charge(gw, "pay", key, headers={"X-Fake-Close": "after-read"}))
    rec = wait_state(gw, "pay", key, ("completed", "held", "released"), timeout=20)
    assert rec["state"] == "completed" and rec["provider_id"] == "eff_1", rec
    assert len(rec["trail"]) == 3, rec["trail"]
    assert "lookup 1: status 503" in rec["trail"][0], rec["trail"]
    assert "lookup 2:" in rec["trail"][1], rec["trail"]
    assert rec["trail"][2].endswith("lookup 3: found eff_1"), rec["trail"]
    assert reconcile_count(gw, "pay", "error") == 2
    assert reconcile_count(gw, "pay", "found") == 1
    r = _charge(gw, "pay", key)
    assert r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert prov.count() == 1


def test_answer_neither_found_nor_absent_is_an_error(prov, gws):
    gw = gws({"pay": lookup_upstream(prov, lookup_attempts=1)})
    lookup_mode(prov, body={"object": "list", "data": [{"no_id": True}]})
    key = new_key("pay")
    _assert_unknown_answer(_charge(gw, "pay", key, headers={"X-Fake-Close": "after-read"}))
    rec = wait_state(gw, "pay", key, ("held", "completed", "released"))
    assert rec["state"] == "held", rec
    assert "neither found nor absent" in rec["trail"][0], rec["trail"]
    assert "held after 1 lookups" in rec["error"], rec
    assert reconcile_count(gw, "pay", "held") == 1
    assert prov.count() == 1


def test_lookup_that_cannot_be_built_is_held_without_asking(prov, gws):
    gw = gws({"pay": upstream(prov, lookup="GET /v1/lookup?by=json:/ref&ref={json:/ref}",
                              lookup_found="json:/data/0/id", lookup_absent="json-empty:/data")})
    key = new_key("pay")
    r = gw.proxy("POST", "pay", "/charges", key=key, json={"amount": 1},
                 headers={"X-Fake-Close": "after-read"})
    _assert_unknown_answer(r)
    rec = wait_state(gw, "pay", key, ("held", "completed", "released"))
    assert rec["state"] == "held", rec
    assert "lookup impossible" in rec["error"] and "json:/ref" in rec["error"], rec
    assert lookups(prov) == []
    assert reconcile_count(gw, "pay", "held") == 1


def test_upstream_without_lookup_holds_unknown_at_once(prov, gws):
    gw = gws({"plain": upstream(prov), "pay": lookup_upstream(prov)})
    key = new_key("plain")
    _assert_unknown_answer(_charge(gw, "plain", key, headers={"X-Fake-Close": "after-read"}))
    rec = wait_state(gw, "plain", key, ("held", "completed", "released"), timeout=10)
    assert rec["state"] == "held", rec
    assert "no provider lookup" in rec["error"], rec
    assert rec["trail"] == [] and rec["lookups"] == 0, rec
    time.sleep(1.0)
    assert lookups(prov) == [], "an upstream without a lookup was looked up"
    assert all(reconcile_count(gw, "plain", res) == 0 for res in ("found", "absent", "error", "held"))
    r = _charge(gw, "plain", key)
    assert assert_problem(r, 409, "outcome_unknown")["state"] == "held"
    assert prov.count() == 1


def test_many_unknown_actions_each_settled_once(prov, gws):
    """More unknown actions than one claim takes (16): every one is settled, each
    looked up exactly once, half found and half absent."""
    gw = gws({"pay": lookup_upstream(prov)})
    keys = [new_key("m") for _ in range(24)]
    for i, k in enumerate(keys):
        close = "after-read" if i % 2 == 0 else "before-effect"
        _assert_unknown_answer(_charge(gw, "pay", k, headers={"X-Fake-Close": close}))
    for i, k in enumerate(keys):
        rec = wait_state(gw, "pay", k, ("completed", "released", "held"), timeout=30)
        assert rec["state"] == ("completed" if i % 2 == 0 else "released"), rec
    refs = [lk["ref"] for lk in lookups(prov)]
    assert sorted(refs) == sorted(keys), "each unknown action is looked up exactly once"
    assert reconcile_count(gw, "pay", "found") == 12
    assert reconcile_count(gw, "pay", "absent") == 12
    for k in keys:
        _charge(gw, "pay", k)
    assert prov.count() == 24  # 12 found (not resent) + 12 released (sent once now)


# --------------------------------------------------------------------------- native keys

def test_native_key_upstream_resends_and_the_provider_dedupes(native_prov, gws):
    gw = gws({"stripe": upstream(native_prov, forward_key_as="Idempotency-Key")})
    key = new_key("n")
    _assert_unknown_answer(_charge(gw, "stripe", key, headers={"X-Fake-Close": "after-read"}))
    assert native_prov.count() == 1

    # Held or not, the same key may be resent: the provider answers the first result.
    r = _charge(gw, "stripe", key)
    assert r.status_code == 200, describe(r)
    assert outcome(r) == "completed", describe(r)
    assert r.json()["id"] == "eff_1", describe(r)
    assert r.headers.get("Idempotent-Replayed") == "true", "the provider's native replay" + describe(r)
    st = native_prov.stats()
    assert st["count"] == 1 and st["native_replays"] == 1, st
    rec = action(gw, "stripe", key)
    assert rec["state"] == "completed" and rec["attempt"] == 2, rec

    r = _charge(gw, "stripe", key)
    assert outcome(r) == "replayed", describe(r)
    assert native_prov.stats()["native_replays"] == 1, "the gateway replayed without asking"
    assert native_prov.count() == 1
    assert all(e["idempotency_key"] == key for e in native_prov.requests_seen())


def test_native_key_upstream_resends_a_held_action(native_prov, gws):
    gw = gws({"stripe": upstream(native_prov, forward_key_as="Idempotency-Key")})
    key = new_key("n")
    _assert_unknown_answer(_charge(gw, "stripe", key, headers={"X-Fake-Close": "after-read"}))
    wait_state(gw, "stripe", key, "held", timeout=10)
    r = _charge(gw, "stripe", key)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert r.json()["id"] == "eff_1"
    assert native_prov.stats()["native_replays"] == 1
    assert native_prov.count() == 1


# --------------------------------------------------------------------------- SIGKILL mid-call

def _kill_mid_call(gw, prov, key, headers, wait_recorded):
    t, box = send_in_background(lambda: _charge(gw, "pay", key, headers=headers))
    deadline = time.monotonic() + 10
    if wait_recorded:
        while prov.count() < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert prov.count() == 1
    else:
        while time.monotonic() < deadline:
            r = gw.action("pay", key)
            if r.status_code == 200 and r.json()["state"] == "pending":
                break
            time.sleep(0.02)
        time.sleep(0.3)  # the call is on its way to the (stalling) provider
        assert prov.count() == 0
    gw.kill()
    t.join(15)
    assert "error" in box, f"the request got an answer from a killed gateway: {box}"
    gw.start()


def test_sigkill_mid_call_after_the_provider_acted_is_found(prov, gws):
    gw = gws({"pay": lookup_upstream(prov, lease="7s", timeout="2s")})
    key = new_key("k9")
    _kill_mid_call(gw, prov, key, {"X-Fake-Delay-Ms": "3000"}, wait_recorded=True)
    rec = wait_state(gw, "pay", key, ("completed", "released", "held"), timeout=20)
    assert rec["state"] == "completed" and rec["provider_id"] == "eff_1", rec
    assert rec["error"] == "lease expired", rec
    assert rec["trail"][-1].endswith("found eff_1"), rec
    r = _charge(gw, "pay", key)
    assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert r.json()["data"][0]["id"] == "eff_1"
    assert prov.count() == 1
    assert reconcile_count(gw, "pay", "found") == 1


def test_sigkill_mid_call_before_the_provider_acted_is_released(prov, gws):
    gw = gws({"pay": lookup_upstream(prov, lease="7s", timeout="2s")})
    key = new_key("k9")
    _kill_mid_call(gw, prov, key, {"X-Fake-Stall-Ms": "2500", "X-Fake-Close": "before-effect"},
                   wait_recorded=False)
    rec = wait_state(gw, "pay", key, ("completed", "released", "held"), timeout=20)
    assert rec["state"] == "released", rec
    r = _charge(gw, "pay", key)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    time.sleep(3)  # the stalled first request ends without an effect
    assert prov.count() == 1
    assert [e["seq"] for e in prov.effects()] == [1]
    assert reconcile_count(gw, "pay", "absent") == 1
    assert list_actions(gw, "pay")[0]["attempt"] == 2


# --------------------------------------------------------------------------- actions API rows

def _sdk_unknown(gw, scope, key, request):
    """An agent reserved through the actions API, called the provider with its SDK (here:
    through the proxy-less fake, by hand) and lost the answer."""
    r = gw.post("/v1/actions", json={"scope": scope, "key": key, "request": request})
    assert r.status_code == 201, describe(r)
    r = gw.post("/v1/actions/unknown", json={"scope": scope, "key": key, "token": r.json()["token"],
                                             "error": "sdk timeout"})
    assert r.status_code == 200, describe(r)


def test_actions_api_unknown_is_reconciled_by_key(prov, gws):
    gw = gws({"pay": upstream(prov, lookup="GET /v1/lookup?by=json:/ref&ref={key}",
                              lookup_found="json:/data/0/id", lookup_absent="json-empty:/data",
                              actions_api=True)})
    key = new_key("sdk")
    import requests as rq
    rq.post(prov.url + "/charges", json={"ref": key}, timeout=10).raise_for_status()  # the SDK's call
    _sdk_unknown(gw, "pay", key, {"ref": key, "amount": 1})
    rec = wait_state(gw, "pay", key, ("completed", "released", "held"))
    assert rec["state"] == "completed" and rec["provider_id"] == "eff_1", rec


def test_actions_api_unknown_is_reconciled_by_json_field(prov, gws):
    """{json:/ptr} in the lookup is filled "from the stored original request"; for an
    action reserved through the actions API that is its "request" object."""
    gw = gws({"pay": upstream(prov, lookup="GET /v1/lookup?by=json:/ref&ref={json:/ref}",
                              lookup_found="json:/data/0/id", lookup_absent="json-empty:/data",
                              actions_api=True)})
    key = new_key("sdk")
    ref = new_key("ref")
    import requests as rq
    rq.post(prov.url + "/charges", json={"ref": ref}, timeout=10).raise_for_status()
    _sdk_unknown(gw, "pay", key, {"ref": ref, "amount": 1})
    rec = wait_state(gw, "pay", key, ("completed", "released", "held"))
    assert rec["state"] == "completed", rec
    assert [lk["ref"] for lk in lookups(prov)] == [ref]
