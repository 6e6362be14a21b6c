"""The proxy, `ANY /v1/proxy/{upstream}/{path…}`, against docs/api.md: every row
of its table, the forwarded request and the replayed answer.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_proxy.py
"""
import base64
import json
import threading
import time

import pytest

from gateway import (Gateway, Provider, assert_problem, closed_port, describe, is_time, new_key,
                     outcome, require_serve)

MAX_BODY = 1024 * 1024


@pytest.fixture(scope="module")
def native_provider():
    p = Provider(native=True)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, native_provider, store_kind):
    require_serve()
    base = {
        "url": provider.url,
        "header": ["X-Injected: yes", "X-Api-Key: injected-secret"],
        "timeout": "10s",
        "key_required": True,
        "release_on": [429, 503],
        "unknown_on": [500, 502, 504],
        "max_response": "64KiB",
    }
    ups = {
        "demo": dict(base, on_mismatch="replay"),
        "strict": dict(base, on_mismatch="reject"),
        "open": dict(base, key_required=False),
        "reads": dict(base),
        "based": dict(base, url=provider.url + "/api/v2"),
        "native": dict(base, url=native_provider.url, forward_key_as="Idempotency-Key"),
        "dead": dict(base, url=f"http://127.0.0.1:{closed_port()}"),
        "slow": dict(base, timeout="1s", lease="10s"),
        "tiny": dict(base, max_response="1KiB"),
        "custom": dict(base, release_on=[418], unknown_on=[599]),
    }
    g = Gateway(tmp_path_factory.mktemp("proxy"), ups, server={"max_body": "1MiB"}, store_kind=store_kind)
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


@pytest.fixture(autouse=True)
def fresh(gw, provider, native_provider):
    provider.reset()
    native_provider.reset()
    yield
    assert gw.alive(), gw.death_note()


def post(gw, upstream, path="/charges", key=None, body=None, headers=None, **kw):
    if body is None:
        body = {"amount": 100, "currency": "eur"}
    if isinstance(body, (dict, list)):
        kw["json"] = body
    else:
        kw["data"] = body
    return gw.proxy("POST", upstream, path, key=key, headers=headers, **kw)


def record(gw, scope, key):
    r = gw.action(scope, key)
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_state(gw, scope, key, states, timeout=10):
    deadline = time.monotonic() + timeout
    rec = record(gw, scope, key)
    while rec["state"] not in states and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = record(gw, scope, key)
    return rec


# ----------------------------------------------------------------------------- rows: refusals

def test_unknown_upstream_404(gw, provider):
    r = post(gw, "nosuch", key=new_key())
    assert_problem(r, 404, "unknown_upstream")
    assert outcome(r) is None, describe(r)
    r = gw.proxy("GET", "nosuch", "/x")
    assert_problem(r, 404, "unknown_upstream")
    assert provider.count() == 0


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_unsafe_method_without_key_400_key_required(gw, provider, method):
    r = gw.proxy(method, "demo", "/charges", data=b'{"a":1}', headers={"Content-Type": "application/json"})
    assert_problem(r, 400, "key_required")
    assert outcome(r) is None, describe(r)
    assert provider.count() == 0


@pytest.mark.parametrize("bad", ["", "x" * 256, "ab\tc", "ab\x01c", "caf\xe9", "del\x7f"],
                         ids=["empty", "256-bytes", "tab", "ctrl", "latin1-high-byte", "DEL"])
def test_malformed_key_400_invalid_key(gw, provider, bad):
    r = post(gw, "demo", key=bad)
    assert_problem(r, 400, "invalid_key")
    assert outcome(r) is None, describe(r)
    assert provider.count() == 0


def test_key_of_255_printable_bytes_with_spaces_is_accepted(gw, provider):
    key = ("k y~!" + new_key()).ljust(255, "z")
    assert len(key) == 255
    r = post(gw, "demo", key=key, headers={"X-Fake-Body-Size": "100"})
    assert r.status_code == 200, describe(r)
    assert outcome(r) == "completed", describe(r)
    r2 = post(gw, "demo", key=key)
    assert r2.status_code == 200 and outcome(r2) == "replayed", describe(r2)
    assert provider.count() == 1


def test_body_over_max_body_413(gw, provider):
    r = post(gw, "demo", key=new_key(), body=b"a" * (MAX_BODY + 1),
             headers={"Content-Type": "application/octet-stream"})
    assert_problem(r, 413, "body_too_large")
    assert outcome(r) is None, describe(r)
    assert provider.count() == 0


