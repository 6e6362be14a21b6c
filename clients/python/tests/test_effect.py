"""Once.effect against the real `once serve`: one intent, one effect, whatever
the retries (sequential, threads, processes, a process killed mid-effect);
NotDone releases; other exceptions leave the action unknown; in flight waits,
then InFlight; the lease is renewed while the effect runs.

Run: /usr/bin/python3 -m pytest -q clients/python/tests/test_effect.py
"""
import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import AGENT_TOKEN, LEASE_S, PACKAGE_ROOT, new_scope, wait_state
from once_client import (Held, InFlight, NotDone, Once, OutcomeUnknown, intent_key)


@pytest.fixture
def once(gw):
    return Once(gw.url, AGENT_TOKEN)


def test_retries_make_one_effect_and_replay_the_result(once, effects):
    scope, run = new_scope(), uuid.uuid4().hex
    calls = []

    @once.effect(scope=scope, key=lambda to, text: intent_key(run, "reply", to, text))
    def reply(to, text):
        calls.append(1)
        return {"provider_id": effects.perform(run, {"to": to}), "to": to, "n": (1, 2)}

    first = reply("a@example.com", "hello")
    again = [reply("a@example.com", "hello") for _ in range(4)]
    assert len(calls) == 1 and effects.count(run) == 1
    # The first answer is the recorded form too (the tuple became a list), as every replay's.
    assert first == {"provider_id": first["provider_id"], "to": "a@example.com", "n": [1, 2]}
    assert all(a == first for a in again)
    # Another intent is another effect.
    reply("b@example.com", "hello")
    assert effects.count(run) == 2
    rec = once.get(scope, intent_key(run, "reply", "a@example.com", "hello"))
    assert rec["state"] == "completed" and rec["attempt"] == 1 and rec["agent"] == "bot", rec
    assert json.loads(rec["response"]["body"]) == first


