"""tests/package: once as an operator installs it (issue 31). The fake provider and the HTTP
helpers come from tests/integration."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
