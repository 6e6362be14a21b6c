"""Operations of `once serve` against docs/api.md: auth, /healthz, /readyz,
/metrics, the per-upstream listener, the JSON log line per request, and
graceful shutdown on SIGTERM.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_server_ops.py
"""
import json
import re
import socket
import threading
import time
import uuid

import pytest
import requests

from gateway import (Gateway, assert_problem, describe, free_port, new_key, outcome,
                     require_serve)

TOKENS = ("tok-alpha-0123456789", "tok-beta-9876543210")


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    """A gateway with tokens and an upstream on its own listener."""
    require_serve()
    d = tmp_path_factory.mktemp("ops")
    tokens = d / "tokens"
    tokens.write_text(f"# agents\n\n{TOKENS[0]}\n  \n{TOKENS[1]}\n")
    up_port = free_port()
    ups = {
        "demo": {"url": provider.url, "header": ["X-Injected: yes"], "listen": f"127.0.0.1:{up_port}"},
        "metered": {"url": provider.url},
    }
    g = Gateway(d, ups, server={"tokens_file": str(tokens)}, store_kind=store_kind)
    g.up_url = f"http://127.0.0.1:{up_port}"
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


@pytest.fixture(autouse=True)
def fresh(provider):
    provider.reset()


def bearer(i=0):
    return {"Authorization": f"Bearer {TOKENS[i]}"}


# ----------------------------------------------------------------------------- health

def test_healthz_readyz_open(gw):
    r = gw.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}, describe(r)
    r = gw.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}, describe(r)


# ----------------------------------------------------------------------------- auth

@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Bearer {TOKENS[0][:-1]}", f"Bearer {TOKENS[0]}x",
                                  f"Basic {TOKENS[0]}", TOKENS[0], "Bearer "],
                         ids=["none", "wrong", "prefix", "longer", "basic", "no-scheme", "empty"])
def test_proxy_needs_a_bearer_token(gw, provider, auth):
    key = new_key()
    h = {"Authorization": auth} if auth is not None else {}
    r = gw.proxy("POST", "demo", "/charges", key=key, json={"a": 1}, headers=h)
    assert_problem(r, 401, "unauthorized")
    assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), describe(r)
    assert outcome(r) is None, describe(r)
    assert provider.count() == 0
    assert gw.action("demo", key, headers=bearer()).status_code == 404, "a refused request left a row"


@pytest.mark.parametrize("i", [0, 1])
def test_proxy_with_token_and_authorization_not_forwarded(gw, provider, i):
    r = gw.proxy("POST", "demo", "/charges", key=new_key(), json={"a": 1}, headers=bearer(i))
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    h = provider.effects()[0]["headers"]
    assert "authorization" not in h, f"the agent's token went upstream: {h}"
    assert h.get("x-injected") == "yes"


def test_without_token_no_key_is_401_not_400(gw):
    assert_problem(gw.proxy("POST", "demo", "/charges", json={}), 401, "unauthorized")


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/actions", {"scope": "s", "key": "k"}),
    ("GET", "/v1/actions", None),
    ("GET", "/v1/actions/s/k", None),
    ("POST", "/v1/actions/complete", {"scope": "s", "key": "k", "token": "t", "result": 1}),
    ("POST", "/v1/actions/release", {"scope": "s", "key": "k", "token": "t"}),
    ("POST", "/v1/actions/unknown", {"scope": "s", "key": "k", "token": "t"}),
    ("POST", "/v1/actions/s/k/resolve", {"outcome": "completed"}),
])
def test_actions_need_a_bearer_token(gw, method, path, body):
    r = gw.request(method, path, json=body)
    assert_problem(r, 401, "unauthorized")
    assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), describe(r)


def test_actions_with_token(gw):
    s, k = "auth-" + uuid.uuid4().hex[:8], new_key()
    r = gw.post("/v1/actions", json={"scope": s, "key": k}, headers=bearer(1))
    assert r.status_code == 201, describe(r)
    r = gw.get(f"/v1/actions?scope={s}", headers=bearer(0))
    assert r.status_code == 200 and len(r.json()["items"]) == 1, describe(r)


def test_ops_routes_are_open(gw):
    for path in ("/healthz", "/readyz", "/metrics"):
        r = gw.get(path)
        assert r.status_code == 200, describe(r)