def test_default_key_is_the_intent_of_name_and_arguments(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    @once.effect(scope=scope)
    def charge(customer, amount, currency="eur"):
        effects.perform(tag)
        return amount

    assert charge("cus_1", 5) == 5 and charge("cus_1", 5) == 5
    assert effects.count(tag) == 1
    key = intent_key(f"{charge.__module__}.{charge.__qualname__}", ["cus_1", 5], {})
    assert once.get(scope, key)["state"] == "completed"
    with pytest.raises(TypeError, match="pass key="):
        charge(object(), 1)
    assert effects.count(tag) == 1


def test_threads_retrying_one_intent_make_one_effect(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    ran = []

    @once.effect(scope=scope, key=intent_key(tag, "send"), wait=30)
    def send():
        ran.append(threading.get_ident())
        effects.perform(tag)
        time.sleep(0.5)  # the others arrive while this one holds the key
        return {"sent": tag}

    results, errors = [], []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        try:
            results.append(send())
        except Exception as e:  # noqa: BLE001 - any error fails the test below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(ran) == 1 and effects.count(tag) == 1
    assert results == [{"sent": tag}] * 8


WORKER = r"""
import json, sys, urllib.request
sys.path.insert(0, sys.argv[1])
from once_client import Once
url, token, scope, key, provider, tag = sys.argv[2:8]
once = Once(url, token)

@once.effect(scope=scope, key=key, wait=30)
def act():
    req = urllib.request.Request(f"{provider}/effects/{tag}", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        pid = json.loads(r.read())["id"]
    print("EFFECT", flush=True)
    if len(sys.argv) > 8 and sys.argv[8] == "hang":
        import time
        time.sleep(3600)
    return {"provider_id": pid}

print(json.dumps(act()), flush=True)
"""


def _worker(gw, scope, key, provider, tag, *extra):
    return subprocess.Popen([sys.executable, "-c", WORKER, str(PACKAGE_ROOT), gw.url, AGENT_TOKEN, scope, key,
                             provider.url, tag, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_processes_retrying_one_intent_make_one_effect(gw, provider, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    key = intent_key(tag, "proc")
    procs = [_worker(gw, scope, key, provider, tag) for _ in range(4)]
    outs, ran = [], 0
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        lines = out.strip().splitlines()
        ran += lines.count("EFFECT")
        outs.append(json.loads(lines[-1]))
    assert ran == 1 and effects.count(tag) == 1
    assert len({o["provider_id"] for o in outs}) == 1, outs


def test_process_killed_between_effect_and_completion(gw, provider, effects):
    """SIGKILL after the effect, before complete: the action stays pending while
    the lease runs, then becomes unknown/held; the next attempt never runs it again."""
    scope, tag = new_scope(), uuid.uuid4().hex
    key = intent_key(tag, "crash")
    p = _worker(gw, scope, key, provider, tag, "hang")
    try:
        line = p.stdout.readline()
        assert line.strip() == "EFFECT", p.stderr.read()
        assert effects.count(tag) == 1
        once = Once(gw.url, AGENT_TOKEN)
        assert once.get(scope, key)["state"] == "pending"
        # While it lives, a retry sees it in flight.
        with pytest.raises(InFlight):
            Once(gw.url, AGENT_TOKEN).effect(scope=scope, key=key)(lambda: effects.perform(tag))()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    # The client's lease (10 s by default) runs out: unknown, then held.
    rec = wait_state(once, scope, key, {"unknown", "held"}, timeout=30)
    assert rec["attempt"] == 1

    ran = []

    @once.effect(scope=scope, key=key, wait=5)
    def retry():
        ran.append(1)
        effects.perform(tag)

    with pytest.raises(OutcomeUnknown) as info:
        retry()
    assert not ran and effects.count(tag) == 1
    assert info.value.state in ("unknown", "held") and info.value.record["key"] == key
    rec = wait_state(once, scope, key, {"held"}, timeout=30)
    with pytest.raises(Held):
        retry()
    assert effects.count(tag) == 1


def test_not_done_releases_the_key(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    attempts = []

    @once.effect(scope=scope, key=intent_key(tag))
    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise NotDone("the provider refused before acting")
        return effects.perform(tag)

    with pytest.raises(NotDone):
        flaky()
    rec = once.get(scope, intent_key(tag))
    assert rec["state"] == "released" and "refused before acting" in rec["error"], rec
    assert effects.count(tag) == 0
    flaky()
    assert effects.count(tag) == 1 and len(attempts) == 2
    assert once.get(scope, intent_key(tag))["attempt"] == 2


def test_other_exception_marks_unknown_and_is_raised(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    class Timeout(Exception):
        pass

    ran = []

    @once.effect(scope=scope, key=tag)
    def pay():
        ran.append(1)
        effects.perform(tag)
        raise Timeout("no answer from the bank")

    with pytest.raises(Timeout):
        pay()
    rec = once.get(scope, tag)
    assert rec["state"] in ("unknown", "held") and "Timeout: no answer from the bank" in rec["error"], rec
    with pytest.raises(OutcomeUnknown) as info:
        pay()
    assert len(ran) == 1 and effects.count(tag) == 1
    assert info.value.code == "outcome_unknown" and info.value.status == 409
    assert info.value.record["error"].startswith("Timeout"), info.value.record


def test_unserialisable_result_marks_unknown(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    @once.effect(scope=scope, key=tag)
    def f():
        effects.perform(tag)
        return object()

    with pytest.raises(TypeError, match="JSON"):
        f()
    assert once.get(scope, tag)["state"] in ("unknown", "held")
    with pytest.raises(OutcomeUnknown):
        f()
    assert effects.count(tag) == 1


def test_in_flight_waits_then_raises(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    started, release = threading.Event(), threading.Event()

    @once.effect(scope=scope, key=tag, wait=0.6)
    def slow():
        started.set()
        effects.perform(tag)
        release.wait(30)
        return "done"

    holder_result = []
    t = threading.Thread(target=lambda: holder_result.append(slow()))
    t.start()
    assert started.wait(10)
    t0 = time.monotonic()
    with pytest.raises(InFlight) as info:
        slow()
    waited = time.monotonic() - t0
    assert waited >= 0.6, waited
    assert info.value.record["state"] == "pending" and info.value.lease_expires_at
    assert info.value.status == 409 and info.value.code == "key_in_flight"

    # A caller that waits long enough gets the holder's result, without running.
    waiter = once.effect(scope=scope, key=tag, wait=30)(lambda: effects.perform(tag))
    got = []
    w = threading.Thread(target=lambda: got.append(waiter()))
    w.start()
    time.sleep(0.3)
    release.set()
    t.join(30)
    w.join(30)
    assert holder_result == ["done"] and got == ["done"]
    assert effects.count(tag) == 1


def test_lease_is_renewed_while_the_effect_runs(gw, effects):
    once = Once(gw.url, AGENT_TOKEN, lease=LEASE_S)
    scope, tag = new_scope(), uuid.uuid4().hex
    seen = []

    with once.effect(scope=scope, key=tag) as e:
        assert not e.done
        effects.perform(tag)
        first = once.get(scope, tag)["lease_expires_at"]
        time.sleep(4 * LEASE_S)  # four leases: without renewals the action would be unknown
        rec = once.get(scope, tag)
        seen.append(rec["state"])
        assert rec["lease_expires_at"] > first
        assert e.renew_error is None
        e.complete({"ok": True})
    assert seen == ["pending"]
    rec = once.get(scope, tag)
    assert rec["state"] == "completed" and rec["attempt"] == 1, rec
    assert effects.count(tag) == 1


def test_context_manager(once, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    def send():
        with once.effect(scope=scope, key=tag, provider_id=lambda r: r["id"]) as e:
            if e.done:
                return e.result, True
            e.complete({"id": effects.perform(tag)})
        return e.result, False

    r1, replayed1 = send()
    r2, replayed2 = send()
    assert (replayed1, replayed2) == (False, True) and r1 == r2
    assert effects.count(tag) == 1
    assert once.get(scope, tag)["provider_id"] == r1["id"]

    # Leaving the block without complete() records None.
    k2 = tag + "-none"
    with once.effect(scope=scope, key=k2) as e:
        effects.perform(tag)
    assert once.get(scope, k2)["state"] == "completed"
    with once.effect(scope=scope, key=k2) as e:
        assert e.done and e.replayed and e.result is None

    # NotDone in the block releases; release() too.
    k3 = tag + "-released"
    with pytest.raises(NotDone):
        with once.effect(scope=scope, key=k3):
            raise NotDone("validation failed")
    assert once.get(scope, k3)["state"] == "released"
    with once.effect(scope=scope, key=k3) as e:
        assert not e.done and e.attempt == 2
        e.release("changed my mind")
    assert once.get(scope, k3)["state"] == "released"

    # Any other exception: unknown.
    k4 = tag + "-unknown"
    with pytest.raises(ZeroDivisionError):
        with once.effect(scope=scope, key=k4):
            1 / 0
    assert once.get(scope, k4)["state"] in ("unknown", "held")

    # One with block per effect() call; complete twice is refused.
    eff = once.effect(scope=scope, key=tag + "-twice")
    with eff as e:
        e.complete(1)
        with pytest.raises(RuntimeError):
            e.complete(2)
    assert effects.count(tag) == 2


def test_failing_provider_id_marks_unknown_and_stops_renewing(gw, effects):
    once = Once(gw.url, AGENT_TOKEN, lease=LEASE_S)
    scope, tag = new_scope(), uuid.uuid4().hex

    @once.effect(scope=scope, key=tag, provider_id=lambda r: r["id"])
    def f():
        effects.perform(tag)
        return {"no_id": True}

    with pytest.raises(KeyError):
        f()
    rec = once.get(scope, tag)
    assert rec["state"] in ("unknown", "held") and "KeyError" in rec["error"], rec
    # No renewal thread is left behind for the settled attempt.
    time.sleep(LEASE_S)
    assert not [t for t in threading.enumerate() if t.name == f"once-renew {scope}/{tag}"]
