"""The package installs with no downloads: pip with no index and no build
isolation (the machine's setuptools builds it), into a fresh virtualenv, and
works from there (import, metadata, the intent_key command).

Needs python3-pip (which brings python3-setuptools and python3-wheel).
Run: /usr/bin/python3 -m pytest -q clients/python/tests/test_install.py
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PACKAGE_ROOT
from once_client import intent_key


def test_installs_offline_into_a_venv(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.fail("pip is missing for this python (Debian: python3-pip, with python3-setuptools and "
                    f"python3-wheel): {r.stderr[-500:]}", pytrace=False)
    # A copy, so the build leaves nothing in the repository.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE_ROOT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info",
                                                                      ".pytest_cache"))
    venv = tmp_path / "venv"
    # --without-pip: no ensurepip needed; pip, setuptools and wheel come from the system's
    # site-packages, and nothing from any index.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_NO_INDEX"] = "1"
    r = subprocess.run([py, "-m", "pip", "install", "--isolated", "--no-index", "--no-build-isolation",
                        "--no-deps", str(src)], capture_output=True, text=True, timeout=300, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check = (
        "import importlib.metadata as md, sys, once_client\n"
        "assert once_client.__file__.startswith(sys.prefix), once_client.__file__\n"
        "assert md.version('once-client') == once_client.__version__\n"
        "assert not md.requires('once-client'), md.requires('once-client')\n"
        "print(once_client.intent_key('run-1', 'send_email', {'to': 'a@example.com'}))\n"
    )
    r = subprocess.run([py, "-c", check], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    want = intent_key("run-1", "send_email", {"to": "a@example.com"})
    assert r.stdout.strip() == want
    r = subprocess.run([py, "-m", "once_client.intent_key"], input='["run-1","send_email",{"to":"a@example.com"}]',
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == want, r.stderr
