"""Black-box tests of the `once` command line: every command, every error.

Rows are created through libonce (ledger_tool, see conftest.py); the CLI is
only observed from outside: exit status, stdout, stderr.
"""
import base64
import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from conftest import REPO_ROOT

RECORD_FIELDS = {
    "scope", "key", "state", "attempt", "agent", "waits_for", "created_at", "updated_at",
    "lease_expires_at", "expires_at", "approved_at", "decided_by", "decision_note", "fingerprint", "request",
    "provider_id", "error", "note", "response", "lookups", "trail",
}
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LS_HEADER = ["SCOPE", "KEY", "STATE", "ATTEMPT", "UPDATED", "PROVIDER_ID"]


def assert_error(r, code, *fragments):
    """Exactly one line on stderr, 'once: ...', the exit code, nothing on stdout."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("once: "), r.stderr
    assert r.stdout == ""
    for f in fragments:
        assert f.lower() in lines[0].lower(), (f, lines[0])
    return lines[0]


def assert_usage_error(r, *fragments):
    line = assert_error(r, 1, *fragments)
    assert "usage: once" in line
    return line


def ls_json(cli, store, *args):
    r = cli("ls", "--store", store, "--json", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert isinstance(data, list)
    return data


def show_json(cli, store, scope, key):
    r = cli("show", scope, key, "--store", store, "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert set(rec) == RECORD_FIELDS
    return rec


def table_rows(stdout):
    lines = stdout.splitlines()
    assert lines, "no header"
    assert lines[0].split() == LS_HEADER
    return [line.split() for line in lines[1:]]


# ---- ls ------------------------------------------------------------------


def test_ls_empty_store_table(cli, store):
    r = cli("ls", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert table_rows(r.stdout) == []


def test_ls_empty_store_json(cli, store):
    assert ls_json(cli, store) == []


def test_ls_table_lists_rows_in_creation_order(cli, store, ledger):
    ledger.make_pending("pay", "p-1")
    ledger.make_completed("pay", "c-1", provider_id="ch_123")
    ledger.make_unknown("mail", "u-1")
    r = cli("ls", "--store", store)
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    assert [row[:4] for row in rows] == [
        ["pay", "p-1", "pending", "1"],
        ["pay", "c-1", "completed", "1"],
        ["mail", "u-1", "unknown", "1"],
    ]
    assert [row[5] for row in rows] == ["-", "ch_123", "-"]
    for row in rows:
        assert TIME_RE.match(row[4]), row
    # Columns are aligned: every STATE cell starts at the header's offset.
    lines = r.stdout.splitlines()
    col = lines[0].index("STATE")
    assert all(line[col:].split()[0] in {"pending", "completed", "unknown"} for line in lines[1:])


def test_ls_json_records(cli, store, ledger):
    ledger.make_pending("pay", "p-1", fingerprint="fp-1")
    ledger.make_completed("pay", "c-1", body="hello", provider_id="ch_9")
    data = ls_json(cli, store)
    assert [(d["scope"], d["key"], d["state"]) for d in data] == [
        ("pay", "p-1", "pending"),
        ("pay", "c-1", "completed"),
    ]
    for d in data:
        assert set(d) == RECORD_FIELDS
        assert d["attempt"] == 1
        assert TIME_RE.match(d["created_at"])
        assert TIME_RE.match(d["updated_at"])
        assert TIME_RE.match(d["lease_expires_at"])
    pending, completed = data
    assert pending["fingerprint"] == "fp-1"
    assert pending["expires_at"] is None
    assert pending["response"] is None
    assert pending["provider_id"] is None and pending["note"] is None and pending["error"] is None
    assert TIME_RE.match(completed["expires_at"])
    assert completed["provider_id"] == "ch_9"
    assert completed["response"] == {"status": 200, "headers": None, "body": "hello"}


def test_ls_status_filter(cli, store, ledger):
    ledger.make_pending("pay", "p-1")
    ledger.make_held("pay", "h-1")
    ledger.make_completed("pay", "c-1")
    ledger.make_held("mail", "h-2")
    assert [d["key"] for d in ls_json(cli, store, "--status", "held")] == ["h-1", "h-2"]
    assert [d["key"] for d in ls_json(cli, store, "--status", "completed")] == ["c-1"]
    assert ls_json(cli, store, "--status", "released") == []
    r = cli("ls", "--status", "held", "--store", store)
    assert r.returncode == 0
    assert [row[1] for row in table_rows(r.stdout)] == ["h-1", "h-2"]


def test_ls_scope_filter(cli, store, ledger):
    ledger.make_pending("pay", "a")
    ledger.make_pending("mail", "b")
    ledger.make_held("pay", "c")
    assert [d["key"] for d in ls_json(cli, store, "--scope", "pay")] == ["a", "c"]
    assert [d["key"] for d in ls_json(cli, store, "--scope", "mail")] == ["b"]
    assert ls_json(cli, store, "--scope", "nothing") == []
    both = ls_json(cli, store, "--scope", "pay", "--status", "held")
    assert [(d["scope"], d["key"]) for d in both] == [("pay", "c")]


def test_ls_limit(cli, store, ledger):
    for k in ("a", "b", "c"):
        ledger.make_pending("pay", k)
    assert [d["key"] for d in ls_json(cli, store, "--limit", "2")] == ["a", "b"]
    assert [d["key"] for d in ls_json(cli, store, "--limit", "1")] == ["a"]
    assert [d["key"] for d in ls_json(cli, store, "--limit", "100000")] == ["a", "b", "c"]
    r = cli("ls", "--limit", "2", "--store", store)
    assert [row[1] for row in table_rows(r.stdout)] == ["a", "b"]


def test_ls_follows_pages(cli, store, ledger):
    first = ledger.reserve_many("bulk", "a", 160)
    ledger.make_pending("other", "x")
    second = ledger.reserve_many("bulk", "b", 90)
    everything = first + ["x"] + second  # 251 rows

    # The default limit is 100 records.
    assert [d["key"] for d in ls_json(cli, store)] == everything[:100]
    # More than one page, no row repeated or skipped, in creation order.
    assert [d["key"] for d in ls_json(cli, store, "--limit", "250")] == everything[:250]
    assert [d["key"] for d in ls_json(cli, store, "--limit", "100000")] == everything
    assert [d["key"] for d in ls_json(cli, store, "--limit", "201")] == everything[:201]
    # A filter keeps working across pages.
    bulk = ls_json(cli, store, "--scope", "bulk", "--limit", "1000")
    assert [d["key"] for d in bulk] == first + second
    # The table follows pages too.
    r = cli("ls", "--store", store, "--limit", "230")
    assert r.returncode == 0
    assert [row[1] for row in table_rows(r.stdout)] == everything[:230]


@pytest.mark.parametrize("bad", ["0", "-1", "100001", "abc", "10x", "", " 5", "+5", "1e3", "99999999999999999999"])
def test_ls_bad_limit(cli, store, bad):
    assert_usage_error(cli("ls", "--store", store, "--limit", bad), "--limit")


def test_ls_limit_needs_value(cli, store):
    assert_usage_error(cli("ls", "--store", store, "--limit"), "--limit")


@pytest.mark.parametrize("bad", ["bogus", "PENDINGX", "", "done"])
def test_ls_bad_status(cli, store, bad):
    assert_usage_error(cli("ls", "--store", store, "--status", bad), "status")


def header_states():
    """Every action state of libonce's enum (include/once/once.h), lower-cased, in order."""
    text = (REPO_ROOT / "include" / "once" / "once.h").read_text()
    body = re.search(r"typedef enum once_state \{(.*?)\} once_state;", text, re.S).group(1)
    names = [m.lower() for m in re.findall(r"ONCE_STATE_([A-Z_]+)\s*=", body)]
    assert {"awaiting_approval", "denied"} <= set(names), names
    return names


