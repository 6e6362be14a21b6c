"""Approvals (issue 16, docs/approvals.md): a human says yes before the effect, bound to the
exact request.

An upstream's `approve = RULE, ...` makes a matching new request wait: it is stored
durably and answered 202 awaiting_approval; nothing reaches the provider until an
operator approves (`POST /v1/actions/{scope}/{key}/approve`, or `once approve`); then the
gateway sends the stored request itself, once, and the agent's next retry gets the
recorded answer replayed. Denied or expired: retries get 403 denied with the note.

Every test counts the provider's effects: the yes/no answer to "was it sent exactly as
often as a human allowed?".

Run on both stores (store_kind); the three-node test needs $ONCE_TEST_PG_URL.
Run: ONCE_BIN=build/asan/once ONCE_TEST_PG_URL=... /usr/bin/python3 -m pytest -q tests/integration/test_approvals.py
"""
import concurrent.futures
import json
import threading
import time
import urllib.parse

import pytest
import requests

from gateway import (NO_PG_REASON, Gateway, Provider, assert_problem, describe, new_key, outcome, pg_base_url,
                     require_serve, store_url, write_config)
from hooks_harness import parse_metrics
from multinode import Cluster

LOOP_S = 0.2
LEASE_S = 2
SERVER = {"loop_interval": f"{int(LOOP_S * 1000)}ms", "lease": f"{LEASE_S}s"}
SEND_WITHIN_S = 10   # an approved action is sent within one loop interval; slack for ASan on 2 cores
BODY = {"amount": 500, "currency": "eur"}


@pytest.fixture
def provider():
    p = Provider()
    yield p
    p.stop()


def start(tmp_path, provider, store_kind, gateways, server=None, **up):
    require_serve()
    upstream = {"url": provider.url, "approve": "POST /charges*, DELETE /customers/*"}
    upstream.update(up)
    g = Gateway(tmp_path / "gw", {"demo": upstream}, server=dict(SERVER, **(server or {})),
                store_kind=store_kind)
    gateways.append(g)
    g.start()
    return g


def charge(g, key, body=None, headers=None, **kw):
    return g.proxy("POST", "demo", "/charges", key=key, json=BODY if body is None else body, headers=headers, **kw)


def record(g, key):
    r = g.action("demo", key)
    assert r.status_code == 200, describe(r)
    return r.json()


def decide(g, key, verb, note=None, headers=None):
    body = {} if note is None else {"note": note}
    return g.post(f"/v1/actions/demo/{urllib.parse.quote(key, safe='')}/{verb}", json=body, headers=headers)


def wait_state(g, key, states, timeout=SEND_WITHIN_S):
    deadline = time.monotonic() + timeout
    rec = record(g, key)
    while rec["state"] not in states and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = record(g, key)
    return rec


def assert_awaiting(r, key):
    assert r.status_code == 202, describe(r)
    assert outcome(r) == "awaiting_approval", describe(r)
    j = r.json()
    assert j["state"] == "awaiting_approval" and j["scope"] == "demo" and j["key"] == key, j
    assert r.headers.get("Location") == f"/v1/actions/demo/{urllib.parse.quote(key, safe='')}", describe(r)
    return j


def assert_decision(rec, by, note):
    """The record names who decided and why as members of their own (null: undecided, or no note)."""
    assert "decided_by" in rec and "decision_note" in rec, rec
    assert rec["decided_by"] == by and rec["decision_note"] == note, rec


def trail(rec):
    """The record's trail (a JSON array of stamped lines) as one text."""
    return "\n".join(rec.get("trail") or [])


def metric(g, name, **labels):
    r = requests.get(g.url + "/metrics", timeout=10)
    assert r.status_code == 200, describe(r)
    return parse_metrics(r.text).value(name, **labels)


# =========================================================================== the happy path