def test_body_of_exactly_max_body_is_forwarded(gw, provider):
    key = new_key()
    r = post(gw, "demo", key=key, body=b"a" * MAX_BODY,
             headers={"Content-Type": "application/octet-stream", "X-Fake-Body-Size": "50"})
    assert r.status_code == 200, describe(r)
    eff = provider.effects()
    assert len(eff) == 1 and len(eff[0]["body"]) == MAX_BODY
    assert "expect" not in eff[0]["headers"], f"once added Expect upstream: {eff[0]['headers']}"


def test_no_headers_added_that_the_client_did_not_send(gw, provider):
    """Forwarded: the request's end-to-end headers plus the configured ones, nothing else."""
    # the client's own Host (one: a second is refused) is not the upstream's
    r = gw.raw("POST", "/v1/proxy/demo/charges", body=b"amount=1",
               headers={"Idempotency-Key": new_key(), "Host": f"localhost:{gw.port}"})
    assert r.status_code == 200, describe(r)
    h = provider.effects()[0]["headers"]
    extra = set(h) - {"host", "content-length", "x-injected", "x-api-key"}
    assert not extra, f"headers the client never sent went upstream: { {k: h[k] for k in extra} }"


# ----------------------------------------------------------------------------- rows: new key, replay

def test_new_key_forwards_records_and_answers(gw, provider):
    key = new_key()
    r = post(gw, "demo", "/v1/charges", key=key, body={"amount": 42})
    assert r.status_code == 200, describe(r)
    assert outcome(r) == "completed", describe(r)
    assert r.headers.get("Idempotent-Replayed") is None, describe(r)
    assert r.headers["X-Provider-Request"] == "1", describe(r)
    assert r.headers["Content-Type"].startswith("application/json"), describe(r)
    j = r.json()
    assert j["id"] == "eff_1"
    assert j["echo"]["path"] == "/v1/charges" and j["echo"]["method"] == "POST"
    assert json.loads(j["echo"]["body"]) == {"amount": 42}
    eff = provider.effects()
    assert len(eff) == 1
    rec = record(gw, "demo", key)
    assert rec["state"] == "completed", rec
    assert rec["scope"] == "demo" and rec["key"] == key and rec["attempt"] == 1, rec
    for t in ("created_at", "updated_at"):
        assert is_time(rec[t]), (t, rec)
    assert isinstance(rec["fingerprint"], str) and rec["fingerprint"], rec
    resp = rec["response"]
    assert resp is not None and resp["status"] == 200, rec
    assert resp["body"] == r.text, rec
    names = {h[0].lower(): h[1] for h in resp["headers"]}
    assert names.get("x-provider-request") == "1", rec
    assert names.get("content-type", "").startswith("application/json"), rec


def test_same_key_completed_replays_status_headers_body(gw, provider):
    key = new_key()
    r1 = post(gw, "demo", key=key, headers={"X-Fake-Status": "201", "X-Fake-Header": "Location: /charges/ch_1"})
    assert r1.status_code == 201 and outcome(r1) == "completed", describe(r1)
    for _ in range(3):
        r = post(gw, "demo", key=key)
        assert r.status_code == 201, describe(r)
        assert r.headers.get("Idempotent-Replayed") == "true", describe(r)
        assert outcome(r) == "replayed", describe(r)
        assert r.content == r1.content, describe(r)
        assert r.headers.get("X-Provider-Request") == r1.headers["X-Provider-Request"], describe(r)
        assert r.headers.get("Location") == "/charges/ch_1", describe(r)
        assert r.headers.get("Content-Type") == r1.headers["Content-Type"], describe(r)
        assert r.headers.get("Idempotency-Payload-Mismatch") is None, describe(r)
    assert provider.count() == 1


def test_a_4xx_not_in_release_on_is_completed_and_replayed(gw, provider):
    key = new_key()
    r1 = post(gw, "demo", key=key, headers={"X-Fake-Status": "422"})
    assert r1.status_code == 422 and outcome(r1) == "completed", describe(r1)
    r2 = post(gw, "demo", key=key)
    assert r2.status_code == 422 and outcome(r2) == "replayed" and r2.content == r1.content, describe(r2)
    assert provider.count() == 1