# ----------------------------------------------------------------------------- per-upstream listener

def test_upstream_listener_forwards_whole_path(gw, provider):
    key = new_key()
    r = requests.post(gw.up_url + "/v1/charges?expand=customer", json={"amount": 5},
                      headers=dict(bearer(), **{"Idempotency-Key": key}), timeout=30)
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    e = provider.effects()
    assert len(e) == 1 and e[0]["path"] == "/v1/charges" and e[0]["query"] == "expand=customer", e
    assert e[0]["headers"].get("x-injected") == "yes"
    assert "authorization" not in e[0]["headers"]
    r2 = requests.post(gw.up_url + "/v1/charges?expand=customer", json={"amount": 5},
                       headers=dict(bearer(), **{"Idempotency-Key": key}), timeout=30)
    assert r2.status_code == 200 and outcome(r2) == "replayed" and r2.content == r.content, describe(r2)
    assert provider.count() == 1
    rec = gw.action("demo", key, headers=bearer())
    assert rec.status_code == 200 and rec.json()["state"] == "completed", describe(rec)


def test_upstream_listener_refusals(gw, provider):
    r = requests.post(gw.up_url + "/v1/charges", json={}, headers=bearer(), timeout=30)
    assert_problem(r, 400, "key_required")
    r = requests.post(gw.up_url + "/v1/charges", json={}, headers={"Idempotency-Key": new_key()}, timeout=30)
    assert_problem(r, 401, "unauthorized")
    r = requests.get(gw.up_url + "/v1/balance", headers=bearer(), timeout=30)
    assert r.status_code == 200 and outcome(r) is None, describe(r)
    assert provider.count() == 0


# ----------------------------------------------------------------------------- metrics

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                    r'([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|NaN|\+Inf|-Inf))( -?\d+)?$')


