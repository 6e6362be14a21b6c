"""Black-box tests of `once hooks`: the inbound webhook events in a store.

Events are put in and moved between states through libonce (ledger_tool's
event-insert / event-claim / event-ack / event-retry, see conftest.py); the
CLI is only observed from outside: exit status, stdout, stderr.
"""
import base64
import json
import re

import pytest

EVENT_FIELDS = {
    "source", "event_id", "state", "attempt", "received_at", "updated_at",
    "next_at", "delivered_at", "expires_at", "content_type", "headers", "error", "claimed_by",
}
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LS_HEADER = ["SOURCE", "EVENT_ID", "STATE", "ATTEMPT", "RECEIVED", "ERROR"]
BROKEN_STORE = "sqlite:/nonexistent/dir/x.db"


# ---- helpers ---------------------------------------------------------------


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
    assert "usage: once hooks" in line
    return line


def insert(ledger, source, event_id, body="{}", content_type=None, headers=None, count=None):
    args = ["event-insert", ledger.store, source, event_id, body]
    if content_type is not None:
        args += ["--content-type", content_type]
    if headers is not None:
        args += ["--headers", headers]
    if count is not None:
        args += ["--count", count]
    return ledger.run(*args).stdout.decode().split()


def claim(ledger, source, max_events=100, lease_ms=60000):
    """[(event_id, receipt, attempt)] of the events claimed."""
    out = ledger.run("event-claim", ledger.store, source, max_events, lease_ms).stdout.decode()
    claimed = []
    for line in out.splitlines():
        event_id, receipt, attempt = line.split()
        claimed.append((event_id, receipt, int(attempt)))
    return claimed


def claim_one(ledger, source, event_id):
    """Claims the only due event of source, which must be event_id; its receipt."""
    claimed = claim(ledger, source)
    assert [c[0] for c in claimed] == [event_id], claimed
    return claimed[0][1]


def ack(ledger, source, receipt, check=True):
    return ledger.run("event-ack", ledger.store, source, receipt, check=check)


def retry(ledger, source, receipt, delay_ms=0, dead=False, error=None):
    args = ["event-retry", ledger.store, source, receipt, delay_ms]
    if dead:
        args.append("--dead")
    if error is not None:
        args.append(error)
    ledger.run(*args)


def make_pending(ledger, source, event_id, **kw):
    assert insert(ledger, source, event_id, **kw) == ["accepted"]


def make_delivered(ledger, source, event_id, **kw):
    make_pending(ledger, source, event_id, **kw)
    ack(ledger, source, claim_one(ledger, source, event_id))


def make_dead(ledger, source, event_id, error="gave-up", **kw):
    make_pending(ledger, source, event_id, **kw)
    retry(ledger, source, claim_one(ledger, source, event_id), dead=True, error=error)


