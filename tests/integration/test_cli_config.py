"""`once --config FILE` (issue 33): the CLI takes the gateway's config and opens its store,
as `once serve --config FILE` does.

The store is --store, else the config's `store` key (loaded with the gateway's loader, so
$ONCE_STORE is over the file as for serve, and a relative sqlite: path is relative to the
working directory, as for serve), else $ONCE_STORE, else sqlite:once.db. The option goes
before or after the command, like --store.
"""
import json
import os

import pytest

from conftest import LedgerTool
from gateway import Gateway, new_key, require_serve
from test_cli import assert_error


def config(path, store):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[server]\nlisten = 127.0.0.1:7600\nstore = {store}\n")
    return path


def keys(r):
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return [a["key"] for a in json.loads(r.stdout)]


@pytest.mark.parametrize("where", ["before", "after", "equals"])
def test_config_names_the_store(cli, store, ledger, tmp_path, where):
    ledger.make_pending("pay", "k")
    cfg = config(tmp_path / "etc" / "once.ini", store)
    args = {"before": ("--config", cfg, "ls", "--json"),
            "after": ("ls", "--json", "--config", cfg),
            "equals": (f"--config={cfg}", "ls", "--json")}[where]
    assert keys(cli(*args)) == ["k"]
    r = cli("show", "pay", "k", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["key"] == "k"


def test_config_for_every_command_that_opens_a_store(cli, store, ledger, tmp_path):
    ledger.make_held("pay", "h")
    cfg = config(tmp_path / "once.ini", store)
    r = cli("resolve", "pay", "h", "--released", "--config", cfg)
    assert r.returncode == 0 and r.stdout == "resolved pay h: released\n", (r.stdout, r.stderr)
    r = cli("gc", "--config", cfg)
    assert r.returncode == 0, r.stderr
    for args in (("hooks", "--config", cfg, "ls", "--json"), ("hooks", "ls", "--json", "--config", cfg),
                 ("--config", cfg, "hooks", "ls", "--json")):
        r = cli(*args)
        assert r.returncode == 0 and json.loads(r.stdout) == [], (args, r.stdout, r.stderr)


def test_store_option_beats_config(cli, store, ledger, tmp_path):
    ledger.make_pending("pay", "k")
    broken = config(tmp_path / "broken.ini", "sqlite:/nonexistent/dir/x.db")
    assert keys(cli("--config", broken, "ls", "--json", "--store", store)) == ["k"]
    assert keys(cli("--store", store, "ls", "--json", "--config", broken)) == ["k"]
    # --store given, the config is not read at all: one that cannot load does not matter
    assert keys(cli("ls", "--json", "--store", store, "--config", tmp_path / "missing.ini")) == ["k"]


def test_config_beats_the_default_and_environment_is_over_the_file(cli, store, ledger, tmp_path):
    """As for `once serve --config`: $ONCE_STORE replaces the file's store key."""
    ledger.make_pending("pay", "k")
    broken = config(tmp_path / "broken.ini", "sqlite:/nonexistent/dir/x.db")
    assert keys(cli("ls", "--json", "--config", broken, env={"ONCE_STORE": store})) == ["k"]
    good = config(tmp_path / "good.ini", store)
    assert_error(cli("ls", "--config", good, env={"ONCE_STORE": "sqlite:/nonexistent/dir/x.db"}), 2,
                 "/nonexistent/dir/x.db")
    # without $ONCE_STORE the file's store, not ./once.db
    assert keys(cli("ls", "--json", "--config", good)) == ["k"]


def test_relative_sqlite_path_is_from_the_working_directory(cli, ledger_tool_bin, tmp_path):
    """`store = sqlite:rel.db` is opened relative to the working directory, as `once serve`
    opens it; the "no store" message says where it came from."""
    cfg = config(tmp_path / "etc" / "once.ini", "sqlite:rel.db")
    LedgerTool(ledger_tool_bin, f"sqlite:{tmp_path / 'etc' / 'rel.db'}").make_pending("pay", "beside-config")
    line = assert_error(cli("ls", "--config", cfg), 2, "no store at rel.db", "--config", str(cfg),
                        "working directory")
    assert "\t" not in line
    LedgerTool(ledger_tool_bin, f"sqlite:{cli.cwd / 'rel.db'}").make_pending("pay", "in-cwd")
    assert keys(cli("ls", "--json", "--config", cfg)) == ["in-cwd"]


def test_no_store_message_names_both_options(cli):
    for args in (("ls",), ("show", "pay", "k"), ("hooks", "ls"), ("gc",), ("approve", "pay", "k")):
        assert_error(cli(*args), 2, "no store at once.db", "--store", "--config")
    assert list(cli.cwd.iterdir()) == []


def test_bad_config_is_one_line_exit_1(cli, tmp_path):
    missing = tmp_path / "missing.ini"
    assert_error(cli("ls", "--config", missing), 1, str(missing))
    bad = tmp_path / "bad.ini"
    bad.write_text("[server]\nstore = ftp://x\n")
    assert_error(cli("--config", bad, "ls"), 1, "bad.ini:2", "store")
    assert list(cli.cwd.iterdir()) == []


@pytest.mark.parametrize("args", [("ls", "--config"), ("--config",), ("--config", "", "ls"), ("ls", "--config="),
                                  ("--config=", "ls")])
def test_config_needs_a_value(cli, args):
    line = assert_error(cli(*args), 1, "--config")
    assert "usage: once" in line


def test_config_with_commands_that_open_no_store(cli, tmp_path):
    missing = tmp_path / "missing.ini"
    for args in (("version",), ("help",), ("token", "bot")):
        r = cli("--config", missing, *args)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)


