"""python3 -m once_client.intent_key — the intent key of a JSON array read on stdin.

For scripts and for the cross-language check of the TypeScript client: it
prints intent_key(*parts) for the array of parts, one line. The numbers are
read as JavaScript's JSON.parse reads them (an integer beyond 2**53 is the
nearest double), so both languages hash the same values. Exit 2, with the
reason on stderr, for input that is not a JSON array or holds NaN/Infinity.
"""
import sys

from ._jcs import intent_key, loads_as_javascript


def main(argv=None):
    text = sys.stdin.read()
    try:
        parts = loads_as_javascript(text)
    except ValueError as e:
        print(f"once_client.intent_key: stdin is not JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(parts, list):
        print("once_client.intent_key: stdin must be a JSON array of parts", file=sys.stderr)
        return 2
    try:
        print(intent_key(*parts))
    except TypeError as e:
        print(f"once_client.intent_key: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
