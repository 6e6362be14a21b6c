"""_jcs.py — the intent key: SHA-256 of the RFC 8785 (JCS) form of the parts.

The key must come out the same in every process and every language that
derives it (the TypeScript client computes the same), so the serialization is
JCS exactly: members sorted by UTF-16 code units, no whitespace, strings
escaped as ECMAScript's JSON.stringify does, numbers as ECMAScript's
Number.prototype.toString writes them.
"""
import hashlib
import json
import math
import re

__all__ = ["canonical_json", "intent_key", "loads_as_javascript", "MAX_SAFE_INTEGER"]

# Integers a JavaScript number holds exactly; past these the other languages
# would hash a different number than the one given, so they are refused.
MAX_SAFE_INTEGER = 2**53

_SURROGATE = re.compile("[\ud800-\udfff]")

_SHORT_ESCAPES = {
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    '"': '\\"',
    "\\": "\\\\",
}


def _escape_char(c):
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    o = ord(c)
    # Control characters, and lone surrogates (well-formed JSON.stringify).
    if o < 0x20 or 0xD800 <= o <= 0xDFFF:
        return "\\u%04x" % o
    return c


def _string(s):
    if _SURROGATE.search(s):
        # A str may hold a UTF-16 pair as two code points (built by hand, or
        # decoded with surrogatepass); JavaScript sees one character there.
        # Lone surrogates stay, and are escaped.
        s = s.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    return '"' + "".join(_escape_char(c) for c in s) + '"'


def _number(x):
    """ECMAScript Number::toString(x) for a finite double."""
    if math.isnan(x) or math.isinf(x):
        raise TypeError(f"intent_key: {x!r} has no JSON form (NaN and Infinity are refused)")
    if x == 0:
        return "0"  # -0 too, as JavaScript writes it
    if x < 0:
        return "-" + _number(-x)
    # repr gives the shortest digits that round-trip, as ECMAScript asks.
    mantissa, _, exp = repr(x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    n = len(whole) + (int(exp) if exp else 0)  # value = 0.DIGITS x 10^n
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits[0] if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{sign}{abs(e)}"


def _utf16_order(item):
    return item[0].encode("utf-16-be", "surrogatepass")


def _write(value, out, seen):
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise TypeError(
                f"intent_key: the integer {value} is beyond 2**53, which a JavaScript number cannot hold "
                "exactly; pass it as a string")
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, (list, tuple, dict)):
        if id(value) in seen:
            raise TypeError("intent_key: a circular structure has no JSON form")
        seen.add(id(value))
        if isinstance(value, dict):
            for k in value:
                if not isinstance(k, str):
                    raise TypeError(f"intent_key: object keys must be str, not {type(k).__name__} ({k!r})")
            out.append("{")
            for i, (k, v) in enumerate(sorted(value.items(), key=_utf16_order)):
                if i:
                    out.append(",")
                out.append(_string(k))
                out.append(":")
                _write(v, out, seen)
            out.append("}")
        else:
            out.append("[")
            for i, v in enumerate(value):
                if i:
                    out.append(",")
                _write(v, out, seen)
            out.append("]")
        seen.discard(id(value))
    else:
        raise TypeError(f"intent_key: a {type(value).__name__} has no JSON form ({value!r})")


def canonical_json(value):
    """The RFC 8785 (JCS) serialization of value, as a str.

    JSON values only: None, bool, int (|n| <= 2**53), finite float, str, and
    lists, tuples and dicts with str keys of these. Anything else: TypeError.
    """
    out = []
    _write(value, out, set())
    return "".join(out)


def _js_int(text):
    n = int(text)
    return n if abs(n) <= MAX_SAFE_INTEGER else float(text)


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def loads_as_javascript(text):
    """Parses JSON text into the values JSON.parse would see: an integer beyond
    2**53 becomes the float JavaScript reads (9007199254740993 -> 9007199254740992.0);
    NaN and Infinity are refused (ValueError), as is a number that overflows
    to Infinity when it is hashed."""
    return json.loads(text, parse_int=_js_int, parse_constant=_no_constant)


def intent_key(*parts):
    """The lowercase hex SHA-256 of canonical_json(list(parts)), UTF-8 encoded.

    Name the intent, never the attempt: a run or conversation id, the tool's
    name and its arguments, never a tool-call id or a timestamp.
    """
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
