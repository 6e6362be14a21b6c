"""SIGKILL of the gateway at each phase of a proxied action and of a webhook, chosen
deterministically by ONCE_FAULT (a -DONCE_FAULT_INJECTION=ON build), one fresh
gateway per scenario, on SQLite and on PostgreSQL.

Each proxied scenario ends with at most one provider effect per intent, every
reservation that was made durable present after the restart, and — after what a
human does with held actions (resolve from what the provider shows) — exactly
one effect and a replayable answer.
"""
import time
import uuid

import pytest
import requests

from chaoslib import (FAST_LOOP, QUIET_LOOP, STARTUP_COMMITS, Gateway, HookGateway, action, answer_of,
                      died_by_fault, effects_by_intent, fault_env, new_key, send, set_server, settle_held,
                      start_with_env, wait_settled, wait_until)

LEASE = "2s"

PROXY_POINTS = {
    # point: (passage, phase, effects expected at the kill, row expected after restart)
    "before_commit": (STARTUP_COMMITS + 1, "before the reservation commits", 0, False),
    "after_commit": (STARTUP_COMMITS + 1, "after the reservation commits, before anyone heard", 0, True),
    "after_reserve": (1, "after the reservation commits, before the upstream call", 0, True),
    "after_upstream": (1, "after the provider accepted, before the outcome is recorded", 1, True),
    "after_record": (1, "after recording, before replying", 1, True),
}


def _gateway(tmp_path, provider, store_kind, gateways):
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "2s", "lease": LEASE}},
                server={"loop_interval": QUIET_LOOP}, store_kind=store_kind)
    gateways.append(g)
    return g


@pytest.mark.ci
@pytest.mark.parametrize("point", list(PROXY_POINTS))
def test_proxy_sigkill_at_phase(point, store_kind, tmp_path, provider, gateways, row):
    nth, phase, effects_at_kill, row_expected = PROXY_POINTS[point]
    row(f"proxy: SIGKILL {phase} ({point}) [{store_kind}]")
    g = _gateway(tmp_path, provider, store_kind, gateways)
    start_with_env(g, fault_env(point, nth))
    time.sleep(1.0)  # the loop's start-up tick is over; it then sleeps for an hour
    assert g.alive(), f"died before the request: {g.death_note()}"

    key = new_key(point)
    first = send(g, key, {"intent": key, "amount": 500})
    assert died_by_fault(g), f"{point}:{nth} did not kill the gateway under the request ({answer_of(first)})"
    assert isinstance(first, Exception), f"the caller heard an answer from a killed gateway: {answer_of(first)}"
    at_kill = provider.count()
    row.set(store=store_kind, intents=1, kills=1).note(f"first attempt: {answer_of(first)}, "
                                                       f"provider effects at the kill {at_kill}")
    assert at_kill == effects_at_kill, f"{at_kill} effects at the kill, expected {effects_at_kill}"

    set_server(g, loop_interval=FAST_LOOP)
    g.start()
    rec = action(g, "demo", key)
    row.note(f"after restart: {rec['state'] if rec else 'no row'}")
    if row_expected:
        assert rec is not None, "a reservation that was made durable is missing after the restart"
    else:
        assert rec is None, f"a reservation that never committed is present: {rec}"

    # The agent retries, as agents do: never a second effect.
    answers = []
    for _ in range(3):
        answers.append(answer_of(send(g, key, {"intent": key, "amount": 500})))
        time.sleep(0.2)
    assert effects_by_intent(provider)[key] <= 1, f"resent: {provider.count()} effects; answers {answers}"
    rec = wait_settled(g, "demo", key)
    answers.append(answer_of(send(g, key, {"intent": key, "amount": 500})))
    after_retries = effects_by_intent(provider)[key]
    assert after_retries <= 1, f"resent after the lease: {after_retries} effects; answers {answers}"
    row.note("retries: " + ",".join(answers))

    # A human settles what is held (from the provider's own records); then the intent is done once.
    settled = settle_held(g, provider, "demo", [key])
    if settled:
        row.note(f"resolved {settled}")
    final = send(g, key, {"intent": key, "amount": 500})
    assert not isinstance(final, Exception) and final.status_code == 200, answer_of(final)
    again = send(g, key, {"intent": key, "amount": 500})
    assert not isinstance(again, Exception) and again.status_code == 200, answer_of(again)
    assert again.headers.get("Idempotent-Replayed") == "true", answer_of(again)
    n = effects_by_intent(provider)[key]
    row.set(effects=n)
    assert n == 1, f"{n} effects for one intent"
    assert action(g, "demo", key)["state"] == "completed"
    g.stop()