def scrape(gw):
    r = gw.get("/metrics")
    assert r.status_code == 200, describe(r)
    assert r.headers.get("Content-Type", "").startswith("text/plain"), describe(r)
    samples, types = {}, {}
    for line in r.text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text format: {line!r}"
        labels = {}
        if m.group(2):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)):
                labels[lm.group(1)] = lm.group(2)
        samples[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
    return samples, types


def val(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def http_count(samples, code):
    """once_http_requests_total{code}: by exact status ("404") or by class ("4xx")."""
    exact = ("once_http_requests_total", (("code", str(code)),))
    if exact in samples:
        return samples[exact]
    return val(samples, "once_http_requests_total", code=f"{code // 100}xx")


def test_metrics_families_and_types(gw):
    gw.proxy("POST", "metered", "/x", key=new_key(), json={}, headers=bearer())
    samples, types = scrape(gw)
    assert types.get("once_actions_total") == "counter", types
    assert types.get("once_http_requests_total") == "counter", types
    for h in ("once_upstream_seconds", "once_store_commit_seconds", "once_group_commit_batch_size"):
        assert types.get(h) == "histogram", (h, types)
        names = {n for (n, _) in samples}
        for suffix in ("_bucket", "_sum", "_count"):
            assert h + suffix in names, f"{h}{suffix} missing"
        infs = [v for (n, lab), v in samples.items() if n == h + "_bucket" and dict(lab).get("le") == "+Inf"]
        counts = [v for (n, lab), v in samples.items() if n == h + "_count"]
        assert infs and sum(infs) == sum(counts), f"{h}: +Inf buckets {infs} != counts {counts}"
    assert val(samples, "once_upstream_seconds_count", scope="metered") >= 1
    assert val(samples, "once_store_commit_seconds_count") >= 1
    assert http_count(samples, 200) >= 1


def test_metrics_counts_outcomes(gw, provider):
    before, _ = scrape(gw)
    h = bearer()
    keys = [new_key() for _ in range(3)]
    for k in keys:
        r = gw.proxy("POST", "metered", "/m", key=k, json={"n": 1}, headers=h)
        assert outcome(r) == "completed", describe(r)
    for k in keys[:2]:
        r = gw.proxy("POST", "metered", "/m", key=k, json={"n": 1}, headers=h)
        assert outcome(r) == "replayed", describe(r)
    r = gw.proxy("POST", "metered", "/m", key=keys[2], json={"n": 2}, headers=h)
    assert r.headers.get("Idempotency-Payload-Mismatch") == "true", describe(r)
    r = gw.proxy("POST", "metered", "/m", key=new_key(), json={}, headers=dict(h, **{"X-Fake-Status": "429"}))
    assert outcome(r) == "released", describe(r)
    ku = new_key()
    r = gw.proxy("POST", "metered", "/m", key=ku, json={}, headers=dict(h, **{"X-Fake-Status": "500"}))
    assert outcome(r) == "unknown", describe(r)
    r = gw.proxy("POST", "metered", "/m", key=ku, json={}, headers=h)
    assert r.status_code == 409, describe(r)
    # one in flight
    kf = new_key()
    t = threading.Thread(target=lambda: gw.proxy("POST", "metered", "/m", key=kf, json={},
                                                 headers=dict(h, **{"X-Fake-Delay-Ms": "1500"})))
    t.start()
    provider.wait_count(6)
    r = gw.proxy("POST", "metered", "/m", key=kf, json={}, headers=h)
    assert outcome(r) == "in_flight", describe(r)
    t.join(30)
    r = gw.get("/nope-" + uuid.uuid4().hex)
    assert r.status_code == 404
    after, _ = scrape(gw)

    def d(outcome_):
        return (val(after, "once_actions_total", scope="metered", outcome=outcome_)
                - val(before, "once_actions_total", scope="metered", outcome=outcome_))

    # docs/api.md: "new" counts every new reservation (the 3 completed, the released,
    # the unknown and the one in flight); a mismatch that is replayed counts as both
    # "mismatch" and "replayed"; the 500 is "unknown" and its retry, answered 409, counts
    # "unknown" or "held" as the background loop has moved it or not.
    assert d("new") == 6, f"new: {d('new')}"
    assert d("replayed") == 3, d("replayed")
    assert d("mismatch") == 1, d("mismatch")
    assert d("released") == 1, d("released")
    assert d("unknown") + d("held") == 2, (d("unknown"), d("held"))
    assert d("unknown") >= 1, d("unknown")
    assert d("in_flight") == 1, d("in_flight")
    assert (val(after, "once_upstream_seconds_count", scope="metered")
            - val(before, "once_upstream_seconds_count", scope="metered")) == 6
    assert http_count(after, 404) >= http_count(before, 404) + 1
    assert http_count(after, 409) >= http_count(before, 409) + 2


# ----------------------------------------------------------------------------- the log line

def test_json_log_line_per_request_without_the_raw_key(gw, provider):
    key = "raw-secret-" + uuid.uuid4().hex
    other = "raw-secret-" + uuid.uuid4().hex

    def metered():
        return [x for x in gw.log_lines() if x.get("scope") == "metered" and x.get("method") == "POST"]

    before = len(metered())
    r1 = gw.proxy("POST", "metered", "/logme", key=key, json={"a": 1},
                  headers=dict(bearer(), **{"X-Fake-Delay-Ms": "200"}))
    r2 = gw.proxy("POST", "metered", "/logme", key=key, json={"a": 1}, headers=bearer())
    r3 = gw.proxy("POST", "metered", "/logme", key=other, json={"a": 1}, headers=bearer())
    assert (r1.status_code, r2.status_code, r3.status_code) == (200, 200, 200)
    # Only this test's three lines, in order: earlier tests log to the same stderr.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(metered()) < before + 3:
        time.sleep(0.1)
    stderr = gw.stderr(all_runs=True)
    assert key not in stderr and other not in stderr, "the raw Idempotency-Key was logged"
    mine = metered()[before:]
    assert len(mine) >= 3, f"no JSON log lines for the requests; stderr tail:\n{stderr[-3000:]}"
    last3 = mine[:3]
    for x in last3:
        for field in ("time", "method", "route", "scope", "status", "outcome"):
            assert field in x, f"log line lacks {field}: {x}"
        assert isinstance(x["time"], str) and re.match(r"^\d{4}-\d{2}-\d{2}T", x["time"]), x
        assert x["status"] == 200, x
    first, replay, third = last3
    assert first["outcome"] == "completed" and replay["outcome"] == "replayed" and third["outcome"] == "completed", last3
    hash_fields = [f for f in first if "key" in f.lower()]
    assert hash_fields, f"no key hash field in {first}"
    hf = hash_fields[0]
    assert isinstance(first[hf], str) and first[hf] and first[hf] != key, first
    assert first[hf] == replay[hf], "the same key must hash the same"
    assert first[hf] != third[hf], "different keys must hash differently"
    up_fields = [f for f in first if "upstream" in f.lower()]
    assert up_fields, f"no upstream time field in {first}"
    assert isinstance(first[up_fields[0]], (int, float)) and first[up_fields[0]] >= 150, first


# ----------------------------------------------------------------------------- shutdown

def _connect_refused(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
    except (ConnectionRefusedError, socket.timeout, OSError):
        return True
    # accepted by the kernel backlog maybe; a request must then not be answered normally
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(2)
        data = s.recv(100)
        return not data.startswith(b"HTTP/1.1 200")
    except OSError:
        return True
    finally:
        s.close()


def test_sigterm_lets_in_flight_calls_finish_and_exits_0(tmp_path, provider, store_kind):
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url}}, server={"shutdown_grace": "20s"},
                store_kind=store_kind)
    g.start()
    key = new_key()
    out = {}

    def call():
        out["r"] = g.proxy("POST", "demo", "/slow", key=key, json={"x": 1}, headers={"X-Fake-Delay-Ms": "2500"})

    t = threading.Thread(target=call)
    t.start()
    assert provider.wait_count(1) == 1
    t0 = time.monotonic()
    g.terminate()
    refused = False
    while time.monotonic() - t0 < 2.0:
        if _connect_refused(g.port):
            refused = True
            break
        time.sleep(0.1)
    assert refused, "still accepting new connections 2 s after SIGTERM"
    t.join(30)
    rc = g.wait(30)
    elapsed = time.monotonic() - t0
    assert "r" in out, "the in-flight call got no answer"
    r = out["r"]
    assert r.status_code == 200 and outcome(r) == "completed", describe(r)
    assert rc == 0, f"exit code {rc} after SIGTERM:\n{g.stderr()[-3000:]}"
    assert elapsed < 10, f"took {elapsed:.1f} s to exit"
    show = g.cli("show", "demo", key, "--json")
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["state"] == "completed", show.stdout
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