def test_approved_request_is_sent_once_and_replayed(tmp_path, provider, store_kind, gateways):
    """202 awaiting_approval (body, Location, Once-Outcome) and nothing sent; retries get the
    same 202; GET shows awaiting_approval; approve -> the gateway sends the stored request
    once (within one loop interval); the retry gets the provider's answer replayed; the
    trail names the decider and the note."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("appr")
    r = charge(g, key)
    assert_awaiting(r, key)
    for _ in range(3):
        assert_awaiting(charge(g, key), key)
    rec = record(g, key)
    assert rec["state"] == "awaiting_approval" and rec.get("approved_at") is None, rec
    assert_decision(rec, None, None)
    assert rec["request"]["method"] == "POST" and rec["request"]["target"] == "/charges", rec
    assert json.loads(rec["request"]["body"]) == BODY, rec
    time.sleep(3 * LOOP_S)
    assert provider.count() == 0, "sent before anyone approved"

    a = decide(g, key, "approve", note="looks right")
    assert a.status_code == 200, describe(a)
    assert a.json()["key"] == key
    # without tokens the decider is "operator": a member of the record, not only trail text
    assert_decision(a.json(), "operator", "looks right")
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1, "the approved request was not sent"
    rec = wait_state(g, key, ("completed",))
    assert rec["state"] == "completed", rec
    assert "approved by operator: looks right" in trail(rec), rec
    assert_decision(rec, "operator", "looks right")  # kept after it is sent

    eff = provider.effects()[0]
    assert eff["method"] == "POST" and eff["path"] == "/charges", eff
    assert json.loads(eff["body"]) == BODY, eff
    assert eff["idempotency_key"] is None or eff["idempotency_key"] == key

    r2 = charge(g, key)
    assert r2.status_code == 200 and outcome(r2) == "replayed", describe(r2)
    assert r2.headers.get("Idempotent-Replayed") == "true"
    assert r2.json()["id"] == eff["id"], describe(r2)
    time.sleep(3 * LOOP_S)
    assert provider.count() == 1
    assert metric(g, "once_approvals_total", scope="demo", decision="approved") == 1


def test_requests_outside_the_rules_pass_and_a_key_is_required(tmp_path, provider, store_kind, gateways):
    """Only matching requests wait (method and path pattern; the query is not matched); a
    matching request without an Idempotency-Key is refused, nothing sent."""
    g = start(tmp_path, provider, store_kind, gateways)
    r = g.proxy("POST", "demo", "/refunds", key=new_key("free"), json=BODY)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    r = g.proxy("GET", "demo", "/charges/ch_1")
    assert r.status_code == 200, describe(r)
    key = new_key("q")
    assert_awaiting(g.proxy("POST", "demo", "/charges/sub?x=1", key=key, json=BODY), key)
    key = new_key("del")
    assert_awaiting(g.proxy("DELETE", "demo", "/customers/cu_9", key=key), key)
    r = g.proxy("POST", "demo", "/charges", json=BODY)
    assert_problem(r, 400, "key_required")
    assert provider.count() == 1


# =========================================================================== no

def test_denied_request_is_never_sent(tmp_path, provider, store_kind, gateways):
    """deny with a note: retries get 403 denied carrying the note; approve after deny and a
    second deny are 409 invalid_transition; nothing reaches the provider."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("deny")
    assert_awaiting(charge(g, key), key)
    d = decide(g, key, "deny", note="amount too high")
    assert d.status_code == 200, describe(d)
    assert d.json()["state"] == "denied", d.json()
    assert_decision(d.json(), "operator", "amount too high")
    for _ in range(2):
        r = charge(g, key)
        j = assert_problem(r, 403, "denied")
        assert outcome(r) == "denied", describe(r)
        assert j["note"] == "amount too high", j
    assert_problem(decide(g, key, "approve"), 409, "invalid_transition")
    assert_problem(decide(g, key, "deny"), 409, "invalid_transition")
    assert_problem(decide(g, new_key("nobody"), "approve"), 404, "not_found")
    rec = record(g, key)
    assert rec["state"] == "denied" and "denied by operator: amount too high" in trail(rec), rec
    assert_decision(rec, "operator", "amount too high")
    # without a note: who, and no note
    other = new_key("deny-nonote")
    assert_awaiting(charge(g, other), other)
    d = decide(g, other, "deny")
    assert d.status_code == 200, describe(d)
    assert_decision(d.json(), "operator", None)
    assert d.json()["note"] == "denied by operator", d.json()
    time.sleep(3 * LOOP_S)
    assert provider.count() == 0
    assert metric(g, "once_approvals_total", scope="demo", decision="denied") == 2


