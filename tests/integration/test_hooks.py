"""Black-box tests of webhooks in `once serve`: ingress (POST /v1/hooks/{source}) with
the senders' signature schemes, push delivery (deliver_to) to a fake agent
(tests/fakes/agent.py) with retries, dead events and redelivery, crash recovery,
and the pull inbox (claim / ack / nack).

Signatures are computed with Python's hmac, and the vectors the senders publish
(GitHub's, Standard Webhooks') are checked against both the gateway and that
code. "Nothing stored" is observed through `once hooks show/ls` (the CLI reads
the store) and GET /metrics.
"""
import base64
import concurrent.futures
import json
import os
import sys
import threading
import time
import uuid

import pytest
import requests

from gateway import assert_problem, describe, free_port, is_time, require_serve
from hooks_harness import (Agent, HookGateway, deliveries_total, sign_github, sign_hmac,
                           sign_standard, sign_stripe, slack_headers, standard_headers, stripe_v1, wait_until,
                           webhooks_total)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fakes"))
from agent import verify_standard  # noqa: E402

# Published vectors.
GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIG = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TS = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

STRIPE_SECRET = "whsec_test_stripe_0123456789abcdef"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
HMAC_SECRET = "plain-hmac-secret"
SW_SECRET2 = "whsec_" + base64.b64encode(b"second standard key, rotated in").decode()
DELIVER_SECRET = "whsec_" + base64.b64encode(b"the gateway signs deliveries w/ this").decode()

RETRY = {"retry_base": "50ms", "retry_cap": "200ms"}


def eid(prefix="evt"):
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def gh_headers(body, delivery=None, secret=GH_SECRET, **extra):
    h = {"X-Hub-Signature-256": sign_github(secret, body), "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
         "X-GitHub-Event": "push", "Content-Type": "application/json"}
    h.update(extra)
    return h


def stripe_body(event_id, **extra):
    d = {"id": event_id, "object": "event", "type": "payment_intent.succeeded"}
    d.update(extra)
    return json.dumps(d).encode()


def assert_accepted(r, status="accepted"):
    assert r.status_code == 200, describe(r)
    assert r.headers.get("Content-Type", "").split(";")[0] == "application/json", describe(r)
    assert r.json() == {"status": status}, describe(r)


def assert_stored(gw, source, event_id, body=None):
    ev = gw.hooks_show(source, event_id)
    assert ev is not None, f"event {source}/{event_id} is not in the store"
    assert ev["source"] == source and ev["event_id"] == event_id, ev
    if body is not None:
        if "body" in ev:
            assert ev["body"].encode() == body, ev
        else:
            assert base64.b64decode(ev["body_base64"]) == body, ev
    return ev


def assert_not_stored(gw, source, event_id=None):
    if event_id is not None:
        assert gw.hooks_show(source, event_id) is None, f"{source}/{event_id} was stored"


class Counts:
    """once_webhooks_total of a source before/after a request."""

    def __init__(self, gw, source):
        self.gw, self.source = gw, source
        self.before = self._now()

    def _now(self):
        m = self.gw.metrics()
        return {r: webhooks_total(m, self.source, r) for r in ("accepted", "duplicate", "bad_signature",
                                                               "no_event_id")}

    def delta(self):
        now = self._now()
        return {k: now[k] - self.before[k] for k in now if now[k] != self.before[k]}


def expect_rejected(gw, source, body, headers, event_id=None, status=401, code="bad_signature",
                    result="bad_signature"):
    """The request is refused with status/code, counted once under result, and nothing is stored."""
    c = Counts(gw, source)
    rows_before = len(gw.hooks_ls(source=source))
    r = gw.hook(source, body, headers)
    j = assert_problem(r, status, code)
    assert "nothing was stored" in j.get("detail", ""), describe(r)
    assert c.delta() == {result: 1}, (c.delta(), describe(r))
    assert len(gw.hooks_ls(source=source)) == rows_before, "a row was stored" + describe(r)
    assert_not_stored(gw, source, event_id)
    return j


def stop_clean(gw):
    if gw.alive():
        rc = gw.stop()
        assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{gw.stderr()[-4000:]}"
    assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]


# =========================================================================== signatures

@pytest.fixture(scope="module")
def sig_gw(tmp_path_factory, store_kind):
    require_serve()
    sources = {
        "gh": {"verify": "github", "secret": GH_SECRET},
        "gh-rot": {"verify": "github", "secret": f"old-github-secret, {GH_SECRET}"},
        "std-old": {"verify": "standard", "secret": SW_SECRET, "tolerance": "100000d"},
        "std": {"verify": "standard", "secret": SW_SECRET},
        "std-rot": {"verify": "standard", "secret": f"{SW_SECRET},{SW_SECRET2}"},
        "stripe": {"verify": "stripe", "secret": STRIPE_SECRET},
        "stripe-rot": {"verify": "stripe", "secret": "whsec_old_stripe_secret, whsec_new_stripe_secret"},
        "slack": {"verify": "slack", "secret": SLACK_SECRET},
        "hmac64": {"verify": "hmac-sha256", "secret": HMAC_SECRET, "signature_header": "X-Signature",
                   "signature_encoding": "base64", "signature_prefix": "sha256=", "event_id": "header:X-Event-Id"},
        "hmachex": {"verify": "hmac-sha256", "secret": HMAC_SECRET, "signature_header": "X-Signature",
                    "event_id": "json:/data/id"},
    }
    g = HookGateway(tmp_path_factory.mktemp("sig") / "gw", sources, store_kind=store_kind)
    g.start()
    yield g
    stop_clean(g)


# ---- GitHub

def test_github_documented_vector_accepted_then_duplicate(sig_gw):
    assert sign_github(GH_SECRET, GH_BODY) == GH_SIG, "the test's own HMAC disagrees with GitHub's docs"
    delivery = str(uuid.uuid4())
    c = Counts(sig_gw, "gh")
    h = {"X-Hub-Signature-256": GH_SIG, "X-GitHub-Delivery": delivery, "Content-Type": "text/plain"}
    assert_accepted(sig_gw.hook("gh", GH_BODY, h))
    ev = assert_stored(sig_gw, "gh", delivery, GH_BODY)
    assert ev["state"] == "pending" and ev["attempt"] == 0, ev
    assert ev["content_type"] == "text/plain", ev
    assert_accepted(sig_gw.hook("gh", GH_BODY, h), "duplicate")
    assert c.delta() == {"accepted": 1, "duplicate": 1}
    assert [e["event_id"] for e in sig_gw.hooks_ls(source="gh")].count(delivery) == 1


