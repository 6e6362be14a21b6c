#!/usr/bin/python3
"""Randomised soak of once (run by scripts/soak; not a pytest file).

3 gateway nodes on one PostgreSQL (--pg-url), the fake provider and a fake agent
(push webhooks). N simulated agents send intents (proxied POSTs) and webhooks
with random retries and random duplicates; a killer SIGKILLs a random node every
few seconds and restarts it a moment later. At the end: every node restarted,
leases left to run out, held actions settled the way a human would (resolved
from the provider's own records), every intent retried until it is done. Then:

    provider effects == distinct intents (and no intent with two effects)
    deliveries >= accepted events, every accepted event delivered (none lost)
    no action left pending

Exits 0 when every invariant holds, 1 otherwise; prints a report.
"""
import argparse
import collections
import os
import random
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaoslib  # noqa: E402
from chaoslib import Agent, Provider, action, answer_of, effects_by_intent, list_actions, send, settle_held  # noqa: E402
from multinode import Cluster, new_schema, with_schema  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--pg-url", required=True)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    duration = max(5.0, min(a.duration, 3600.0))  # bounded
    rng = random.Random(a.seed)
    print(f"soak: {duration:.0f} s, {a.agents} agents, {a.nodes} nodes, seed {a.seed}", flush=True)

    provider, agent = Provider(), Agent()
    src = {"push": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id",
                    "deliver_to": agent.url + "/events", "timeout": "2s", "retry_base": "100ms",
                    "retry_cap": "1s", "max_attempts": 1000}}
    ups = {"demo": {"url": provider.url, "timeout": "2s", "lease": "3s"}}
    c = Cluster(a.workdir, with_schema(a.pg_url, new_schema("soak")), a.nodes, upstreams=ups, sources=src,
                server={"loop_interval": "300ms"})
    c.start()
    lock = threading.Lock()
    intents, events_acked = set(), set()
    answers, hook_answers = collections.Counter(), collections.Counter()
    kills = [0]
    stop = threading.Event()

    def live_node(r):
        nodes = [g for g in c.nodes if g.alive()] or c.nodes
        return r.choice(nodes)

    def sim_agent(i):
        r = random.Random(a.seed * 1000 + i)
        while not stop.is_set():
            if r.random() < 0.25:
                ev = f"evt-{i}-{uuid.uuid4().hex[:10]}"
                for _ in range(r.randint(1, 4)):  # the sender retries / redelivers
                    g = live_node(r)
                    try:
                        resp = g.hook("push", b'{"t":"soak"}', {"X-Event-Id": ev, "Content-Type": "application/json"},
                                      timeout=10)
                        st = f"{resp.status_code}/{resp.json().get('status') or resp.json().get('code')}"
                        with lock:
                            hook_answers[st] += 1
                            if resp.status_code == 200:
                                events_acked.add(ev)
                    except Exception as e:  # noqa: BLE001
                        with lock:
                            hook_answers[type(e).__name__] += 1
                    time.sleep(r.uniform(0, 0.2))
                continue
            k = f"soak-{i}-{uuid.uuid4().hex[:10]}"
            with lock:
                intents.add(k)
            for _ in range(r.randint(1, 5)):  # random retries, to random nodes
                resp = send(live_node(r), k, {"intent": k, "v": r.random()}, timeout=10,
                            headers={"X-Fake-Delay-Ms": str(r.choice([0, 0, 50, 300]))})
                with lock:
                    answers[answer_of(resp)] += 1
                if not isinstance(resp, Exception) and resp.status_code == 200 and r.random() < 0.7:
                    break
                time.sleep(r.uniform(0.01, 0.3))

    def killer():
        r = random.Random(a.seed + 1)
        while not stop.wait(r.uniform(2.0, 5.0)):
            g = r.choice(c.nodes)
            if g.alive():
                g.kill()
                kills[0] += 1
                time.sleep(r.uniform(0.2, 1.5))
                g.start()

    threads = [threading.Thread(target=sim_agent, args=(i,), daemon=True) for i in range(a.agents)]
    kt = threading.Thread(target=killer, daemon=True)
    for t in threads + [kt]:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in threads + [kt]:
        t.join(60)

    # -------- the end: every node up, leases run out, held settled, every intent done
    for g in c.nodes:
        if not g.alive():
            g.start()
    c.wait_ready()
    g0 = c.nodes[0]
    time.sleep(3 + 1)
    deadline = time.monotonic() + 30
    while list_actions(g0, status="pending") and time.monotonic() < deadline:
        time.sleep(0.3)
    time.sleep(1)
    keys = sorted(intents)
    settled = settle_held(g0, provider, "demo", keys)
    unfinished = []
    for k in keys:
        for _ in range(20):
            resp = send(g0, k, {"intent": k, "final": True}, timeout=10)
            if not isinstance(resp, Exception) and resp.status_code == 200:
                break
            if not isinstance(resp, Exception) and resp.status_code == 409 and \
                    resp.json().get("state") in ("unknown", "held"):
                settle_held(g0, provider, "demo", [k])
            time.sleep(0.2)
        else:
            unfinished.append(k)
    # webhooks: every acknowledged event delivered
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        delivered = {d["headers"].get("once-event-id") for d in agent.deliveries() if d.get("answered") == 200}
        if events_acked <= delivered:
            break
        time.sleep(0.5)
    ds = agent.deliveries()
    delivered = {d["headers"].get("once-event-id") for d in ds if d.get("answered") == 200}
    per = effects_by_intent(provider)
    dups = {k: n for k, n in per.items() if n > 1}
    pending = list_actions(g0, status="pending")
    lost = sorted(events_acked - delivered)
    c.stop_clean()

    checks = [
        ("provider effects == distinct intents", provider.count() == len(keys) and set(per) == set(keys),
         f"effects {provider.count()}, intents {len(keys)}"),
        ("no intent with two effects", not dups, f"{len(dups)} duplicated {list(dups)[:3]}"),
        ("every intent finished", not unfinished, f"{len(unfinished)} unfinished {unfinished[:3]}"),
        ("deliveries >= events, none lost", len(ds) >= len(events_acked) and not lost,
         f"deliveries {len(ds)}, acknowledged events {len(events_acked)}, lost {len(lost)} {lost[:3]}"),
        ("no action left pending", not pending, f"pending {len(pending)}"),
    ]
    print(f"soak report: {duration:.0f} s, seed {a.seed}, nodes {a.nodes}, agents {a.agents}, kills {kills[0]}")
    print(f"  intents {len(keys)}, effects {provider.count()}, held settled {settled}")
    print(f"  proxy answers {dict(answers)}")
    print(f"  webhook answers {dict(hook_answers)}")
    ok = True
    for name, good, ev in checks:
        ok &= bool(good)
        print(f"  {'yes' if good else 'NO '}  {name}: {ev}")
    provider.stop()
    agent.stop()
    print("soak: " + ("all invariants hold" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
