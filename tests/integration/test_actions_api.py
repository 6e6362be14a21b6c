"""The actions API (docs/api.md, "Actions API"): reserve, complete, release,
unknown, read, list, resolve, and every error they document.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_actions_api.py
"""
import threading
import time
import uuid
from urllib.parse import quote

import pytest

from gateway import Gateway, assert_problem, describe, is_time, new_key, require_serve

RECORD_FIELDS = {"scope", "key", "state", "attempt", "created_at", "updated_at", "lease_expires_at",
                 "expires_at", "fingerprint", "provider_id", "error", "note", "response"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    require_serve()
    g = Gateway(tmp_path_factory.mktemp("actions"), {"demo": {"url": provider.url}},
                server={"loop_interval": "200ms", "max_body": "64KiB"}, store_kind=store_kind)
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


def reserve(gw, s, k, **extra):
    return gw.post("/v1/actions", json=dict({"scope": s, "key": k}, **extra))


def reserved(gw, s, k, **extra):
    r = reserve(gw, s, k, **extra)
    assert r.status_code == 201, describe(r)
    j = r.json()
    return j


def finish(gw, what, s, k, token, **extra):
    return gw.post(f"/v1/actions/{what}", json=dict({"scope": s, "key": k, "token": token}, **extra))


def get_record(gw, s, k):
    r = gw.action(s, k)
    assert r.status_code == 200, describe(r)
    return r.json()


def assert_record(rec, s, k, state):
    missing = RECORD_FIELDS - set(rec)
    assert not missing, f"record lacks {missing}: {rec}"
    assert rec["scope"] == s and rec["key"] == k and rec["state"] == state, rec
    assert is_time(rec["created_at"]) and is_time(rec["updated_at"]), rec
    for t in ("lease_expires_at", "expires_at"):
        assert rec[t] is None or is_time(rec[t]), (t, rec)
    assert isinstance(rec["attempt"], int) and rec["attempt"] >= 1, rec


# ----------------------------------------------------------------------------- reserve

def test_reserve_new_key_201(gw):
    s, k = scope(), new_key()
    r = reserve(gw, s, k, fingerprint="fp-1", lease_ms=60000, request={"to": "x@example.com"})
    assert r.status_code == 201, describe(r)
    assert r.headers.get("Content-Type", "").startswith("application/json"), describe(r)
    j = r.json()
    assert j["status"] == "reserved", j
    assert isinstance(j["token"], str) and j["token"], j
    assert j["attempt"] == 1, j
    assert is_time(j["lease_expires_at"]), j
    rec = get_record(gw, s, k)
    assert_record(rec, s, k, "pending")
    assert rec["response"] is None, rec
    assert rec["fingerprint"] == "fp-1", rec


def test_reserve_in_flight_409(gw):
    s, k = scope(), new_key()
    reserved(gw, s, k)
    r = reserve(gw, s, k)
    assert_problem(r, 409, "key_in_flight")
    assert r.headers.get("Retry-After") is not None, describe(r)


@pytest.mark.parametrize("result", [{"id": "msg_1", "n": [1, 2]}, [1, "two"], "text", 42, True, None],
                         ids=["object", "array", "string", "number", "bool", "null"])
def test_complete_then_reserve_replays_result(gw, result):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    r = finish(gw, "complete", s, k, tok, result=result, provider_id="msg_1")
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)
    rec = get_record(gw, s, k)
    assert_record(rec, s, k, "completed")
    assert rec["provider_id"] == "msg_1", rec
    for _ in range(2):
        r = reserve(gw, s, k)
        assert r.status_code == 200, describe(r)
        j = r.json()
        assert j["status"] == "completed" and j["replayed"] is True, j
        assert j["result"] == result, j
        assert j["provider_id"] == "msg_1", j
        assert j["fingerprint_mismatch"] is False, j


def test_fingerprint_mismatch_flag(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k, fingerprint="f1")["token"]
    assert finish(gw, "complete", s, k, tok, result={"ok": 1}).status_code == 200
    j = reserve(gw, s, k, fingerprint="f2").json()
    assert j["status"] == "completed" and j["fingerprint_mismatch"] is True, j
    j = reserve(gw, s, k, fingerprint="f1").json()
    assert j["status"] == "completed" and j["fingerprint_mismatch"] is False, j


