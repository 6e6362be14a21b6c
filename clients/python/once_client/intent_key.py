"""python3 -m once_client.intent_key — the intent key of a JSON array read on stdin.

For scripts and for the cross-language check of the TypeScript client: it
prints intent_key(*parts) for the array of parts, one line.
"""
import json
import sys

from ._jcs import intent_key


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def main(argv=None):
    text = sys.stdin.read()
    try:
        parts = json.loads(text, parse_constant=_reject_constant)
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