@pytest.mark.parametrize("case", [
    "tampered_body", "missing", "empty", "prefix_only", "sha1_prefix", "no_prefix", "upper_prefix",
    "truncated", "extended", "non_hex", "other_secret", "two_values", "space_inside",
])
def test_github_bad_signature_401_nothing_stored(sig_gw, case):
    body = GH_BODY
    sig = GH_SIG
    hexsig = GH_SIG[len("sha256="):]
    if case == "tampered_body":
        body = b"Hello, World?"
    elif case == "missing":
        sig = None
    elif case == "empty":
        sig = ""
    elif case == "prefix_only":
        sig = "sha256="
    elif case == "sha1_prefix":
        sig = "sha1=" + hexsig
    elif case == "no_prefix":
        sig = hexsig
    elif case == "upper_prefix":
        sig = "SHA256=" + hexsig
    elif case == "truncated":
        sig = GH_SIG[:-1]
    elif case == "extended":
        sig = GH_SIG + "00"
    elif case == "non_hex":
        sig = GH_SIG[:-1] + "g"
    elif case == "other_secret":
        sig = sign_github("not the secret", GH_BODY)
    elif case == "two_values":
        sig = GH_SIG + "," + GH_SIG
    elif case == "space_inside":
        sig = "sha256= " + hexsig
    delivery = str(uuid.uuid4())
    h = {"X-GitHub-Delivery": delivery}
    if sig is not None:
        h["X-Hub-Signature-256"] = sig
    expect_rejected(sig_gw, "gh", body, h, delivery)


def test_github_rotated_secrets_either_accepted(sig_gw):
    for secret in ("old-github-secret", GH_SECRET):
        body = json.dumps({"zen": secret}).encode()
        h = gh_headers(body, secret=secret)
        assert_accepted(sig_gw.hook("gh-rot", body, h))
        assert_stored(sig_gw, "gh-rot", h["X-GitHub-Delivery"], body)
    body = b"{}"
    h = gh_headers(body, secret="a third secret")
    expect_rejected(sig_gw, "gh-rot", body, h, h["X-GitHub-Delivery"])
    # A source does not accept another source's secret.
    h = gh_headers(body, secret="old-github-secret")
    expect_rejected(sig_gw, "gh", body, h, h["X-GitHub-Delivery"])


def test_bad_signature_checked_before_event_id(sig_gw):
    # Neither a signature nor an event id: 401 (the signature is checked first), not 400.
    expect_rejected(sig_gw, "gh", GH_BODY, {})


# ---- Standard Webhooks

def test_standard_documented_vector_with_huge_tolerance(sig_gw):
    assert sign_standard(SW_SECRET, SW_ID, SW_TS, SW_BODY) == SW_SIG, "the test's HMAC disagrees with the spec"
    h = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TS), "webhook-signature": SW_SIG,
         "Content-Type": "application/json"}
    c = Counts(sig_gw, "std-old")
    assert_accepted(sig_gw.hook("std-old", SW_BODY, h))
    ev = assert_stored(sig_gw, "std-old", SW_ID, SW_BODY)
    names = {n.lower(): v for n, v in ev["headers"]}
    assert names.get("webhook-id") == SW_ID and names.get("webhook-signature") == SW_SIG, ev["headers"]
    assert_accepted(sig_gw.hook("std-old", SW_BODY, h), "duplicate")
    assert c.delta() == {"accepted": 1, "duplicate": 1}


def test_standard_documented_vector_stale_with_default_tolerance(sig_gw):
    h = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TS), "webhook-signature": SW_SIG}
    j = expect_rejected(sig_gw, "std", SW_BODY, h, SW_ID)
    assert "stale" in j["detail"], j


@pytest.mark.parametrize("case", [
    "tampered_body", "stale", "future", "other_id", "missing_id", "missing_ts", "missing_sig", "ts_not_digits",
    "ts_ms", "no_v1", "v1a_only", "bad_base64", "short_sig", "empty_sig", "other_key", "hex_sig",
])
def test_standard_bad_signature_401(sig_gw, case):
    msg_id = eid("msg")
    body = json.dumps({"type": "invoice.paid", "n": 1}).encode()
    now = int(time.time())
    ts = now
    h = standard_headers(SW_SECRET, msg_id, body, ts)
    good_b64 = h["webhook-signature"][3:]
    if case == "tampered_body":
        body = body.replace(b"1", b"2")
    elif case == "stale":
        h = standard_headers(SW_SECRET, msg_id, body, now - 600)
    elif case == "future":
        h = standard_headers(SW_SECRET, msg_id, body, now + 600)
    elif case == "other_id":
        h["webhook-id"] = eid("msg")
        msg_id = h["webhook-id"]
    elif case == "missing_id":
        del h["webhook-id"]
        msg_id = None
    elif case == "missing_ts":
        del h["webhook-timestamp"]
    elif case == "missing_sig":
        del h["webhook-signature"]
    elif case == "ts_not_digits":
        h["webhook-timestamp"] = f"{now}.0"
    elif case == "ts_ms":
        h = standard_headers(SW_SECRET, msg_id, body, now * 1000)
    elif case == "no_v1":
        h["webhook-signature"] = good_b64
    elif case == "v1a_only":
        h["webhook-signature"] = "v1a," + good_b64
    elif case == "bad_base64":
        h["webhook-signature"] = "v1," + good_b64[:-2] + "!="
    elif case == "short_sig":
        h["webhook-signature"] = "v1," + base64.b64encode(base64.b64decode(good_b64)[:31]).decode()
    elif case == "empty_sig":
        h["webhook-signature"] = ""
    elif case == "other_key":
        h = standard_headers(SW_SECRET2, msg_id, body, ts)
    elif case == "hex_sig":
        h["webhook-signature"] = "v1," + base64.b64decode(good_b64).hex()
    expect_rejected(sig_gw, "std", body, h, msg_id)


