"""Helpers for the reconciliation and intent-key tests (a module, not tests).

Builds on gateway.py (Provider, Gateway): the fake provider's lookup endpoints
and lookup faults, waiting for an action to reach a state, reading
/metrics samples, and `once show`. Everything is bounded and loopback-only.
"""
import re
import threading
import time
from urllib.parse import quote

import requests

from gateway import Gateway, Provider, describe, new_key  # noqa: F401  (re-exported)

SETTLE_TIMEOUT = 15  # the reconciler polls every 0.5 s; sanitizer builds are slow


# --------------------------------------------------------------------------- provider

def lookups(prov):
    """Every lookup the fake provider answered (or closed)."""
    r = requests.get(prov.url + "/_fake/lookups", timeout=10)
    r.raise_for_status()
    return r.json()


def lookup_mode(prov, **mode):
    """Every following lookup gets this fault (status=, close=, delay_ms=, body=); no args: none."""
    requests.post(prov.url + "/_fake/lookup-mode", json=mode, timeout=10).raise_for_status()


def queue_lookup_faults(prov, *faults):
    requests.post(prov.url + "/_fake/lookup-faults", json={"faults": list(faults)},
                  timeout=10).raise_for_status()


def wait_lookups(prov, n, timeout=SETTLE_TIMEOUT):
    deadline = time.monotonic() + timeout
    got = lookups(prov)
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.05)
        got = lookups(prov)
    return got


# --------------------------------------------------------------------------- gateway

def upstream(prov, **extra):
    """An upstream section for the fake provider; extra keys win."""
    up = {"url": prov.url, "timeout": "10s", "key_required": True}
    up.update(extra)
    return up


def lookup_upstream(prov, **extra):
    """An upstream whose unknown actions are looked up by the key, carried in the body as "ref"."""
    up = upstream(prov,
                  lookup="GET /v1/lookup?by=json:/ref&ref={key}",
                  lookup_found="json:/data/0/id",
                  lookup_absent="json-empty:/data",
                  lookup_backoff="200ms",
                  lookup_attempts=5)
    up.update(extra)
    return up


def action(gw, scope, key):
    """GET /v1/actions/{scope}/{key} as JSON (asserts 200)."""
    r = gw.action(scope, key)
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_state(gw, scope, key, states, timeout=SETTLE_TIMEOUT):
    """Waits until the action's state is one of states; returns the record (asserts)."""
    if isinstance(states, str):
        states = (states,)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        r = gw.action(scope, key)
        if r.status_code == 200:
            last = r.json()
            if last.get("state") in states:
                return last
        else:
            last = (r.status_code, r.text[:300])
        if not gw.alive():
            raise AssertionError(gw.death_note())
        time.sleep(0.05)
    raise AssertionError(f"{scope}/{key} not in {states} within {timeout} s; last: {last}\n"
                         f"{gw.stderr()[-3000:]}")


def list_actions(gw, scope):
    r = gw.get(f"/v1/actions?scope={quote(scope, safe='')}&limit=1000")
    assert r.status_code == 200, describe(r)
    return r.json()["items"]


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def metrics(gw):
    """{(name, frozenset(labels.items())): value} of GET /metrics."""
    r = gw.get("/metrics")
    assert r.status_code == 200, describe(r)
    out = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def metric(gw, name, **labels):
    """One sample's value; 0 when the series is absent (counters start at 0)."""
    return metrics(gw).get((name, frozenset(labels.items())), 0.0)


def reconcile_count(gw, scope, result):
    return metric(gw, "once_reconcile_total", scope=scope, result=result)


def show(gw, scope, key):
    """`once show SCOPE KEY` on the gateway's store: (returncode, stdout, stderr)."""
    r = gw.cli("show", scope, key)
    return r.returncode, r.stdout, r.stderr


def trail_lines(show_stdout):
    return [ln[len("trail: "):] for ln in show_stdout.splitlines() if ln.startswith("trail: ")]


def send_in_background(fn):
    """Runs fn() on a thread (a request the test will cut off); returns (thread, box)."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except Exception as e:  # noqa: BLE001  (the point is that it may fail)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box