def test_ls_status_names_all_accepted(cli, store):
    for name in header_states():
        assert ls_json(cli, store, "--status", name) == []


def test_ls_bad_status_lists_every_state(cli, store):
    """The message names every state the ledger has, in the enum's order (issue 33: it
    left out awaiting_approval and denied)."""
    line = assert_usage_error(cli("ls", "--store", store, "--status", "done"), "unknown status 'done'")
    listed = re.search(r"\(expected ([^)]*)\)", line).group(1)
    assert re.split(r", | or ", listed) == header_states(), line


def test_help_ls_lists_every_state(cli):
    r = cli("help", "ls")
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("--status"))
    # the option's text runs until the next option
    text = lines[at]
    for line in lines[at + 1:]:
        if line.lstrip().startswith("--"):
            break
        text += " " + line.strip()
    words = re.findall(r"[a-z_]+", text.split(":", 1)[1])
    assert [w for w in words if w != "or"] == header_states(), text
    assert all(len(line) <= 80 for line in lines), r.stdout


def test_ls_bad_scope(cli, store):
    assert_error(cli("ls", "--store", store, "--scope", "no spaces"), 1, "scope")


def test_ls_unexpected_argument(cli, store):
    assert_usage_error(cli("ls", "extra", "--store", store), "extra")