def test_standard_current_signature_accepted_and_multiple_signatures(sig_gw):
    body = b'{"type":"x"}'
    for ts_offset in (0, -200, 200):  # inside the default 5 minutes either way
        msg_id = eid("msg")
        h = standard_headers(SW_SECRET, msg_id, body, int(time.time()) + ts_offset)
        assert_accepted(sig_gw.hook("std", body, h))
        assert_stored(sig_gw, "std", msg_id, body)
    # Several signatures separated by spaces: one valid is enough; other versions are ignored.
    msg_id = eid("msg")
    h = standard_headers(SW_SECRET, msg_id, body)
    wrong = sign_standard(SW_SECRET2, msg_id, int(h["webhook-timestamp"]), body)
    h["webhook-signature"] = f"v1a,AAAA {wrong} {h['webhook-signature']}"
    assert_accepted(sig_gw.hook("std", body, h))
    assert_stored(sig_gw, "std", msg_id, body)


def test_standard_rotated_secrets(sig_gw):
    body = b'{"rotated":true}'
    for secret in (SW_SECRET, SW_SECRET2):
        msg_id = eid("msg")
        assert_accepted(sig_gw.hook("std-rot", body, standard_headers(secret, msg_id, body)))
        assert_stored(sig_gw, "std-rot", msg_id, body)
    other = "whsec_" + base64.b64encode(b"neither of them").decode()
    msg_id = eid("msg")
    expect_rejected(sig_gw, "std-rot", body, standard_headers(other, msg_id, body), msg_id)


# ---- Stripe

def test_stripe_signature_accepted_then_duplicate(sig_gw):
    event_id = eid("evt")
    body = stripe_body(event_id)
    c = Counts(sig_gw, "stripe")
    h = {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body), "Content-Type": "application/json; charset=utf-8"}
    assert_accepted(sig_gw.hook("stripe", body, h))
    ev = assert_stored(sig_gw, "stripe", event_id, body)
    assert ev["content_type"] == "application/json; charset=utf-8", ev
    # Stripe retries with a fresh signature and timestamp: still the same event.
    h2 = {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body, int(time.time()) - 60),
          "Content-Type": "application/json; charset=utf-8"}
    assert_accepted(sig_gw.hook("stripe", body, h2), "duplicate")
    assert c.delta() == {"accepted": 1, "duplicate": 1}


def test_stripe_timestamps_inside_tolerance_accepted(sig_gw):
    for offset in (-240, 240):
        event_id = eid("evt")
        body = stripe_body(event_id)
        t = int(time.time()) + offset
        assert_accepted(sig_gw.hook("stripe", body, {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body, t)}))
        assert_stored(sig_gw, "stripe", event_id)


def test_stripe_several_v1_one_valid_accepted(sig_gw):
    event_id = eid("evt")
    body = stripe_body(event_id)
    t = int(time.time())
    good = stripe_v1(STRIPE_SECRET, body, t)
    bad = stripe_v1("whsec_expired", body, t)
    h = {"Stripe-Signature": f"t={t},v1={bad},v0={'0' * 64},v1={good}"}
    assert_accepted(sig_gw.hook("stripe", body, h))
    assert_stored(sig_gw, "stripe", event_id)


@pytest.mark.parametrize("case", [
    "tampered_body", "stale", "future", "missing", "empty", "no_t", "two_t", "t_not_digits", "t_other_than_signed",
    "v0_only", "v1_short", "v1_non_hex", "v1_upper_key", "other_secret", "no_commas",
])
def test_stripe_bad_signature_401(sig_gw, case):
    event_id = eid("evt")
    body = stripe_body(event_id)
    now = int(time.time())
    t = now
    good = stripe_v1(STRIPE_SECRET, body, t)
    sig = f"t={t},v1={good}"
    if case == "tampered_body":
        body = stripe_body(event_id, amount=1)
    elif case == "stale":
        t = now - 400
        sig = f"t={t},v1={stripe_v1(STRIPE_SECRET, body, t)}"
    elif case == "future":
        t = now + 400
        sig = f"t={t},v1={stripe_v1(STRIPE_SECRET, body, t)}"
    elif case == "missing":
        sig = None
    elif case == "empty":
        sig = ""
    elif case == "no_t":
        sig = f"v1={good}"
    elif case == "two_t":
        sig = f"t={t},t={t + 1},v1={good}"
    elif case == "t_not_digits":
        sig = f"t={t}a,v1={good}"
    elif case == "t_other_than_signed":
        sig = f"t={t - 1},v1={good}"
    elif case == "v0_only":
        sig = f"t={t},v0={good}"
    elif case == "v1_short":
        sig = f"t={t},v1={good[:-2]}"
    elif case == "v1_non_hex":
        sig = f"t={t},v1={good[:-1]}z"
    elif case == "v1_upper_key":
        sig = f"t={t},V1={good}"
    elif case == "other_secret":
        sig = f"t={t},v1={stripe_v1('whsec_other', body, t)}"
    elif case == "no_commas":
        sig = f"t={t} v1={good}"
    h = {"Content-Type": "application/json"}
    if sig is not None:
        h["Stripe-Signature"] = sig
    expect_rejected(sig_gw, "stripe", body, h, event_id)


def test_stripe_rotated_secrets(sig_gw):
    for secret in ("whsec_old_stripe_secret", "whsec_new_stripe_secret"):
        event_id = eid("evt")
        body = stripe_body(event_id)
        assert_accepted(sig_gw.hook("stripe-rot", body, {"Stripe-Signature": sign_stripe(secret, body)}))
        assert_stored(sig_gw, "stripe-rot", event_id, body)
    event_id = eid("evt")
    body = stripe_body(event_id)
    expect_rejected(sig_gw, "stripe-rot", body, {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body)}, event_id)


# ---- Slack

def test_slack_signature(sig_gw):
    event_id = "Ev" + uuid.uuid4().hex[:10].upper()
    body = json.dumps({"token": "x", "type": "event_callback", "event_id": event_id}).encode()
    assert_accepted(sig_gw.hook("slack", body, slack_headers(SLACK_SECRET, body)))
    assert_stored(sig_gw, "slack", event_id, body)
    assert_accepted(sig_gw.hook("slack", body, slack_headers(SLACK_SECRET, body)), "duplicate")


