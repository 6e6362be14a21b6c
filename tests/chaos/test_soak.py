"""A short run of the randomised soak (tests/chaos/soak.py) inside the suite; `make soak
DURATION=…` runs it longer."""
import os
import subprocess
import sys

import pytest

from chaoslib import HERE, pg_base_url
from gateway import NO_PG_REASON

SECONDS = int(os.environ.get("ONCE_CHAOS_SOAK_SECONDS", "20"))


def test_short_soak(tmp_path, row):
    row(f"randomised soak ({SECONDS} s, 3 nodes, random SIGKILLs): effects == intents, no event lost, none pending")
    if not pg_base_url():
        pytest.skip(NO_PG_REASON)
    r = subprocess.run([sys.executable, str(HERE / "soak.py"), "--duration", str(SECONDS), "--pg-url", pg_base_url(),
                        "--workdir", str(tmp_path / "nodes"), "--seed", "42"],
                       capture_output=True, text=True, timeout=SECONDS + 200)
    report = [ln for ln in r.stdout.splitlines() if not ln.startswith("{")]
    line = next((ln for ln in report if ln.startswith("soak report")), "")
    row.note(line.replace("soak report: ", ""))
    for ln in report:
        if ln.strip().startswith(("intents", "yes", "NO")):
            row.note(ln.strip())
    assert r.returncode == 0, "\n".join(report[-12:]) + r.stderr[-2000:]
