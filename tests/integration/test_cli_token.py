"""`once token [--operator] NAME` (issue 28): a fresh bearer token (line 1) and the
tokens_file line that admits it, `sha256:HEX agent NAME` (or `operator`), HEX the SHA-256 of
the token. No store is opened; NAME is 1-64 of A-Z a-z 0-9 . _ -.
"""
import hashlib
import re

import pytest

from test_cli import assert_usage_error

LINE_RE = re.compile(r"^sha256:([0-9a-f]{64}) (agent|operator) (\S+)$")


def assert_token_usage_error(r, *fragments):
    line = assert_usage_error(r, *fragments)
    assert "usage: once token" in line, line
    return line


def token(cli, *args):
    r = cli("token", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = r.stdout.split("\n")
    assert len(lines) == 3 and lines[2] == "", r.stdout
    m = LINE_RE.match(lines[1])
    assert m, lines[1]
    return lines[0], m.group(1), m.group(2), m.group(3)


def test_token_and_its_line(cli):
    tok, hexdigest, role, name = token(cli, "billing-bot")
    assert (role, name) == ("agent", "billing-bot")
    assert hashlib.sha256(tok.encode()).hexdigest() == hexdigest
    assert re.fullmatch(r"[\x21-\x7e]{32,}", tok), tok   # one printable word, worth a bearer header


def test_two_runs_give_different_tokens(cli):
    a = token(cli, "bot")
    b = token(cli, "bot")
    assert a[0] != b[0] and a[1] != b[1]


@pytest.mark.parametrize("args", [("--operator", "ada"), ("ada", "--operator")])
def test_operator(cli, args):
    tok, hexdigest, role, name = token(cli, *args)
    assert (role, name) == ("operator", "ada")
    assert hashlib.sha256(tok.encode()).hexdigest() == hexdigest


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * 64])
def test_good_names(cli, name):
    assert token(cli, name)[3] == name


@pytest.mark.parametrize("name", ["", "two words", "x" * 65, "a/b", "caf\u00e9", "a:b", "tab\there"])
def test_bad_names(cli, name):
    line = assert_token_usage_error(cli("token", name), "invalid agent name", "1-64 of A-Z a-z 0-9 . _ -")
    assert "\t" not in line


@pytest.mark.parametrize("args, fragment", [
    ((), "missing NAME"),
    (("a", "b"), "too many arguments"),
    (("--frob", "a"), "--frob"),
])
def test_usage_errors(cli, args, fragment):
    assert_token_usage_error(cli("token", *args), fragment)


def test_no_store_is_opened(cli):
    tok = token(cli, "bot", "--store", "sqlite:/nonexistent/dir/x.db")
    assert tok[3] == "bot"
    r = cli("token", "bot", env={"ONCE_STORE": "sqlite:/nonexistent/dir/x.db"})
    assert r.returncode == 0, r.stderr
    assert list(cli.cwd.iterdir()) == []


def test_help(cli):
    r = cli("help", "token")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: once token [--operator] NAME")
    assert "--operator" in r.stdout and "tokens_file" in r.stdout
    assert "--store" not in r.stdout
    assert cli("token", "--help").stdout == r.stdout
    listed = cli("help").stdout
    assert re.search(r"^  token\s", listed, re.M), listed


def test_the_gateway_admits_the_printed_tokens(cli, tmp_path, provider, gateways):
    """The two lines as a person uses them: line 2 into the tokens_file, line 1 to the
    agent (or the operator) as a bearer token."""
    from gateway import Gateway, require_serve
    require_serve()
    lines = [cli("token", "billing-bot"), cli("token", "--operator", "ada")]
    agent_tok, op_tok = (r.stdout.split("\n")[0] for r in lines)
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(r.stdout.split("\n")[1] + "\n" for r in lines))
    tokens.chmod(0o600)
    assert agent_tok not in tokens.read_text() and op_tok not in tokens.read_text()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url}}, server={"tokens_file": tokens})
    gateways.append(g)
    g.start()

    def bearer(tok):
        return {"Authorization": f"Bearer {tok}"}

    assert g.action("demo", "nope").status_code == 401
    assert g.action("demo", "nope", headers=bearer("once_" + "0" * 64)).status_code == 401
    assert g.action("demo", "nope", headers=bearer(agent_tok)).status_code == 404
    resolve = "/v1/actions/demo/nope/resolve"
    assert g.post(resolve, json={"outcome": "released"}, headers=bearer(agent_tok)).status_code == 403
    assert g.post(resolve, json={"outcome": "released"}, headers=bearer(op_tok)).status_code == 404