@pytest.mark.ci
def test_proxy_sigkill_mid_stream(store_kind, tmp_path, provider, gateways, row):
    """A streamed LLM answer (text/event-stream) is being relayed when the gateway is
    SIGKILLed: the caller has some frames, the provider has generated (and billed) it.
    After the restart the action is held for a human, never sent again."""
    row(f"proxy: SIGKILL mid-stream (2 of 10 frames relayed) -> held, never resent [{store_kind}]")
    g = _gateway(tmp_path, provider, store_kind, gateways)
    g.start()
    key = new_key("stream")
    body = {"intent": key, "model": "fake", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    hdr = {"X-Fake-Stream-Frames": "10", "X-Fake-Stream-Gap-Ms": "200", "Idempotency-Key": key}
    r = requests.post(f"{g.url}/v1/proxy/demo/chat/completions", json=body, headers=hdr, stream=True, timeout=15)
    assert r.status_code == 200 and r.headers.get("Once-Outcome") == "streaming", answer_of(r)
    seen = b""
    for piece in r.iter_content(chunk_size=None):
        seen += piece
        if seen.count(b"part ") >= 2:
            break
    g.kill()
    r.close()
    row.set(store=store_kind, intents=1, kills=1).note(f"caller saw {seen.count(b'part ')} frames before the kill")
    assert provider.count() == 1

    set_server(g, loop_interval=FAST_LOOP)
    g.start()
    rec = wait_settled(g, "demo", key)
    row.note(f"after restart: {rec['state']}")
    assert rec["state"] == "held", rec
    answers = []
    for _ in range(3):
        a = send(g, key, body, path="/chat/completions", headers={"X-Fake-Stream-Frames": "10"})
        answers.append(answer_of(a))
        assert not isinstance(a, Exception) and a.status_code == 409, answer_of(a)
    row.note("retries: " + ",".join(answers))
    time.sleep(1.0)
    n = provider.count()
    row.set(effects=n)
    assert n == 1, f"resent: {n} effects"
    g.stop()


# --------------------------------------------------------------------------- webhooks

def _hook_gateway(tmp_path, sources, store_kind, gateways, loop=QUIET_LOOP):
    g = HookGateway(tmp_path / "gw", sources, server={"loop_interval": loop}, store_kind=store_kind)
    gateways.append(g)
    return g


def _post_hook(g, source, event_id, timeout=15):
    try:
        return g.hook(source, b'{"type":"chaos"}', {"X-Event-Id": event_id, "Content-Type": "application/json"},
                      timeout=timeout)
    except requests.RequestException as e:
        return e


def _status(r):
    if isinstance(r, Exception):
        return type(r).__name__
    try:
        return f"{r.status_code}/{r.json().get('status') or r.json().get('code')}"
    except ValueError:
        return str(r.status_code)


@pytest.mark.ci
def test_webhook_sigkill_before_durable_insert(store_kind, tmp_path, gateways, row):
    row(f"webhook: SIGKILL before the durable insert -> sender retries -> accepted once [{store_kind}]")
    # A pull source: no delivery loop, so the insert is the first commit after start-up.
    g = _hook_gateway(tmp_path, {"pull": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id"}},
                      store_kind, gateways)
    start_with_env(g, fault_env("before_commit", STARTUP_COMMITS + 1))
    time.sleep(1.0)
    assert g.alive(), g.death_note()
    ev = f"evt_{uuid.uuid4().hex[:16]}"
    first = _post_hook(g, "pull", ev)
    assert died_by_fault(g), f"before_commit did not kill the gateway under the webhook ({_status(first)})"
    assert isinstance(first, Exception), f"the sender heard {_status(first)} from a killed gateway"
    set_server(g, loop_interval=FAST_LOOP)
    g.start()
    assert g.hooks_show("pull", ev) is None, "an event whose insert never committed is stored"
    answers = [_status(_post_hook(g, "pull", ev)) for _ in range(3)]  # the sender retries
    assert answers == ["200/accepted", "200/duplicate", "200/duplicate"], answers
    events = g.claim("pull", max=100)
    assert [e["event_id"] for e in events] == [ev], events
    g.ack("pull", [e["receipt"] for e in events])
    row.set(store=store_kind, events=1, accepted=answers.count("200/accepted"), deliveries=len(events), kills=1)
    row.note(f"first post: {_status(first)}; retries: {','.join(answers)}")
    g.stop()


@pytest.mark.parametrize("point", ["before_delivery", "during_delivery", "agent_saw_it"])
def test_webhook_sigkill_after_ack(point, store_kind, tmp_path, agent, gateways, row):
    what = {"before_delivery": "after the acknowledgement, before delivery -> delivered after restart",
            "during_delivery": "during delivery -> redelivered with the same event id",
            "agent_saw_it": "while the agent holds the delivery (external SIGKILL) -> redelivered, same id"}[point]
    row(f"webhook: SIGKILL {what} [{store_kind}]")
    src = {"push": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id",
                    "deliver_to": agent.url + "/events", "timeout": "1s", "retry_base": "100ms",
                    "retry_cap": "500ms"}}
    g = _hook_gateway(tmp_path, src, store_kind, gateways, loop=FAST_LOOP)
    ev = f"evt_{uuid.uuid4().hex[:16]}"
    if point == "agent_saw_it":
        agent.configure(hang_first=1, hang_ms=4000)
        g.start()
        first = _post_hook(g, "push", ev)
        assert _status(first) == "200/accepted", f"the webhook was not acknowledged: {_status(first)}"
        agent.wait_deliveries(1, timeout=10)
        g.kill()
    else:
        start_with_env(g, fault_env(point, 1))
        first = _post_hook(g, "push", ev)
        assert _status(first) == "200/accepted", f"the webhook was not acknowledged: {_status(first)}"
        assert died_by_fault(g), f"{point} did not kill the gateway"
    before = [d for d in agent.deliveries() if d["headers"].get("once-event-id") == ev]
    before_seqs = {d["seq"] for d in before}
    t_restart = time.monotonic()
    g.start()
    got = wait_until(lambda: [d for d in agent.deliveries() if d["headers"].get("once-event-id") == ev
                              and d.get("answered") == 200 and d["seq"] not in before_seqs] or None,
                     timeout=20, what=f"delivery of {ev} after the restart")
    took = time.monotonic() - t_restart
    time.sleep(1.0)
    all_d = agent.deliveries()
    mine = [d for d in all_d if d["headers"].get("once-event-id") == ev]
    assert len(all_d) == len(mine), f"deliveries of other events: {all_d}"
    assert len(mine) >= 1 and got
    rec = g.hooks_show("push", ev)
    assert rec is not None and rec["state"] in ("delivered", "acked", "done"), rec
    row.set(store=store_kind, events=1, accepted=1, deliveries=len(mine), kills=1)
    row.note(f"before the kill the agent saw {len(before)}; redelivered {took:.1f} s after restart, "
             f"attempts {[d['headers'].get('once-attempt') for d in mine]}; event state {rec['state']}")
    g.stop()
