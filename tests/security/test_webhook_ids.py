"""Webhook ids that the signature does not cover are not trusted alone.

- GitHub signs the body only; X-GitHub-Delivery is not signed. Whoever captured one
  delivery can replay its body under a fresh delivery id: that must be a duplicate
  (dedupe on the body digest too), while a different body is a new event.
- Standard Webhooks / Svix sign "id.timestamp.body". A request signed with svix-*
  headers, replayed with an added `webhook-id: other-N`, must not become a new event:
  the event id is the one the signature covered. (And the other way round.)
"""
import base64
import json
import uuid

import pytest

from hooks_harness import sign_github, standard_headers
from gateway import describe

GH_SECRET = "security-suite-github-secret"
SW_SECRET = "whsec_" + base64.b64encode(b"security suite standard webhooks key").decode()


@pytest.fixture
def gw(gateway):
    """Two pull sources: gh (github) and sw (standard)."""
    return gateway(sources={"gh": {"verify": "github", "secret": GH_SECRET},
                            "sw": {"verify": "standard", "secret": SW_SECRET}})


def body(**extra):
    return json.dumps(dict({"action": "opened", "nonce": uuid.uuid4().hex}, **extra)).encode()


def assert_status(r, status):
    assert r.status_code == 200 and r.json() == {"status": status}, f"expected {status}" + describe(r)


def inbox(gw, source):
    """Every event waiting in the source's inbox (claimed for a minute)."""
    return gw.claim(source, max=100, lease_ms=60000)


def gh_delivery(gw, payload, delivery=None):
    return gw.hook("gh", payload, {"X-Hub-Signature-256": sign_github(GH_SECRET, payload),
                                   "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                                   "X-GitHub-Event": "issues", "Content-Type": "application/json"})


def test_github_body_replayed_under_a_new_delivery_id(gw):
    """A captured GitHub delivery resent with a fresh X-GitHub-Delivery: duplicate; the
    same delivery again: duplicate; another body: accepted. Two events in all."""
    first, other, delivery = body(), body(action="closed"), str(uuid.uuid4())
    assert_status(gh_delivery(gw, first, delivery), "accepted")
    assert_status(gh_delivery(gw, first, delivery), "duplicate")
    for _ in range(3):
        assert_status(gh_delivery(gw, first), "duplicate")      # a fresh delivery id each time
    assert_status(gh_delivery(gw, other), "accepted")
    events = inbox(gw, "gh")
    assert sorted(e["body"].encode() for e in events) == sorted([first, other]), events


def svix(headers):
    return {k.replace("webhook-", "svix-"): v for k, v in headers.items()}


@pytest.mark.parametrize("signed_with,added", [("svix", "webhook-id"), ("webhook", "svix-id")])
def test_standard_webhooks_unsigned_id_header(gw, signed_with, added):
    """A request signed with one family of headers (svix-* or webhook-*) replayed with an
    extra id header of the other family: duplicate, never a second event."""
    payload = body()
    signed = standard_headers(SW_SECRET, "msg_" + uuid.uuid4().hex[:20], payload)
    if signed_with == "svix":
        signed = svix(signed)
    signed["Content-Type"] = "application/json"
    assert_status(gw.hook("sw", payload, signed), "accepted")
    for n in range(3):
        assert_status(gw.hook("sw", payload, dict(signed, **{added: f"other-{n}"})), "duplicate")
    events = inbox(gw, "sw")
    assert len(events) == 1, events
    assert events[0]["event_id"] == signed.get("webhook-id", signed.get("svix-id")), events


def test_standard_webhooks_new_message_is_accepted(gw):
    """A genuinely new message (its own id, signed) is a new event, with either headers."""
    for family in ("webhook", "svix"):
        payload = body()
        h = standard_headers(SW_SECRET, "msg_" + uuid.uuid4().hex[:20], payload)
        assert_status(gw.hook("sw", payload, svix(h) if family == "svix" else h), "accepted")
    assert len(inbox(gw, "sw")) == 2


def test_unverified_source_keeps_events_with_the_same_body(gateway):
    """Regression: with verify = none there is no signature to replay, so the body digest
    must not merge two events that share a body (a ping sent twice is two events). The
    chaos flood test found this: 30 events with one body became one."""
    g = gateway(sources={"open": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id"}})
    same = b'{"type":"ping"}'
    for ev in ("evt_a", "evt_b", "evt_c"):
        assert_status(g.hook("open", same, {"X-Event-Id": ev, "Content-Type": "application/json"}), "accepted")
    assert_status(g.hook("open", same, {"X-Event-Id": "evt_b", "Content-Type": "application/json"}), "duplicate")
    assert sorted(e["event_id"] for e in inbox(g, "open")) == ["evt_a", "evt_b", "evt_c"]
