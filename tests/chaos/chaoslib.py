"""Helpers of the chaos suite (a module, not tests).

Builds on tests/integration/gateway.py, hooks_harness.py and multinode.py
(imported, unchanged): a gateway started with ONCE_FAULT set (the crash
points of a -DONCE_FAULT_INJECTION=ON build, src/ledger/fault.h), effects
counted per intent through the fake provider's /_fake/effects, small bounded
waits. Every wait here has a deadline.
"""
import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

import requests  # noqa: E402

from gateway import (REPO_ROOT, Gateway, Provider, describe, new_key, outcome,  # noqa: E402,F401
                     pg_base_url, pg_schemas_made, write_config)
from hooks_harness import Agent, HookGateway, wait_until  # noqa: E402,F401

# The background loop of `once serve` (src/server/server.c) runs one tick at
# start-up: expire leases, hold unknown actions, sweep actions, sweep events —
# four group commits on either store. With loop_interval = 1h nothing else
# commits on an idle gateway without push sources or lookups, so the first
# commit a request causes is passage STARTUP_COMMITS + 1 of before_commit /
# after_commit. Each scenario checks the gateway was alive just before its
# request and died of the fault point under it, so a miscount fails loudly.
STARTUP_COMMITS = 4
QUIET_LOOP = "1h"
FAST_LOOP = "300ms"


def start_with_env(gw, env):
    """gw.start() with extra environment variables for the server process only
    (gateway.Gateway passes os.environ through; they are removed right after)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        gw.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return gw


def fault_env(point, nth=1):
    return {"ONCE_FAULT": f"{point}:{nth}"}


def set_server(gw, **server):
    """Changes [server] keys of gw's config (takes effect on the next start)."""
    gw.server_cfg.update(server)
    if hasattr(gw, "write_config"):
        gw.write_config()
    else:
        write_config(gw.config_path, gw.server_cfg, gw.upstreams)


def died_by_fault(gw, timeout=15):
    """Waits for gw's process to exit; True when its fault point SIGKILLed it."""
    try:
        gw.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    gw._close_stderr()
    return gw.proc.returncode == -9 and "ONCE_FAULT: SIGKILL" in gw.stderr()


def body_of(rec):
    if rec.get("body") is not None:
        return rec["body"]
    import base64
    return base64.b64decode(rec.get("body_base64") or "").decode("utf-8", "replace")


def intent_of(rec, member="intent"):
    try:
        return json.loads(body_of(rec)).get(member)
    except (ValueError, AttributeError):
        return None


def effects_by_intent(provider, member="intent"):
    """Counter: intent -> effects the fake provider performed for it."""
    return collections.Counter(intent_of(e, member) for e in provider.effects())


def send(gw, key, body, path="/charges", upstream="demo", headers=None, timeout=15, base=None):
    """One proxied POST; returns the response or the exception."""
    try:
        return gw.request("POST", f"/v1/proxy/{upstream}{path}", key=key, json=body, headers=headers,
                          timeout=timeout, base=base)
    except requests.RequestException as e:
        return e


def answer_of(r):
    """A short label of an answer: '200/completed', '409/outcome_unknown', 'ConnectionError'."""
    if isinstance(r, Exception):
        return type(r).__name__
    code = None
    if r.headers.get("Content-Type", "").startswith("application/problem+json"):
        try:
            code = r.json().get("code")
        except ValueError:
            pass
    return f"{r.status_code}/{code or outcome(r) or '-'}"


def action(gw, scope, key):
    """The action record, or None (404)."""
    r = gw.action(scope, key, timeout=10)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_settled(gw, scope, key, timeout=20):
    """Waits until the action is no longer pending (lease expiry -> unknown -> held);
    returns the record (None when there is no row)."""
    deadline = time.monotonic() + timeout
    rec = action(gw, scope, key)
    while rec is not None and rec["state"] in ("pending", "unknown") and time.monotonic() < deadline:
        time.sleep(0.1)
        rec = action(gw, scope, key)
    return rec


def resolve(gw, scope, key, outcome_, provider_id=None, note="chaos suite"):
    from urllib.parse import quote
    body = {"outcome": outcome_, "note": note}
    if provider_id:
        body["provider_id"] = provider_id
    r = gw.post(f"/v1/actions/{quote(scope, safe='')}/{quote(key, safe='')}/resolve", json=body, timeout=10)
    assert r.status_code == 200, describe(r)
    return r.json()


def settle_held(gw, provider, scope, keys, member="intent"):
    """What a human does with held actions: looks at the provider, resolves each held or
    unknown action completed (an effect exists) or released (none). Returns
    {"completed": n, "released": n}."""
    eff = {}
    for e in provider.effects():
        eff.setdefault(intent_of(e, member), e)
    done = collections.Counter()
    for k in keys:
        rec = action(gw, scope, k)
        if rec is None or rec["state"] not in ("unknown", "held"):
            continue
        if k in eff:
            resolve(gw, scope, k, "completed", provider_id=eff[k].get("id"))
            done["completed"] += 1
        else:
            resolve(gw, scope, k, "released")
            done["released"] += 1
    return dict(done)


def list_actions(gw, status=None, scope=None):
    items, after = [], None
    for _ in range(1000):
        q = {"limit": 1000}
        if status:
            q["status"] = status
        if scope:
            q["scope"] = scope
        if after:
            q["after"] = after
        r = requests.get(gw.url + "/v1/actions", params=q, timeout=30)
        assert r.status_code == 200, describe(r)
        j = r.json()
        items += j["items"]
        after = j.get("next")
        if not after:
            break
    return items


class Stopwatch:
    def __init__(self):
        self.t0 = time.monotonic()

    def __call__(self):
        return time.monotonic() - self.t0


def hammer(fn, n_threads, items_per_thread):
    """Runs fn(thread_index, item) for every item of items_per_thread(i) on n_threads threads;
    returns the exceptions raised (so a test can assert there were none)."""
    errors = []

    def run(i):
        try:
            for it in items_per_thread(i):
                fn(i, it)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    return errors


def shuffled(xs, seed):
    xs = list(xs)
    random.Random(seed).shuffle(xs)
    return xs