def test_global_config_reaches_serve(cli, tmp_path):
    """`once --config FILE serve` is `once serve --config FILE`: a config that does not load
    is its error, not "--config FILE is required"."""
    bad = tmp_path / "bad.ini"
    bad.write_text("[server]\nstore = ftp://x\n")
    assert_error(cli("--config", bad, "serve"), 1, "bad.ini:2")
    assert_error(cli("serve", "-c", bad), 1, "bad.ini:2")
    assert_error(cli("serve"), 1, "--config FILE is required")


def test_help_mentions_config(cli):
    r = cli("help")
    assert r.returncode == 0 and "--config FILE" in r.stdout
    for cmd in ("ls", "show", "approve", "resolve", "hooks", "gc"):
        r = cli("help", cmd)
        assert r.returncode == 0 and "--config FILE" in r.stdout and "--store URL" in r.stdout, (cmd, r.stdout)
        globals_part = r.stdout[r.stdout.index("Global options:"):]
        assert all(len(line) <= 80 for line in globals_part.splitlines()), r.stdout


def test_the_gateways_config_from_its_directory(cli, provider, tmp_path, gateways):
    """A gateway on `store = sqlite:gw.db` (relative: from its working directory): the CLI
    given the same config in that directory lists what the gateway recorded."""
    require_serve()
    g = Gateway(tmp_path / "gw", {"demo": {"url": provider.url}}, store="sqlite:gw.db")
    gateways.append(g)
    g.start()
    key = new_key("cfg")
    r = g.proxy("POST", "demo", "/charges", key=key, json={"a": 1})
    assert r.status_code == 200, r.text
    assert (g.workdir / "gw.db").exists()
    from conftest import Cli
    here = Cli(cli.binary, g.workdir)
    assert key in keys(here("--config", g.config_path, "ls", "--json"))
    r = here("show", "demo", key, "--config", "once.ini")
    assert r.returncode == 0 and f"key: {key}" in r.stdout.splitlines(), (r.stdout, r.stderr)
    assert os.path.samefile(here.cwd, g.workdir)