# ---- show ----------------------------------------------------------------


def parse_show(stdout):
    fields = {}
    for line in stdout.splitlines():
        name, sep, value = line.partition(": ")
        assert sep, line
        assert name not in fields, name
        fields[name] = value
    return fields


def test_show_table(cli, store, ledger):
    ledger.make_pending("pay", "c-1", fingerprint="fp-abc")
    # complete with headers through the tool
    token = ledger.make_pending("pay", "c-2")
    ledger.complete("pay", "c-2", token, status=201, body="charged 5 EUR",
                    provider_id="ch_42", headers='[["content-type","text/plain"]]')
    r = cli("show", "pay", "c-2", "--store", store)
    assert r.returncode == 0, r.stderr
    f = parse_show(r.stdout)
    assert f["scope"] == "pay"
    assert f["key"] == "c-2"
    assert f["state"] == "completed"
    assert f["attempt"] == "1"
    for name in ("created_at", "updated_at", "lease_expires_at", "expires_at"):
        assert TIME_RE.match(f[name]), (name, f[name])
    assert f["provider_id"] == "ch_42"
    assert f["fingerprint"] == "-"
    assert f["error"] == "-"
    assert f["note"] == "-"
    assert "decided_by" not in f and "decision_note" not in f  # no approval: no decision lines
    assert "201" in f["response"] and "13 bytes" in f["response"]
    assert f["body"] == "charged 5 EUR"
    assert "content-type" in f["headers"]

    r = cli("show", "pay", "c-1", "--store", store)
    f = parse_show(r.stdout)
    assert f["state"] == "pending"
    assert f["fingerprint"] == "fp-abc"
    assert f["expires_at"] == "-"
    assert f["response"] == "-"
    assert "body" not in f


def test_show_table_binary_body(cli, store, ledger):
    token = ledger.make_pending("pay", "bin")
    ledger.complete("pay", "bin", token, body=b"\xff\xfezz")
    r = cli("show", "pay", "bin", "--store", store)
    assert r.returncode == 0
    f = parse_show(r.stdout)
    assert "4 bytes" in f["response"]
    assert "binary" in f["body"]


