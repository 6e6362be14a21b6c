"""The operator console (GET /console, docs/console.md) in a real browser.

Headless Chromium (/usr/bin/chromium, Debian's `chromium` package) driven by puppeteer-core
(tests/clients/console_driver.mjs, installed by `npm ci` in tests/clients). Each test starts a
gateway of its own (SQLite store, a tokens_file with an operator and an agent, an upstream with
approvals, an upstream whose lookup settles nothing, a push webhook source to a fake agent), puts
rows into it through the HTTP API as agents and senders would, runs one scenario of the driver,
and asserts on what the driver saw in the page and on the store (through the API), and on what
the provider and the agent received.

Every scenario also checks what the page did: each request stayed on the gateway's origin; no
console error (a Content-Security-Policy violation is one), no uncaught error, no CSP violation
event, no dialog (alert()), no cookie, nothing in localStorage.

Skipped, with the reason, when /usr/bin/chromium is missing (scripts/deps installs it).
Run: ONCE_BIN=build/asan/once /usr/bin/python3 -m pytest -q tests/integration/test_console.py
Set ONCE_CONSOLE_SCREENSHOT=1 to write the laptop screenshot to docs/img/console.png.
"""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from gateway import REPO_ROOT, assert_problem, describe, require_serve
from hooks_harness import Agent, HookGateway, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CLIENTS = REPO_ROOT / "tests" / "clients"
DRIVER = CLIENTS / "console_driver.mjs"
SCREENSHOT = REPO_ROOT / "docs" / "img" / "console.png"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is missing: the console's browser tests need Debian's chromium package "
           "(scripts/deps installs it)")

OPERATOR = "op-console-7c1d9e2f4a6b8c0d"
AGENT = "ag-console-3e5f7a9b1c2d4e6f"
OP = {"Authorization": f"Bearer {OPERATOR}"}
AG = {"Authorization": f"Bearer {AGENT}"}
XSS = "<img src=x onerror=alert(1)>"
XSS_EVENT_ID = "<img/src=x/onerror=alert(1)>"   # event ids are visible ASCII: no spaces
REFRESH_S = 1
SEND_WITHIN_S = 10       # an approved action reaches the provider (slack for ASan on 2 cores)
DRIVER_TIMEOUT_S = 180
AGE = re.compile(r"^\d+[smhd]( \d+[smh])?$")


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def node():
    node = shutil.which("node")
    if not node or not (CLIENTS / "node_modules" / "puppeteer-core").is_dir():
        pytest.fail("puppeteer-core is not installed: run `npm ci --prefix tests/clients` (scripts/test does)")
    return node


@pytest.fixture
def agent():
    """The fake agent that push deliveries go to; it answers 500 until told otherwise."""
    a = Agent(always_fail=True)
    yield a
    a.stop()


@pytest.fixture
def make_gw(tmp_path, provider, agent, gateways):
    def make(tokens=True):
        require_serve()
        server = {"loop_interval": "200ms"}
        if tokens:
            path = tmp_path / "tokens"
            path.write_text(f"# console tests\n{OPERATOR} operator alice\n{AGENT} agent bot\n")
            os.chmod(path, 0o600)
            server["tokens_file"] = str(path)
        upstreams = {
            "demo": {"url": provider.url, "approve": "POST /charges*"},
            # Its lookup never settles anything (503), an hour apart: its unknown actions stay unknown.
            "ledger": {"url": provider.url, "lookup": "GET /v1/lookup?ref={key}&fake_status=503",
                       "lookup_found": "json:/data/0/id", "lookup_backoff": "1h"},
        }
        sources = {"push": {"verify": "none", "insecure": "yes", "event_id": "header:X-Event-Id",
                            "deliver_to": agent.url + "/hooks/in", "max_attempts": 2,
                            "retry_base": "50ms", "retry_cap": "200ms"}}
        g = HookGateway(tmp_path / f"gw{len(gateways)}", sources, upstreams=upstreams, server=server,
                        store_kind="sqlite")
        if tokens:
            # The agent's grants and a limit, for the Agents table (docs/agents.md).
            with open(g.config_path, "a") as f:
                f.write("\n[agent.bot]\nallow = demo: *\nallow = ledger: *\nallow = actions: *\n"
                        "limit = demo 1000/1d\n")
        gateways.append(g)
        g.start()
        return g
    return make


# --------------------------------------------------------------------------- rows, as agents make them

def q(s):
    return urllib.parse.quote(s, safe="")