@pytest.mark.parametrize("case", ["tampered", "stale", "future", "no_ts", "no_v0", "other_secret"])
def test_slack_bad_signature_401(sig_gw, case):
    event_id = "Ev" + uuid.uuid4().hex[:10].upper()
    body = json.dumps({"type": "event_callback", "event_id": event_id}).encode()
    now = int(time.time())
    h = slack_headers(SLACK_SECRET, body, now)
    if case == "tampered":
        body = body.replace(b"event_callback", b"url_verification")
    elif case == "stale":
        h = slack_headers(SLACK_SECRET, body, now - 600)
    elif case == "future":
        h = slack_headers(SLACK_SECRET, body, now + 600)
    elif case == "no_ts":
        del h["X-Slack-Request-Timestamp"]
    elif case == "no_v0":
        h["X-Slack-Signature"] = h["X-Slack-Signature"][3:]
    elif case == "other_secret":
        h = slack_headers("other", body, now)
    expect_rejected(sig_gw, "slack", body, h, event_id)


# ---- plain hmac-sha256

def test_hmac_sha256_base64_with_prefix_and_hex(sig_gw):
    event_id = eid("h")
    body = b'{"data":{"id":"ignored"}}'
    h = {"X-Signature": sign_hmac(HMAC_SECRET, body, True, "sha256="), "X-Event-Id": event_id}
    assert_accepted(sig_gw.hook("hmac64", body, h))
    assert_stored(sig_gw, "hmac64", event_id, body)

    event_id = eid("h")
    body = json.dumps({"data": {"id": event_id}}).encode()
    assert_accepted(sig_gw.hook("hmachex", body, {"X-Signature": sign_hmac(HMAC_SECRET, body)}))
    assert_stored(sig_gw, "hmachex", event_id, body)


@pytest.mark.parametrize("case", ["hex_in_base64_source", "no_prefix", "tampered", "missing", "std_b64url"])
def test_hmac_sha256_base64_bad_401(sig_gw, case):
    event_id = eid("h")
    body = b'{"data":{"id":"x"}}\xff\xfe?'  # bytes chosen so base64 of the MAC may need + and /
    sig = sign_hmac(HMAC_SECRET, body, True, "sha256=")
    if case == "hex_in_base64_source":
        sig = sign_hmac(HMAC_SECRET, body, False, "sha256=")
    elif case == "no_prefix":
        sig = sign_hmac(HMAC_SECRET, body, True)
    elif case == "tampered":
        body = body + b" "
    elif case == "missing":
        sig = None
    elif case == "std_b64url":
        # The URL-safe alphabet is not standard base64; also force a difference when
        # the MAC happens to have no + or /.
        raw = sig[len("sha256="):]
        sig = "sha256=" + (raw.replace("+", "-").replace("/", "_") if ("+" in raw or "/" in raw) else raw[:-2] + "-=")
    h = {"X-Event-Id": event_id}
    if sig is not None:
        h["X-Signature"] = sig
    expect_rejected(sig_gw, "hmac64", body, h, event_id)


def test_hmac_sha256_hex_source_refuses_base64(sig_gw):
    event_id = eid("h")
    body = json.dumps({"data": {"id": event_id}}).encode()
    expect_rejected(sig_gw, "hmachex", body, {"X-Signature": sign_hmac(HMAC_SECRET, body, True)}, event_id)


# ---- event ids, routes, headers, metrics

@pytest.mark.parametrize("case", ["no_id", "not_json", "id_null", "id_object", "id_empty", "id_too_long",
                                  "id_control", "id_non_ascii", "duplicate_keys"])
def test_stripe_no_event_id_400_nothing_stored(sig_gw, case):
    bodies = {
        "no_id": b'{"object":"event"}',
        "not_json": b"id=evt_1",
        "id_null": b'{"id":null}',
        "id_object": b'{"id":{"a":1}}',
        "id_empty": b'{"id":""}',
        "id_too_long": json.dumps({"id": "e" * 256}).encode(),
        "id_control": b'{"id":"evt_\\u0001"}',
        "id_non_ascii": '{"id":"évt"}'.encode(),
        "duplicate_keys": b'{"id":"evt_a","id":"evt_b"}',
    }
    body = bodies[case]
    expect_rejected(sig_gw, "stripe", body, {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body)},
                    status=400, code="no_event_id", result="no_event_id")
    for ghost in ("evt_a", "evt_b", "evt_1"):
        assert_not_stored(sig_gw, "stripe", ghost)


def test_stripe_integer_event_id_and_255_bytes(sig_gw):
    n = int(time.time() * 1000) + 7
    body = json.dumps({"id": n}).encode()
    assert_accepted(sig_gw.hook("stripe", body, {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body)}))
    assert_stored(sig_gw, "stripe", str(n), body)
    long_id = "e" * 243 + uuid.uuid4().hex[:12]
    body = json.dumps({"id": long_id}).encode()
    assert_accepted(sig_gw.hook("stripe", body, {"Stripe-Signature": sign_stripe(STRIPE_SECRET, body)}))
    assert_stored(sig_gw, "stripe", long_id, body)


def test_github_without_delivery_header_400(sig_gw):
    h = gh_headers(GH_BODY)
    del h["X-GitHub-Delivery"]
    expect_rejected(sig_gw, "gh", GH_BODY, h, status=400, code="no_event_id", result="no_event_id")


def test_unknown_source_404_and_wrong_method_405(sig_gw):
    r = sig_gw.hook("nope", GH_BODY, gh_headers(GH_BODY))
    assert_problem(r, 404, "unknown_source")
    r = requests.post(sig_gw.url + "/v1/hooks/", data=b"{}", timeout=10)
    assert r.status_code == 404, describe(r)
    r = requests.get(sig_gw.url + "/v1/hooks/gh", timeout=10)
    assert_problem(r, 405, "method_not_allowed")
    m = sig_gw.metrics()
    assert not any(k[0] == "once_webhooks_total" and ("source", "nope") in k[1] for k in m), \
        "an unknown source got a metrics series"