def test_undecided_request_expires_after_approve_ttl(tmp_path, provider, store_kind, gateways):
    """approve_ttl = 1s: undecided, the action is denied by the loop with the expiry note;
    retries get 403 denied; approving it then is refused; /metrics counts it expired and the
    oldest-waiting gauge is back to 0."""
    g = start(tmp_path, provider, store_kind, gateways, approve_ttl="1s")
    key = new_key("ttl")
    assert_awaiting(charge(g, key), key)
    assert metric(g, "once_approval_oldest_waiting_seconds") >= 0
    rec = wait_state(g, key, ("denied",), timeout=1 + LOOP_S + 8)
    assert rec["state"] == "denied", rec
    assert "expired" in (rec.get("note") or ""), rec
    assert_decision(rec, None, None)  # nobody decided: no human's name
    j = assert_problem(charge(g, key), 403, "denied")
    assert "expired" in j["note"], j
    assert_problem(decide(g, key, "approve"), 409, "invalid_transition")
    assert provider.count() == 0
    assert metric(g, "once_approvals_total", scope="demo", decision="expired") == 1
    deadline = time.monotonic() + 5
    while metric(g, "once_approval_oldest_waiting_seconds") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(g, "once_approval_oldest_waiting_seconds") == 0


def test_oldest_waiting_gauge_grows(tmp_path, provider, store_kind, gateways):
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("age")
    assert_awaiting(charge(g, key), key)
    time.sleep(1.5)
    deadline = time.monotonic() + 5
    age = metric(g, "once_approval_oldest_waiting_seconds")
    while age < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
        age = metric(g, "once_approval_oldest_waiting_seconds")
    assert age >= 1, age


# =========================================================================== exactly the stored request

@pytest.mark.parametrize("on_mismatch", ["replay", "reject"])
def test_a_different_payload_is_never_approved(tmp_path, provider, store_kind, gateways, on_mismatch):
    """While waiting, a retry with another body is a mismatch per on_mismatch (202 flagged, or
    422); after approval the provider receives the first body, never the second."""
    g = start(tmp_path, provider, store_kind, gateways, on_mismatch=on_mismatch)
    key = new_key("mm")
    assert_awaiting(charge(g, key), key)
    r = charge(g, key, body={"amount": 99999, "currency": "eur"})
    if on_mismatch == "reject":
        assert_problem(r, 422, "payload_mismatch")
    else:
        assert_awaiting(r, key)
        assert r.headers.get("Idempotency-Payload-Mismatch") == "true", describe(r)
    assert decide(g, key, "approve").status_code == 200
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    wait_state(g, key, ("completed",))
    r = charge(g, key, body={"amount": 99999, "currency": "eur"})
    if on_mismatch == "reject":
        assert_problem(r, 422, "payload_mismatch")
    else:
        assert r.status_code == 200 and r.headers.get("Idempotency-Payload-Mismatch") == "true", describe(r)
    time.sleep(3 * LOOP_S)
    effects = provider.effects()
    assert len(effects) == 1 and json.loads(effects[0]["body"]) == BODY, effects