def record(g, scope, key):
    r = g.get(f"/v1/actions/{q(scope)}/{q(key)}", headers=OP)
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_state(g, scope, key, states, timeout=15):
    return wait_until(lambda: (lambda rec: rec if rec["state"] in states else None)(record(g, scope, key)),
                      timeout=timeout, what=f"{scope}/{key} in {states}")


def awaiting(g, key, headers=AG):
    r = g.proxy("POST", "demo", "/charges", key=key, json={"order": key, "amount": 4200}, headers=headers)
    assert r.status_code == 202, describe(r)
    return key


def held_by_proxy(g, key):
    """The provider answers 500 (unknown_on): unknown; no lookup on demo, so the loop holds it."""
    r = g.proxy("POST", "demo", "/refunds", key=key, json={"refund": key}, headers=dict(AG, **{"X-Fake-Status": "500"}))
    assert r.status_code == 500, describe(r)
    wait_state(g, "demo", key, {"held"})
    return key


def reserve(g, scope, key, lease_ms=None, request=None):
    body = {"scope": scope, "key": key, "request": request or {"op": "transfer", "to": "acct_9", "amount": 7}}
    if lease_ms:
        body["lease_ms"] = lease_ms
    r = g.post("/v1/actions", json=body, headers=AG)
    assert r.status_code == 201, describe(r)
    return r.json()["token"]


def held_by_agent(g, scope, key, error):
    """An actions-API action (the agent's own JSON as its request) marked unknown, then held."""
    token = reserve(g, scope, key)
    r = g.post("/v1/actions/unknown", json={"scope": scope, "key": key, "token": token, "error": error}, headers=AG)
    assert r.status_code == 200, describe(r)
    wait_state(g, scope, key, {"held"})
    return key


def unknown_by_proxy(g, key):
    r = g.proxy("POST", "ledger", "/payouts", key=key, json={"payout": key}, headers=dict(AG, **{"X-Fake-Status": "502"}))
    assert r.status_code == 502, describe(r)
    rec = wait_state(g, "ledger", key, {"unknown"})
    return key, rec


def denied(g, key):
    awaiting(g, key)
    r = g.post(f"/v1/actions/demo/{q(key)}/deny", json={"note": "not today"}, headers=OP)
    assert r.status_code == 200, describe(r)
    return key


def event(g, event_id, body=b'{"type":"invoice.paid"}'):
    r = g.hook("push", body, {"Content-Type": "application/json", "X-Event-Id": event_id})
    assert r.status_code == 200, describe(r)
    return event_id


def get_event(g, source, event_id):
    r = g.get(f"/v1/events?source={q(source)}&limit=1000", headers=OP)
    assert r.status_code == 200, describe(r)
    return next((e for e in r.json()["items"] if e["event_id"] == event_id), None)


def wait_dead(g, *event_ids):
    for e in event_ids:
        wait_until(lambda: (get_event(g, "push", e) or {}).get("state") == "dead", timeout=20, what=f"{e} dead")


def effects(provider, path, marker):
    return [e for e in provider.effects() if e["path"] == path and marker in (e.get("body") or "")]


# --------------------------------------------------------------------------- the driver

def drive(node, g, scenario, **cfg):
    cfg = dict(cfg, url=g.url, scenario=scenario)
    cfg.setdefault("token", OPERATOR)
    cfg.setdefault("refresh", REFRESH_S)
    p = subprocess.run([node, str(DRIVER), json.dumps(cfg)], capture_output=True, text=True,
                       timeout=DRIVER_TIMEOUT_S, cwd=CLIENTS)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"the driver printed nothing (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert out["ok"], f"scenario {scenario} failed: {out.get('error')}\nwatch: {json.dumps(out['watch'])[:4000]}\n" \
                      f"stderr: {p.stderr[-2000:]}\ngateway: {g.stderr()[-2000:]}"
    assert_clean(g, out["watch"], cfg.get("allowed_statuses", ()))
    return out["result"]


def assert_clean(g, w, allowed_statuses=()):
    """Nothing left the origin; no errors, CSP violations, dialogs, cookies or localStorage."""
    origin = g.url + "/"
    assert w["requests"], "the driver recorded no request"
    strangers = [u for u in w["requests"] if not u.startswith(origin)]
    assert not strangers, f"requests outside {origin}: {strangers}"
    errors = []
    for m in w["console"]:
        if m["type"] != "error":
            continue
        # A refused API call the scenario asked for: the browser logs the status it got.
        st = re.match(r"Failed to load resource: the server responded with a status of (\d+)", m["text"])
        if st and int(st.group(1)) in allowed_statuses and (m["url"] or "").startswith(g.url + "/v1/"):
            continue
        errors.append(m)
    assert not errors, f"console errors: {errors}"
    assert w["page_errors"] == [], f"uncaught errors in the page: {w['page_errors']}"
    assert w["csp"] == [], f"Content-Security-Policy violations: {w['csp']}"
    assert w["dialogs"] == [], f"the page opened dialogs (script ran): {w['dialogs']}"
    assert w["cookies"] == [], f"cookies: {w['cookies']}"
    assert w["document_cookie"] == "", f"document.cookie: {w['document_cookie']!r}"
    assert w["local_storage"] == 0, "the page wrote to localStorage"