def test_stored_headers_keep_what_the_agent_needs_and_drop_credentials(sig_gw):
    body = b'{"action":"opened"}'
    h = gh_headers(body, **{"User-Agent": "GitHub-Hookshot/044aadd", "X-GitHub-Hook-ID": "292430182",
                            "Authorization": "Bearer sekrit", "Cookie": "session=sekrit"})
    assert_accepted(sig_gw.hook("gh", body, h))
    ev = assert_stored(sig_gw, "gh", h["X-GitHub-Delivery"], body)
    stored = {n.lower(): v for n, v in ev["headers"]}
    for name in ("x-github-event", "x-github-delivery", "x-hub-signature-256", "x-github-hook-id", "content-type",
                 "user-agent"):
        assert stored.get(name) == h[next(k for k in h if k.lower() == name)], (name, ev["headers"])
    assert "authorization" not in stored and "cookie" not in stored, ev["headers"]
    assert "sekrit" not in json.dumps(ev), ev


def test_ack_histogram_counts_every_acknowledgement(sig_gw):
    m = sig_gw.metrics()
    accepted = sum(v for (n, l), v in m.items() if n == "once_webhooks_total" and ("result", "accepted") in l)
    duplicate = sum(v for (n, l), v in m.items() if n == "once_webhooks_total" and ("result", "duplicate") in l)
    count = m.value("once_webhook_ack_seconds_count")
    assert accepted >= 1
    assert count == accepted + duplicate, (count, accepted, duplicate)
    inf = m.value("once_webhook_ack_seconds_bucket", le="+Inf")
    assert inf == count, (inf, count)
    rows = sig_gw.hooks_ls()
    assert len(rows) == accepted, (len(rows), accepted)


# =========================================================================== push delivery

@pytest.fixture
def agent():
    a = Agent(secret=DELIVER_SECRET)
    yield a
    a.stop()


def push_source(agent_url, **kw):
    src = {"verify": "github", "secret": GH_SECRET, "deliver_to": agent_url + "/hooks/in", **RETRY}
    src.update(kw)
    return src


@pytest.fixture
def make_gw(tmp_path, store_kind):
    made = []

    def make(sources, server=None, start=True):
        require_serve()
        g = HookGateway(tmp_path / f"gw{len(made)}", sources, server=server, store_kind=store_kind)
        made.append(g)
        if start:
            g.start()
        return g

    yield make
    for g in made:
        if g.alive():
            stop_clean(g)
        else:
            assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


def post_gh(gw, source, body, delivery=None, **extra):
    h = gh_headers(body, delivery, **extra)
    r = gw.hook(source, body, h)
    assert_accepted(r)
    return h["X-GitHub-Delivery"]


def test_push_delivery_headers_body_and_signature(make_gw, agent):
    gw = make_gw({"push": push_source(agent.url, deliver_secret=DELIVER_SECRET)})
    json_body = b'{"zen":"Design for failure.","n":1}'
    e1 = post_gh(gw, "push", json_body, **{"Content-Type": "application/json; charset=utf-8"})
    bin_body = bytes(range(256)) + b"\xff\xfe\x00"
    e2 = post_gh(gw, "push", bin_body, **{"Content-Type": "application/octet-stream"})
    ds = agent.wait_deliveries(2)
    assert len(ds) == 2, ds
    by_id = {d["headers"].get("once-event-id"): d for d in ds}
    assert set(by_id) == {e1, e2}, ds
    for event_id, body, ctype in ((e1, json_body, "application/json; charset=utf-8"),
                                  (e2, bin_body, "application/octet-stream")):
        d = by_id[event_id]
        h = d["headers"]
        assert d["path"] == "/hooks/in", d
        assert h.get("once-source") == "push", h
        assert h.get("once-attempt") == "1", h
        assert h.get("content-type") == ctype, h
        got = d["body"].encode() if "body" in d else base64.b64decode(d["body_base64"])
        assert got == body, d
        assert h.get("webhook-id") == event_id, h
        assert h.get("webhook-timestamp", "").isdigit() and abs(int(h["webhook-timestamp"]) - time.time()) < 120, h
        assert d["signature"] is True, d["signature_error"]
        # The check in the agent means something: another key or another body fails it.
        other = "whsec_" + base64.b64encode(b"not the deliver secret").decode()
        assert verify_standard(other, h, got)[0] is False
        assert verify_standard(DELIVER_SECRET, h, got + b" ")[0] is False
        assert d["answered"] == 200
    for e in (e1, e2):
        ev = wait_until(lambda: (gw.hooks_show("push", e) or {}).get("state") == "delivered" and
                        gw.hooks_show("push", e), what=f"{e} delivered")
        assert ev["attempt"] == 1 and is_time(ev["delivered_at"]), ev
    m = gw.metrics()
    assert deliveries_total(m, "push", "delivered") == 2
    assert deliveries_total(m, "push", "retried") == 0 and deliveries_total(m, "push", "dead") == 0


def test_push_without_deliver_secret_sends_no_signature(make_gw, agent):
    agent.configure(secret=None)
    gw = make_gw({"push": push_source(agent.url)})
    e = post_gh(gw, "push", b'{"a":1}')
    ds = agent.wait_deliveries(1)
    assert len(ds) == 1 and ds[0]["headers"]["once-event-id"] == e, ds
    assert not {"webhook-id", "webhook-signature", "webhook-timestamp"} & set(ds[0]["headers"]), ds[0]["headers"]


def test_same_event_50_times_concurrently_one_row_one_delivery(make_gw, agent):
    gw = make_gw({"push": push_source(agent.url, deliver_secret=DELIVER_SECRET)})
    body = b'{"action":"completed","check_run":{"id":4}}'
    h = gh_headers(body)
    barrier = threading.Barrier(50)

    def send(_):
        barrier.wait(10)
        return gw.hook("push", body, h)

    with concurrent.futures.ThreadPoolExecutor(50) as ex:
        rs = list(ex.map(send, range(50)))
    for r in rs:
        assert r.status_code == 200, describe(r)
    statuses = sorted(r.json()["status"] for r in rs)
    assert statuses.count("accepted") == 1 and statuses.count("duplicate") == 49, statuses
    rows = gw.hooks_ls(source="push")
    assert [x["event_id"] for x in rows] == [h["X-GitHub-Delivery"]], rows
    ds = agent.wait_deliveries(1)
    assert len(ds) == 1, ds
    wait_until(lambda: gw.hooks_show("push", h["X-GitHub-Delivery"])["state"] == "delivered", what="delivered")
    time.sleep(1.5)
    ds = agent.deliveries()
    assert len(ds) == 1, f"the event was delivered {len(ds)} times: {ds}"
    assert ds[0]["headers"]["once-event-id"] == h["X-GitHub-Delivery"] and ds[0]["signature"] is True, ds
    m = gw.metrics()
    assert webhooks_total(m, "push", "accepted") == 1 and webhooks_total(m, "push", "duplicate") == 49
    assert deliveries_total(m, "push", "delivered") == 1


