#!/usr/bin/python3
"""The agent of `make demo` (scripts/demo): Python 3 standard library only.

    demo_agent.py run --run A|B --url BASE --state FILE --results FILE [options]
    demo_agent.py report --provider URL --results-a FILE --results-b FILE --store-held N ...
    demo_agent.py held --provider URL --held-json FILE

`run` works through an inbox of N intents, "reply to inbound message msg-NNN", one
POST each, the way an agent (or the worker behind it) does: with a client timeout,
and retrying what looks failed. Its progress is a checkpoint file written after each
intent is done, as a queue consumer acks a message: an agent killed between its call
and its checkpoint is restarted by scripts/demo and does that intent again.

The same code runs against the provider directly (run A) and through once (run B); the
Idempotency-Key header, derived from the intent, is sent both times. Only the base URL
differs, and what the agent does with once's answers:

    2xx                          done (Once-Outcome: completed or replayed)
    409 key_in_flight            another attempt holds the key: wait Retry-After, retry
    409/504 outcome_unknown      it may have happened: never resent; noted for a human
    502 upstream_unreachable,
    503, no connection           nothing was sent: back off and retry
    a timeout, a reset           run A: retry (a duplicate, if the provider had acted);
                                 run B: retry (once replays it, or says in flight/unknown)

Faults, planned from --seed so that both runs meet the same ones, on the first attempt:
    slow     X-Fake-Delay-Ms beyond the client timeout: the provider acts, answers late
    drop     X-Fake-Close: after-read: the provider acts, the connection is dropped
    crash    the call succeeds, then the agent is SIGKILLed before its checkpoint
    kill     a slow call during which scripts/demo SIGKILLs and restarts the gateway
             (it touches --kill-marker first); in run A it is just a slow call
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import sys
import time
import urllib.parse

SCOPE = "mailer"
PATH = "/v1/messages"


def plan(n, seed, slow, drop, crash):
    """{intent index: fault} for the intents 1..n; the gateway kill goes to about 60%."""
    rng = random.Random(seed)
    kill_at = max(1, (n * 3) // 5)
    others = [i for i in range(1, n + 1) if i != kill_at]
    picked = rng.sample(others, min(len(others), slow + drop + crash))
    faults = {kill_at: "kill"}
    for j, i in enumerate(picked):
        faults[i] = "slow" if j < slow else "drop" if j < slow + drop else "crash"
    return faults


def key_of(i):
    return f"msg-{i:03d}:reply"


class Attempt:
    def __init__(self, status=None, headers=None, body=b"", error=None):
        self.status, self.headers, self.body, self.error = status, headers or {}, body, error

    def code(self):
        try:
            return json.loads(self.body).get("code")
        except (ValueError, AttributeError):
            return None


def post(base, path, body, headers, timeout):
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", u.path.rstrip("/") + path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return Attempt(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    except (socket.timeout, TimeoutError):
        return Attempt(error="timeout")
    except ConnectionRefusedError:
        return Attempt(error="refused")
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        return Attempt(error=type(e).__name__)
    finally:
        conn.close()


def load_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"done": 0, "crashed": []}


def save_state(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def do_intent(args, i, fault, state):
    """Sends intent i until it is done or must be left to a human: (outcome, attempts, note)."""
    key = key_of(i)
    body = json.dumps({"run": args.run, "intent": key, "to": f"customer-{i}@example.com",
                       "text": f"Thanks for message {i}, your order ships today."}).encode()
    deadline = time.monotonic() + args.intent_budget
    backoff = 0.1
    attempt = 0
    while True:
        attempt += 1
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        if attempt == 1 and fault == "slow":
            headers["X-Fake-Delay-Ms"] = str(args.slow_ms)
        elif attempt == 1 and fault == "kill":
            headers["X-Fake-Delay-Ms"] = str(args.kill_ms)
            if args.kill_marker:
                with open(args.kill_marker, "w") as f:
                    f.write(key + "\n")
        elif attempt == 1 and fault == "drop":
            headers["X-Fake-Close"] = "after-read"
        a = post(args.url, PATH, body, headers, args.client_timeout)
        outcome = a.headers.get("once-outcome")
        if a.status is not None and 200 <= a.status < 300:
            return ("ok", attempt, outcome or "answered")
        code = a.code()
        if code == "outcome_unknown":
            return ("held", attempt, (json.loads(a.body).get("state") or "unknown"))
        if time.monotonic() >= deadline:
            return ("gave_up", attempt, a.error or f"{a.status} {code}")
        if code == "key_in_flight":
            wait = min(float(a.headers.get("retry-after") or 1), 1.0)
            time.sleep(wait)
            continue
        # a timeout, a reset, a refused connection, a 5xx: the usual retry with backoff
        time.sleep(backoff)
        backoff = min(backoff * 2, 1.0)


def cmd_run(args):
    faults = plan(args.intents, args.seed, args.slow, args.drop, args.crash)
    state = load_state(args.state)
    end_at = args.deadline or (time.time() + 120)
    with open(args.results, "a") as out:
        for i in range(state["done"] + 1, args.intents + 1):
            if time.time() > end_at:
                print(f"agent: deadline reached at intent {i}", file=sys.stderr)
                return 3
            fault = faults.get(i)
            if fault == "crash" and i in state["crashed"]:
                fault = None  # a restarted agent redoes the intent; the machine does not crash again
            if fault == "crash":
                state["crashed"].append(i)
                save_state(args.state, state)
            result, attempts, note = do_intent(args, i, fault, state)
            out.write(json.dumps({"intent": i, "key": key_of(i), "fault": faults.get(i), "result": result,
                                  "attempts": attempts, "note": note}) + "\n")
            out.flush()
            if fault == "crash":
                # Killed after the provider acted and before the checkpoint: the intent is redone.
                os.kill(os.getpid(), signal.SIGKILL)
            state["done"] = i
            save_state(args.state, state)
    return 0


def fetch_json(url):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request("GET", u.path + (("?" + u.query) if u.query else ""))
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def effects_by_intent(provider, run):
    per = {}
    for e in fetch_json(provider + "/_fake/effects"):
        try:
            doc = json.loads(e.get("body") or "")
        except ValueError:
            continue
        if doc.get("run") == run:
            per.setdefault(doc["intent"], []).append(e["id"])
    return per


def read_results(path):
    last, attempts = {}, 0
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            last[r["intent"]] = r
            attempts += r["attempts"]
    return last, attempts


def cmd_report(args):
    n = args.intents
    faults = plan(n, args.seed, args.slow, args.drop, args.crash)
    rows = []
    cols = {}
    for run, results, elapsed in (("A", args.results_a, args.elapsed_a), ("B", args.results_b, args.elapsed_b)):
        per = effects_by_intent(args.provider, run)
        last, attempts = read_results(results)
        effects = sum(len(v) for v in per.values())
        dup_by = {}
        for i in range(1, n + 1):
            extra = len(per.get(key_of(i), [])) - 1
            if extra > 0:
                f = faults.get(i) or "none"
                dup_by[f] = dup_by.get(f, 0) + extra
        cols[run] = {
            "effects": effects,
            "dups": sum(max(0, len(v) - 1) for v in per.values()),
            "missing": sum(1 for i in range(1, n + 1) if not per.get(key_of(i))),
            "held": sum(1 for r in last.values() if r["result"] == "held"),
            "gave_up": sum(1 for r in last.values() if r["result"] == "gave_up"),
            "replayed": sum(1 for r in last.values() if r["note"] == "replayed"),
            "attempts": attempts,
            "elapsed": elapsed,
            "dup_by": dup_by,
        }
    a, b = cols["A"], cols["B"]
    b_held = f"{args.store_held} held" + (f" + {args.store_unknown} unknown" if args.store_unknown else "")

    def line(label, x, y):
        rows.append(f"  {label:<44}{x:>14}{y:>14}")

    rows.append(f"  {'':<44}{'without once':>14}{'with once':>14}")
    line("intents (\"reply to msg-NNN\")", n, n)
    line("requests the agent sent (retries included)", a["attempts"], b["attempts"])
    line("effects at the provider (messages sent)", a["effects"], b["effects"])
    line("duplicates (effects - intents performed)", a["dups"], b["dups"])
    line("intents never performed", a["missing"], b["missing"])
    line("answers replayed by once", "-", b["replayed"])
    line("actions waiting for a human (once ls)", "-", b_held)
    line("elapsed", f"{a['elapsed']:.1f} s", f"{b['elapsed']:.1f} s")
    names = {"slow": "slow answers (agent timed out, retried)", "drop": "dropped connections (after the send)",
             "crash": "agent SIGKILLed before its checkpoint", "kill": "the call the gateway was killed in",
             "none": "no fault"}
    rows.append("")
    rows.append("  duplicates by cause" + " " * 25 + f"{'without once':>14}{'with once':>14}")
    for f in ("slow", "drop", "crash", "kill", "none"):
        if a["dup_by"].get(f) or b["dup_by"].get(f):
            line("  " + names[f], a["dup_by"].get(f, 0), b["dup_by"].get(f, 0))
    rows.append("")
    rows.append("  (with once the agent waits out a call in flight (409, Retry-After: 1) instead of sending it")
    rows.append("  again, and the call the gateway died in waits out its 4 s lease: hence the longer run)")
    print("\n".join(rows))
    if a["gave_up"] or b["gave_up"]:
        print(f"\n  (the agent gave up on {a['gave_up']} intents in run A, {b['gave_up']} in run B)")
    ok = b["dups"] == 0 and b["missing"] == 0 and a["missing"] == 0
    return 0 if ok else 1


def cmd_held(args):
    """What a human does with each held action: looks at the provider, then resolves it.
    Prints one line per action: KEY completed PROVIDER_ID, or KEY released."""
    with open(args.held_json) as f:
        held = json.load(f)
    per = effects_by_intent(args.provider, "B")
    for rec in held:
        ids = per.get(rec["key"], [])
        if ids:
            print(f"{rec['key']} completed {ids[0]}")
        else:
            print(f"{rec['key']} released -")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--intents", type=int, default=50)
        p.add_argument("--seed", type=int, default=7)
        p.add_argument("--slow", type=int, default=8, help="intents whose first call answers late")
        p.add_argument("--drop", type=int, default=4, help="intents whose first connection is dropped")
        p.add_argument("--crash", type=int, default=3, help="intents after whose call the agent is killed")

    r = sub.add_parser("run")
    common(r)
    r.add_argument("--run", required=True, choices=["A", "B"])
    r.add_argument("--url", required=True, help="base URL the agent POSTs {base}/v1/messages to")
    r.add_argument("--state", required=True, help="the agent's checkpoint file")
    r.add_argument("--results", required=True, help="JSON lines, one per intent done")
    r.add_argument("--client-timeout", type=float, default=0.5)
    r.add_argument("--slow-ms", type=int, default=1200)
    r.add_argument("--kill-ms", type=int, default=2000)
    r.add_argument("--kill-marker", help="file touched just before the call the gateway is killed in")
    r.add_argument("--intent-budget", type=float, default=15.0, help="seconds per intent before giving up")
    r.add_argument("--deadline", type=float, help="epoch seconds: stop after this")

    p = sub.add_parser("report")
    common(p)
    p.add_argument("--provider", required=True)
    p.add_argument("--results-a", required=True)
    p.add_argument("--results-b", required=True)
    p.add_argument("--elapsed-a", type=float, required=True)
    p.add_argument("--elapsed-b", type=float, required=True)
    p.add_argument("--store-held", type=int, required=True)
    p.add_argument("--store-unknown", type=int, default=0)

    h = sub.add_parser("held")
    h.add_argument("--provider", required=True)
    h.add_argument("--held-json", required=True)

    args = ap.parse_args(argv)
    return {"run": cmd_run, "report": cmd_report, "held": cmd_held}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
