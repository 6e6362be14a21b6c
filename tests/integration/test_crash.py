"""SIGKILL of the gateway mid-call: one intent, one effect.

- killed during a slow upstream call, restarted on the same store: the retry
  is never resent; after the lease (+ the loop interval) the action is held
  and the retry gets 409 outcome_unknown; `once resolve --completed` then lets
  the retry replay;
- the same with an upstream that dedupes natively on the forwarded key: the
  retry is sent again and the provider answers the original result;
- killed right after an answer: the answer was recorded before it was sent.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_crash.py
"""
import json
import threading
import time

import pytest
import requests

from gateway import Gateway, Provider, assert_problem, describe, new_key, outcome, require_serve

LEASE_S = 3
LOOP_S = 0.5


@pytest.fixture
def provider():
    p = Provider()
    yield p
    p.stop()


@pytest.fixture
def native_provider():
    p = Provider(native=True)
    yield p
    p.stop()


@pytest.fixture
def gw(tmp_path, provider, native_provider, store_kind):
    require_serve()
    ups = {
        "demo": {"url": provider.url, "timeout": "2s", "lease": f"{LEASE_S}s"},
        "native": {"url": native_provider.url, "timeout": "2s", "lease": f"{LEASE_S}s",
                   "forward_key_as": "Idempotency-Key"},
    }
    g = Gateway(tmp_path / "gw", ups, server={"loop_interval": f"{int(LOOP_S * 1000)}ms"},
                store_kind=store_kind)
    g.start()
    yield g
    if g.alive():
        g.stop()
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


def fire(gw, upstream, key, headers, body=None):
    """Sends the call in the background; the gateway will die under it."""
    out = {}

    def run():
        try:
            out["r"] = gw.proxy("POST", upstream, "/charges", key=key, json=body or {"amount": 500},
                                headers=headers, timeout=30)
        except requests.RequestException as e:
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def state_of(gw, scope, key):
    r = gw.action(scope, key)
    assert r.status_code == 200, describe(r)
    return r.json()


@pytest.mark.parametrize("fault", [{"X-Fake-Hang": "1"}, {"X-Fake-Delay-Ms": "8000"}], ids=["hang", "slow"])
def test_sigkill_mid_call_then_held_never_resent_then_resolve(gw, provider, fault):
    key = new_key("crash")
    t0 = time.monotonic()
    t, out = fire(gw, "demo", key, fault)
    assert provider.wait_count(1) == 1, "the call never reached the provider"
    gw.kill()
    t.join(10)
    assert "r" not in out or out["r"].status_code != 200, "answered 200 although killed mid-call"

    gw.start()
    # at once after the restart: the lease may still run (409 key_in_flight) or be over
    r = gw.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    assert r.status_code == 409, describe(r)
    assert r.json()["code"] in ("key_in_flight", "outcome_unknown"), describe(r)
    assert provider.count() == 1, "resent after the crash"

    # after the lease + the loop interval: held
    deadline = t0 + LEASE_S + LOOP_S + 10
    rec = state_of(gw, "demo", key)
    while rec["state"] != "held" and time.monotonic() < deadline:
        time.sleep(0.1)
        rec = state_of(gw, "demo", key)
    assert rec["state"] == "held", f"lease {LEASE_S}s, loop {LOOP_S}s; still {rec}"
    assert rec["attempt"] == 1, rec
    r = gw.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    j = assert_problem(r, 409, "outcome_unknown")
    assert j["state"] == "held", j
    assert isinstance(j.get("reason"), str) and j["reason"], j
    assert outcome(r) == "held", describe(r)
    time.sleep(1)
    assert provider.count() == 1, "an action of a killed gateway was resent"

    # the CLI shows it, from the store, while the server runs
    show = gw.cli("show", "demo", key, "--json")
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["state"] == "held", show.stdout
    ls = gw.cli("ls", "--status", "held", "--json")
    assert ls.returncode == 0, ls.stderr
    assert key in ls.stdout, ls.stdout

    res = gw.cli("resolve", "demo", key, "--completed", "--provider-id", "eff_1", "--note", "seen at provider")
    assert res.returncode == 0, (res.stdout, res.stderr)
    r = gw.proxy("POST", "demo", "/charges", key=key, json={"amount": 500})
    assert r.status_code == 200, describe(r)
    assert r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert outcome(r) == "replayed", describe(r)
    j = r.json()
    assert j.get("state") == "completed" and j.get("provider_id") == "eff_1" \
        and j.get("note") == "seen at provider", j
    assert provider.count() == 1


