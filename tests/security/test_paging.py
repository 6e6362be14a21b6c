"""Pages are bounded in bytes, not only in items: 24 records of ~700 KB each asked for
with limit=1000 (or max=100) would be a 17 MB answer built in memory at once. An
agent (or anyone who can store big results) must not make the gateway do that: a
page stops under 12 MiB and says where to go on, and paging on returns every record
exactly once.
"""
import json
import uuid

import pytest

from gateway import describe, new_key

N = 24
BIG = 700 * 1024
PAGE_LIMIT = 12 * 1024 * 1024
MAX_PAGES = 3 * N           # a bound on the paging loops


@pytest.fixture
def gw(gateway):
    return gateway(server={"max_body": "1MiB"},
                   sources={"feed": {"verify": "none", "insecure": True, "event_id": "header:X-Event-Id"}})


def filler(i):
    """~700 KB of text, different per record."""
    return (f"{i:04d}-{uuid.uuid4().hex}-" * (BIG // 38 + 1))[:BIG]


def assert_bounded_page(r, what):
    assert r.status_code == 200, describe(r)
    size = len(r.content)
    assert size < PAGE_LIMIT, f"{what}: an answer of {size} bytes, over {PAGE_LIMIT}"


def test_action_list_pages_are_bounded(gw):
    """24 actions completed with ~700 KB results; GET /v1/actions?limit=1000 answers
    fewer than 24 with a `next`, under 12 MiB; following `next` gives each once."""
    keys = set()
    for i in range(N):
        key = new_key(f"big{i:02d}")
        r = gw.post("/v1/actions", json={"scope": "bulk", "key": key})
        assert r.status_code == 201, describe(r)
        r = gw.post("/v1/actions/complete", json={"scope": "bulk", "key": key, "token": r.json()["token"],
                                                   "result": {"text": filler(i)}})
        assert r.status_code == 200, describe(r)
        keys.add(key)

    r = gw.get("/v1/actions?limit=1000")
    assert_bounded_page(r, "first page")
    page = r.json()
    assert len(page["items"]) < N and page.get("next"), \
        f"one page of {len(page['items'])} items ({len(r.content)} bytes), next={page.get('next')!r}"

    seen = [i["key"] for i in page["items"]]
    for _ in range(MAX_PAGES):
        if not page.get("next"):
            break
        r = gw.get("/v1/actions", params={"limit": 1000, "after": page["next"]})
        assert_bounded_page(r, f"page after {len(seen)} items")
        page = r.json()
        assert page["items"] or not page.get("next"), "an empty page that is not the last"
        seen += [i["key"] for i in page["items"]]
    assert not page.get("next"), f"still a next page after {MAX_PAGES} pages"
    assert sorted(seen) == sorted(keys), f"{len(seen)} items seen for {N} actions (each must come once)"


def test_inbox_claims_are_bounded(gw):
    """24 webhook events of ~700 KB; a claim of max=100 returns fewer than 24, under
    12 MiB; claiming on gets every event exactly once."""
    ids = set()
    for i in range(N):
        eid = f"evt-{i:02d}-{uuid.uuid4().hex[:8]}"
        r = gw.hook("feed", json.dumps({"i": i, "text": filler(i)}), {"X-Event-Id": eid,
                                                                        "Content-Type": "application/json"})
        assert r.status_code == 200 and r.json() == {"status": "accepted"}, describe(r)
        ids.add(eid)

    seen, sizes = [], []
    for _ in range(MAX_PAGES):
        r = gw.inbox("feed", "claim", {"max": 100, "lease_ms": 600000})
        assert_bounded_page(r, f"claim after {len(seen)} events")
        events = r.json()["events"]
        if not events:
            break
        sizes.append(len(events))
        seen += [e["event_id"] for e in events]
    else:
        raise AssertionError(f"still claiming after {MAX_PAGES} claims")
    assert sizes and sizes[0] < N, f"the first claim returned all {N} events at once ({sizes})"
    assert sorted(seen) == sorted(ids), f"{len(seen)} events claimed for {N} (each must come once)"
