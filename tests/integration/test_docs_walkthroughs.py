"""The docs' walkthroughs, run as written (issue 33): each doc's complete config is the example
file under examples/ (byte for byte), `once check-config` accepts it, and its session — the
commands and the output the doc shows, taken from the Markdown (docs_harness.py) — runs against
the gateway on that file and the fakes the repository ships, as `make run EXAMPLE=NAME` starts
them. A doc that drifts from its example, or from what the binary prints, fails here.
"""
import pytest

from docs_harness import (DOCS, REPO_ROOT, Walkthrough, assert_doc_shows_example, check_config,
                          config_blocks, match_output, walkthrough)
from gateway import Provider
from mcp_harness import McpUpstream, node_or_skip

WALKTHROUGHS = [
    # (doc, walkthrough name, example)
    ("approvals.md", "approvals", "examples/approvals.ini"),
    ("keys.md", "keys", "examples/keys.ini"),
    ("webhooks.md", "webhooks", "examples/webhooks.ini"),
    ("mcp.md", "mcp", "examples/mcp.ini"),
    ("mcp.md", "mcp-stdio", "examples/mcp-stdio.ini"),
]


@pytest.fixture
def provider_fresh():
    p = Provider()
    yield p
    p.stop()


def run_walkthrough(tmp_path, gateways, doc, name, example, ports):
    assert_doc_shows_example(DOCS / doc, example)
    r = check_config(example)
    assert r.returncode == 0 and r.stdout.startswith(f"{example}: ok"), r.stdout + r.stderr
    w = Walkthrough(tmp_path, example, ports)
    gw = w.start(gateways)
    w.run_and_check(walkthrough(DOCS / doc, name))
    assert gw.secret_warnings() == [], "the example's own files warned:\n" + gw.stderr()[-3000:]
    return w


@pytest.mark.parametrize("doc,name,example", WALKTHROUGHS[:3], ids=[w[1] for w in WALKTHROUGHS[:3]])
def test_walkthrough_against_the_fake_provider(tmp_path, gateways, provider_fresh, doc, name, example):
    """approvals.md, keys.md, webhooks.md: `make run EXAMPLE=NAME` (the fake provider on 7700)."""
    run_walkthrough(tmp_path, gateways, doc, name, example, {7700: provider_fresh.port})
    # What the provider got is what the sessions say it got; nothing more.
    assert provider_fresh.count() == {"approvals": 1, "keys": 2, "webhooks": 1}[name]


def test_walkthrough_mcp_over_url(tmp_path, gateways):
    """mcp.md: `make run EXAMPLE=mcp` (the SDK server on 3001; the agent is the SDK client)."""
    node_or_skip()
    upstream = McpUpstream(tmp_path / "mcp-upstream")
    try:
        run_walkthrough(tmp_path, gateways, "mcp.md", "mcp", "examples/mcp.ini", {3001: upstream.port})
        # One charge and one refund reached the server, whatever the agent repeated.
        assert upstream.count("A-1182", "charge") == 1
        assert upstream.count("A-1182", "refund") == 1
        # The credential of secrets/payments.headers reached the server; the agent's did not.
        auth = {r["headers"].get("authorization") for r in upstream.requests_seen() if r["method"] == "POST"}
        assert auth == {"Bearer demo-payments-token"}, auth
    finally:
        upstream.stop()


def test_walkthrough_mcp_over_stdio(tmp_path, gateways):
    """mcp.md: `make run EXAMPLE=mcp-stdio` (once spawns the SDK server from its directory)."""
    node_or_skip()
    run_walkthrough(tmp_path, gateways, "mcp.md", "mcp-stdio", "examples/mcp-stdio.ini", {})


def test_every_example_is_shown_whole_by_its_doc():
    """Each examples/*.ini but the README's once.ini is a doc's ```ini block, byte for byte."""
    shown = {}
    for doc in sorted(DOCS.glob("*.md")):
        for example in config_blocks(doc):
            shown.setdefault(example, doc.name)
    examples = {f"examples/{p.name}" for p in (REPO_ROOT / "examples").glob("*.ini")} - {"examples/once.ini"}
    assert examples <= set(shown), f"not shown by any doc: {sorted(examples - set(shown))}"
    for example, doc in shown.items():
        assert_doc_shows_example(DOCS / doc, example)


def test_a_doc_that_drifts_from_its_example_fails(tmp_path):
    """The extraction is strict: one changed character in the doc's block is a failure."""
    text = (DOCS / "keys.md").read_text()
    line = next(ln for ln in (REPO_ROOT / "examples/keys.ini").read_text().splitlines()
                if ln.startswith("key_source"))
    assert text.count(line) == 1
    drifted = tmp_path / "keys.md"
    drifted.write_text(text.replace(line, line.replace("template", "header", 1)))
    with pytest.raises(AssertionError, match="differs from the file"):
        assert_doc_shows_example(drifted, "examples/keys.ini")
    # and an output the binary does not print is a failure too
    assert match_output(['{"status":"accepted"}'], '{"status":"duplicate"}\n') is not None
    assert match_output(['{"status":…}'], '{"status":"duplicate"}\n') is None
