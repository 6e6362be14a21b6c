"""`Prefer: wait=N` on `POST /v1/actions` (docs/api.md, "Actions API"): a reservation that
finds its key in flight (or waiting for approval) waits — parked, no thread held — until the
key settles or N seconds pass, then is answered as a fresh reservation would be at that
moment: the recorded result after a completion, a reservation of its own after a release,
409 `outcome_unknown` after an unknown, 409 `key_in_flight` (+ Retry-After) at the deadline;
on a key awaiting approval, the decision and the outcome instead of a 202.

Every waiting test checks the order of events, not durations: the waiter is still waiting
after the holder reserved, and its answer is the one that only exists once the holder
settled. On both stores (store_kind).

Run: ONCE_BIN=build/asan/once ONCE_TEST_PG_URL=... /usr/bin/python3 -m pytest -q tests/integration/test_actions_wait.py
"""
import threading
import time
import uuid

import pytest

from gateway import Gateway, assert_problem, describe, new_key, require_serve

WAIT_TIMEOUT_S = 60   # an HTTP timeout far past every Prefer: wait here


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    require_serve()
    # "demo": an upstream whose POST /charges waits for a person, open to the actions API, so
    # that an agent's reservation can meet a key awaiting approval.
    g = Gateway(tmp_path_factory.mktemp("actions-wait"),
                {"demo": {"url": provider.url, "approve": "POST /charges*", "actions_api": True}},
                server={"loop_interval": "200ms"}, store_kind=store_kind)
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


@pytest.fixture(autouse=True)
def alive(gw):
    yield
    assert gw.alive(), gw.death_note()


def scope():
    return "agent-" + uuid.uuid4().hex[:10]


def reserve(gw, s, k, wait=None, **extra):
    headers = {"Prefer": wait} if wait is not None else None
    return gw.post("/v1/actions", json=dict({"scope": s, "key": k}, **extra), headers=headers,
                   timeout=WAIT_TIMEOUT_S)


def holder(gw, s, k):
    r = reserve(gw, s, k)
    assert r.status_code == 201, describe(r)
    return r.json()["token"]


def finish(gw, what, s, k, token, **extra):
    r = gw.post(f"/v1/actions/{what}", json=dict({"scope": s, "key": k, "token": token}, **extra))
    assert r.status_code == 200, describe(r)
    return r


class Waiter:
    """A reservation with Prefer: wait on a thread of its own; `at` is when its answer came."""

    def __init__(self, gw, s, k, wait="wait=30", **extra):
        self.r = None
        self.at = None
        self.t = threading.Thread(target=self._run, args=(gw, s, k, wait, extra), daemon=True)
        self.t.start()

    def _run(self, gw, s, k, wait, extra):
        try:
            self.r = reserve(gw, s, k, wait=wait, **extra)
        finally:
            self.at = time.monotonic()

    def assert_waiting(self, settle_s=1.0):
        """Still waiting after settle_s: it did not answer 409 (or anything) at once."""
        self.t.join(settle_s)
        assert self.t.is_alive(), f"answered before the key settled: {describe(self.r)}"

    def answer(self):
        self.t.join(WAIT_TIMEOUT_S + 5)
        assert not self.t.is_alive(), "no answer"
        assert self.r is not None, "the request failed"
        return self.r


# ----------------------------------------------------------------------------- in flight

def settled_while_waiting(gw, what, wait="wait=30", **extra):
    """A holder reserves; a waiter reserves with Prefer: wait and is still waiting a second
    later; the holder settles (what: complete, release or unknown). The waiter's answer, the
    holder's token, the scope and key, and when the settle was sent."""
    s, k = scope(), new_key(what)
    token = holder(gw, s, k)
    w = Waiter(gw, s, k, wait=wait)
    w.assert_waiting()
    settled_at = time.monotonic()
    finish(gw, what, s, k, token, **extra)
    r = w.answer()
    assert w.at >= settled_at
    return r, token, s, k


def test_wait_gets_the_completion(gw):
    r, _, _, _ = settled_while_waiting(gw, "complete", wait="wait=5", result={"id": "msg_1", "n": 2},
                                       provider_id="msg_1")
    assert r.status_code == 200, describe(r)   # not the 409 of a key in flight
    j = r.json()
    assert j["status"] == "completed" and j["replayed"] is True, j
    assert j["result"] == {"id": "msg_1", "n": 2} and j["provider_id"] == "msg_1", j


def test_many_waiters_all_get_the_completion(gw):
    s, k = scope(), new_key("many")
    token = holder(gw, s, k)
    ws = [Waiter(gw, s, k, wait="wait=20") for _ in range(6)]
    for w in ws:
        w.assert_waiting(0.2)
    finish(gw, "complete", s, k, token, result="sent")
    for w in ws:
        r = w.answer()
        assert r.status_code == 200 and r.json()["result"] == "sent", describe(r)
    rec = gw.action(s, k).json()
    assert rec["state"] == "completed" and rec["attempt"] == 1, rec