def test_show_escapes_control_characters(cli, store, ledger):
    # Free text (error, note) may hold anything; the terminal must not obey it.
    text = "line1\nline2\x1b[31m red \u009b"
    ledger.make_unknown("pay", "u-1", error=text)
    r = cli("show", "pay", "u-1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u009b" not in r.stdout
    f = parse_show(r.stdout)  # the newline did not split the field
    assert f["error"] == "line1\\nline2\\x1b[31m red \\u009b"
    # JSON keeps the exact value.
    assert show_json(cli, store, "pay", "u-1")["error"] == text


def test_show_json(cli, store, ledger):
    token = ledger.make_pending("pay", "c-2", fingerprint="fp-1")
    ledger.complete("pay", "c-2", token, status=201, body="héllo", provider_id="ch_42",
                    headers='[["content-type","text/plain"],["x-id","7"]]')
    rec = show_json(cli, store, "pay", "c-2")
    assert rec["scope"] == "pay" and rec["key"] == "c-2"
    assert rec["state"] == "completed"
    assert rec["attempt"] == 1
    assert rec["fingerprint"] == "fp-1"
    assert rec["provider_id"] == "ch_42"
    assert rec["error"] is None and rec["note"] is None
    # no approval, so nobody decided (tests/integration/test_approvals.py has decided ones)
    assert rec["approved_at"] is None and rec["decided_by"] is None and rec["decision_note"] is None
    for name in ("created_at", "updated_at", "lease_expires_at", "expires_at"):
        assert TIME_RE.match(rec[name]), name
    assert rec["created_at"] <= rec["updated_at"] < rec["expires_at"]
    assert rec["response"] == {
        "status": 201,
        "headers": [["content-type", "text/plain"], ["x-id", "7"]],
        "body": "héllo",
    }


def test_show_json_binary_body_is_base64(cli, store, ledger):
    token = ledger.make_pending("pay", "bin")
    ledger.complete("pay", "bin", token, body=b"a\xff\xfe", headers="not json {")
    rec = show_json(cli, store, "pay", "bin")
    resp = rec["response"]
    assert set(resp) == {"status", "headers", "body_base64"}
    assert resp["body_base64"] == "Yf/+"
    assert resp["headers"] == "not json {"


def test_show_json_overlong_utf8_is_base64(cli, store, ledger):
    # 0xC0 0xAF is an overlong '/', which a strict validator refuses.
    token = ledger.make_pending("pay", "ovl")
    ledger.complete("pay", "ovl", token, body=b"\xc0\xaf")
    resp = show_json(cli, store, "pay", "ovl")["response"]
    assert resp["body_base64"] == "wK8="
    assert "body" not in resp


@pytest.mark.parametrize("body, text", [
    ("plain ascii", True),
    ("é ü ß", True),                          # 2-byte sequences
    ("€ ✓", True),                             # 3-byte
    ("\U0001F600 \U0010FFFF", True),             # 4-byte, the last code point
    (b"\xed\xa0\x80", False),                   # a UTF-16 surrogate
    (b"\xf4\x90\x80\x80", False),               # above U+10FFFF
    (b"\xe0\x80\xaf", False),                   # overlong 3-byte
    (b"ok\xe2\x82", False),                      # truncated at the end
    (b"\x80abc", False),                         # stray continuation byte
    (b"\xf8\x88\x80\x80\x80", False),           # 5-byte form
])
def test_show_json_body_utf8_strictness(cli, store, ledger, body, text):
    raw = body.encode() if isinstance(body, str) else body
    token = ledger.make_pending("pay", "u")
    ledger.complete("pay", "u", token, body=body)
    resp = show_json(cli, store, "pay", "u")["response"]
    if text:
        assert resp["body"] == body
        assert "body_base64" not in resp
    else:
        assert "body" not in resp
        assert base64.b64decode(resp["body_base64"], validate=True) == raw


def test_times_are_utc_now(cli, store, ledger):
    before = datetime.now(timezone.utc)
    ledger.make_pending("pay", "t", lease_ms=60000)
    after = datetime.now(timezone.utc)
    rec = show_json(cli, store, "pay", "t")
    created = datetime.strptime(rec["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    lease = datetime.strptime(rec["lease_expires_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert before - timedelta(seconds=1) <= created <= after + timedelta(seconds=1)
    assert lease - created == timedelta(seconds=60)


def test_show_missing_action(cli, store, ledger):
    ledger.make_pending("pay", "exists")
    assert_error(cli("show", "pay", "absent", "--store", store), 1, "absent")
    assert_error(cli("show", "pay", "absent", "--json", "--store", store), 1)


@pytest.mark.parametrize("args", [[], ["pay"], ["pay", "k", "extra"]])
def test_show_wrong_arguments(cli, store, args):
    assert_usage_error(cli("show", *args, "--store", store))


def test_show_invalid_scope(cli, store):
    assert_error(cli("show", "bad scope!", "k", "--store", store), 1, "scope")


# ---- resolve -------------------------------------------------------------


def test_resolve_completed_from_unknown(cli, store, ledger):
    ledger.make_unknown("pay", "u-1", error="read timeout")
    r = cli("resolve", "pay", "u-1", "--completed", "--provider-id", "ch_77",
            "--note", "found in the dashboard", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "completed" in r.stdout
    rec = show_json(cli, store, "pay", "u-1")
    assert rec["state"] == "completed"
    assert rec["provider_id"] == "ch_77"
    assert rec["note"] == "found in the dashboard"
    assert rec["response"] is None
    assert rec["expires_at"] is not None


def test_resolve_completed_from_held(cli, store, ledger):
    ledger.make_held("pay", "h-1", reason="no lookup configured")
    r = cli("--store", store, "resolve", "pay", "h-1", "--completed", "--note", "checked")
    assert r.returncode == 0, r.stderr
    rec = show_json(cli, store, "pay", "h-1")
    assert rec["state"] == "completed"
    assert rec["provider_id"] is None
    assert rec["note"] == "checked"


@pytest.mark.parametrize("make", ["make_unknown", "make_held"])
def test_resolve_released(cli, store, ledger, make):
    getattr(ledger, make)("pay", "r-1")
    r = cli("resolve", "pay", "r-1", "--released", "--note", "never reached them", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "released" in r.stdout
    rec = show_json(cli, store, "pay", "r-1")
    assert rec["state"] == "released"
    assert rec["note"] == "never reached them"
    # The key is free again: the next reservation is attempt 2.
    status, token, attempt = ledger.reserve("pay", "r-1")
    assert (status, attempt) == ("reserved", 2)
    assert token


@pytest.mark.parametrize("make", ["make_pending", "make_completed", "make_released"])
@pytest.mark.parametrize("how", [["--completed", "--provider-id", "x"], ["--released"]])
def test_resolve_refused_leaves_row_unchanged(cli, store, ledger, make, how):
    getattr(ledger, make)("pay", "k")
    before = show_json(cli, store, "pay", "k")
    r = cli("resolve", "pay", "k", *how, "--note", "n", "--store", store)
    assert_error(r, 1, "resolve")
    assert show_json(cli, store, "pay", "k") == before


@pytest.mark.parametrize("args, fragment", [
    (["--released", "--note", "n" * 5000], "note"),
    (["--completed", "--provider-id", "tab\there"], "provider_id"),
])
def test_resolve_invalid_values(cli, store, ledger, args, fragment):
    ledger.make_unknown("pay", "k")
    before = show_json(cli, store, "pay", "k")
    assert_error(cli("resolve", "pay", "k", *args, "--store", store), 1, fragment)
    assert show_json(cli, store, "pay", "k") == before


def test_resolve_missing_action(cli, store):
    assert_error(cli("resolve", "pay", "nope", "--released", "--store", store), 1, "nope")


@pytest.mark.parametrize("args", [
    ["pay", "k"],                                   # neither outcome
    ["pay", "k", "--completed", "--released"],     # both
    ["pay", "k", "--released", "--provider-id", "x"],
    ["pay", "--completed"],                          # no key
    ["pay", "k", "x", "--completed"],                # extra operand
    ["pay", "k", "--completed", "--note"],           # option without value
    ["pay", "k", "--completed", "--frobnicate"],
])
def test_resolve_usage_errors(cli, store, ledger, args):
    ledger.make_unknown("pay", "k")
    assert_usage_error(cli("resolve", *args, "--store", store))
    assert show_json(cli, store, "pay", "k")["state"] == "unknown"


# ---- gc ------------------------------------------------------------------


def test_gc_deletes_only_expired_completed_and_released(cli, store, ledger):
    ledger.make_completed("gc", "done-old", retention_ms=1)
    ledger.make_released("gc", "rel-old", retention_ms=1)
    ledger.make_completed("gc", "done-new")                  # 24 h retention
    ledger.make_pending("gc", "pending", retention_ms=1)
    ledger.make_unknown("gc", "unknown", retention_ms=1)
    ledger.make_held("gc", "held", retention_ms=1)
    time.sleep(0.05)  # past the 1 ms retentions

    r = cli("gc", "--store", store)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\b2\b", r.stdout), r.stdout
    keys = [d["key"] for d in ls_json(cli, store)]
    assert keys == ["done-new", "pending", "unknown", "held"]

    r = cli("gc", "--store", store)
    assert r.returncode == 0
    assert re.search(r"\b0\b", r.stdout), r.stdout
    assert [d["key"] for d in ls_json(cli, store)] == keys


def test_gc_empty_store(cli, store):
    r = cli("gc", "--store", store)
    assert r.returncode == 0
    assert re.search(r"\b0\b", r.stdout)


def test_gc_rejects_arguments(cli, store):
    assert_usage_error(cli("gc", "now", "--store", store))
    assert_usage_error(cli("gc", "--all", "--store", store))


# ---- version and help ----------------------------------------------------


def header_version():
    text = (REPO_ROOT / "include" / "once" / "once.h").read_text()
    return re.search(r'#define ONCE_VERSION "([^"]+)"', text).group(1)


@pytest.mark.parametrize("args", [["version"], ["--version"]])
def test_version(cli, args):
    r = cli(*args)
    assert r.returncode == 0
    assert r.stderr == ""
    assert r.stdout == f"once {header_version()}\n"


def test_version_rejects_arguments(cli):
    assert_usage_error(cli("version", "extra"))


COMMANDS = ["ls", "show", "resolve", "gc", "version", "help"]


@pytest.mark.parametrize("args", [["help"], ["--help"], ["-h"]])
def test_help(cli, args):
    r = cli(*args)
    assert r.returncode == 0
    assert r.stderr == ""
    assert r.stdout.startswith("usage: once")
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert set(COMMANDS) <= listed
    assert "--store" in r.stdout


@pytest.mark.parametrize("cmd", ["ls", "show", "resolve", "gc", "version"])
def test_help_for_command(cli, cmd):
    a = cli("help", cmd)
    assert a.returncode == 0
    assert a.stdout.startswith(f"usage: once {cmd}")
    b = cli(cmd, "--help")
    assert b.returncode == 0
    assert b.stdout == a.stdout
    c = cli(cmd, "-h")
    assert c.stdout == a.stdout


def test_help_mentions_command_options(cli):
    out = cli("help", "ls").stdout
    for opt in ("--status", "--scope", "--limit", "--json"):
        assert opt in out
    out = cli("help", "resolve").stdout
    for opt in ("--completed", "--released", "--provider-id", "--note"):
        assert opt in out


def test_help_unknown_command(cli):
    assert_usage_error(cli("help", "frobnicate"), "frobnicate")


def test_help_does_not_open_the_store(cli):
    r = cli("help", env={"ONCE_STORE": "sqlite:/nonexistent/dir/x.db"})
    assert r.returncode == 0


# ---- usage errors --------------------------------------------------------


@pytest.mark.parametrize("args, fragment", [
    ([], "no command"),
    (["frobnicate"], "frobnicate"),
    (["--frob", "ls"], "--frob"),
    (["ls", "--frob"], "--frob"),
    (["ls", "-x"], "-x"),
    (["ls", "--json=yes"], "--json"),
    (["--store"], "--store"),
    (["--store="], "--store"),
    (["ls", "--store"], "--store"),
    (["ls", "--store="], "--store"),
])
def test_usage_errors(cli, args, fragment):
    assert_usage_error(cli(*args), fragment)


def test_usage_error_creates_no_store(cli):
    assert_usage_error(cli("ls", "--frob"))
    assert not (cli.cwd / "once.db").exists()


# ---- store selection and store errors ------------------------------------


@pytest.mark.parametrize("cmd", [
    ["ls"], ["ls", "--json"], ["show", "pay", "k"], ["resolve", "pay", "k", "--released"], ["gc"],
])
def test_store_missing_directory(cli, cmd):
    url = "sqlite:/nonexistent/dir/x.db"
    assert_error(cli(*cmd, "--store", url), 2, "/nonexistent/dir/x.db")


@pytest.mark.parametrize("cmd", [["ls"], ["show", "pay", "k"], ["resolve", "pay", "k", "--released"], ["gc"]])
def test_store_not_sqlite(cli, tmp_path, cmd):
    bogus = tmp_path / "notes.txt"
    content = b"this is not a database, just some text\n" * 100
    bogus.write_bytes(content)
    assert_error(cli(*cmd, "--store", f"sqlite:{bogus}"), 2)
    assert bogus.read_bytes() == content  # left untouched


def _closed_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("cmd", [["ls"], ["show", "pay", "k"], ["gc"]])
def test_store_postgres_unreachable(cli, cmd):
    url = f"postgres://postgres@127.0.0.1:{_closed_port()}/once"
    assert_error(cli(*cmd, "--store", url), 2, url)


@pytest.mark.parametrize("cmd", [["ls"], ["show", "pay", "k"], ["gc"]])
def test_store_postgres_bad_schema_name(cli, cmd):
    assert_error(cli(*cmd, "--store", "postgres://postgres@127.0.0.1:1/once?once_schema=Bad-Name"), 2,
                 "once_schema")


def test_store_bad_url(cli):
    assert_error(cli("ls", "--store", "mysql://x"), 2, "mysql://x")


def test_store_option_positions(cli, store, ledger):
    ledger.make_pending("pay", "k")
    forms = [
        ["--store", store, "ls", "--json"],
        [f"--store={store}", "ls", "--json"],
        ["ls", "--store", store, "--json"],
        ["ls", "--json", f"--store={store}"],
    ]
    for args in forms:
        r = cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert [d["key"] for d in json.loads(r.stdout)] == ["k"], args


def test_store_after_command_wins_over_before(cli, store, tmp_path, ledger):
    ledger.make_pending("pay", "k")
    other = f"sqlite:{tmp_path / 'other.db'}"
    r = cli("--store", other, "ls", "--json", "--store", store)
    assert [d["key"] for d in json.loads(r.stdout)] == ["k"]


def test_store_from_environment(cli, store, ledger):
    ledger.make_pending("pay", "k")
    r = cli("ls", "--json", env={"ONCE_STORE": store})
    assert r.returncode == 0, r.stderr
    assert [d["key"] for d in json.loads(r.stdout)] == ["k"]
    r = cli("show", "pay", "k", env={"ONCE_STORE": store})
    assert r.returncode == 0
    assert parse_show(r.stdout)["key"] == "k"


def test_store_option_overrides_environment(cli, store, ledger):
    ledger.make_pending("pay", "k")
    env = {"ONCE_STORE": "sqlite:/nonexistent/dir/x.db"}
    r = cli("ls", "--json", "--store", store, env=env)
    assert r.returncode == 0, r.stderr
    assert [d["key"] for d in json.loads(r.stdout)] == ["k"]
    # And without the option, the environment's (broken) store is used.
    assert_error(cli("ls", env=env), 2, "/nonexistent/dir/x.db")


def test_default_store_is_once_db_in_cwd(cli, ledger_tool_bin):
    from conftest import LedgerTool
    db = cli.cwd / "once.db"
    # The CLI reads stores but never makes one: in an empty folder it says so (issue 13).
    for args in (("ls", "--json"), ("show", "pay", "k"), ("hooks", "ls"), ("gc",),
                 ("resolve", "pay", "k", "--released")):
        assert_error(cli(*args), 2, "no store at once.db")
        assert not db.exists(), f"once {' '.join(args)} created {db}"
    LedgerTool(ledger_tool_bin, f"sqlite:{db}").make_pending("pay", "k")
    r = cli("ls", "--json")
    assert r.returncode == 0, r.stderr
    assert [d["key"] for d in json.loads(r.stdout)] == ["k"]
    r = cli("show", "pay", "k", "--json")
    assert r.returncode == 0
    assert json.loads(r.stdout)["key"] == "k"