def test_release_frees_the_key_next_attempt(gw):
    s, k = scope(), new_key()
    tok1 = reserved(gw, s, k)["token"]
    r = finish(gw, "release", s, k, tok1, error="smtp 421, not sent")
    assert r.status_code == 200 and r.json()["state"] == "released", describe(r)
    rec = get_record(gw, s, k)
    assert_record(rec, s, k, "released")
    assert rec["error"] == "smtp 421, not sent", rec
    j = reserved(gw, s, k)
    assert j["attempt"] == 2 and j["token"] != tok1, j
    # the first attempt's token is stale now: nothing changes
    r = finish(gw, "complete", s, k, tok1, result={"late": True})
    assert_problem(r, 409, "stale_token")
    rec = get_record(gw, s, k)
    assert rec["state"] == "pending" and rec["attempt"] == 2, rec
    r = finish(gw, "complete", s, k, j["token"], result={"ok": True})
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)


def other_token(tok):
    """A well-formed token that is not tok."""
    c = tok[-1]
    return tok[:-1] + ("0" if c != "0" else "1")


@pytest.mark.parametrize("what", ["complete", "release", "unknown"])
def test_finish_answers_the_full_record(gw, what):
    """docs/api.md: "Answer 200 with the action record"."""
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    extra = {"result": {"a": 1}, "provider_id": "p1"} if what == "complete" else {"error": "why"}
    r = finish(gw, what, s, k, tok, **extra)
    assert r.status_code == 200, describe(r)
    want = {"complete": "completed", "release": "released", "unknown": "unknown"}[what]
    rec = r.json()
    assert_record(rec, s, k, rec.get("state"))
    assert rec["state"] in (want, "held") if what == "unknown" else rec["state"] == want, rec


def test_wrong_token_is_stale_and_changes_nothing(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    for what in ("complete", "release", "unknown"):
        extra = {"result": 1} if what == "complete" else {}
        r = finish(gw, what, s, k, other_token(tok), **extra)
        assert_problem(r, 409, "stale_token")
    assert get_record(gw, s, k)["state"] == "pending"


def test_unknown_then_reserve_409_outcome_unknown_then_late_complete(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    r = finish(gw, "unknown", s, k, tok, error="read timeout")
    assert r.status_code == 200, describe(r)
    assert r.json()["state"] in ("unknown", "held"), r.json()
    r = reserve(gw, s, k)
    j = assert_problem(r, 409, "outcome_unknown")
    assert j.get("state") in ("unknown", "held"), j
    # a late completion is the truth about the world
    r = finish(gw, "complete", s, k, tok, result={"id": "late"}, provider_id="p9")
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)
    j = reserve(gw, s, k).json()
    assert j["status"] == "completed" and j["result"] == {"id": "late"} and j["provider_id"] == "p9", j


def test_invalid_transitions_409(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    assert finish(gw, "complete", s, k, tok, result=1).status_code == 200
    assert_problem(finish(gw, "release", s, k, tok), 409, "invalid_transition")
    assert_problem(finish(gw, "unknown", s, k, tok), 409, "invalid_transition")
    assert get_record(gw, s, k)["state"] == "completed"


@pytest.mark.parametrize("what", ["complete", "release", "unknown"])
def test_finish_of_missing_action_404(gw, what):
    extra = {"result": 1} if what == "complete" else {}
    tok = reserved(gw, scope(), new_key())["token"]  # a well-formed token of another action
    r = finish(gw, what, scope(), new_key(), tok, **extra)
    assert_problem(r, 404, "not_found")


def test_lease_expiry_turns_held_and_late_complete_is_accepted(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k, lease_ms=300)["token"]
    deadline = time.monotonic() + 10
    rec = get_record(gw, s, k)
    while rec["state"] != "held" and time.monotonic() < deadline:
        time.sleep(0.1)
        rec = get_record(gw, s, k)
    assert rec["state"] == "held", f"lease of 300 ms + loop_interval 200 ms; after 10 s: {rec}"
    r = reserve(gw, s, k)
    j = assert_problem(r, 409, "outcome_unknown")
    assert j["state"] == "held", j
    assert isinstance(j.get("reason"), str) and j["reason"], j
    r = finish(gw, "complete", s, k, tok, result={"ok": 1})
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)


# ----------------------------------------------------------------------------- GET one

def test_get_missing_404(gw):
    assert_problem(gw.action(scope(), new_key()), 404, "not_found")


def test_get_percent_decodes_path_segments(gw):
    s = scope()
    k = "order/17 step:2?#%"
    reserved(gw, s, k)
    r = gw.get(f"/v1/actions/{s}/{quote(k, safe='')}")
    assert r.status_code == 200, describe(r)
    assert r.json()["key"] == k, r.json()


# ----------------------------------------------------------------------------- list

def _page_all(gw, query, limit):
    items, after, pages = [], None, 0
    while True:
        q = f"{query}&limit={limit}" + (f"&after={quote(after, safe='')}" if after else "")
        r = gw.get(f"/v1/actions?{q}")
        assert r.status_code == 200, describe(r)
        j = r.json()
        assert set(j) >= {"items", "next"}, j
        assert len(j["items"]) <= limit
        items += j["items"]
        pages += 1
        assert pages < 1000
        if j["next"] is None:
            return items
        after = j["next"]


def test_list_filters_and_paging(gw):
    s = scope()
    keys = [f"k{i:02d}" for i in range(7)]
    toks = {k: reserved(gw, s, k)["token"] for k in keys}
    for k in keys[:3]:
        assert finish(gw, "complete", s, k, toks[k], result=k).status_code == 200
    assert finish(gw, "release", s, keys[3], toks[keys[3]]).status_code == 200
    r = gw.get(f"/v1/actions?scope={s}")
    assert r.status_code == 200, describe(r)
    j = r.json()
    assert sorted(x["key"] for x in j["items"]) == keys and j["next"] is None, j
    for it in j["items"]:
        assert_record(it, s, it["key"], it["state"])
    comp = gw.get(f"/v1/actions?scope={s}&status=completed").json()["items"]
    assert sorted(x["key"] for x in comp) == keys[:3]
    pend = gw.get(f"/v1/actions?scope={s}&status=pending").json()["items"]
    assert sorted(x["key"] for x in pend) == keys[4:]
    paged = _page_all(gw, f"scope={s}", 2)
    assert sorted(x["key"] for x in paged) == keys, "paging lost or repeated items"


def test_list_paging_stable_under_concurrent_inserts(gw):
    s = scope()
    first = [f"a{i:03d}" for i in range(30)]
    for k in first:
        reserved(gw, s, k)
    seen = []
    after = None
    n = 0
    while True:
        q = f"scope={s}&limit=4" + (f"&after={quote(after, safe='')}" if after else "")
        j = gw.get(f"/v1/actions?{q}").json()
        seen += [x["key"] for x in j["items"]]
        # inserts between pages, before and after the cursor in key order
        for p in ("0", "z"):
            reserved(gw, s, f"{p}{n:03d}")
        n += 1
        if j["next"] is None:
            break
        after = j["next"]
        assert n < 200
    assert len(seen) == len(set(seen)), f"an item came twice: {seen}"
    missing = set(first) - set(seen)
    assert not missing, f"paging skipped items present from the start: {sorted(missing)}"


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=abc", "limit=-1", "status=bogus",
                                   "after=%%%", "after=not-a-cursor"])
