"""intent_key and canonical_json: RFC 8785 (JCS) exactly, so the key is the same
in every process and in the TypeScript client (clients/testdata/intent_keys.json,
the vectors both clients check), and python3 -m once_client.intent_key.

Run: /usr/bin/python3 -m pytest -q clients/python/tests/test_intent_key.py
"""
import hashlib
import json
import math
import struct
import subprocess
import sys

import pytest

from conftest import PACKAGE_ROOT, REPO_ROOT
from once_client import MAX_SAFE_INTEGER, canonical_json, intent_key
from once_client._jcs import loads_as_javascript

VECTORS = REPO_ROOT / "clients" / "testdata" / "intent_keys.json"


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# RFC 8785 appendix B: IEEE 754 bit patterns and their ECMAScript form.
RFC_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize("bits,expected", RFC_NUMBERS)
def test_rfc8785_numbers(bits, expected):
    x = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical_json(x) == expected


@pytest.mark.parametrize("x,expected", [
    (1e21, "1e+21"), (1e-7, "1e-7"), (0.000001, "0.000001"), (123456789012345680000.0, "123456789012345680000"),
    (-0.0, "0"), (1.0, "1"), (100.0, "100"), (1e20, "100000000000000000000"), (0.1, "0.1"), (-1.5e-10, "-1.5e-10"),
    (5, "5"), (-7, "-7"), (MAX_SAFE_INTEGER, "9007199254740992"), (2.5e-7, "2.5e-7"), (1.5e300, "1.5e+300"),
])
def test_ecmascript_number_forms(x, expected):
    assert canonical_json(x) == expected


def test_rfc8785_main_example():
    value = {
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert canonical_json(value) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')


def test_rfc8785_sorting_by_utf16_code_units():
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
             "1": "One", "\U0001F600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}
    keys = list(json.loads(canonical_json(value)))
    # U+1F600 is D83D DE00 in UTF-16, below U+FB33 (by code points it would come last).
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"]


def test_strings_escaped_as_json_stringify():
    s = "".join(chr(c) for c in range(0x20)) + "\"\\/\u007f\u2028é😀"
    assert canonical_json(s) == ('"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r'
                                 '\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018'
                                 '\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\"\\\\/\u007f\u2028é😀"')
    # A lone surrogate is escaped, as ES2019's well-formed JSON.stringify does.
    assert canonical_json("\ud800x") == '"\\ud800x"'
    # A UTF-16 pair held as two code points is the one character JavaScript sees.
    assert canonical_json("\ud83d\ude00") == canonical_json("\U0001F600") == '"\U0001F600"'
    assert canonical_json("\ude00\ud83d") == '"\\ude00\\ud83d"'


def test_intent_key_is_the_sha256_of_the_canonical_array():
    parts = ("run-1", "send_email", {"to": "a@example.com", "body": "hi", "cc": []})
    canon = '["run-1","send_email",{"body":"hi","cc":[],"to":"a@example.com"}]'
    assert canonical_json(list(parts)) == canon
    assert intent_key(*parts) == sha(canon)
    assert intent_key() == sha("[]")
    # Order of members never matters; order of parts does; tuples are arrays.
    assert intent_key({"a": 1, "b": 2}) == intent_key({"b": 2, "a": 1})
    assert intent_key("a", "b") != intent_key("b", "a")
    assert intent_key((1, 2)) == intent_key([1, 2])
    assert len(intent_key("x")) == 64 and intent_key("x") == intent_key("x").lower()


@pytest.mark.parametrize("bad", [
    math.nan, math.inf, -math.inf, {1: "int key"}, {("t",): 1}, b"bytes", {1, 2}, object(),
    MAX_SAFE_INTEGER + 1, -(MAX_SAFE_INTEGER + 1), 10**30, [1, [2, {"x": float("nan")}]],
])
def test_refuses_what_has_no_json_form(bad):
    with pytest.raises(TypeError):
        intent_key(bad)


def test_refuses_circular_structures():
    a = []
    a.append(a)
    with pytest.raises(TypeError, match="circular"):
        intent_key(a)
    shared = [1]
    assert canonical_json([shared, shared]) == "[[1],[1]]"  # shared, not circular


def test_shared_vectors_with_the_typescript_client():
    """clients/testdata/intent_keys.json: [{"parts", "canonical", "key"}], written for both clients."""
    assert VECTORS.is_file(), f"{VECTORS} is missing (the shared vectors both clients check)"
    # Read as JSON.parse reads it (the TypeScript side): 123456789012345680000 is a double.
    vectors = loads_as_javascript(VECTORS.read_text(encoding="utf-8"))
    assert isinstance(vectors, list) and len(vectors) >= 10, vectors
    for v in vectors:
        parts = v["parts"]
        assert canonical_json(parts) == v["canonical"], v
        assert intent_key(*parts) == v["key"], v
        assert sha(v["canonical"]) == v["key"], v


def test_cli_reads_numbers_as_javascript_does():
    # JSON.parse("[9007199254740993]")[0] === 9007199254740992
    r = _cli("[9007199254740993, 123456789012345680000]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == intent_key(9007199254740992, 1.2345678901234568e20)
    assert canonical_json([1.2345678901234568e20]) == "[123456789012345680000]"


def _cli(stdin):
    return subprocess.run([sys.executable, "-m", "once_client.intent_key"], input=stdin, capture_output=True,
                          text=True, timeout=60, cwd=str(PACKAGE_ROOT))


def test_cli_prints_the_key():
    r = _cli('["run-1", "send_email", {"to": "a@example.com", "n": 1.0}]')
    assert r.returncode == 0, r.stderr
    assert r.stdout == intent_key("run-1", "send_email", {"to": "a@example.com", "n": 1}) + "\n"
    for v in json.loads(VECTORS.read_text(encoding="utf-8"))[:5] if VECTORS.is_file() else []:
        assert _cli(json.dumps(v["parts"])).stdout.strip() == v["key"]


@pytest.mark.parametrize("stdin,why", [
    ("{}", "array"), ("not json", "not JSON"), ("[NaN]", "not JSON"), ("[1e400]", "Infinity"),
])
def test_cli_refuses(stdin, why):
    r = _cli(stdin)
    assert r.returncode == 2 and why in r.stderr and r.stdout == "", (r.returncode, r.stdout, r.stderr)
