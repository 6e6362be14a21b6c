"""What README.md, docs/config.md and examples/once.ini say about `make run` and the INI dialect,
checked against the binary (issue 33): the README's first session, run as written on
examples/once.ini; an example that makes once warn about nobody's secrets; comments after values;
indented lines; and the proxy path that looks like a host.
"""
import re
import subprocess

import pytest

from docs_harness import DOCS, REPO_ROOT, Walkthrough, check_config, fenced_blocks, walkthrough
from gateway import Provider, _env, once_bin

SECRET_KEYS = ("header", "secret", "metrics_token")


@pytest.fixture
def provider_fresh():
    p = Provider()
    yield p
    p.stop()


def test_readme_session_on_examples_once_ini(tmp_path, gateways, provider_fresh):
    """README.md's first session against `make run` (examples/once.ini, the fake provider), and
    the gateway's start says nothing about secrets that others may read: the example keeps its one
    secret in examples/secrets/, which scripts/run makes 0600, as the README says."""
    r = check_config("examples/once.ini")
    assert r.returncode == 0, r.stderr
    w = Walkthrough(tmp_path, "examples/once.ini", {7700: provider_fresh.port})
    gw = w.start(gateways)
    w.run_and_check(walkthrough(REPO_ROOT / "README.md", "once"))
    assert gw.secret_warnings() == [], gw.stderr()[-3000:]
    assert provider_fresh.wait_count(2) == 2


def test_examples_hold_no_secret_inline_and_run_chmods_the_secret_files():
    """No example sets header, secret or metrics_token in the file itself (once would warn about a
    file git leaves 0644); scripts/run makes examples/secrets/* 0600 before it starts once."""
    for ini in sorted((REPO_ROOT / "examples").glob("*.ini")):
        for n, line in enumerate(ini.read_text().splitlines(), 1):
            key = line.split("=", 1)[0].strip()
            assert not (("=" in line) and not line.lstrip().startswith((";", "#")) and key in SECRET_KEYS), \
                f"{ini.name}:{n}: a secret in the config itself: {line}"
    run = (REPO_ROOT / "scripts" / "run").read_text()
    assert "chmod 600 examples/secrets/*" in run


def test_every_example_passes_check_config():
    for ini in sorted((REPO_ROOT / "examples").glob("*.ini")):
        rel = f"examples/{ini.name}"
        r = check_config(rel)
        assert r.returncode == 0 and r.stdout.startswith(f"{rel}: ok"), r.stdout + r.stderr


def test_no_doc_config_comments_with_hash_after_a_value():
    """Only `;` after whitespace starts an inline comment: a ` # …` after a value in a doc's INI
    block would be read as part of the value (a header, a key template, a path)."""
    bad = []
    for doc in [REPO_ROOT / "README.md"] + sorted(DOCS.glob("*.md")):
        for lang, info, text, line in fenced_blocks(doc):
            if lang != "ini":
                continue
            for i, ln in enumerate(text.splitlines(), 1):
                if ln.lstrip().startswith((";", "#")) or "=" not in ln:
                    continue
                if re.search(r"\s#", ln.split("=", 1)[1]):
                    bad.append(f"{doc.name}:{line + i}: {ln}")
    assert not bad, "\n".join(bad)


def _check_text(tmp_path, text):
    p = tmp_path / "c.ini"
    p.write_text(text)
    return subprocess.run([str(once_bin()), "check-config", str(p)], capture_output=True, text=True,
                          timeout=60, env=_env())


def test_config_md_leading_whitespace_and_no_continuation(tmp_path):
    """docs/config.md: leading whitespace is ignored (an indented key, section or comment is
    read as if it were not indented); there are no continuation lines, so an indented line that is
    not `key = value`, a section or a comment is an error naming its line."""
    doc = (DOCS / "config.md").read_text()
    assert "an indented line is a line of its own (and, if it is not a comment, an error)" not in doc
    r = _check_text(tmp_path, "  [upstream.a]\n    url = http://127.0.0.1:1\n\t; a comment\n  # another\n")
    assert r.returncode == 0, r.stderr
    r = _check_text(tmp_path, "[upstream.a]\nurl = http://127.0.0.1:1\nrelease_on = 429\n    503\n")
    assert r.returncode == 1 and ":4: syntax error" in r.stderr, r.stderr


def test_readme_proxy_path_that_looks_like_a_host(tmp_path, gateways, provider_fresh):
    """README.md's security paragraph: /v1/proxy/demo/@evil.example/x goes to the configured host
    with the path /@evil.example/x; `..` is 400 invalid_path and nothing is sent."""
    readme = (REPO_ROOT / "README.md").read_text()
    assert "`/v1/proxy/demo/@evil.example/x` is sent to the configured host as `/@evil.example/x`" in readme
    w = Walkthrough(tmp_path, "examples/once.ini", {7700: provider_fresh.port})
    gw = w.start(gateways)
    r = gw.raw("POST", "/v1/proxy/demo/@evil.example/x", headers={"Idempotency-Key": "evil-1"})
    assert r.status_code == 200, r.text
    eff = provider_fresh.effects()
    assert [e["path"] for e in eff] == ["/@evil.example/x"]
    assert eff[0]["headers"]["host"] == f"127.0.0.1:{provider_fresh.port}"
    r = gw.raw("POST", "/v1/proxy/demo/../x", headers={"Idempotency-Key": "evil-2"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_path", r.text
    assert provider_fresh.count() == 1


def test_keys_md_templated_reservation_answers_its_key(tmp_path, gateways, provider_fresh):
    """docs/keys.md (and api.md): the 201 of a reservation by key_template carries the key."""
    assert "does not (yet) repeat the derived key" not in (DOCS / "keys.md").read_text()
    w = Walkthrough(tmp_path, "examples/once.ini", {7700: provider_fresh.port})
    gw = w.start(gateways)
    r = gw.post("/v1/actions", json={"scope": "invoices", "key_template": "invoice:{json:/customer}:{json:/month}",
                                     "request": {"customer": "cus_1", "month": "2026-11", "amount": 1200}})
    assert r.status_code == 201, r.text
    assert r.json()["key"] == "invoice:cus_1:2026-11"