def test_sigkill_mid_call_native_dedupe_retries_safely(gw, native_provider):
    key = new_key("crash-native")
    t, out = fire(gw, "native", key, {"X-Fake-Hang": "1"})
    assert native_provider.wait_count(1) == 1
    gw.kill()
    t.join(10)
    gw.start()
    deadline = time.monotonic() + LEASE_S + LOOP_S + 10
    r = None
    while time.monotonic() < deadline:
        r = gw.proxy("POST", "native", "/charges", key=key, json={"amount": 500})
        if r.status_code == 200:
            break
        assert r.status_code == 409 and r.json()["code"] == "key_in_flight", describe(r)
        time.sleep(0.2)
    assert r.status_code == 200, describe(r)
    assert r.json()["id"] == "eff_1", describe(r)  # the provider's original result
    assert native_provider.count() == 1
    r2 = gw.proxy("POST", "native", "/charges", key=key, json={"amount": 500})
    assert r2.status_code == 200 and outcome(r2) == "replayed" and r2.content == r.content, describe(r2)
    assert state_of(gw, "native", key)["state"] == "completed"


def test_sigkill_right_after_answers_keeps_them(gw, provider):
    keys = [new_key("done") for _ in range(20)]
    answers = {}
    for k in keys:
        r = gw.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200 and outcome(r) == "completed", describe(r)
        answers[k] = r.content
    gw.kill()
    gw.start()
    for k in keys:
        r = gw.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        assert r.status_code == 200 and outcome(r) == "replayed" and r.content == answers[k], describe(r)
    assert provider.count() == 20


def test_sigkill_under_load_one_effect_per_key(gw, provider):
    """Kill while many calls are in flight at different phases; after restart and the lease,
    every key is completed or held, never resent, never lost."""
    keys = [new_key("load") for _ in range(40)]
    threads = []
    for i, k in enumerate(keys):
        delay = str((i % 8) * 150)
        threads.append(fire(gw, "demo", k, {"X-Fake-Delay-Ms": delay}, body={"k": k}))
        time.sleep(0.01)
    time.sleep(0.4)
    gw.kill()
    for t, _ in threads:
        t.join(10)
    answered = {k: out["r"] for k, (t, out) in zip(keys, threads) if "r" in out}
    gw.start()
    time.sleep(LEASE_S + LOOP_S + 1)
    effects_before = provider.count()
    per_key = {}
    for e in provider.effects():
        k = json.loads(e["body"])["k"]
        per_key[k] = per_key.get(k, 0) + 1
    assert all(n == 1 for n in per_key.values()), f"a key reached the provider twice: {per_key}"
    for k in keys:
        deadline = time.monotonic() + 10
        r = gw.action("demo", k)
        while r.status_code == 200 and r.json()["state"] == "pending" and time.monotonic() < deadline:
            time.sleep(0.1)
            r = gw.action("demo", k)
        if r.status_code == 404:
            # never reserved durably: then it must not have been sent or answered
            assert k not in per_key, f"{k} reached the provider but has no row (reserve first)"
            assert k not in answered or answered[k].status_code != 200, f"{k} was answered 200 but has no row"
            continue
        assert r.status_code == 200, describe(r)
        st = r.json()["state"]
        assert st in ("completed", "held"), (k, r.json())
        if k in answered and answered[k].status_code == 200:
            assert st == "completed", f"{k} answered 200 before the kill but is {st} after"
        if st == "completed":
            assert per_key.get(k) == 1, f"{k} completed without an effect"
        again = gw.proxy("POST", "demo", "/charges", key=k, json={"k": k})
        if st == "completed":
            assert again.status_code == 200 and outcome(again) == "replayed", describe(again)
        else:
            assert_problem(again, 409, "outcome_unknown")
    assert provider.count() == effects_before, "something was resent after the restart"