def test_binary_body_and_injected_headers_are_sent_as_stored(tmp_path, provider, store_kind, gateways):
    """A body that is not UTF-8 is stored as base64 and sent byte for byte; the upstream's
    injected header is added at send time (never stored); a client's secret header is not
    stored, so it is not sent either."""
    g = start(tmp_path, provider, store_kind, gateways, header="Authorization: Bearer sk_live_injected")
    key = new_key("bin")
    payload = bytes(range(256)) * 3
    r = g.proxy("POST", "demo", "/charges", key=key, data=payload,
                headers={"Content-Type": "application/octet-stream", "X-Trace": "t-1"})
    assert_awaiting(r, key)
    rec = record(g, key)
    assert "sk_live_injected" not in json.dumps(rec), "an injected credential was stored"
    assert decide(g, key, "approve").status_code == 200
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    eff = provider.effects()[0]
    import base64
    assert base64.b64decode(eff["body_base64"]) == payload, "the body changed on the way"
    assert eff["headers"].get("authorization") == "Bearer sk_live_injected", eff["headers"]
    assert eff["headers"].get("x-trace") == "t-1", eff["headers"]
    assert eff["headers"].get("content-type") == "application/octet-stream", eff["headers"]


def test_a_stored_header_never_stands_in_for_the_injected_one(tmp_path, provider, store_kind, gateways):
    """The attack: an agent stores a request carrying X-Provider-Account: attacker while the
    upstream injects nothing of that name; the operator then configures the upstream to inject
    X-Provider-Account and restarts. The approved send must carry the operator's value only:
    the send re-applies the proxy's header filter instead of trusting what was stored."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("hdr")
    assert_awaiting(charge(g, key, headers={"X-Provider-Account": "attacker", "X-Trace": "t-9"}), key)
    g.stop()
    g.upstreams["demo"]["header"] = "X-Provider-Account: operator"
    write_config(g.config_path, g.server_cfg, g.upstreams)
    g.start()
    assert decide(g, key, "approve").status_code == 200
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    eff = provider.effects()[0]
    sent = [v for k, v in eff["raw_headers"] if k.lower() == "x-provider-account"]
    assert sent == ["operator"], eff["raw_headers"]
    assert eff["headers"].get("x-trace") == "t-9", eff["headers"]


# =========================================================================== waiting, racing

def test_prefer_wait_waits_for_the_decision_and_the_outcome(tmp_path, provider, store_kind, gateways):
    """An agent with Prefer: wait=30 waits while a human decides; approved a second later, it
    gets the provider's answer (replayed from the record) in the same HTTP exchange."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("wait")
    assert_awaiting(charge(g, key), key)
    out = {}

    def run():
        out["r"] = charge(g, key, headers={"Prefer": "wait=30"}, timeout=60)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1.0)
    assert t.is_alive(), f"answered before the decision: {describe(out.get('r'))}"
    assert decide(g, key, "approve").status_code == 200
    t.join(40)
    r = out["r"]
    assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
    assert provider.count() == 1


def test_prefer_wait_times_out_with_202(tmp_path, provider, store_kind, gateways):
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("wait-to")
    assert_awaiting(charge(g, key), key)
    t0 = time.monotonic()
    r = charge(g, key, headers={"Prefer": "wait=1"}, timeout=30)
    assert time.monotonic() - t0 >= 0.9
    assert_awaiting(r, key)