def test_agent_fails_three_times_then_gets_it_once(make_gw, agent):
    agent.configure(fail_first=3)
    gw = make_gw({"push": push_source(agent.url, max_attempts=10)})
    e = post_gh(gw, "push", b'{"retry":"me"}')
    ds = agent.wait_deliveries(4, timeout=20)
    assert len(ds) >= 4, ds
    wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered")
    time.sleep(1.5)
    ds = agent.deliveries()
    assert [d["headers"]["once-attempt"] for d in ds] == ["1", "2", "3", "4"], ds
    assert [d["answered"] for d in ds] == [500, 500, 500, 200], ds
    assert {d["headers"]["once-event-id"] for d in ds} == {e}
    assert all(d["body"] == '{"retry":"me"}' for d in ds)
    # Backoff: no retry came before the previous answer; they are spread out, not a hot loop.
    times = [d["time"] for d in ds]
    assert all(b >= a for a, b in zip(times, times[1:]))
    ev = gw.hooks_show("push", e)
    assert ev["attempt"] == 4 and ev["state"] == "delivered", ev
    m = gw.metrics()
    assert (deliveries_total(m, "push", "retried"), deliveries_total(m, "push", "delivered"),
            deliveries_total(m, "push", "dead")) == (3, 1, 0)
    # The sender retries an event that was delivered: acknowledged, not delivered again.
    assert_accepted(gw.hook("push", b'{"retry":"me"}', gh_headers(b'{"retry":"me"}', e)), "duplicate")
    time.sleep(1)
    assert len(agent.deliveries()) == 4