def test_list_bad_query_400(gw, query):
    r = gw.raw("GET", f"/v1/actions?{query}")
    if query == "after=%%%":
        assert r.status_code == 400, describe(r)
        assert r.json()["code"] in ("bad_request", "invalid_request"), describe(r)
    else:
        assert_problem(r, 400, "invalid_request")


def test_list_limit_bounds_accepted(gw):
    for lim in (1, 1000):
        r = gw.get(f"/v1/actions?limit={lim}")
        assert r.status_code == 200 and len(r.json()["items"]) <= lim, describe(r)


# ----------------------------------------------------------------------------- resolve

def test_resolve_unknown_completed_and_released(gw):
    s = scope()
    for outcome_, k in (("completed", new_key()), ("released", new_key())):
        tok = reserved(gw, s, k)["token"]
        assert finish(gw, "unknown", s, k, tok).status_code == 200
        body = {"outcome": outcome_, "note": "checked the provider"}
        if outcome_ == "completed":
            body["provider_id"] = "pm_1"
        r = gw.post(f"/v1/actions/{s}/{quote(k, safe='')}/resolve", json=body)
        assert r.status_code == 200, describe(r)
        rec = r.json()
        assert_record(rec, s, k, outcome_)
        assert rec["note"] == "checked the provider", rec
        if outcome_ == "completed":
            assert rec["provider_id"] == "pm_1", rec
            j = reserve(gw, s, k).json()
            assert j["status"] == "completed" and j["result"] is None and j["provider_id"] == "pm_1", j
        else:
            j = reserved(gw, s, k)
            assert j["attempt"] == 2, j


def test_resolve_only_unknown_or_held(gw):
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    r = gw.post(f"/v1/actions/{s}/{k}/resolve", json={"outcome": "completed"})
    assert_problem(r, 409, "invalid_transition")
    finish(gw, "complete", s, k, tok, result=1)
    r = gw.post(f"/v1/actions/{s}/{k}/resolve", json={"outcome": "released"})
    assert_problem(r, 409, "invalid_transition")


