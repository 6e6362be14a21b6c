"""`once ls --agent NAME` and the agent in `once show` / `--json` (issue 28): every action
carries the name of the agent whose token asked for its current attempt (the third column of
its tokens_file line); the CLI filters on it and shows it ("-" in text, null in JSON when
nobody was named).

The agents' tokens are made with `once token`, as a person would.
"""
import json

import pytest

from gateway import Gateway, new_key, require_serve
from test_cli import assert_usage_error


def make_token(cli, name):
    r = cli("token", name)
    assert r.returncode == 0, r.stderr
    tok, line = r.stdout.split("\n")[:2]
    return tok, line


@pytest.fixture
def agents_gateway(cli, tmp_path, provider, store_kind, gateways):
    """A gateway whose tokens_file names the agents alpha and beta; returns (g, tokens)."""
    require_serve()
    tokens = {name: make_token(cli, name) for name in ("alpha", "beta")}
    path = tmp_path / "tokens"
    path.write_text("".join(line + "\n" for _, line in tokens.values()))
    path.chmod(0o600)
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url}}, server={"tokens_file": path},
                store_kind=store_kind)
    gateways.append(g)
    g.start()
    return g, {name: tok for name, (tok, _) in tokens.items()}


def charge(g, tok, key):
    r = g.proxy("POST", "demo", "/charges", key=key, json={"amount": 1},
                headers={"Authorization": f"Bearer {tok}"})
    assert r.status_code == 200, r.text


def ls_json(g, *args):
    r = g.cli("ls", "--json", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return json.loads(r.stdout)


def test_ls_agent_filters_and_the_record_names_the_agent(agents_gateway):
    g, tok = agents_gateway
    k1, k2, k3 = new_key("a1"), new_key("b1"), new_key("a2")
    charge(g, tok["alpha"], k1)
    charge(g, tok["beta"], k2)
    charge(g, tok["alpha"], k3)
    alpha = ls_json(g, "--agent", "alpha")
    assert [a["key"] for a in alpha] == [k1, k3]
    assert all(a["agent"] == "alpha" for a in alpha)
    assert [a["key"] for a in ls_json(g, "--agent", "beta", "--scope", "demo", "--status", "completed")] == [k2]
    assert ls_json(g, "--agent", "gamma") == []
    assert {a["agent"] for a in ls_json(g)} == {"alpha", "beta"}
    # the table: filtered the same way (the agent is not a column: `once show` has it)
    r = g.cli("ls", "--agent", "beta")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()[1:]
    assert len(rows) == 1 and rows[0].split()[1] == k2, r.stdout
    # show: a field line, and the JSON record's member
    r = g.cli("show", "demo", k2)
    assert r.returncode == 0, r.stderr
    assert "agent: beta" in r.stdout.splitlines(), r.stdout
    r = g.cli("show", "demo", k1, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["agent"] == "alpha"


def test_no_agent_is_a_dash_and_null(cli, store, ledger):
    ledger.make_pending("pay", "k")
    r = cli("show", "pay", "k", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "agent: -" in r.stdout.splitlines(), r.stdout
    r = cli("show", "pay", "k", "--store", store, "--json")
    rec = json.loads(r.stdout)
    assert "agent" in rec and rec["agent"] is None, rec
    r = cli("ls", "--store", store, "--json")
    assert [a["agent"] for a in json.loads(r.stdout)] == [None]
    r = cli("ls", "--store", store, "--json", "--agent", "alpha")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr


@pytest.mark.parametrize("name", ["", "two words", "x" * 65, "a/b", "caf\u00e9"])
def test_bad_agent_name(cli, name):
    # checked before any store is opened: no store here, and none is made
    assert_usage_error(cli("ls", "--agent", name), "invalid agent name", "usage: once ls")
    assert list(cli.cwd.iterdir()) == []


def test_agent_needs_a_value(cli):
    assert_usage_error(cli("ls", "--agent"), "--agent")


def test_help_ls_mentions_agent(cli):
    r = cli("help", "ls")
    assert r.returncode == 0 and "--agent NAME" in r.stdout
    assert r.stdout.startswith("usage: once ls [--status S] [--scope S] [--agent NAME]")