def test_retry_delays_respect_retry_cap(make_gw, agent):
    # Full jitter: each retry waits a random time in [0, min(retry_cap, base * 2^(n-1))]. With
    # retry_cap = 100ms no retry should come much later than 100 ms after the failed answer.
    agent.configure(fail_first=5)
    gw = make_gw({"push": push_source(agent.url, max_attempts=10, retry_base="50ms", retry_cap="100ms")})
    post_gh(gw, "push", b'{"gaps":1}')
    ds = agent.wait_deliveries(6, timeout=20)
    assert len(ds) == 6, ds
    t = [d["time"] for d in ds]
    gaps = sorted(b - a for a, b in zip(t, t[1:]))
    median = gaps[len(gaps) // 2]
    assert median < 0.4, (f"retries came {['%.3f' % g for g in gaps]} s apart with retry_cap = 100ms: "
                          f"the backoff is not what is configured")


def test_any_2xx_is_delivered_4xx_is_retried(make_gw, agent):
    agent.configure(fail_first=1, status=404, ok_status=204)
    gw = make_gw({"push": push_source(agent.url)})
    e = post_gh(gw, "push", b'{"x":1}')
    wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered")
    assert [d["answered"] for d in agent.deliveries()] == [404, 204]


def test_body_over_max_body_413_nothing_stored(make_gw):
    gw = make_gw({"gh": {"verify": "github", "secret": GH_SECRET}}, server={"max_body": "64KiB"})
    body = b"{" + b" " * (70 * 1024) + b"}"
    h = gh_headers(body)
    r = gw.hook("gh", body, h)
    assert_problem(r, 413, "body_too_large")
    assert gw.hooks_ls() == []
    assert webhooks_total(gw.metrics(), "gh", "accepted") == 0


def test_agent_never_succeeds_dead_after_max_attempts_then_redeliver(make_gw, agent):
    agent.configure(always_fail=True)
    gw = make_gw({"push": push_source(agent.url, max_attempts=3)})
    e = post_gh(gw, "push", b'{"doomed":true}')
    ev = wait_until(lambda: (lambda x: x if x["state"] == "dead" else None)(gw.hooks_show("push", e)),
                    timeout=20, what="dead")
    assert ev["attempt"] == 3, ev
    assert ev["error"] and "500" in ev["error"], ev
    assert [x["event_id"] for x in gw.hooks_ls(source="push", status="dead")] == [e]
    assert gw.hooks_ls(source="push", status="pending") == []
    time.sleep(1.5)
    ds = agent.deliveries()
    assert [d["headers"]["once-attempt"] for d in ds] == ["1", "2", "3"], ds
    m = gw.metrics()
    assert (deliveries_total(m, "push", "retried"), deliveries_total(m, "push", "dead"),
            deliveries_total(m, "push", "delivered")) == (2, 1, 0)

    agent.configure(always_fail=False)
    gw.redeliver("push", e)
    ds = agent.wait_deliveries(4, timeout=15)
    assert len(ds) == 4, ds
    assert ds[3]["headers"]["once-event-id"] == e and ds[3]["headers"]["once-attempt"] == "4", ds[3]
    assert ds[3]["answered"] == 200
    wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered after redeliver")
    time.sleep(1)
    assert len(agent.deliveries()) == 4
    assert deliveries_total(gw.metrics(), "push", "delivered") == 1


def test_delivery_timeout_is_retried(make_gw, agent):
    agent.configure(hang_first=1, hang_ms=20000)
    gw = make_gw({"push": push_source(agent.url, timeout="1s")})
    t0 = time.monotonic()
    e = post_gh(gw, "push", b'{"slow":1}')
    ds = agent.wait_deliveries(1, timeout=15, pred=lambda d: d["answered"] == 200)
    assert len(ds) == 1, agent.deliveries()
    assert time.monotonic() - t0 < 15, "not retried before the hanging delivery ended by itself"
    ds = agent.deliveries()
    assert [d["headers"]["once-attempt"] for d in ds] == ["1", "2"], ds
    wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered")
    assert deliveries_total(gw.metrics(), "push", "retried") == 1


def test_concurrency_limit(make_gw, agent):
    agent.configure(delay_ms=700)
    gw = make_gw({"push": push_source(agent.url, concurrency=2)})
    ids = [post_gh(gw, "push", json.dumps({"n": i}).encode()) for i in range(6)]
    ds = agent.wait_deliveries(6, timeout=30, pred=lambda d: d["answered"] == 200)
    assert len(ds) == 6, agent.deliveries()
    assert {d["headers"]["once-event-id"] for d in ds} == set(ids)
    st = agent.stats()
    assert st["max_in_flight"] <= 2, st
    assert st["max_in_flight"] == 2, f"deliveries never ran in parallel: {st}"
    assert st["count"] == 6, st


def test_event_id_with_space_is_refused_at_ingress(make_gw, agent):
    # Regression: "evt 1" was accepted, then could never be signed for delivery
    # (webhook-id cannot hold a space) and was retried forever. Event ids are now
    # visible ASCII only, refused before anything is stored.
    gw = make_gw({"push": {"verify": "none", "insecure": "yes", "event_id": "json:/id",
                           "deliver_to": agent.url + "/in", "deliver_secret": DELIVER_SECRET,
                           "max_attempts": 3, **RETRY}})
    r = gw.hook("push", b'{"id":"evt 1"}', {"Content-Type": "application/json"})
    assert_problem(r, 400, "no_event_id")
    assert webhooks_total(gw.metrics(), "push", "no_event_id") == 1
    time.sleep(0.5)
    assert agent.deliveries() == []


def test_inbox_of_push_source_409(make_gw, agent):
    gw = make_gw({"push": push_source(agent.url)})
    for verb, payload in (("claim", {"max": 1}), ("ack", {"receipts": []}), ("nack", {"receipts": []})):
        r = gw.inbox("push", verb, payload)
        assert_problem(r, 409, "push_source")


# =========================================================================== crashes

def test_sigkill_after_ack_before_delivery(make_gw):
    port = free_port()  # nothing listens there yet: every delivery fails to connect
    # timeout 2s: a kill that lands between a claim and its settlement leaves the
    # claim for timeout + 5 s, well inside the wait below.
    gw = make_gw({"push": push_source(f"http://127.0.0.1:{port}", max_attempts=1000, timeout="2s")})
    e = post_gh(gw, "push", b'{"survive":"kill -9"}')
    # At least one delivery attempt failed (connection refused) and the event is pending.
    ev = wait_until(lambda: (lambda x: x if x["attempt"] >= 1 and x["state"] == "pending" else None)(
        gw.hooks_show("push", e)), what="a failed attempt")
    gw.kill()
    agent = Agent(port=port, secret=DELIVER_SECRET)
    try:
        assert gw.hooks_show("push", e)["state"] == "pending"
        gw.restart()
        ds = agent.wait_deliveries(1, timeout=20)
        assert len(ds) == 1, ds
        wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered")
        time.sleep(1.5)
        ds = agent.deliveries()
        assert len(ds) == 1 and ds[0]["headers"]["once-event-id"] == e, ds
        assert int(ds[0]["headers"]["once-attempt"]) > ev["attempt"], (ds, ev)
    finally:
        agent.stop()


def test_sigkill_during_delivery_redelivered_after_claim_lease(make_gw, agent):
    # The agent receives the first delivery and never answers; the gateway dies mid-call.
    # After a restart the claim (timeout + CLAIM_GRACE_MS = 2 s + 5 s) must run out and the
    # same event be delivered again.
    agent.configure(hang_first=1, hang_ms=90000)
    gw = make_gw({"push": push_source(agent.url, timeout="2s", max_attempts=5)})
    e = post_gh(gw, "push", b'{"mid":"delivery"}')
    ds = agent.wait_deliveries(1, timeout=10)
    assert len(ds) == 1, ds
    gw.kill()
    killed_at = time.monotonic()
    assert agent.deliveries()[0]["answered"] == "hang"
    gw.restart()
    ds = agent.wait_deliveries(1, timeout=50, pred=lambda d: d["answered"] == 200)
    assert len(ds) == 1, agent.deliveries()
    waited = time.monotonic() - killed_at
    ds = agent.deliveries()
    assert [d["headers"]["once-event-id"] for d in ds] == [e, e], ds
    assert [d["headers"]["once-attempt"] for d in ds] == ["1", "2"], ds
    wait_until(lambda: gw.hooks_show("push", e)["state"] == "delivered", what="delivered")
    # Not before the claim's lease: no two deliveries of one event at once.
    assert waited > 6, f"redelivered {waited:.1f} s after the kill, before the claim's lease ended"


# =========================================================================== pull inbox

PULL = {"verify": "none", "insecure": "yes", "event_id": "json:/id"}


def post_pull(gw, event_id, source="in", **extra):
    body = json.dumps({"id": event_id, **extra}).encode()
    assert_accepted(gw.hook(source, body, {"Content-Type": "application/json"}))
    return body


def test_pull_claim_ack_nack(make_gw):
    gw = make_gw({"in": PULL, "other": PULL})
    assert gw.claim("in") == []
    ids = [eid() for _ in range(3)]
    bodies = [post_pull(gw, i, n=k) for k, i in enumerate(ids)]
    got = gw.claim("in", max=2, lease_ms=60000)
    assert [g["event_id"] for g in got] == ids[:2], got
    for g, body in zip(got, bodies):
        assert g["attempt"] == 1 and g["state"] == "pending", g
        assert g["body"].encode() == body and g["source"] == "in", g
        assert isinstance(g["receipt"], str) and g["receipt"], g
        assert is_time(g["received_at"]), g
        assert ["Content-Type", "application/json"] in g["headers"] or \
            any(n.lower() == "content-type" for n, _ in g["headers"]), g
    got3 = gw.claim("in", max=10, lease_ms=60000)
    assert [g["event_id"] for g in got3] == ids[2:], got3
    assert gw.claim("in") == [], "an event under a live claim was claimed again"

    # ack
    r1, r2, r3 = got[0]["receipt"], got[1]["receipt"], got3[0]["receipt"]
    assert gw.ack("in", [r1]) == {"acked": 1, "failed": []}
    assert gw.hooks_show("in", ids[0])["state"] == "delivered"
    assert gw.ack("in", [r1]) == {"acked": 1, "failed": []}, "a repeated ack is not idempotent"

    # nack: pending again at once, claimed with attempt 2 and a new receipt; the old one is stale
    assert gw.nack("in", [r2]) == {"nacked": 1, "failed": []}
    again = gw.claim("in", max=10, lease_ms=60000)
    assert [g["event_id"] for g in again] == [ids[1]], again
    assert again[0]["attempt"] == 2 and again[0]["receipt"] != r2, again
    res = gw.ack("in", [r2, again[0]["receipt"]])
    assert res["acked"] == 1 and [f["receipt"] for f in res["failed"]] == [r2], res
    assert res["failed"][0]["code"] == "stale_receipt" and res["failed"][0]["detail"], res

    # nack with a delay: not claimable before it ends
    assert gw.nack("in", [r3], delay_ms=1500) == {"nacked": 1, "failed": []}
    assert gw.claim("in") == []
    time.sleep(1.7)
    later = gw.claim("in")
    assert [g["event_id"] for g in later] == [ids[2]] and later[0]["attempt"] == 2, later

    # receipts that are not ours
    res = gw.ack("in", ["garbage", "1.00000000000000000000000000000000", later[0]["receipt"]])
    assert res["acked"] == 1, res
    codes = {f["receipt"]: f["code"] for f in res["failed"]}
    # Row 1 is ids[0] (acked with another receipt): a well-formed receipt that is not its claim.
    assert codes == {"garbage": "invalid_receipt", "1.00000000000000000000000000000000": "stale_receipt"}, res
    post_pull(gw, "other-1", source="other")
    orec = gw.claim("other")[0]["receipt"]
    res = gw.ack("in", [orec])
    assert res["acked"] == 0 and res["failed"][0]["code"] == "not_found", res
    assert gw.hooks_show("other", "other-1")["state"] == "pending"
    assert [x["event_id"] for x in gw.hooks_ls(source="in", status="delivered")] == ids


def test_pull_lease_expiry_then_claimed_again(make_gw):
    gw = make_gw({"in": PULL})
    e = eid()
    post_pull(gw, e)
    first = gw.claim("in", max=1, lease_ms=600)
    assert [g["event_id"] for g in first] == [e] and first[0]["attempt"] == 1
    assert gw.claim("in", lease_ms=600) == []
    time.sleep(0.8)
    second = gw.claim("in", max=1, lease_ms=60000)
    assert [g["event_id"] for g in second] == [e], second
    assert second[0]["attempt"] == 2 and second[0]["receipt"] != first[0]["receipt"]
    res = gw.ack("in", [first[0]["receipt"]])
    assert res["acked"] == 0 and res["failed"][0]["code"] == "stale_receipt", res
    assert gw.ack("in", [second[0]["receipt"]]) == {"acked": 1, "failed": []}


def test_pull_concurrent_claimers_never_share_an_event(make_gw):
    gw = make_gw({"in": PULL})
    ids = [f"c-{i:03d}" for i in range(60)]
    for i in ids:
        post_pull(gw, i)
    seen = []
    lock = threading.Lock()

    def claimer(_):
        mine = []
        for _ in range(200):
            got = gw.claim("in", max=3, lease_ms=60000)
            if not got:
                break
            mine.extend(g["event_id"] for g in got)
        with lock:
            seen.extend(mine)
        return len(mine)

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        per = list(ex.map(claimer, range(8)))
    assert sorted(seen) == ids, f"duplicates or losses: {len(seen)} claims for {len(ids)} events, per {per}"


def test_pull_binary_body_is_base64(make_gw):
    gw = make_gw({"bin": {"verify": "github", "secret": GH_SECRET}})
    body = b"\x89PNG\r\n\x1a\n\x00\xff"
    d = post_gh(gw, "bin", body, **{"Content-Type": "image/png"})
    got = gw.claim("bin")
    assert len(got) == 1 and got[0]["event_id"] == d, got
    assert "body" not in got[0] and base64.b64decode(got[0]["body_base64"]) == body, got
    assert got[0]["content_type"] == "image/png"


@pytest.mark.parametrize("verb,payload", [
    ("claim", {"max": 0}), ("claim", {"max": 101}), ("claim", {"max": "2"}), ("claim", {"lease_ms": 0}),
    ("claim", {"lease_ms": 1.5}), ("ack", {}), ("ack", {"receipts": "r"}), ("ack", {"receipts": [1]}),
    ("nack", {"receipts": [], "delay_ms": -1}),
])
def test_pull_bad_requests_400(make_gw, verb, payload):
    gw = make_gw({"in": PULL})
    assert_problem(gw.inbox("in", verb, payload), 400, "invalid_request")


def test_pull_invalid_json_unknown_source_unknown_verb(make_gw):
    gw = make_gw({"in": PULL})
    r = requests.post(gw.url + "/v1/inbox/in/claim", data=b"[1,2", timeout=10)
    assert_problem(r, 400, "invalid_json")
    assert_problem(gw.inbox("nope", "claim"), 404, "unknown_source")
    assert_problem(gw.inbox("in", "peek"), 404, "not_found")


def test_pull_inbox_needs_bearer_token_hooks_do_not(make_gw, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("# agents\ntok-agent-1\n")
    gw = make_gw({"in": PULL}, server={"tokens_file": str(tokens)})
    e = eid()
    post_pull(gw, e)  # ingress: authenticated by its signature scheme, no token
    for verb in ("claim", "ack", "nack"):
        r = gw.inbox("in", verb, {"receipts": []} if verb != "claim" else {})
        assert_problem(r, 401, "unauthorized")
        assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), describe(r)
        r = gw.inbox("in", verb, {"receipts": []} if verb != "claim" else {}, token="wrong")
        assert_problem(r, 401, "unauthorized")
    assert gw.hooks_show("in", e)["attempt"] == 0, "an unauthorised claim claimed"
    got = gw.claim("in", token="tok-agent-1")
    assert [g["event_id"] for g in got] == [e]
    assert gw.ack("in", [got[0]["receipt"]], token="tok-agent-1") == {"acked": 1, "failed": []}