def test_binary_body_forwarded_and_binary_answer_replayed(gw, provider):
    key = new_key()
    payload = bytes(range(256)) * 4
    r1 = post(gw, "demo", key=key, body=payload,
              headers={"Content-Type": "application/octet-stream", "X-Fake-Echo-Body": "1"})
    assert r1.status_code == 200 and r1.content == payload, describe(r1)
    eff = provider.effects()
    assert base64.b64decode(eff[0]["body_base64"]) == payload
    r2 = post(gw, "demo", key=key, body=payload, headers={"Content-Type": "application/octet-stream"})
    assert r2.status_code == 200 and outcome(r2) == "replayed", describe(r2)
    assert r2.content == payload
    rec = record(gw, "demo", key)
    assert rec["response"].get("body") is None and base64.b64decode(rec["response"]["body_base64"]) == payload, rec
    assert provider.count() == 1


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_other_unsafe_methods_are_recorded(gw, provider, method):
    key = new_key()
    r1 = gw.proxy(method, "demo", "/things/1", key=key, json={"m": method})
    assert r1.status_code == 200 and outcome(r1) == "completed", describe(r1)
    r2 = gw.proxy(method, "demo", "/things/1", key=key, json={"m": method})
    assert r2.status_code == 200 and outcome(r2) == "replayed" and r2.content == r1.content, describe(r2)
    eff = provider.effects()
    assert [e["method"] for e in eff] == [method]


def test_different_keys_same_payload_are_two_effects(gw, provider):
    for _ in range(2):
        r = post(gw, "demo", key=new_key(), body={"same": True})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert provider.count() == 2


# ----------------------------------------------------------------------------- rows: mismatch

@pytest.mark.parametrize("change", ["body", "path", "method"])
def test_mismatch_replay_policy(gw, provider, change):
    key = new_key()
    r1 = post(gw, "demo", "/charges", key=key, body={"amount": 1})
    assert r1.status_code == 200, describe(r1)
    if change == "body":
        r2 = post(gw, "demo", "/charges", key=key, body={"amount": 2})
    elif change == "path":
        r2 = post(gw, "demo", "/refunds", key=key, body={"amount": 1})
    else:
        r2 = gw.proxy("PUT", "demo", "/charges", key=key, json={"amount": 1})
    assert r2.status_code == 200, describe(r2)
    assert r2.content == r1.content, describe(r2)
    assert r2.headers.get("Idempotency-Payload-Mismatch") == "true", describe(r2)
    assert r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert outcome(r2) == "replayed", describe(r2)
    assert provider.count() == 1


def test_mismatch_reject_policy_422(gw, provider):
    key = new_key()
    r1 = post(gw, "strict", key=key, body={"amount": 1})
    assert r1.status_code == 200 and outcome(r1) == "completed", describe(r1)
    r2 = post(gw, "strict", key=key, body={"amount": 2})
    assert_problem(r2, 422, "payload_mismatch")
    assert outcome(r2) == "replayed", describe(r2)
    # the same payload still replays
    r3 = post(gw, "strict", key=key, body={"amount": 1})
    assert r3.status_code == 200 and outcome(r3) == "replayed" and r3.content == r1.content, describe(r3)
    assert r3.headers.get("Idempotency-Payload-Mismatch") is None, describe(r3)
    assert provider.count() == 1


# ----------------------------------------------------------------------------- rows: in flight

