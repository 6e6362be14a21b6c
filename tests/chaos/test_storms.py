"""Storms: many agents retrying the same intents concurrently across 3 nodes on one
PostgreSQL; LLM drift (the same key with a different body on every retry); webhook
redelivery floods. One effect per intent, one acceptance per event, no event lost."""
import collections
import concurrent.futures
import os
import random
import threading
import time
import uuid

import pytest
import requests

from chaoslib import (Gateway, HookGateway, answer_of, effects_by_intent, pg_base_url, pg_schemas_made, send,
                      wait_until)
from multinode import Cluster, new_schema, with_schema
from gateway import NO_PG_REASON


def _cluster(tmp_path, n, upstreams=None, sources=None, gateways=None):
    base = pg_base_url()
    if not base:
        pytest.skip(NO_PG_REASON)
    schema = new_schema("chaos")
    pg_schemas_made.append(schema)
    c = Cluster(tmp_path, with_schema(base, schema), n, upstreams=upstreams, sources=sources,
                server={"loop_interval": "500ms"})
    if gateways is not None:
        gateways.extend(c.nodes)
    c.start()
    return c


def _until_done(nodes, key, body_fn, path="/charges", deadline_s=60, headers=None, rng=None):
    """An agent that retries one intent on random nodes until it gets a 200; returns
    (final response, attempts, answers seen)."""
    rng = rng or random
    seen = collections.Counter()
    deadline = time.monotonic() + deadline_s
    n = 0
    while time.monotonic() < deadline:
        g = rng.choice(nodes)
        n += 1
        r = send(g, key, body_fn(n), path=path, headers=headers, timeout=20)
        seen[answer_of(r)] += 1
        if not isinstance(r, Exception) and r.status_code == 200:
            return r, n, seen
        if not isinstance(r, Exception) and r.status_code in (400, 404, 413, 422):
            return None, n, seen  # a refusal no retry will change
        time.sleep(rng.uniform(0.01, 0.1))
    return None, n, seen


@pytest.mark.ci
def test_storm_same_intents_three_nodes(tmp_path, provider, gateways, row):
    row("storm: 16 agents retry the same 40 intents at once on 3 nodes (PostgreSQL)")
    c = _cluster(tmp_path, 3, upstreams={"demo": {"url": provider.url, "timeout": "5s", "lease": "10s"}},
                 gateways=gateways)
    intents = [f"storm-{uuid.uuid4().hex[:10]}-{i}" for i in range(40)]
    answers = collections.Counter()
    firsts = collections.defaultdict(set)
    lock = threading.Lock()

    def agent(i):
        rng = random.Random(i)
        for k in rng.sample(intents, len(intents)):
            r, _, seen = _until_done(c.nodes, k, lambda n, k=k: {"intent": k, "amount": 100},
                                     headers={"X-Fake-Delay-Ms": "150"}, rng=rng)
            with lock:
                answers.update(seen)
                if r is not None:
                    firsts[k].add(r.json().get("id"))

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        for f in [ex.submit(agent, i) for i in range(16)]:
            f.result()
    per = effects_by_intent(provider)
    dup = {k: n for k, n in per.items() if n > 1}
    row.set(store="postgres x3", intents=len(intents), effects=provider.count(), kills=0,
            requests=sum(answers.values()))
    row.note("answers " + ", ".join(f"{k}:{v}" for k, v in sorted(answers.items())))
    assert not dup, f"intents with more than one effect: {dup}"
    assert provider.count() == len(intents)
    assert all(len(v) == 1 for v in firsts.values()), "an intent answered with two different effects"
    assert len(firsts) == len(intents), "some agent never got its answer"
    c.stop_clean()