def test_wait_after_release_gets_its_own_reservation(gw):
    r, token, s, k = settled_while_waiting(gw, "release", error="provider said 503")
    assert r.status_code == 201, describe(r)
    j = r.json()
    assert j["status"] == "reserved" and j["key"] == k and j["attempt"] == 2 and j["token"] != token, j
    # the reservation is the waiter's: its token completes, the holder's is stale
    stale = gw.post("/v1/actions/complete", json={"scope": s, "key": k, "token": token, "result": 1})
    assert_problem(stale, 409, "stale_token")
    finish(gw, "complete", s, k, j["token"], result="second")
    assert gw.action(s, k).json()["state"] == "completed"


def test_wait_after_unknown_409_outcome_unknown(gw):
    r, _, _, _ = settled_while_waiting(gw, "unknown", error="sdk timeout")
    assert_problem(r, 409, "outcome_unknown")
    assert r.json()["state"] == "unknown", r.json()


def test_wait_runs_out_409_key_in_flight(gw):
    s, k = scope(), new_key("late")
    holder(gw, s, k)
    t0 = time.monotonic()
    r = reserve(gw, s, k, wait="wait=1")
    assert time.monotonic() - t0 >= 0.9, "answered before its wait ran out"
    assert_problem(r, 409, "key_in_flight")
    assert r.headers.get("Retry-After") == "1", describe(r)
    assert r.json()["state"] == "pending", r.json()


@pytest.mark.parametrize("prefer", ["wait=abc", "wait=0", "wait=-5", "respond-async"])
def test_no_usable_wait_answers_at_once(gw, prefer):
    """A Prefer without a usable wait is ignored, as on the proxy: the 409 comes while the
    holder still holds the key (the holder settles only after it, so a waiting reserve
    would get the completion, or time out)."""
    s, k = scope(), new_key("nowait")
    token = holder(gw, s, k)
    r = reserve(gw, s, k, wait=prefer)
    assert_problem(r, 409, "key_in_flight")
    finish(gw, "complete", s, k, token, result="x")


def test_wait_on_a_free_or_done_key_answers_at_once(gw):
    s, k = scope(), new_key("free")
    r = reserve(gw, s, k, wait="wait=30")
    assert r.status_code == 201, describe(r)
    finish(gw, "complete", s, k, r.json()["token"], result="r")
    r = reserve(gw, s, k, wait="wait=30")
    assert r.status_code == 200 and r.json()["result"] == "r", describe(r)


# ----------------------------------------------------------------------------- awaiting approval

def charge(gw, key):
    return gw.proxy("POST", "demo", "/charges", headers={"Idempotency-Key": key}, json={"amount": 500})


def decide(gw, key, verb):
    r = gw.post(f"/v1/actions/demo/{key}/{verb}", json={})
    assert r.status_code == 200, describe(r)


def test_wait_on_awaiting_approval_gets_the_decision_and_the_outcome(gw, provider):
    k = new_key("appr")
    r = charge(gw, k)
    assert r.status_code == 202, describe(r)
    before = provider.count()
    w = Waiter(gw, "demo", k)
    w.assert_waiting()
    decide(gw, k, "approve")
    r = w.answer()
    assert r.status_code == 200, describe(r)   # not the 202 of a key awaiting approval
    j = r.json()
    assert j["status"] == "completed" and j["replayed"] is True, j
    assert j["result"]["echo"]["path"] == "/charges", j   # what the provider answered the approved send
    assert provider.count() == before + 1


def test_wait_on_awaiting_approval_denied_403(gw):
    k = new_key("deny")
    assert charge(gw, k).status_code == 202
    w = Waiter(gw, "demo", k)
    w.assert_waiting()
    decide(gw, k, "deny")
    assert_problem(w.answer(), 403, "denied")


def test_wait_on_awaiting_approval_runs_out_202(gw):
    k = new_key("appr-late")
    assert charge(gw, k).status_code == 202
    t0 = time.monotonic()
    r = reserve(gw, "demo", k, wait="wait=1")
    assert time.monotonic() - t0 >= 0.9, "answered before its wait ran out"
    assert r.status_code == 202 and r.json()["state"] == "awaiting_approval", describe(r)
    decide(gw, k, "deny")


def test_another_requests_fingerprint_does_not_wait_for_the_decision(gw):
    """As on the proxy, only the stored request waits for its decision: a caller whose
    fingerprint names another request is answered 202 at once (the decision is refused
    afterwards, so a waiting reserve would get 403)."""
    k = new_key("appr-fp")
    assert charge(gw, k).status_code == 202
    r = reserve(gw, "demo", k, wait="wait=30", fingerprint="not-the-stored-request")
    assert r.status_code == 202 and r.json()["state"] == "awaiting_approval", describe(r)
    decide(gw, k, "deny")