def hooks_ls_json(cli, store, *args):
    r = cli("hooks", "ls", "--store", store, "--json", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    data = json.loads(r.stdout)
    assert isinstance(data, list)
    return data


def hooks_show_json(cli, store, source, event_id):
    r = cli("hooks", "show", source, event_id, "--store", store, "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    rec = json.loads(r.stdout)
    body_keys = {k for k in rec if k.startswith("body")}
    assert set(rec) - body_keys == EVENT_FIELDS
    assert body_keys in ({"body"}, {"body_base64"})
    return rec


def table_rows(stdout):
    lines = stdout.splitlines()
    assert lines, "no header"
    assert lines[0].split() == LS_HEADER
    return [line.split(None, 5) for line in lines[1:]]


def parse_show(stdout):
    fields = {}
    for line in stdout.splitlines():
        name, sep, value = line.partition(": ")
        assert sep, line
        assert name not in fields, name
        fields[name] = value
    return fields


# ---- hooks ls --------------------------------------------------------------


def test_ls_empty_store_table(cli, store):
    r = cli("hooks", "ls", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert table_rows(r.stdout) == []


def test_ls_empty_store_json(cli, store):
    r = cli("hooks", "ls", "--store", store, "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[]\n"


def test_ls_table_lists_events_in_arrival_order(cli, store, ledger):
    make_delivered(ledger, "stripe", "evt_1")
    make_dead(ledger, "github", "gh-1", error="http-500")
    make_pending(ledger, "stripe", "evt_2")
    r = cli("hooks", "ls", "--store", store)
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    assert [row[:4] for row in rows] == [
        ["stripe", "evt_1", "delivered", "1"],
        ["github", "gh-1", "dead", "1"],
        ["stripe", "evt_2", "pending", "0"],
    ]
    assert [row[5] for row in rows] == ["-", "http-500", "-"]
    for row in rows:
        assert TIME_RE.match(row[4]), row
    # Columns are aligned: every STATE cell starts at the header's offset.
    lines = r.stdout.splitlines()
    col = lines[0].index("STATE")
    assert [line[col:].split()[0] for line in lines[1:]] == ["delivered", "dead", "pending"]


def test_ls_table_error_is_escaped_and_cut(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    retry(ledger, "src", claim_one(ledger, "src", "e-1"), delay_ms=60000,
          error="bad\nthing\x1b[31m " + "x" * 200)
    r = cli("hooks", "ls", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout
    lines = r.stdout.splitlines()
    assert len(lines) == 2  # the newline did not split the row
    error = lines[1][lines[0].index("ERROR"):]
    assert error.startswith("bad\\nthing\\x1b[31m xxx")
    assert error.endswith("...") and len(error) <= 60
    # JSON keeps the exact value.
    assert hooks_ls_json(cli, store)[0]["error"] == "bad\nthing\x1b[31m " + "x" * 200


def test_ls_json_records(cli, store, ledger):
    make_delivered(ledger, "stripe", "evt_1", body='{"id":"evt_1"}', content_type="application/json",
                   headers='[["stripe-signature","t=1,v1=ab"]]')
    make_pending(ledger, "stripe", "evt_2", body="héllo")
    data = hooks_ls_json(cli, store)
    assert [(d["source"], d["event_id"], d["state"]) for d in data] == [
        ("stripe", "evt_1", "delivered"),
        ("stripe", "evt_2", "pending"),
    ]
    for d in data:
        assert set(d) == EVENT_FIELDS | {"body"}  # no receipt outside claims
        for name in ("received_at", "updated_at", "next_at"):
            assert TIME_RE.match(d[name]), name
    delivered, pending = data
    assert delivered["attempt"] == 1
    assert TIME_RE.match(delivered["delivered_at"])
    assert TIME_RE.match(delivered["expires_at"])
    assert delivered["received_at"] <= delivered["delivered_at"] < delivered["expires_at"]
    assert delivered["content_type"] == "application/json"
    assert delivered["headers"] == [["stripe-signature", "t=1,v1=ab"]]
    assert delivered["body"] == '{"id":"evt_1"}'
    assert delivered["error"] is None
    assert pending["attempt"] == 0
    assert pending["delivered_at"] is None and pending["expires_at"] is None
    assert pending["content_type"] is None and pending["headers"] is None
    assert pending["body"] == "héllo"


def test_ls_json_binary_body_is_base64(cli, store, ledger):
    make_pending(ledger, "src", "bin", body=b"a\xff\xfe")
    (rec,) = hooks_ls_json(cli, store)
    assert rec["body_base64"] == "Yf/+"
    assert "body" not in rec


@pytest.fixture
def mixed(ledger):
    """Events of two sources in every state, in this arrival order."""
    make_delivered(ledger, "stripe", "s-del")
    make_dead(ledger, "stripe", "s-dead")
    make_delivered(ledger, "github", "g-del")
    make_pending(ledger, "stripe", "s-pend")
    make_pending(ledger, "github", "g-pend")
    return ["s-del", "s-dead", "g-del", "s-pend", "g-pend"]


@pytest.mark.parametrize("args, expected", [
    ([], ["s-del", "s-dead", "g-del", "s-pend", "g-pend"]),
    (["--source", "stripe"], ["s-del", "s-dead", "s-pend"]),
    (["--source", "github"], ["g-del", "g-pend"]),
    (["--source", "nobody"], []),
    (["--status", "pending"], ["s-pend", "g-pend"]),
    (["--status", "delivered"], ["s-del", "g-del"]),
    (["--status", "dead"], ["s-dead"]),
    (["--status", "delivered", "--source", "github"], ["g-del"]),
    (["--source", "github", "--status", "dead"], []),
    (["--limit", "2"], ["s-del", "s-dead"]),
    (["--limit", "1", "--status", "pending"], ["s-pend"]),
])
def test_ls_filters(cli, store, mixed, args, expected):
    data = hooks_ls_json(cli, store, *args)
    assert [d["event_id"] for d in data] == expected
    r = cli("hooks", "ls", "--store", store, *args)
    assert r.returncode == 0, r.stderr
    assert [row[1] for row in table_rows(r.stdout)] == expected


def test_ls_follows_pages(cli, store, ledger):
    lines = insert(ledger, "bulk", "e", body="x", count=250)
    assert lines == ["accepted"] * 250
    ids = [f"e-{i:05d}" for i in range(250)]
    assert [d["event_id"] for d in hooks_ls_json(cli, store, "--limit", "1000")] == ids
    assert [d["event_id"] for d in hooks_ls_json(cli, store, "--limit", "150")] == ids[:150]
    # The default is 100.
    assert [d["event_id"] for d in hooks_ls_json(cli, store)] == ids[:100]
    r = cli("hooks", "ls", "--store", store, "--limit", "100000")
    assert r.returncode == 0, r.stderr
    assert [row[1] for row in table_rows(r.stdout)] == ids


def test_duplicate_event_is_listed_once(cli, store, ledger):
    assert insert(ledger, "stripe", "evt_1", body="first") == ["accepted"]
    assert insert(ledger, "stripe", "evt_1", body="second") == ["duplicate"]
    assert insert(ledger, "other", "evt_1", body="third") == ["accepted"]
    data = hooks_ls_json(cli, store)
    assert [(d["source"], d["body"]) for d in data] == [("stripe", "first"), ("other", "third")]


@pytest.mark.parametrize("bad", ["0", "-1", "100001", "ten", "10x", "", "1e3", "+5", " 5"])
def test_ls_bad_limit(cli, store, bad):
    assert_usage_error(cli("hooks", "ls", "--store", store, "--limit", bad), "--limit")


@pytest.mark.parametrize("bad", ["completed", "PENDING", "", "dead "])
def test_ls_bad_status(cli, store, bad):
    assert_usage_error(cli("hooks", "ls", "--store", store, "--status", bad), "status")


@pytest.mark.parametrize("name", ["pending", "delivered", "dead"])
def test_ls_status_names_accepted(cli, store, name):
    assert hooks_ls_json(cli, store, "--status", name) == []


@pytest.mark.parametrize("bad", ["has space", "a/b", "", "x" * 65])
def test_ls_bad_source(cli, bad):
    assert_error(cli("hooks", "ls", "--source", bad), 1, "invalid source")
    assert not (cli.cwd / "once.db").exists()


def test_ls_unexpected_argument(cli, store):
    assert_usage_error(cli("hooks", "ls", "stripe", "--store", store), "unexpected argument", "stripe")


@pytest.mark.parametrize("args, fragment", [
    (["hooks", "ls", "--frob"], "--frob"),
    (["hooks", "ls", "--limit"], "--limit"),
    (["hooks", "ls", "--json=yes"], "--json"),
    (["hooks", "ls", "-x"], "-x"),
    (["hooks", "show", "--limit", "5", "a", "b"], "--limit"),
    (["hooks", "redeliver", "--json", "a", "b"], "--json"),
])
def test_option_errors(cli, args, fragment):
    line = assert_usage_error(cli(*args), fragment)
    assert f"usage: once hooks {args[1]}" in line
    assert not (cli.cwd / "once.db").exists()


# ---- hooks show ------------------------------------------------------------


def test_show_table(cli, store, ledger):
    make_delivered(ledger, "stripe", "evt_1", body='{"amount":5}', content_type="application/json",
                   headers='[["x-id","7"]]')
    r = cli("hooks", "show", "stripe", "evt_1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    f = parse_show(r.stdout)
    assert f["source"] == "stripe" and f["event_id"] == "evt_1"
    assert f["state"] == "delivered"
    assert f["attempt"] == "1"
    for name in ("received_at", "updated_at", "next_at", "delivered_at", "expires_at"):
        assert TIME_RE.match(f[name]), name
    assert f["claim_until"] == "-"
    assert f["content_type"] == "application/json"
    assert f["error"] == "-"
    assert "x-id" in f["headers"]
    assert f["body_bytes"] == "12"
    assert f["body"] == '{"amount":5}'


def test_show_table_pending_claimed(cli, store, ledger):
    make_pending(ledger, "src", "e-1", body="")
    claim(ledger, "src")
    f = parse_show(cli("hooks", "show", "src", "e-1", "--store", store).stdout)
    assert f["state"] == "pending"
    assert f["attempt"] == "1"
    assert TIME_RE.match(f["claim_until"])
    assert f["delivered_at"] == "-" and f["expires_at"] == "-"
    assert f["content_type"] == "-" and f["headers"] == "-"
    assert f["body_bytes"] == "0"


def test_show_table_binary_body(cli, store, ledger):
    make_pending(ledger, "src", "bin", body=b"\xff\xfezz")
    r = cli("hooks", "show", "src", "bin", "--store", store)
    assert r.returncode == 0, r.stderr
    f = parse_show(r.stdout)
    assert f["body_bytes"] == "4"
    assert "binary" in f["body"] and "body_base64" in f["body"]


def test_show_table_long_body_is_cut(cli, store, ledger):
    make_pending(ledger, "src", "long", body="y" * 5000)
    f = parse_show(cli("hooks", "show", "src", "long", "--store", store).stdout)
    assert f["body_bytes"] == "5000"
    assert f["body"].endswith("...") and len(f["body"]) <= 200


def test_show_escapes_control_characters(cli, store, ledger):
    text = "line1\nline2\x1b[31m red \u009b"
    make_dead(ledger, "src", "e-1", error=text, body="a\tb\x1b]0;x\x07")
    r = cli("hooks", "show", "src", "e-1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u009b" not in r.stdout and "\x07" not in r.stdout
    f = parse_show(r.stdout)  # no newline split a field
    assert f["error"] == "line1\\nline2\\x1b[31m red \\u009b"
    assert f["body"] == "a\\tb\\x1b]0;x\\x07"
    rec = hooks_show_json(cli, store, "src", "e-1")
    assert rec["error"] == text
    assert rec["body"] == "a\tb\x1b]0;x\x07"


def test_show_json(cli, store, ledger):
    make_dead(ledger, "github", "gh-9", error="timeout", body="héllo", content_type="text/plain",
              headers='[["content-type","text/plain"],["x-github-event","push"]]')
    rec = hooks_show_json(cli, store, "github", "gh-9")
    assert rec["source"] == "github" and rec["event_id"] == "gh-9"
    assert rec["state"] == "dead"
    assert rec["attempt"] == 1
    assert rec["content_type"] == "text/plain"
    assert rec["headers"] == [["content-type", "text/plain"], ["x-github-event", "push"]]
    assert rec["body"] == "héllo"
    assert rec["error"] == "timeout"
    assert rec["delivered_at"] is None
    for name in ("received_at", "updated_at", "next_at", "expires_at"):
        assert TIME_RE.match(rec[name]), name
    assert "receipt" not in rec
    # Indented for people, like `once show --json`.
    r = cli("hooks", "show", "github", "gh-9", "--json", "--store", store)
    assert r.stdout.startswith("{\n  \"source\": ")


def test_show_json_binary_body_is_base64(cli, store, ledger):
    make_pending(ledger, "src", "bin", body=b"a\xff\xfe", headers="not json {")
    rec = hooks_show_json(cli, store, "src", "bin")
    assert rec["body_base64"] == "Yf/+"
    assert "body" not in rec
    assert rec["headers"] == "not json {"


@pytest.mark.parametrize("body, text", [
    ("plain ascii", True),
    ("é ü ß € ✓", True),
    ("\U0001F600 \U0010FFFF", True),
    (b"\xc0\xaf", False),                # overlong '/'
    (b"\xed\xa0\x80", False),            # a UTF-16 surrogate
    (b"\xf4\x90\x80\x80", False),        # above U+10FFFF
    (b"ok\xe2\x82", False),              # truncated at the end
    (b"\x80abc", False),                 # stray continuation byte
])
def test_show_json_body_utf8_strictness(cli, store, ledger, body, text):
    raw = body.encode() if isinstance(body, str) else body
    make_pending(ledger, "src", "u", body=body)
    rec = hooks_show_json(cli, store, "src", "u")
    if text:
        assert rec["body"] == body
    else:
        assert base64.b64decode(rec["body_base64"], validate=True) == raw


def test_show_json_matches_ls_json(cli, store, ledger):
    make_dead(ledger, "src", "e-1", body=b"0\x01\xff")
    make_delivered(ledger, "src", "e-2", headers='{"a": 1}')
    for rec in hooks_ls_json(cli, store):
        assert hooks_show_json(cli, store, "src", rec["event_id"]) == rec


def test_show_missing_event(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    assert_error(cli("hooks", "show", "src", "e-2", "--store", store), 1, "no such event", "src e-2")
    assert_error(cli("hooks", "show", "other", "e-1", "--store", store, "--json"), 1, "no such event")


@pytest.mark.parametrize("args, fragment", [
    ([], "missing SOURCE and ID"),
    (["src"], "missing ID"),
    (["src", "e-1", "extra"], "too many"),
])
def test_show_wrong_arguments(cli, store, args, fragment):
    assert_usage_error(cli("hooks", "show", *args, "--store", store), fragment)


@pytest.mark.parametrize("cmd", ["show", "redeliver"])
@pytest.mark.parametrize("source, event_id, fragment", [
    ("bad source", "e-1", "invalid source"),
    ("a/b", "e-1", "invalid source"),
    ("x" * 65, "e-1", "invalid source"),
    ("src", "tab\there", "invalid event id"),
    ("src", "é", "invalid event id"),
    ("src", "", "invalid event id"),
    ("src", "x" * 256, "invalid event id"),
])
def test_invalid_operands(cli, cmd, source, event_id, fragment):
    line = assert_error(cli("hooks", cmd, source, event_id), 1, fragment)
    assert "\t" not in line
    assert not (cli.cwd / "once.db").exists()


def test_longest_event_id(cli, store, ledger):
    event_id = "i" * 255
    make_pending(ledger, "src", event_id)
    assert hooks_show_json(cli, store, "src", event_id)["event_id"] == event_id
    r = cli("hooks", "redeliver", "src", event_id, "--store", store)
    assert r.returncode == 0, r.stderr


# ---- hooks redeliver -------------------------------------------------------


def test_redeliver_delivered(cli, store, ledger):
    make_delivered(ledger, "stripe", "evt_1")
    r = cli("hooks", "redeliver", "stripe", "evt_1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout == "redelivering stripe evt_1\n"
    rec = hooks_show_json(cli, store, "stripe", "evt_1")
    assert rec["state"] == "pending"
    assert rec["attempt"] == 1
    assert rec["expires_at"] is None  # no longer swept
    assert rec["next_at"] <= rec["updated_at"]  # due now
    # The gateway (any consumer) gets it again; the attempt count goes on.
    claimed = claim(ledger, "stripe")
    assert [(c[0], c[2]) for c in claimed] == [("evt_1", 2)]
    ack(ledger, "stripe", claimed[0][1])
    assert hooks_show_json(cli, store, "stripe", "evt_1")["state"] == "delivered"


def test_redeliver_dead(cli, store, ledger):
    make_dead(ledger, "github", "gh-1", error="http-500")
    assert hooks_ls_json(cli, store, "--status", "dead")[0]["event_id"] == "gh-1"
    r = cli("hooks", "redeliver", "github", "gh-1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "redelivering github gh-1\n"
    assert hooks_ls_json(cli, store, "--status", "dead") == []
    (rec,) = hooks_ls_json(cli, store, "--status", "pending")
    assert rec["event_id"] == "gh-1"
    assert rec["expires_at"] is None
    claimed = claim(ledger, "github")
    assert [(c[0], c[2]) for c in claimed] == [("gh-1", 2)]


def test_redeliver_pending_not_yet_due(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    retry(ledger, "src", claim_one(ledger, "src", "e-1"), delay_ms=3600000, error="later")
    assert claim(ledger, "src") == []  # backing off for an hour
    r = cli("hooks", "redeliver", "src", "e-1", "--store", store)
    assert r.returncode == 0, r.stderr
    assert [(c[0], c[2]) for c in claim(ledger, "src")] == [("e-1", 2)]


def test_redeliver_claimed_event_voids_the_old_receipt(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    old = claim_one(ledger, "src", "e-1")
    r = cli("hooks", "redeliver", "src", "e-1", "--store", store)
    assert r.returncode == 0, r.stderr
    f = parse_show(cli("hooks", "show", "src", "e-1", "--store", store).stdout)
    assert f["state"] == "pending" and f["claim_until"] == "-"
    assert ack(ledger, "src", old, check=False).returncode == 1  # stale receipt
    new = claim_one(ledger, "src", "e-1")
    ack(ledger, "src", new)
    assert hooks_show_json(cli, store, "src", "e-1")["state"] == "delivered"


def test_redeliver_missing_event(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    assert_error(cli("hooks", "redeliver", "src", "nope", "--store", store), 1, "no such event", "src nope")
    assert_error(cli("hooks", "redeliver", "other", "e-1", "--store", store), 1, "no such event")


@pytest.mark.parametrize("args, fragment", [
    ([], "missing SOURCE and ID"),
    (["src"], "missing ID"),
    (["src", "e-1", "extra"], "too many"),
])
def test_redeliver_wrong_arguments(cli, store, args, fragment):
    assert_usage_error(cli("hooks", "redeliver", *args, "--store", store), fragment)


# ---- dispatch, help --------------------------------------------------------


def test_hooks_without_subcommand(cli):
    assert_usage_error(cli("hooks"), "missing subcommand")
    assert_usage_error(cli("hooks", "--json"), "missing subcommand")


def test_hooks_unknown_subcommand(cli, store):
    assert_usage_error(cli("hooks", "frob", "--store", store), "unknown subcommand", "frob")
    assert_usage_error(cli("hooks", "--store", store, "list"), "list")


def test_help_lists_hooks(cli):
    r = cli("help")
    assert r.returncode == 0
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert "hooks" in listed


def test_help_hooks_describes_subcommands(cli):
    a = cli("help", "hooks")
    assert a.returncode == 0
    assert a.stderr == ""
    assert a.stdout.startswith("usage: once hooks")
    for text in ("hooks ls", "hooks show", "hooks redeliver", "--source", "--status", "--limit",
                 "--json", "pending", "delivered", "dead", "--store"):
        assert text in a.stdout, text
    for args in (["hooks", "--help"], ["hooks", "-h"], ["hooks", "--store", "sqlite:x.db", "-h"]):
        b = cli(*args)
        assert b.returncode == 0
        assert b.stdout == a.stdout, args
    assert not (cli.cwd / "x.db").exists()


@pytest.mark.parametrize("sub", ["ls", "show", "redeliver"])
def test_help_for_subcommand(cli, sub):
    a = cli("hooks", sub, "--help", env={"ONCE_STORE": BROKEN_STORE})
    assert a.returncode == 0, a.stderr
    assert a.stdout.startswith(f"usage: once hooks {sub}")
    assert cli("hooks", sub, "-h").stdout == a.stdout
    assert cli("hooks", "-h", sub).stdout == a.stdout


# ---- store selection and store errors --------------------------------------


def test_store_option_positions(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    forms = [
        ["--store", store, "hooks", "ls", "--json"],
        [f"--store={store}", "hooks", "ls", "--json"],
        ["hooks", "--store", store, "ls", "--json"],
        ["hooks", f"--store={store}", "ls", "--json"],
        ["hooks", "--sto", store, "ls", "--json"],
        ["hooks", "--json", "ls", "--store", store],
        ["hooks", "ls", "--json", f"--store={store}"],
        ["hooks", "--json", "--store", store, "--", "ls"],
    ]
    for args in forms:
        r = cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert [d["event_id"] for d in json.loads(r.stdout)] == ["e-1"], args
    for args in (["hooks", "--store", store, "show", "src", "e-1", "--json"],
                 ["hooks", "show", "src", "--json", "e-1", "--store", store],
                 ["hooks", "--limit", "5", "show", "src", "e-1"]):
        r = cli(*args, env={"ONCE_STORE": store})
        if "--limit" in args:
            assert_usage_error(r, "--limit")
        else:
            assert r.returncode == 0, (args, r.stderr)
            assert json.loads(r.stdout)["event_id"] == "e-1"


def test_store_from_environment(cli, store, ledger):
    make_dead(ledger, "src", "e-1")
    env = {"ONCE_STORE": store}
    r = cli("hooks", "ls", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert [d["event_id"] for d in json.loads(r.stdout)] == ["e-1"]
    r = cli("hooks", "redeliver", "src", "e-1", env=env)
    assert r.returncode == 0, r.stderr
    f = parse_show(cli("hooks", "show", "src", "e-1", env=env).stdout)
    assert f["state"] == "pending"


def test_store_option_overrides_environment(cli, store, ledger):
    make_pending(ledger, "src", "e-1")
    env = {"ONCE_STORE": BROKEN_STORE}
    r = cli("hooks", "ls", "--json", "--store", store, env=env)
    assert r.returncode == 0, r.stderr
    assert_error(cli("hooks", "ls", env=env), 2, "/nonexistent/dir/x.db")


STORE_CMDS = [
    ["hooks", "ls"], ["hooks", "ls", "--json"], ["hooks", "ls", "--source", "s", "--status", "dead"],
    ["hooks", "show", "src", "e-1"], ["hooks", "show", "src", "e-1", "--json"],
    ["hooks", "redeliver", "src", "e-1"],
]


@pytest.mark.parametrize("cmd", STORE_CMDS)
def test_store_missing_directory(cli, cmd):
    assert_error(cli(*cmd, "--store", BROKEN_STORE), 2, "/nonexistent/dir/x.db")


@pytest.mark.parametrize("cmd", STORE_CMDS)
def test_store_not_sqlite(cli, tmp_path, cmd):
    bogus = tmp_path / "notes.txt"
    content = b"this is not a database, just some text\n" * 100
    bogus.write_bytes(content)
    assert_error(cli(*cmd, "--store", f"sqlite:{bogus}"), 2)
    assert bogus.read_bytes() == content  # left untouched


@pytest.mark.parametrize("cmd", STORE_CMDS)
def test_store_postgres_unreachable(cli, cmd):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgres://postgres@127.0.0.1:{port}/once"
    assert_error(cli(*cmd, "--store", url), 2, url)


def test_default_store_is_once_db_in_cwd(cli, ledger_tool_bin):
    from conftest import LedgerTool
    db = cli.cwd / "once.db"
    # The CLI reads stores but never makes one: in an empty folder it says so (issue 13).
    for args in (("hooks", "ls", "--json"), ("hooks", "show", "src", "e-1"), ("hooks", "redeliver", "src", "e-1")):
        assert_error(cli(*args), 2, "no store at once.db")
        assert not db.exists(), f"once {' '.join(args)} created {db}"
    make_pending(LedgerTool(ledger_tool_bin, f"sqlite:{db}"), "src", "e-1")
    r = cli("hooks", "show", "src", "e-1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["event_id"] == "e-1"


def test_closed_stdout_is_a_failure(cli, store, ledger, tmp_path):
    make_pending(ledger, "src", "e-1")
    # /dev/full makes every write fail: the command must not report success.
    import subprocess
    from conftest import TIMEOUT, _clean_env
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(cli.binary), "hooks", "ls", "--store", store], cwd=cli.cwd,
                           env=_clean_env(), stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=TIMEOUT)
    assert r.returncode == 2
    assert r.stderr.startswith("once: cannot write output")