@pytest.mark.ci
@pytest.mark.parametrize("where", ["sqlite", "postgres-3-nodes"])
def test_llm_drift(where, tmp_path, provider, gateways, row):
    row(f"LLM drift: same key, a different body on every retry, 8 agents at once [{where}]")
    ups = {"demo": {"url": provider.url, "timeout": "5s", "lease": "10s"}}
    if where == "sqlite":
        g = Gateway(tmp_path / "gw", ups, store_kind="sqlite")
        gateways.append(g)
        g.start()
        nodes = [g]
    else:
        nodes = _cluster(tmp_path, 3, upstreams=ups, gateways=gateways).nodes
    keys = [f"conv-{uuid.uuid4().hex[:8]}:turn-{i}" for i in range(20)]
    ids = collections.defaultdict(set)
    mismatch = collections.Counter()
    lock = threading.Lock()

    def body(k, n, rng):
        # what a retried LLM client sends: the same intent, re-generated
        return {"intent": k, "model": "m", "temperature": round(rng.random(), 3),
                "messages": [{"role": "user", "content": f"draft {n} {rng.random()}"}]}

    def agent(i):
        rng = random.Random(100 + i)
        for k in rng.sample(keys, len(keys)):
            r, _, _ = _until_done(nodes, k, lambda n, k=k: body(k, n, rng), path="/v1/chat/completions",
                                  headers={"X-Fake-Delay-Ms": "100"}, rng=rng)
            assert r is not None, f"{k}: no answer"
            with lock:
                ids[k].add(r.json()["id"])
                if r.headers.get("Idempotency-Payload-Mismatch") == "true":
                    mismatch[k] += 1

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for f in [ex.submit(agent, i) for i in range(8)]:
            f.result()
    per = effects_by_intent(provider)
    row.set(store=where, intents=len(keys), effects=provider.count(), kills=0,
            mismatch_replays=sum(mismatch.values()))
    assert all(n == 1 for n in per.values()) and len(per) == len(keys), per
    assert all(len(v) == 1 for v in ids.values()), f"one key answered with two generations: {dict(ids)}"
    assert sum(mismatch.values()) > 0, "no replay was flagged Idempotency-Payload-Mismatch"
    row.note("every agent got the first generation of its key")


@pytest.mark.ci
@pytest.mark.parametrize("where", ["sqlite", "postgres-3-nodes"])
def test_webhook_redelivery_flood(where, tmp_path, agent, gateways, row):
    n_events, copies = 30, 8
    row(f"webhook flood: {n_events} events x {copies} copies at once -> one acceptance each, none lost [{where}]")
    src = {"push": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id",
                    "deliver_to": agent.url + "/events", "timeout": "5s", "retry_base": "100ms",
                    "retry_cap": "1s"}}
    if where == "sqlite":
        g = HookGateway(tmp_path / "gw", src, store_kind="sqlite")
        gateways.append(g)
        g.start()
        nodes = [g]
    else:
        nodes = _cluster(tmp_path, 3, sources=src, gateways=gateways).nodes
    events = [f"evt_{uuid.uuid4().hex[:12]}" for _ in range(n_events)]
    jobs = [e for e in events for _ in range(copies)]
    random.Random(7).shuffle(jobs)
    results = collections.Counter()
    per_event = collections.defaultdict(collections.Counter)
    lock = threading.Lock()

    def post(i_ev):
        i, ev = i_ev
        g = nodes[i % len(nodes)]
        for _ in range(20):  # the sender retries until it hears 2xx
            try:
                r = g.hook("push", b'{"type":"flood"}', {"X-Event-Id": ev, "Content-Type": "application/json"},
                           timeout=20)
                if r.status_code == 200:
                    st = r.json()["status"]
                    with lock:
                        results[st] += 1
                        per_event[ev][st] += 1
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)

    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        list(ex.map(post, enumerate(jobs)))
    accepted_once = all(per_event[e]["accepted"] == 1 for e in events)
    got = wait_until(lambda: {d["headers"].get("once-event-id") for d in agent.deliveries()} >= set(events),
                     timeout=30, what="every event delivered")
    ds = agent.deliveries()
    delivered = collections.Counter(d["headers"].get("once-event-id") for d in ds)
    row.set(store=where, events=n_events, accepted=results["accepted"], duplicates=results["duplicate"],
            deliveries=len(ds), kills=0)
    assert got
    assert accepted_once, {e: dict(per_event[e]) for e in events if per_event[e]["accepted"] != 1}
    assert results["accepted"] + results["duplicate"] == len(jobs), results
    assert set(delivered) == set(events), "an event was lost or an unknown one delivered"
    row.note(f"distinct delivered {len(delivered)}; delivered more than once {sum(1 for v in delivered.values() if v > 1)}")