def test_sigterm_idle_exits_0_quickly(tmp_path, provider, store_kind):
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url}}, store_kind=store_kind)
    g.start()
    t0 = time.monotonic()
    g.terminate()
    rc = g.wait(20)
    assert rc == 0, f"exit code {rc}:\n{g.stderr()[-3000:]}"
    assert time.monotonic() - t0 < 5
    assert not g.sanitizer_reports(), g.stderr()[-6000:]


def test_sigterm_grace_exceeded_exits_and_call_is_never_resent(tmp_path, provider, store_kind):
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "timeout": "3s", "lease": "4s"}},
                server={"shutdown_grace": "1s", "loop_interval": "200ms"}, store_kind=store_kind)
    g.start()
    key = new_key()
    out = {}

    def call():
        try:
            out["r"] = g.proxy("POST", "demo", "/slow", key=key, json={}, headers={"X-Fake-Delay-Ms": "6000"},
                               timeout=30)
        except requests.RequestException as e:
            out["e"] = e

    t = threading.Thread(target=call)
    t.start()
    assert provider.wait_count(1) == 1
    t0 = time.monotonic()
    g.terminate()
    rc = g.wait(20)
    elapsed = time.monotonic() - t0
    t.join(30)
    assert rc == 0, f"exit code {rc}:\n{g.stderr()[-3000:]}"
    assert elapsed < 4.5, f"shutdown_grace = 1s but exit took {elapsed:.1f} s"
    if "r" in out:  # if it answered at all, it must not claim a completion it did not see
        assert out["r"].status_code != 200, describe(out["r"])
    g.start()
    deadline = time.monotonic() + 15
    state = None
    while time.monotonic() < deadline:
        rec = g.action("demo", key)
        state = rec.json().get("state") if rec.status_code == 200 else rec.status_code
        if state in ("held", "completed"):
            break
        time.sleep(0.2)
    assert state in ("held",), f"after the lease the action must be held, not {state}"
    r = g.proxy("POST", "demo", "/slow", key=key, json={})
    j = assert_problem(r, 409, "outcome_unknown")
    assert j["state"] == "held", j
    time.sleep(0.5)
    assert provider.count() == 1, "an action cut off by shutdown was resent"
    assert g.stop() == 0
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]
