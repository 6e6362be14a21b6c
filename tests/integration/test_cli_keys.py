"""Keys printed whole (issue 33): default MCP keys are 64-hex digests (`refund:f44e…`), and
a key the CLI prints cut with "..." cannot be pasted back into the next command. Every line
that names an action (approve, deny, resolve, their errors, show's "not found") carries the
key whole; each test pastes what was printed into `once show`.
"""
import hashlib
import json
import re

import pytest

from gateway import Gateway, require_serve
from test_cli import assert_error

DIGEST_KEY = "refund:" + hashlib.sha256(b"order A-1182").hexdigest()
LONGEST_KEY = "k" * 255  # ONCE_KEY_MAX


def printed_key(line, verb, scope):
    """The key of "<verb> SCOPE KEY: ..." as a person would copy it."""
    m = re.match(rf"^{verb} {re.escape(scope)} (\S+): ", line)
    assert m, line
    return m.group(1)


def show_key(run, scope, key):
    r = run("show", scope, key, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["key"]


@pytest.mark.parametrize("key", [DIGEST_KEY, LONGEST_KEY])
def test_resolve_prints_the_key_whole(cli, store, ledger, key):
    ledger.make_held("payments", key)
    r = cli("resolve", "payments", key, "--completed", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "..." not in r.stdout
    pasted = printed_key(r.stdout, "resolved", "payments")
    assert pasted == key
    assert show_key(lambda *a: cli(*a, "--store", store), "payments", pasted) == key


@pytest.mark.parametrize("key", [DIGEST_KEY, LONGEST_KEY])
def test_errors_name_the_key_whole(cli, store, ledger, key):
    line = assert_error(cli("show", "payments", key, "--store", store), 1, f"action payments {key}: ")
    assert "..." not in line
    line = assert_error(cli("resolve", "payments", key, "--released", "--store", store), 1,
                        f"cannot resolve action payments {key}: ")
    ledger.make_pending("payments", key)
    for verb in ("approve", "deny"):
        line = assert_error(cli(verb, "payments", key, "--store", store), 1, f"cannot {verb} action payments {key}: ")
        assert "..." not in line


def test_hooks_errors_name_the_event_whole(cli, store):
    event_id = "evt_" + "e" * 200
    line = assert_error(cli("hooks", "show", "stripe", event_id, "--store", store), 1,
                        f"no such event stripe {event_id}")
    assert "..." not in line


def test_approve_and_deny_print_digest_keys_that_paste_back(tmp_path, provider, store_kind, gateways):
    """The MCP case of issue 33 through the proxy: actions awaiting approval under 64-hex keys;
    what approve and deny print is pasted into show."""
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url, "approve": "POST /charges*"}},
                server={"loop_interval": "200ms"}, store_kind=store_kind)
    gateways.append(g)
    g.start()
    yes = "refund:" + hashlib.sha256(b"yes").hexdigest()
    no = "refund:" + hashlib.sha256(b"no").hexdigest()
    for key in (yes, no):
        r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 1})
        assert r.status_code == 202, r.text
    a = g.cli("approve", "demo", yes, "--note", "ok")
    assert a.returncode == 0, a.stderr
    assert "..." not in a.stdout
    d = g.cli("deny", "demo", no)
    assert d.returncode == 0, d.stderr
    assert printed_key(d.stdout, "denied", "demo") == no
    pasted = printed_key(a.stdout, "approved", "demo")
    assert pasted == yes
    r = g.cli("show", "demo", pasted)
    assert r.returncode == 0, r.stderr
    assert f"key: {yes}" in r.stdout.splitlines()
    r = g.cli("ls", "--scope", "demo")
    assert r.returncode == 0 and yes in r.stdout and no in r.stdout, r.stdout
