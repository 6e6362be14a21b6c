"""Secrets stay secret: the SQLite store is created 0600 (even under umask 022), a
tokens or secret file that others may read is warned about at start, and a store
URL's password never appears in any output (the URL is shown with *** instead).
"""
import contextlib
import json
import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from gateway import free_port, pg_base_url, store_url, NO_PG_REASON, write_config
import security_harness as sh

PASSWORD = "s3cret-pw"
DEAD_PG = f"postgres://u:{PASSWORD}@127.0.0.1:1/x"          # nothing listens on port 1


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# ----------------------------------------------------------------------------- SQLite file modes

def assert_private(paths):
    modes = {p.name: oct(sh.file_mode(p)) for p in paths if p.exists()}
    wrong = {n: m for n, m in modes.items() if m != oct(0o600)}
    assert not wrong, f"store files not 0600: {wrong}"
    return modes


def test_sqlite_store_is_0600_under_umask_022(gateway, tmp_path):
    """The ledger (requests, answers, tokens of reservations) in a file the whole machine
    could read: once.db, once.db-wal and once.db-shm must be 0600."""
    with umask(0o022):
        gw = gateway(name="gw")
    r = gw.post("/v1/actions", json={"scope": "s", "key": "k"})
    assert r.status_code == 201, r.text
    db = gw.workdir / "once.db"
    modes = assert_private([db, db.with_name("once.db-wal"), db.with_name("once.db-shm")])
    assert "once.db" in modes and "once.db-wal" in modes, f"expected the database and its WAL: {modes}"


def test_cli_never_creates_a_store(tmp_path):
    """`once --store sqlite:NEW ls` on a path with no store: one line naming the path, exit 2,
    and no file made (a typo must not answer with an empty table, nor leave a world-readable
    file behind)."""
    db = tmp_path / "cli.db"
    with umask(0o022):
        r = sh.run_once("--store", f"sqlite:{db}", "ls")
    assert r.returncode == 2, sh.output_of(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0], sh.output_of(r)
    assert not db.exists(), "the CLI created a store"


# ----------------------------------------------------------------------------- readable secret files

def warnings_naming(gw, path):
    return [ln for ln in gw.log_lines() if ln.get("level") == "warn" and str(path) in json.dumps(ln)]


def gateway_with_secret_file(gateway, tmp_path, kind, mode):
    """A gateway whose tokens_file or source secret_file has the given mode: (gw, path)."""
    path = tmp_path / f"{kind}.secret"
    if kind == "tokens_file":
        sh.write_tokens(path, ["tok-secret-file-0123456789"], mode=mode)
        return gateway(server={"tokens_file": str(path)}), path
    path.write_text("github-webhook-secret-42\n")
    os.chmod(path, mode)
    return gateway(sources={"gh": {"verify": "github", "secret_file": str(path)}}), path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o666], ids=oct)
@pytest.mark.parametrize("kind", ["tokens_file", "secret_file"])
def test_readable_secret_file_is_warned_about(gateway, tmp_path, kind, mode):
    """A tokens or webhook secret file that group or others can read: a warn log line
    naming it at start."""
    gw, path = gateway_with_secret_file(gateway, tmp_path, kind, mode)
    assert warnings_naming(gw, path), f"no warning about {path} ({oct(mode)}):\n{gw.stderr()[-3000:]}"


@pytest.mark.parametrize("mode", [0o600, 0o400], ids=oct)
@pytest.mark.parametrize("kind", ["tokens_file", "secret_file"])
def test_private_secret_file_is_not_warned_about(gateway, tmp_path, kind, mode):
    """The same file readable by its owner only: no warning."""
    gw, path = gateway_with_secret_file(gateway, tmp_path, kind, mode)
    assert not warnings_naming(gw, path), gw.stderr()[-3000:]


# ----------------------------------------------------------------------------- store URL passwords

def assert_password_hidden(text, what, url_fragment):
    """No password in text; where the URL is shown, *** stands in its place."""
    assert PASSWORD not in text, f"{what} prints the store password:\n{text[-3000:]}"
    if url_fragment in text:
        assert ":***@" in text, f"{what} shows the store URL without *** for the password:\n{text[-3000:]}"


def test_cli_error_hides_the_password(tmp_path):
    """`once --store postgres://u:PW@127.0.0.1:1/x ls` fails to connect: the error names the
    store without its password."""
    r = sh.run_once("--store", DEAD_PG, "ls", cwd=tmp_path)
    assert r.returncode != 0, sh.output_of(r)
    assert_password_hidden(sh.output_of(r), "once ls", "127.0.0.1:1/x")


@pytest.mark.parametrize("how", ["config", "flag", "env"])
def test_serve_error_hides_the_password(tmp_path, how):
    """`once serve` on a store it cannot reach, the URL given in the file, with --store or
    in ONCE_STORE: the error output has no password."""
    store = DEAD_PG if how == "config" else f"sqlite:{tmp_path / 'unused.db'}"
    cfg = write_config(tmp_path / "once.ini", {"listen": f"127.0.0.1:{free_port()}", "store": store}, {})
    extra = ["--store", DEAD_PG] if how == "flag" else []
    env = {"ONCE_STORE": DEAD_PG} if how == "env" else None
    r = sh.run_serve(cfg, *extra, env=env, cwd=tmp_path)
    assert r.returncode not in (0, None), f"once serve did not fail ({r.returncode}):\n{sh.output_of(r)}"
    assert_password_hidden(sh.output_of(r), f"once serve (store in {how})", "127.0.0.1:1/x")


@pytest.mark.parametrize("how", ["config", "env"])
def test_check_config_hides_the_password(tmp_path, how):
    """`once check-config` on a file (or ONCE_STORE) with a password in the store URL."""
    store = DEAD_PG if how == "config" else f"sqlite:{tmp_path / 'unused.db'}"
    cfg = write_config(tmp_path / "once.ini", {"listen": f"127.0.0.1:{free_port()}", "store": store}, {})
    r = sh.run_once("check-config", cfg, env={"ONCE_STORE": DEAD_PG} if how == "env" else None)
    assert r.returncode == 0, sh.output_of(r)
    assert_password_hidden(sh.output_of(r), "once check-config", "127.0.0.1:1/x")


def with_password(url):
    """url with the password PASSWORD for its user (postgres:// URLs only)."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{host}"))


def test_serve_log_hides_the_password(tmp_path):
    """`once serve` on a real PostgreSQL ($ONCE_TEST_PG_URL, which trusts any password)
    with a password in the URL: the start-up line names the store as user:***@…, and no
    line of the run (start, requests, stop) has the password."""
    if not pg_base_url():
        pytest.skip(NO_PG_REASON)
    store = with_password(store_url("postgres", tmp_path))
    gw = sh.launch(tmp_path / "gw", server={"store": store})
    try:
        r = gw.post("/v1/actions", json={"scope": "s", "key": "k"})
        assert r.status_code == 201, r.text
    finally:
        sh.finish(gw)
    out = gw.stderr(all_runs=True)
    assert_password_hidden(out, "once serve's log", urlsplit(store).hostname)
    assert ":***@" in out, f"the store is never named in the log (expected user:***@…):\n{out[-3000:]}"
    shown = sh.run_once("check-config", gw.config_path)
    assert_password_hidden(sh.output_of(shown), "once check-config", urlsplit(store).hostname)