def _background(fn):
    out = {}

    def run():
        try:
            out["r"] = fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out["e"] = e
        out["t"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_same_key_in_flight_409_with_retry_after(gw, provider):
    key = new_key()
    t, out = _background(lambda: post(gw, "demo", key=key, headers={"X-Fake-Delay-Ms": "2500"}))
    assert provider.wait_count(1) == 1
    r = post(gw, "demo", key=key)
    p = assert_problem(r, 409, "key_in_flight")
    assert r.headers.get("Retry-After") == "1", describe(r)
    assert outcome(r) == "in_flight", describe(r)
    assert p["code"] == "key_in_flight"
    t.join(20)
    assert "r" in out, out
    first = out["r"]
    assert first.status_code == 200 and outcome(first) == "completed", describe(first)
    r3 = post(gw, "demo", key=key)
    assert r3.status_code == 200 and outcome(r3) == "replayed" and r3.content == first.content, describe(r3)
    assert provider.count() == 1


def test_prefer_wait_gets_the_outcome(gw, provider):
    key = new_key()
    t, out = _background(lambda: post(gw, "demo", key=key, headers={"X-Fake-Delay-Ms": "1500"}))
    assert provider.wait_count(1) == 1
    t0 = time.monotonic()
    r = post(gw, "demo", key=key, headers={"Prefer": "wait=10"})
    done = time.monotonic()
    t.join(20)
    first = out["r"]
    assert first.status_code == 200, describe(first)
    assert r.status_code == 200, describe(r)
    assert r.content == first.content, describe(r)
    assert r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert outcome(r) == "replayed", describe(r)
    lag = done - out["t"]
    assert lag < 2, (f"the waiter got the outcome {lag:.1f} s after the first call was answered "
                     f"(first took {out['t'] - t0:.1f} s from the wait's start)")
    assert provider.count() == 1


def test_prefer_wait_on_an_outcome_that_turns_unknown_409(gw, provider):
    key = new_key()
    t, out = _background(lambda: post(gw, "demo", key=key, headers={"X-Fake-Delay-Ms": "1000",
                                                                     "X-Fake-Status": "500"}))
    assert provider.wait_count(1) == 1
    t0 = time.monotonic()
    r = post(gw, "demo", key=key, headers={"Prefer": "wait=10"})
    elapsed = time.monotonic() - t0
    t.join(20)
    assert out["r"].status_code == 500 and outcome(out["r"]) == "unknown", describe(out["r"])
    j = assert_problem(r, 409, "outcome_unknown")
    assert j.get("state") in ("unknown", "held") and outcome(r) == j["state"], describe(r)
    assert elapsed < 6, f"waited {elapsed:.1f} s although the outcome was known after 1 s"
    assert provider.count() == 1


def test_prefer_wait_times_out_with_409(gw, provider):
    key = new_key()
    t, out = _background(lambda: post(gw, "demo", key=key, headers={"X-Fake-Delay-Ms": "4000"}))
    assert provider.wait_count(1) == 1
    t0 = time.monotonic()
    r = post(gw, "demo", key=key, headers={"Prefer": "wait=1"})
    elapsed = time.monotonic() - t0
    assert_problem(r, 409, "key_in_flight")
    assert outcome(r) == "in_flight", describe(r)
    assert 0.8 <= elapsed < 3.5, f"waited {elapsed:.2f} s for Prefer: wait=1"
    t.join(20)
    assert out["r"].status_code == 200
    assert provider.count() == 1


# ----------------------------------------------------------------------------- rows: failures

def test_upstream_unreachable_502_released(gw, provider):
    key = new_key()
    r = post(gw, "dead", key=key)
    assert_problem(r, 502, "upstream_unreachable")
    assert outcome(r) == "released", describe(r)
    rec = record(gw, "dead", key)
    assert rec["state"] == "released", rec
    # the key is free: the next attempt is tried again (attempt 2)
    r2 = post(gw, "dead", key=key)
    assert_problem(r2, 502, "upstream_unreachable")
    assert outcome(r2) == "released", describe(r2)
    rec = record(gw, "dead", key)
    assert rec["attempt"] == 2, rec


def _assert_unknown_retry(gw, provider, upstream, key, effects):
    r = post(gw, upstream, key=key)
    j = assert_problem(r, 409, "outcome_unknown")
    assert j.get("state") in ("unknown", "held"), describe(r)
    assert isinstance(j.get("reason"), str), describe(r)
    assert outcome(r) == j["state"], describe(r)
    assert provider.count() == effects, "an unknown action was resent"


def test_upstream_timeout_504_unknown_never_resent(gw, provider):
    key = new_key()
    t0 = time.monotonic()
    r = post(gw, "slow", key=key, headers={"X-Fake-Delay-Ms": "4000"})
    elapsed = time.monotonic() - t0
    assert_problem(r, 504, "outcome_unknown")
    assert outcome(r) == "unknown", describe(r)
    assert elapsed < 3.5, f"timeout = 1s but the answer took {elapsed:.2f} s"
    rec = record(gw, "slow", key)
    assert rec["state"] in ("unknown", "held"), rec
    _assert_unknown_retry(gw, provider, "slow", key, 1)
    _assert_unknown_retry(gw, provider, "slow", key, 1)


@pytest.mark.parametrize("close", ["after-read", "mid-response"])
def test_reset_after_sending_504_unknown(gw, provider, close):
    key = new_key()
    r = post(gw, "demo", key=key, headers={"X-Fake-Close": close})
    assert_problem(r, 504, "outcome_unknown")
    assert outcome(r) == "unknown", describe(r)
    assert provider.count() == 1
    _assert_unknown_retry(gw, provider, "demo", key, 1)


def test_close_after_read_on_a_reused_upstream_connection_is_never_resent(gw, provider):
    """The upstream closes a kept-alive connection after reading the request (it may have
    acted on it). HTTP clients such as libcurl silently resend a request once when a reused
    connection dies before any answer; for once that is a second effect."""
    for i in range(3):
        provider.reset()
        warm = post(gw, "demo", key=new_key())  # leaves a kept-alive connection to the upstream
        assert warm.status_code == 200, describe(warm)
        key = new_key()
        r = post(gw, "demo", "/charges", key=key, body={"n": i}, headers={"X-Fake-Close": "after-read"})
        assert_problem(r, 504, "outcome_unknown")
        effects = [e for e in provider.effects() if e["body"] == json.dumps({"n": i})]
        assert len(effects) == 1, (f"round {i}: the upstream received the request {len(effects)} times "
                                   f"for one attempt (a transparent resend on a reused connection)")


@pytest.mark.parametrize("status", [429, 503])
def test_release_on_status_passes_through_and_frees_key(gw, provider, status):
    key = new_key()
    r = post(gw, "demo", key=key, headers={"X-Fake-Status": str(status)})
    assert r.status_code == status, describe(r)
    assert outcome(r) == "released", describe(r)
    assert r.json()["id"] == "eff_1", describe(r)  # the upstream's answer
    assert r.headers.get("X-Provider-Request") == "1", describe(r)
    assert record(gw, "demo", key)["state"] == "released"
    r2 = post(gw, "demo", key=key)
    assert r2.status_code == 200 and outcome(r2) == "completed", describe(r2)
    assert r2.json()["id"] == "eff_2"
    assert provider.count() == 2
    rec = record(gw, "demo", key)
    assert rec["state"] == "completed" and rec["attempt"] == 2, rec


@pytest.mark.parametrize("status", [500, 502, 504])
def test_unknown_on_status_passes_through_never_resent(gw, provider, status):
    key = new_key()
    r = post(gw, "demo", key=key, headers={"X-Fake-Status": str(status)})
    assert r.status_code == status, describe(r)
    assert outcome(r) == "unknown", describe(r)
    assert r.json()["id"] == "eff_1", describe(r)
    assert r.headers.get("X-Provider-Request") == "1", describe(r)
    _assert_unknown_retry(gw, provider, "demo", key, 1)


def test_release_on_and_unknown_on_are_configurable(gw, provider):
    k1, k2, k3 = new_key(), new_key(), new_key()
    r = post(gw, "custom", key=k1, headers={"X-Fake-Status": "418"})
    assert r.status_code == 418 and outcome(r) == "released", describe(r)
    r = post(gw, "custom", key=k2, headers={"X-Fake-Status": "429"})
    assert r.status_code == 429 and outcome(r) == "completed", describe(r)
    r = post(gw, "custom", key=k2)
    assert r.status_code == 429 and outcome(r) == "replayed", describe(r)
    r = post(gw, "custom", key=k3, headers={"X-Fake-Status": "500"})
    assert r.status_code == 500 and outcome(r) == "completed", describe(r)
    assert provider.count() == 3


def test_response_too_large_502_unknown(gw, provider):
    key = new_key()
    r = post(gw, "tiny", key=key, headers={"X-Fake-Body-Size": "4096"})
    assert_problem(r, 502, "response_too_large")
    assert outcome(r) == "unknown", describe(r)
    assert provider.count() == 1
    _assert_unknown_retry(gw, provider, "tiny", key, 1)
    ok = post(gw, "tiny", key=new_key(), headers={"X-Fake-Body-Size": "1000"})
    assert ok.status_code == 200 and len(ok.content) == 1000, describe(ok)


def test_resolved_by_hand_completed_replays_the_resolution(gw, provider):
    key = new_key()
    r = post(gw, "demo", key=key, headers={"X-Fake-Close": "after-read"})
    assert r.status_code == 504, describe(r)
    res = gw.post(f"/v1/actions/demo/{key}/resolve",
                  json={"outcome": "completed", "provider_id": "ch_123", "note": "seen in dashboard"})
    assert res.status_code == 200, describe(res)
    assert res.json()["state"] == "completed"
    r2 = post(gw, "demo", key=key)
    assert r2.status_code == 200, describe(r2)
    assert r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert outcome(r2) == "replayed", describe(r2)
    j = r2.json()
    assert j.get("state") == "completed" and j.get("provider_id") == "ch_123" \
        and j.get("note") == "seen in dashboard", describe(r2)
    assert provider.count() == 1


def test_resolved_by_hand_released_frees_the_key(gw, provider):
    key = new_key()
    r = post(gw, "demo", key=key, headers={"X-Fake-Status": "500"})
    assert r.status_code == 500 and outcome(r) == "unknown", describe(r)
    res = gw.post(f"/v1/actions/demo/{key}/resolve", json={"outcome": "released", "note": "not in dashboard"})
    assert res.status_code == 200 and res.json()["state"] == "released", describe(res)
    r2 = post(gw, "demo", key=key)
    assert r2.status_code == 200 and outcome(r2) == "completed", describe(r2)
    assert provider.count() == 2


# ----------------------------------------------------------------------------- native dedupe

def test_forward_key_as_sends_the_key(gw, native_provider):
    key = new_key()
    r = post(gw, "native", key=key)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    eff = native_provider.effects()
    assert len(eff) == 1 and eff[0]["idempotency_key"] == key, eff


def test_forward_key_as_unknown_is_tried_again_and_provider_dedupes(gw, native_provider):
    key = new_key()
    r1 = post(gw, "native", key=key, headers={"X-Fake-Close": "after-read"})
    assert_problem(r1, 504, "outcome_unknown")
    assert outcome(r1) == "unknown", describe(r1)
    assert native_provider.count() == 1
    r2 = post(gw, "native", key=key)
    assert r2.status_code == 200, describe(r2)
    assert r2.json()["id"] == "eff_1", describe(r2)  # the original result, from the provider
    assert outcome(r2) == "completed", describe(r2)
    assert native_provider.count() == 1
    r3 = post(gw, "native", key=key)
    assert r3.status_code == 200 and outcome(r3) == "replayed" and r3.json()["id"] == "eff_1", describe(r3)
    assert len(native_provider.requests_seen()) == 2, "a completed action was sent again"
    assert record(gw, "native", key)["state"] == "completed"


def test_without_forward_key_as_the_key_is_not_forwarded(gw, provider):
    key = new_key()
    r = post(gw, "demo", key=key)
    assert r.status_code == 200, describe(r)
    eff = provider.effects()[0]
    assert "idempotency-key" not in eff["headers"], eff["headers"]


# ----------------------------------------------------------------------------- forwarding

def test_forwarded_request_path_query_and_headers(gw, provider):
    key = new_key()
    body = b'{"to":"+3312345678","text":"ships Tuesday"}'
    r = gw.proxy("POST", "demo", "/v1/messages/send?dry=0&tag=a%20b", key=key, data=body, headers={
        "Content-Type": "application/json",
        "X-Custom": "c1",
        "X-Injected": "no",       # replaced by the configured header
        "Prefer": "wait=5",       # removed
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Proxy-Authorization": "Basic Zm9vOmJhcg==",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "hop",
    })
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    eff = provider.effects()
    assert len(eff) == 1
    e = eff[0]
    h = e["headers"]
    assert e["method"] == "POST" and e["path"] == "/v1/messages/send", e
    assert e["query"] == "dry=0&tag=a%20b", e
    assert e["body"] == body.decode()
    assert h.get("content-type") == "application/json", h
    assert h.get("x-custom") == "c1", h
    assert h.get("x-injected") == "yes", f"configured header must replace the client's: {h}"
    assert h.get("x-api-key") == "injected-secret", h
    assert h.get("content-length") == str(len(body)), h
    assert h.get("host") == f"127.0.0.1:{provider.port}", f"Host must be the upstream's: {h}"
    for gone in ("idempotency-key", "prefer", "keep-alive", "te", "proxy-authorization", "x-hop"):
        assert gone not in h, f"{gone} forwarded upstream: {h}"


def test_stored_request_keeps_client_headers_but_not_credentials_or_injected(gw, provider):
    """The request stored with the reservation (for lookups and humans): method,
    target, the client's headers without Authorization or Cookie and without the
    configured (secret) headers, and the body. It is built only when the row is
    written (once_reserve_req.request_fn), from copies of the headers; a replay
    leaves it as the first request stored it."""
    if gw.store_kind != "sqlite":
        pytest.skip("reads the SQLite file directly")
    import sqlite3
    key = new_key()
    body = b'{"to":"+3312345678"}'
    r = gw.proxy("POST", "demo", "/v1/messages?x=1", key=key, data=body, headers={
        "Content-Type": "application/json", "X-Custom": "c1", "Authorization": "Bearer client-secret",
        "Cookie": "session=s1", "X-Api-Key": "client-value",
        "X-Latin": "caf\xe9"})  # not UTF-8: forwarded, not stored (and no 500)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    r = gw.proxy("POST", "demo", "/v1/messages?x=1", key=key, data=b'{"to":"other"}',
                 headers={"Content-Type": "application/json", "X-Custom": "c2"})
    assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
    db = sqlite3.connect(f"file:{gw.workdir / 'once.db'}?mode=ro", uri=True)
    try:
        (raw,) = db.execute("SELECT request FROM actions WHERE scope = 'demo' AND key = ?", (key,)).fetchone()
    finally:
        db.close()
    stored = json.loads(raw)
    assert stored["method"] == "POST" and stored["target"] == "/v1/messages?x=1", stored
    assert stored["body"] == body.decode(), stored
    names = {n.lower(): v for n, v in stored["headers"]}
    assert names.get("x-custom") == "c1", stored
    assert names.get("content-type") == "application/json", stored
    assert "authorization" not in names and "cookie" not in names, stored
    assert "x-latin" not in names, stored
    assert provider.effects()[0]["headers"].get("x-latin") is not None, "the header was not forwarded"
    assert "x-injected" not in names, f"a configured header was stored: {stored}"
    assert names.get("x-api-key") is None, f"the configured X-Api-Key replaces the client's and is not stored: {stored}"