def test_resolve_missing_404_and_bad_outcome_400(gw):
    r = gw.post(f"/v1/actions/{scope()}/{new_key()}/resolve", json={"outcome": "completed"})
    assert_problem(r, 404, "not_found")
    s, k = scope(), new_key()
    tok = reserved(gw, s, k)["token"]
    finish(gw, "unknown", s, k, tok)
    for body in ({"outcome": "maybe"}, {}, {"outcome": 1}, {"outcome": "completed", "note": 5}):
        assert_problem(gw.post(f"/v1/actions/{s}/{k}/resolve", json=body), 400, "invalid_request")


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"[]", b'"scope"', b"42", b"null",
                                 b'{"scope":"a","key":"b"', b"\xff\xfe{}"],
                         ids=["empty", "open-brace", "text", "array", "string", "number", "null",
                              "truncated", "bad-utf8"])
@pytest.mark.parametrize("route", ["/v1/actions", "/v1/actions/complete", "/v1/actions/release",
                                   "/v1/actions/unknown", "/v1/actions/s/k/resolve"])
def test_not_a_json_object_400_invalid_json(gw, route, raw):
    r = gw.post(route, data=raw, headers={"Content-Type": "application/json"})
    assert_problem(r, 400, "invalid_json")


@pytest.mark.parametrize("body", [
    {"key": "k"}, {"scope": "s"}, {"scope": 1, "key": "k"}, {"scope": "s", "key": 1},
    {"scope": "s", "key": "k", "lease_ms": "100"}, {"scope": "s", "key": "k", "fingerprint": 7},
    {"scope": "s", "key": "k", "lease_ms": -5},
], ids=["no-scope", "no-key", "scope-int", "key-int", "lease-string", "fingerprint-int", "lease-negative"])
def test_reserve_bad_members_400_invalid_request(gw, body):
    assert_problem(gw.post("/v1/actions", json=body), 400, "invalid_request")


@pytest.mark.parametrize("route,body", [
    ("complete", {"scope": "s", "key": "k", "result": 1}),
    ("complete", {"scope": "s", "key": "k", "token": 5, "result": 1}),
    ("release", {"scope": "s", "token": "t"}),
    ("unknown", {"key": "k", "token": "t"}),
    ("complete", {"scope": "s", "key": "k", "token": "t", "result": 1, "provider_id": 3}),
])
def test_finish_bad_members_400_invalid_request(gw, route, body):
    assert_problem(gw.post(f"/v1/actions/{route}", json=body), 400, "invalid_request")


@pytest.mark.parametrize("s", ["", "has space", "x" * 65, "sl/ash", "é"], ids=["empty", "space", "65", "slash", "utf8"])
def test_invalid_scope_400(gw, s):
    assert_problem(reserve(gw, s, "k"), 400, "invalid_scope")


def test_scope_of_64_allowed_chars_is_valid(gw):
    s = ("A-z_0.9" + uuid.uuid4().hex).ljust(64, "x")
    assert reserve(gw, s, "k").status_code == 201


@pytest.mark.parametrize("k", ["", "x" * 256, "a\tb", "a\nb", "é", "a\x7f"], ids=["empty", "256", "tab", "newline", "utf8", "DEL"])
def test_invalid_key_400(gw, k):
    assert_problem(reserve(gw, "s", k), 400, "invalid_key")


def test_invalid_scope_in_path_400(gw):
    assert_problem(gw.get("/v1/actions/bad%20scope/k"), 400, "invalid_scope")


@pytest.mark.parametrize("path", ["/v1/actions/s/%zz", "/v1/actions/s/abc%2", "/v1/actions/s%G1/k"])
def test_bad_percent_encoding_400_bad_request(gw, path):
    assert_problem(gw.raw("GET", path), 400, "bad_request")


def test_encoded_nul_in_path_400(gw):
    r = gw.raw("GET", "/v1/actions/s/a%00b")
    assert r.status_code == 400, describe(r)
    assert r.json()["code"] in ("bad_request", "invalid_key"), describe(r)


def test_delete_actions_405_with_allow(gw):
    r = gw.request("DELETE", "/v1/actions")
    assert_problem(r, 405, "method_not_allowed")
    allow = r.headers.get("Allow", "")
    assert "GET" in allow and "POST" in allow, describe(r)


def test_body_over_max_body_413(gw):
    r = gw.post("/v1/actions", data=b'{"scope":"s","key":"k","request":"' + b"a" * 70000 + b'"}',
                headers={"Content-Type": "application/json"})
    assert_problem(r, 413, "body_too_large")


def test_concurrent_reserve_same_key_one_winner(gw):
    s, k = scope(), new_key()
    results = []
    lock = threading.Lock()
    barrier = threading.Barrier(20)

    def one():
        barrier.wait(10)
        r = reserve(gw, s, k)
        with lock:
            results.append(r)

    ts = [threading.Thread(target=one) for _ in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    codes = sorted(r.status_code for r in results)
    assert codes.count(201) == 1, codes
    assert codes.count(409) == 19, codes
    for r in results:
        if r.status_code == 409:
            assert r.json()["code"] == "key_in_flight", describe(r)