def row(snap, table, **attrs):
    rows = [r for r in snap["tables"][table] if all(r.get(k) == v for k, v in attrs.items())]
    assert len(rows) == 1, f"{table} rows matching {attrs}: {rows}\nall: {snap['tables'][table]}"
    return rows[0]


# --------------------------------------------------------------------------- scenarios

def test_overview_counts_rows_xss_keyboard_phone_signout(node, make_gw, agent, tmp_path):
    """Sign in with the keyboard: the counts per state and every table's rows, with their buttons
    and labelled inputs; keys, errors and event ids that are HTML show as text and run nothing;
    Tab reaches the buttons with a visible focus ring; on a phone nothing sticks out sideways and
    every button is on screen; the screenshot; sign out empties sessionStorage and the page."""
    g = make_gw()
    a1 = awaiting(g, "order-1182")
    a2 = awaiting(g, XSS)
    h1 = held_by_proxy(g, "refund-77")
    h2 = held_by_agent(g, "billing", "transfer-9", XSS)
    u1, urec = unknown_by_proxy(g, "payout-5")
    reserve(g, "billing", "still-running", lease_ms=600000)
    denied(g, "order-1183")
    e1 = event(g, "evt_3f2a9c")
    e2 = event(g, XSS_EVENT_ID)
    wait_dead(g, e1, e2)
    shot = tmp_path / "console.png"

    res = drive(node, g, "overview", screenshot=str(shot), phone_screenshot=str(tmp_path / "phone.png"),
                wait_rows=[["unknown", {"scope": "ledger", "key": u1}]])

    assert res["page"]["csp"] and "script-src 'self'" in res["page"]["csp"], res["page"]
    first = res["initial"]
    assert first["signin"] and not first["dashboard"] and first["action_rows"] == 0, first
    s = res["signed_in"]
    assert s["dashboard"] and not s["signin"] and s["refused"] is None and s["signout"], s
    assert s["counts"] == {"awaiting_approval": "2", "pending": "1", "unknown": "1", "held": "2", "denied": "1",
                           "dead": "2"}, s["counts"]
    assert "not counted" in s["body_text"], s["body_text"]
    agents = {a["agent"]: a["cells"] for a in s["agents"]}
    assert agents["alice"][1:3] == ["operator", "operator"], agents
    assert agents["bot"][1:3] == ["agent", "its grants"], agents
    assert agents["bot"][3] == "demo: *; ledger: *; actions: *", agents
    # awaiting (2) and held (1) went through demo: three new actions counted.
    assert agents["bot"][4].startswith("demo 1000/1d: 3 of 1000 used, room in "), agents
    assert s["status_role"] == "status", s
    assert s["session_keys"] == ["once-console-token"], s["session_keys"]

    for key in (a1, a2):
        r = row(s, "awaiting", scope="demo", key=key)
        assert r["cells"][:2] == ["demo", key] and AGE.match(r["cells"][2]), r
        assert r["cells"][3] == "POST /charges", r
        assert r["buttons"] == ["Approve", "Deny"], r
        assert [i["name"] for i in r["inputs"]] == ["note"] and "Note" in r["inputs"][0]["label"], r
    r = row(s, "held", scope="demo", key=h1)
    assert r["cells"][3] == "POST /refunds" and "500" in r["cells"][4], r
    assert r["buttons"] == ["Mark completed", "Mark released"], r
    assert [i["name"] for i in r["inputs"]] == ["provider_id"] and "Provider id" in r["inputs"][0]["label"], r
    r = row(s, "held", scope="billing", key=h2)
    assert r["cells"][3].startswith('{"') and '"transfer"' in r["cells"][3], r   # the agent's JSON, short
    assert XSS in r["cells"][4], r      # the agent's error, as text
    r = row(s, "unknown", scope="ledger", key=u1)
    assert r["cells"][3] == "POST /payouts" and r["buttons"] == ["Mark completed", "Mark released"], r
    if urec["trail"]:
        assert r["cells"][5].strip() and r["cells"][5] != "—", (r, urec["trail"])
    for eid in (e1, e2):
        r = row(s, "dead", source="push", event_id=eid)
        assert r["cells"][:2] == ["push", eid] and AGE.match(r["cells"][2]), r
        assert r["cells"][3] == "2" and "500" in r["cells"][4], r
        assert r["buttons"] == ["Redeliver"], r
    assert s["images"] == 0, "an <img> was made from data"
    assert XSS in s["body_text"] and XSS_EVENT_ID in s["body_text"]

    f = res["keyboard_focus"]
    assert f and f["tag"] == "BUTTON" and f["text"] == "Approve", f
    assert f["focus_visible"] and not f["outline"].startswith("none"), f

    ph = res["phone"]
    assert ph["inner_width"] == 390, ph
    assert ph["doc_scroll_width"] <= ph["inner_width"] and ph["body_scroll_width"] <= ph["inner_width"], ph
    assert ph["buttons"] >= 11 and ph["bad"] == [], ph
    assert res["phone_snapshot"]["counts"] == s["counts"], "signed out by a reload"

    out = res["signed_out"]
    assert out["signin"] and not out["dashboard"] and out["session_keys"] == [], out
    assert out["action_rows"] == 0 and out["event_rows"] == 0 and XSS not in out["body_text"], out

    assert shot.stat().st_size < 400_000, shot.stat().st_size
    if os.environ.get("ONCE_CONSOLE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    # Looking changed nothing.
    assert record(g, "demo", a2)["state"] == "awaiting_approval"
    assert record(g, "demo", h1)["state"] == "held"


def test_resolve_held_completed_and_released(node, make_gw, provider):
    g = make_gw()
    h1 = held_by_proxy(g, "refund-4711")
    h2 = held_by_agent(g, "billing", "transfer/2026:12 a&b", "connection reset")
    sent = len(effects(provider, "/refunds", h1))
    assert sent == 1

    res = drive(node, g, "resolve", rows=[{"scope": "demo", "key": h1}, {"scope": "billing", "key": h2}],
                provider_id="re_3MtwBw")

    assert res["completed"]["class"] == "status ok" and "done" in res["completed"]["text"], res["completed"]
    assert res["released"]["class"] == "status ok", res["released"]
    assert res["after"]["counts"]["held"] == "0", res["after"]["counts"]
    r1 = record(g, "demo", h1)
    assert r1["state"] == "completed" and r1["provider_id"] == "re_3MtwBw", r1
    r2 = record(g, "billing", h2)
    assert r2["state"] == "released", r2
    # Completed by hand: a retry is answered from the resolution and nothing is sent again.
    r = g.proxy("POST", "demo", "/refunds", key=h1, json={"refund": h1}, headers=AG)
    assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert r.json().get("provider_id") == "re_3MtwBw", describe(r)
    assert len(effects(provider, "/refunds", h1)) == 1


def test_approve_sends_once_and_deny_refuses_retries(node, make_gw, provider):
    g = make_gw()
    ok = awaiting(g, "inv/2026:0001?x=1#f %2F&")     # every character that needs escaping in a path
    no = awaiting(g, XSS)
    assert effects(provider, "/charges", ok) == []

    res = drive(node, g, "decide", rows=[{"scope": "demo", "key": ok}, {"scope": "demo", "key": no}],
                approve_note="ticket 5521", deny_note=XSS)

    assert res["approved"]["class"] == "status ok" and res["denied"]["class"] == "status ok", res
    # The note typed before two refreshes went by is still there, and still focused.
    assert res["approved"]["typed"]["note"] == {"value": "ticket 5521", "focused": True, "connected": True}, res
    assert res["after"]["counts"]["awaiting_approval"] == "0", res["after"]["counts"]
    wait_until(lambda: len(effects(provider, "/charges", ok)) >= 1, timeout=SEND_WITHIN_S, what="approved charge sent")
    rec = wait_state(g, "demo", ok, {"completed"}, timeout=SEND_WITHIN_S)
    assert rec["approved_at"] and any("ticket 5521" in ln for ln in rec["trail"]), rec
    assert any("alice" in ln for ln in rec["trail"]), rec["trail"]     # the operator token's name
    rec = record(g, "demo", no)
    assert rec["state"] == "denied" and rec["note"] == XSS, rec
    j = assert_problem(g.proxy("POST", "demo", "/charges", key=no, json={"order": no, "amount": 4200}, headers=AG),
                       403, "denied")
    assert XSS in json.dumps(j), j
    time.sleep(1)
    assert len(effects(provider, "/charges", ok)) == 1 and effects(provider, "/charges", no) == []


def test_redeliver_dead_event(node, make_gw, agent):
    g = make_gw()
    e = event(g, "evt_redeliver_1")
    wait_dead(g, e)
    assert len(agent.deliveries()) == 2
    agent.configure(always_fail=False)

    res = drive(node, g, "redeliver", row={"source": "push", "eventId": e})

    assert res["redelivered"]["class"] == "status ok", res
    assert res["after"]["counts"]["dead"] == "0", res["after"]["counts"]
    ev = wait_until(lambda: (lambda x: x if x and x["state"] == "delivered" else None)(get_event(g, "push", e)),
                    timeout=15, what="delivered after the redelivery")
    assert ev["attempt"] == 3, ev
    ds = agent.wait_deliveries(3, timeout=15)
    assert [d["headers"]["once-attempt"] for d in ds] == ["1", "2", "3"], ds
    assert ds[2]["answered"] == 200, ds[2]


def test_page_refreshes_itself(node, make_gw):
    g = make_gw()
    awaiting(g, "before-load")
    key = "made-after-load"
    create = {"method": "POST", "path": "/v1/proxy/demo/charges",
              "headers": dict(AG, **{"Idempotency-Key": key, "Content-Type": "application/json"}),
              "body": json.dumps({"order": key}), "table": "awaiting", "row": {"scope": "demo", "key": key}}

    res = drive(node, g, "refresh", create=create)

    assert res["created_status"] == 202, res
    assert res["navigations"] == 1, "the page was reloaded"
    # Within the refresh interval (1 s here), with slack for a loaded machine.
    assert res["appeared_after_ms"] < REFRESH_S * 1000 + 4000, res["appeared_after_ms"]
    assert res["after"]["counts"]["awaiting_approval"] == "2", res["after"]["counts"]
    row(res["after"], "awaiting", scope="demo", key=key)


def test_agent_token_is_refused_with_a_message_and_no_data(node, make_gw):
    g = make_gw()
    awaiting(g, "agent-must-not-see")
    event(g, "evt_agent")

    res = drive(node, g, "agent", token=AGENT, allowed_statuses=(403,))

    for snap in (res["first"], res["later"]):
        assert snap["refused"] and "agent" in snap["refused"] and "operator token" in snap["refused"], snap
        assert not snap["dashboard"] and not snap["signin"], snap
        assert snap["action_rows"] == 0 and snap["event_rows"] == 0, snap
        assert snap["visible_buttons"] == ["Sign out"], snap["visible_buttons"]
        assert "agent-must-not-see" not in snap["body_text"], snap
    assert res["events_calls_during_wait"] >= 1, "the operator check is not repeated on refresh"


def test_unknown_token_is_refused_back_to_sign_in(node, make_gw):
    g = make_gw()
    awaiting(g, "stranger-must-not-see")
    res = drive(node, g, "badtoken", token="tok-nobody-knows-this-one", allowed_statuses=(401,))
    snap = res["snapshot"]
    assert snap["signin"] and not snap["dashboard"] and snap["refused"] is None, snap
    assert "401" in snap["status"] and "unauthorized" in snap["status"] and "error" in snap["status_class"], snap
    assert snap["session_keys"] == [] and snap["action_rows"] == 0, snap
    assert "stranger-must-not-see" not in snap["body_text"]


def test_error_from_the_api_is_shown(node, make_gw):
    """Someone else denied it first: the page's Approve gets 409 invalid_transition, shown in the
    status area; the next refresh drops the row."""
    g = make_gw()
    key = awaiting(g, "decided-elsewhere")
    side = {"method": "POST", "path": f"/v1/actions/demo/{q(key)}/deny",
            "headers": dict(OP, **{"Content-Type": "application/json"}), "body": json.dumps({"note": "cli"})}

    res = drive(node, g, "conflict", row={"scope": "demo", "key": key}, side=side, refresh=30,
                allowed_statuses=(409,))

    assert res["side_status"] == 200, res
    st = res["status"]
    assert "invalid_transition" in st["text"] and "error" in st["class"], st
    assert st["role"] == "status" and st["live"] == "polite" and st["visible"], st
    assert record(g, "demo", key)["state"] == "denied"


def test_without_tokens_file_an_empty_token_signs_in(node, make_gw):
    g = make_gw(tokens=False)
    awaiting(g, "open-gateway", headers={})
    res = drive(node, g, "signin", token="")
    snap = res["snapshot"]
    assert snap["dashboard"] and snap["counts"]["awaiting_approval"] == "1", snap
    row(snap, "awaiting", scope="demo", key="open-gateway")