def test_upstream_url_with_a_base_path(gw, provider):
    r = post(gw, "based", "/charges/ch_1/capture", key=new_key())
    assert r.status_code == 200, describe(r)
    assert provider.effects()[0]["path"] == "/api/v2/charges/ch_1/capture"


def test_get_without_key_passes_through_untouched(gw, provider):
    before = gw.get("/v1/actions?scope=reads&limit=1000").json()["items"]
    r = gw.proxy("GET", "reads", "/v1/balance?currency=eur")
    assert r.status_code == 200, describe(r)
    assert outcome(r) is None, describe(r)
    assert r.json()["echo"]["query"] == "currency=eur"
    r = gw.proxy("GET", "reads", "/v1/balance?currency=eur")
    assert r.status_code == 200 and outcome(r) is None, describe(r)
    seen = provider.requests_seen()
    assert [x["method"] for x in seen] == ["GET", "GET"], seen
    assert seen[0]["headers"].get("x-injected") == "yes"
    after = gw.get("/v1/actions?scope=reads&limit=1000").json()["items"]
    assert len(after) == len(before), "a GET without a key touched the ledger"


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS"])
def test_head_and_options_without_key_pass_through(gw, provider, method):
    r = gw.proxy(method, "reads", "/v1/balance")
    assert r.status_code == 200, describe(r)
    assert outcome(r) is None, describe(r)
    assert [x["method"] for x in provider.requests_seen()] == [method]


def test_get_with_key_is_recorded_and_replayed(gw, provider):
    key = new_key()
    r1 = gw.proxy("GET", "reads", "/v1/report", key=key)
    assert r1.status_code == 200 and outcome(r1) == "completed", describe(r1)
    r2 = gw.proxy("GET", "reads", "/v1/report", key=key)
    assert r2.status_code == 200 and outcome(r2) == "replayed" and r2.content == r1.content, describe(r2)
    assert len(provider.requests_seen()) == 1


def test_key_not_required_upstream_passes_unsafe_methods_through(gw, provider):
    for _ in range(2):
        r = post(gw, "open", key=None)
        assert r.status_code == 200, describe(r)
        assert outcome(r) is None, describe(r)
    assert provider.count() == 2
    key = new_key()
    r1 = post(gw, "open", key=key)
    r2 = post(gw, "open", key=key)
    assert outcome(r1) == "completed" and outcome(r2) == "replayed", describe(r2)
    assert provider.count() == 3