def test_concurrent_approvals_send_once(tmp_path, provider, store_kind, gateways):
    """Eight operators approve at the same moment (and the CLI too): every approve answers
    200 (approving what was approved is a no-op, even once it is being sent or done), the
    provider sees one request, the trail one approval."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("race")
    assert_awaiting(charge(g, key), key)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(decide, g, key, "approve", f"op {i}") for i in range(8)]
        cli = g.cli("approve", "demo", key)
        codes = [f.result().status_code for f in futs]
    assert all(c == 200 for c in codes), codes
    assert cli.returncode == 0, cli.stderr
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    rec = wait_state(g, key, ("completed",))
    assert rec["state"] == "completed", rec
    assert trail(rec).count("approved by") == 1, rec["trail"]
    time.sleep(5 * LOOP_S)
    assert provider.count() == 1


# =========================================================================== the CLI

def test_cli_approval_while_the_gateway_runs(tmp_path, provider, store_kind, gateways):
    """`once approve` writes the decision to the store; the running gateway sends it within
    a loop interval; `once ls --status awaiting_approval` and `once show` show the wait."""
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("cli")
    other = new_key("cli-deny")
    assert_awaiting(charge(g, key), key)
    assert_awaiting(charge(g, other), other)
    ls = g.cli("ls", "--status", "awaiting_approval", "--json")
    assert ls.returncode == 0, ls.stderr
    keys = {a["key"] for a in json.loads(ls.stdout)}
    assert {key, other} <= keys, ls.stdout
    show = g.cli("show", "demo", key)
    assert show.returncode == 0 and "state: awaiting_approval" in show.stdout and "decide_by:" in show.stdout, \
        show.stdout
    assert "decided_by: -" in show.stdout.splitlines(), show.stdout
    shown = g.cli("show", "demo", key, "--json")
    assert shown.returncode == 0, shown.stderr
    assert_decision(json.loads(shown.stdout), None, None)
    a = g.cli("approve", "demo", key, "--note", "ok by phone")
    assert a.returncode == 0, a.stderr
    assert a.stdout.startswith("approved "), a.stdout
    d = g.cli("deny", "demo", other, "--note", "no")
    assert d.returncode == 0, d.stderr
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    rec = wait_state(g, key, ("completed",))
    assert rec["state"] == "completed" and "approved by cli: ok by phone" in trail(rec), rec
    assert_decision(rec, "cli", "ok by phone")
    j = assert_problem(charge(g, other), 403, "denied")
    assert j["note"] == "no"
    # `once show --json` is the same record; `once show` prints both lines
    for k, note in ((key, "ok by phone"), (other, "no")):
        shown = g.cli("show", "demo", k, "--json")
        assert shown.returncode == 0, shown.stderr
        assert_decision(json.loads(shown.stdout), "cli", note)
        shown = g.cli("show", "demo", k)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert "decided_by: cli" in lines and f"decision_note: {note}" in lines, shown.stdout
    again = g.cli("deny", "demo", key)
    assert again.returncode == 1 and again.stderr.startswith("once: ") and len(again.stderr.splitlines()) == 1, \
        again.stderr
    missing = g.cli("approve", "demo")
    assert missing.returncode == 1 and "missing KEY" in missing.stderr, missing.stderr
    time.sleep(3 * LOOP_S)
    assert provider.count() == 1


# =========================================================================== crashes

def test_sigkill_while_an_approved_action_is_sent_is_held_never_resent(tmp_path, provider, store_kind, gateways):
    """The approved request hangs at the provider and the gateway is SIGKILLed; restarted, the
    action goes unknown -> held within a lease (+ loop, + slack), retries get 409
    outcome_unknown, and nothing is sent a second time."""
    g = start(tmp_path, provider, store_kind, gateways, timeout="60s")
    key = new_key("kill")
    assert_awaiting(charge(g, key, headers={"X-Fake-Hang": "1"}), key)
    assert decide(g, key, "approve").status_code == 200
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    g.kill()
    g.start()
    rec = wait_state(g, key, ("held",), timeout=LEASE_S + LOOP_S + 10)
    assert rec["state"] == "held", rec
    r = charge(g, key)
    assert_problem(r, 409, "outcome_unknown")
    time.sleep(5 * LOOP_S)
    assert provider.count() == 1


# =========================================================================== who may decide

def test_only_operators_decide_and_the_trail_names_them(tmp_path, provider, store_kind, gateways):
    """With tokens: an agent token gets 403 on approve and deny; the operator's token name is
    what the trail records."""
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-agent-aaaaaaaaaaaaaaaa agent bot\ntok-oper-bbbbbbbbbbbbbbbbbb operator alice\n")
    tokens.chmod(0o600)
    g = start(tmp_path, provider, store_kind, gateways, server={"tokens_file": str(tokens)})
    agent = {"Authorization": "Bearer tok-agent-aaaaaaaaaaaaaaaa"}
    oper = {"Authorization": "Bearer tok-oper-bbbbbbbbbbbbbbbbbb"}
    key = new_key("roles")
    assert_awaiting(charge(g, key, headers=agent), key)
    assert_problem(decide(g, key, "approve", headers=agent), 403, "forbidden")
    assert_problem(decide(g, key, "deny", headers=agent), 403, "forbidden")
    assert_problem(decide(g, key, "approve"), 401, "unauthorized")
    a = decide(g, key, "approve", note="ok", headers=oper)
    assert a.status_code == 200, describe(a)
    assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
    assert_decision(a.json(), "alice", "ok")
    r = g.action("demo", key, headers=oper)
    assert "approved by alice: ok" in trail(r.json()), r.json()
    assert_decision(r.json(), "alice", "ok")
    no = new_key("roles-deny")
    assert_awaiting(charge(g, no, headers=agent), no)
    d = decide(g, no, "deny", headers=oper)
    assert d.status_code == 200, describe(d)
    assert_decision(d.json(), "alice", None)
    assert_decision(g.action("demo", no, headers=oper).json(), "alice", None)


def test_bad_decision_bodies_are_refused(tmp_path, provider, store_kind, gateways):
    g = start(tmp_path, provider, store_kind, gateways)
    key = new_key("bad")
    assert_awaiting(charge(g, key), key)
    r = g.post(f"/v1/actions/demo/{key}/approve", data="not json", headers={"Content-Type": "application/json"})
    assert_problem(r, 400, "invalid_json")
    assert_problem(g.post(f"/v1/actions/demo/{key}/approve", json={"note": 5}), 400, "invalid_request")
    assert_problem(g.raw("POST", "/v1/actions/demo/%ZZ/approve", body=b"{}",
                         headers={"Content-Type": "application/json"}), 400, "bad_request")
    assert_problem(g.post(f"/v1/actions/demo/{'k' * 300}/approve", json={}), 400, "bad_request")
    assert_problem(g.raw("POST", "/v1/actions/demo/a%01b/deny", body=b"", headers={}), 400, "invalid_key")
    assert provider.count() == 0


# =========================================================================== configuration

@pytest.mark.parametrize("line, message", [
    ("approve = post /x", "METHOD PATTERN"),
    ("approve = POST x", "METHOD PATTERN"),
    ("approve = POST /x?y", "not allowed in the path pattern"),
    ("approve_ttl = 1h", "does nothing without approve"),
    ("approve = all\napprove_ttl = 0s", "approve_ttl"),
])
def test_config_errors(cli, tmp_path, line, message):
    cfg = tmp_path / "once.ini"
    cfg.write_text(f"[upstream.demo]\nurl = http://127.0.0.1:9\n{line}\n")
    r = cli("check-config", cfg)
    assert r.returncode != 0, r.stdout
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# =========================================================================== several nodes

def test_three_nodes_send_an_approved_action_once(tmp_path, provider, gateways):
    """Three gateways on one PostgreSQL: the request arrives at node 0, all three nodes (and
    the CLI) approve at once; exactly one node sends it; every node replays the answer."""
    if not pg_base_url():
        pytest.skip(NO_PG_REASON)
    url = store_url("postgres", tmp_path)
    c = Cluster(tmp_path / "c", url, 3,
                upstreams={"demo": {"url": provider.url, "approve": "POST /charges"}}, server=SERVER)
    try:
        c.start()
        key = new_key("mn")
        assert_awaiting(charge(c[0], key), key)
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            futs = [ex.submit(decide, c[i], key, "approve", f"node {i}") for i in range(3)]
            cli = c[2].cli("approve", "demo", key)
            codes = [f.result().status_code for f in futs]
        assert codes == [200, 200, 200], codes
        assert cli.returncode == 0, cli.stderr
        assert provider.wait_count(1, timeout=SEND_WITHIN_S) == 1
        rec = wait_state(c[1], key, ("completed",))
        assert rec["state"] == "completed", rec
        for g in c.nodes:
            r = charge(g, key)
            assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
        time.sleep(5 * LOOP_S)
        assert provider.count() == 1
    finally:
        c.stop_clean()
