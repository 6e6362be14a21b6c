"""Helpers for black-box tests of webhooks in `once serve` (a module, not tests).

Builds on gateway.py (unchanged): HookGateway is a Gateway whose config also
has [source.NAME] sections; Agent runs tests/fakes/agent.py as a subprocess;
sign_* compute the senders' signatures with Python's hmac; metrics() parses
GET /metrics; hooks_ls / hooks_show read the store through `once hooks`.
Everything listens on 127.0.0.1 and every wait is bounded.
"""
import base64
import hashlib
import hmac
import json
import re
import time

import requests

from gateway import PYTHON, REPO_ROOT, FakeProcess, Gateway, _ini_value, describe, write_config

AGENT_PY = REPO_ROOT / "tests" / "fakes" / "agent.py"


# --------------------------------------------------------------------------- config

def write_hook_config(path, server, upstreams, sources):
    """gateway.write_config plus one [source.NAME] section per entry of sources."""
    write_config(path, server, upstreams)
    lines = []
    for name, src in sources.items():
        lines.append("")
        lines.append(f"[source.{name}]")
        for k, v in src.items():
            if v is None:
                continue
            lines.append(f"{k} = {_ini_value(v)}")
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")
    return path


class HookGateway(Gateway):
    """A Gateway with webhook sources: sources = {name: {key: value}}."""

    def __init__(self, workdir, sources, upstreams=None, server=None, port=None, store_kind="sqlite"):
        super().__init__(workdir, upstreams or {}, server=server, port=port, store_kind=store_kind)
        self.sources = sources
        self.write_config()

    def write_config(self):
        write_hook_config(self.config_path, self.server_cfg, self.upstreams, self.sources)

    def hook(self, source, body=b"", headers=None, timeout=30):
        if isinstance(body, str):
            body = body.encode()
        return requests.post(f"{self.url}/v1/hooks/{source}", data=body, headers=headers or {}, timeout=timeout)

    def inbox(self, source, verb, payload=None, token=None, timeout=30):
        h = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.post(f"{self.url}/v1/inbox/{source}/{verb}", json=payload if payload is not None else {},
                             headers=h, timeout=timeout)

    def claim(self, source, max=10, lease_ms=30000, token=None):
        r = self.inbox(source, "claim", {"max": max, "lease_ms": lease_ms}, token)
        assert r.status_code == 200, describe(r)
        return r.json()["events"]

    def ack(self, source, receipts, token=None):
        r = self.inbox(source, "ack", {"receipts": list(receipts)}, token)
        assert r.status_code == 200, describe(r)
        return r.json()

    def nack(self, source, receipts, delay_ms=None, token=None):
        payload = {"receipts": list(receipts)}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        r = self.inbox(source, "nack", payload, token)
        assert r.status_code == 200, describe(r)
        return r.json()

    def metrics(self):
        r = requests.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200, describe(r)
        return parse_metrics(r.text)

    def hooks_ls(self, source=None, status=None):
        """The records of `once hooks ls --json` (all pages up to 100000)."""
        args = ["hooks", "ls", "--json", "--limit", "100000"]
        if source:
            args += ["--source", source]
        if status:
            args += ["--status", status]
        r = self.cli(*args)
        assert r.returncode == 0, f"once {' '.join(args)} exited {r.returncode}: {r.stderr}"
        return json.loads(r.stdout)

    def hooks_show(self, source, event_id):
        """The record of `once hooks show --json`, or None when there is no such event (exit 1)."""
        r = self.cli("hooks", "show", source, event_id, "--json")
        if r.returncode == 1 and "no " in r.stderr.lower():
            return None
        assert r.returncode == 0, f"once hooks show {source} {event_id} exited {r.returncode}: {r.stderr}"
        return json.loads(r.stdout)

    def redeliver(self, source, event_id):
        r = self.cli("hooks", "redeliver", source, event_id)
        assert r.returncode == 0, f"once hooks redeliver exited {r.returncode}: {r.stdout} {r.stderr}"
        return r


# --------------------------------------------------------------------------- metrics

_METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics(dict):
    """{(name, frozenset(labels.items())): value}; .get(name, **labels) -> value or 0."""

    def value(self, name, **labels):
        return self.get((name, frozenset(labels.items())), 0.0)


def parse_metrics(text):
    out = Metrics()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _METRIC_LINE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(_LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def webhooks_total(m, source, result):
    return m.value("once_webhooks_total", source=source, result=result)


def deliveries_total(m, source, result):
    return m.value("once_deliveries_total", source=source, result=result)


# --------------------------------------------------------------------------- signatures

def _hmac(key, msg):
    if isinstance(key, str):
        key = key.encode()
    if isinstance(msg, str):
        msg = msg.encode()
    return hmac.new(key, msg, hashlib.sha256)


def _b(body):
    return body.encode() if isinstance(body, str) else body


def sign_github(secret, body):
    """X-Hub-Signature-256: sha256=<hex HMAC of the body>."""
    return "sha256=" + _hmac(secret, _b(body)).hexdigest()


def sign_stripe(secret, body, t=None):
    """Stripe-Signature: t=<secs>,v1=<hex HMAC of "{t}.{body}"> (the secret's bytes are the key)."""
    t = int(time.time()) if t is None else t
    return f"t={t},v1=" + _hmac(secret, str(t).encode() + b"." + _b(body)).hexdigest()


def stripe_v1(secret, body, t):
    return _hmac(secret, str(t).encode() + b"." + _b(body)).hexdigest()


def sign_standard(secret, msg_id, ts, body):
    """webhook-signature value v1,<base64 HMAC of "{id}.{ts}.{body}">, key = base64 after whsec_."""
    key = base64.b64decode(secret[len("whsec_"):])
    mac = _hmac(key, f"{msg_id}.{ts}.".encode() + _b(body)).digest()
    return "v1," + base64.b64encode(mac).decode()


def standard_headers(secret, msg_id, body, ts=None):
    ts = int(time.time()) if ts is None else ts
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts),
            "webhook-signature": sign_standard(secret, msg_id, ts, body)}


def sign_slack(secret, ts, body):
    """X-Slack-Signature: v0=<hex HMAC of "v0:{ts}:{body}">."""
    return "v0=" + _hmac(secret, f"v0:{ts}:".encode() + _b(body)).hexdigest()


def slack_headers(secret, body, ts=None):
    ts = int(time.time()) if ts is None else ts
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sign_slack(secret, ts, body)}


def sign_hmac(secret, body, base64_encoding=False, prefix=""):
    mac = _hmac(secret, _b(body))
    return prefix + (base64.b64encode(mac.digest()).decode() if base64_encoding else mac.hexdigest())


# --------------------------------------------------------------------------- the fake agent

class Agent(FakeProcess):
    """tests/fakes/agent.py in its own process (so it can be absent, then started on a fixed port)."""

    def __init__(self, port=0, secret=None, **mode):
        argv = [PYTHON, str(AGENT_PY), "--port", str(port)]
        if secret:
            argv += ["--secret", secret]
        super().__init__(argv, "fake agent")
        self.url = f"http://127.0.0.1:{self.port}"
        if mode:
            self.configure(**mode)

    def configure(self, **mode):
        r = requests.post(self.url + "/_agent/config", json=mode, timeout=10)
        r.raise_for_status()
        return r.json()

    def release(self):
        requests.post(self.url + "/_agent/release", timeout=10).raise_for_status()

    def reset(self):
        requests.post(self.url + "/_agent/reset", timeout=10).raise_for_status()

    def deliveries(self):
        r = requests.get(self.url + "/_agent/deliveries", timeout=10)
        r.raise_for_status()
        return r.json()

    def stats(self):
        r = requests.get(self.url + "/_agent/stats", timeout=10)
        r.raise_for_status()
        return r.json()

    def wait_deliveries(self, n, timeout=15, pred=None):
        """Waits until at least n deliveries (matching pred, if given) were seen; returns them all."""
        deadline = time.monotonic() + timeout
        while True:
            ds = self.deliveries()
            got = [d for d in ds if pred is None or pred(d)]
            if len(got) >= n or time.monotonic() >= deadline:
                return got
            time.sleep(0.05)


# --------------------------------------------------------------------------- waiting

def wait_until(fn, timeout=15, interval=0.05, what="condition"):
    """Calls fn until it returns a true value (returned) or timeout passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    last = fn()
    if last:
        return last
    raise AssertionError(f"{what} not reached within {timeout} s (last: {last!r})")


def ini(sections):
    """INI text of {section: {key: value or [values]}} (a list repeats the key)."""
    out = []
    for name, keys in sections.items():
        out += ["", f"[{name}]"]
        for k, v in keys.items():
            for item in v if isinstance(v, list) else [v]:
                out.append(f"{k} = {item}")
    return "\n".join(out) + "\n"


class AgentGateway(HookGateway):
    """A HookGateway whose config ends with extra sections ([mcp.NAME], [agent.NAME]: docs/agents.md);
    extra = {section: {key: value or [values]}}, written again with the config."""

    def __init__(self, workdir, extra, **kw):
        self.extra = extra
        super().__init__(workdir, **kw)

    def write_config(self):
        super().write_config()
        with open(self.config_path, "a") as f:
            f.write(ini(self.extra))
