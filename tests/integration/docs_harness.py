"""Helpers of the doc walkthrough tests (issue 33; tests/integration/test_docs_*.py) — a
module, not tests.

A doc marks what the tests take from it with the info string of a fenced block:

    ```ini examples/NAME.ini        the complete config of a walkthrough: must be the file, byte
                                    for byte (a doc that drifts from its example fails)
    ```console walkthrough=NAME     commands (`$ ` lines, `\\` continues a line) and the output
                                    they print, run in order in one bash session

An output line is matched against the lines the commands printed, in order, a line of the doc
to a whole line printed: `…` stands for any text, a line of `…` alone for any lines (skipped),
blank lines are ignored, and a comment after two blanks (`  # why`) is not part of the line.

Walkthrough runs it the way `make run EXAMPLE=NAME` does (scripts/run): examples/ copied into
a scratch directory with the demo secrets made 0600, `once serve --config examples/NAME.ini`
started there (store sqlite:once.db in that directory), and the commands run from there too,
with `once` on PATH and tests/ reachable as in the repository. The fixed ports of the examples
(7600 the gateway, 7700 the fake provider, 3001 the MCP server) become free loopback ports, in
the copied config and in the commands alike. Every wait is bounded.
"""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from gateway import REPO_ROOT, Gateway, _env, free_port, once_bin, require_serve

DOCS = REPO_ROOT / "docs"
EXAMPLES = REPO_ROOT / "examples"
FENCE = re.compile(r"^```(\S*)(.*)$")
ELLIPSIS = "…"
SCRIPT_TIMEOUT = 120


def fenced_blocks(doc):
    """[(language, rest of the info string, text, line number)] of a Markdown file's top-level
    fenced blocks (``` at the start of a line)."""
    out = []
    lines = Path(doc).read_text().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{doc}:{start + 1}: a fenced block is not closed"
        out.append((m.group(1), m.group(2).strip(), "\n".join(body) + "\n", start + 1))
        i += 1
    return out


def config_blocks(doc):
    """{examples/NAME.ini: text} of the `ini examples/…` blocks of a doc."""
    return {info: text for lang, info, text, _ in fenced_blocks(doc)
            if lang == "ini" and info.startswith("examples/")}


def assert_doc_shows_example(doc, example):
    """The doc has a block `ini examples/EXAMPLE`, and its text is the file's."""
    blocks = config_blocks(doc)
    assert example in blocks, f"{doc} has no ```ini {example} block (it has {sorted(blocks)})"
    want = (REPO_ROOT / example).read_text()
    assert blocks[example] == want, (f"{doc}'s block of {example} differs from the file:\n"
                                     f"--- doc\n{blocks[example]}--- file\n{want}")


def walkthrough(doc, name):
    """[(command, [expected output lines])] of the `console walkthrough=NAME` blocks, in order."""
    steps = []
    for lang, info, text, line in fenced_blocks(doc):
        if lang != "console" or f"walkthrough={name}" not in info.split():
            continue
        cont = False
        for ln in text.rstrip("\n").split("\n"):
            if cont:
                steps[-1][0] += "\n" + ln
            elif ln.startswith("$ "):
                steps.append([ln[2:], []])
            else:
                assert steps, f"{doc}:{line}: output before the first command: {ln!r}"
                steps[-1][1].append(ln)
                continue
            cont = ln.endswith("\\")
    assert steps, f"{doc} has no ```console walkthrough={name} block"
    return [(c, out) for c, out in steps]


def check_config(path, cwd=REPO_ROOT):
    """`once check-config PATH` (from the repository's root, as the docs say): CompletedProcess."""
    return subprocess.run([str(once_bin()), "check-config", str(path)], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=_env())


def _line_pattern(expected):
    expected = re.sub(r"\s{2,}# .*$", "", expected).rstrip()
    return re.compile(".*".join(re.escape(part) for part in expected.split(ELLIPSIS)) + r"\s*")


def match_output(expected, actual):
    """None when the expected lines match the printed ones (see the module's header), else
    what did not match."""
    got = [ln.rstrip() for ln in actual.split("\n") if ln.strip()]
    i = 0
    for want in expected:
        if not want.strip() or want.strip() == ELLIPSIS:
            continue
        pat = _line_pattern(want)
        while i < len(got) and not pat.fullmatch(got[i]):
            i += 1
        if i == len(got):
            return f"no line (in order) matches {want!r}"
        i += 1
    return None


class Walkthrough:
    """One walkthrough's scratch directory, ports and gateway."""

    def __init__(self, tmp_path, example, ports):
        """ports: {fixed port of the example: port used here}; 7600 (the gateway's) is added."""
        self.workdir = Path(tmp_path) / "run"
        self.workdir.mkdir(parents=True)
        self.ports = dict(ports)
        self.ports.setdefault(7600, free_port())
        self.example = example
        shutil.copytree(EXAMPLES, self.workdir / "examples",
                        ignore=shutil.ignore_patterns("*.c"))
        for f in (self.workdir / "examples" / "secrets").iterdir():
            f.chmod(0o600)                 # as scripts/run does
        config = self.workdir / example
        config.write_text(self.rewrite(config.read_text()))
        (self.workdir / "tests").symlink_to(REPO_ROOT / "tests")
        bindir = Path(tmp_path) / "bin"
        bindir.mkdir()
        (bindir / "once").symlink_to(once_bin())
        self.path = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.gateway = None

    def rewrite(self, text):
        for fixed, port in self.ports.items():
            text = re.sub(rf"\b(127\.0\.0\.1|localhost):{fixed}\b", rf"\g<1>:{port}", text)
        return text

    def start(self, gateways):
        """`once serve --config examples/NAME.ini` in the scratch directory; waits for /healthz
        (and /readyz: a stdio MCP server has started)."""
        require_serve()
        gw = DocGateway(self.workdir, self.example, self.ports[7600])
        gateways.append(gw)
        gw.start()
        deadline = time.monotonic() + 30
        while gw.get("/readyz", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "GET /readyz not 200 within 30 s\n" + gw.stderr()[-3000:]
            time.sleep(0.1)
        self.gateway = gw
        return gw

    def run(self, steps):
        """Runs the commands in one bash session; returns [(command, output)]."""
        mark = "@@once-doc-step@@"
        script = ["set +e"]
        for i, (cmd, _) in enumerate(steps):
            script.append(f"printf '\\n{mark} {i}\\n'")
            script.append(self.rewrite(cmd))
        script.append(f"printf '\\n{mark} end\\n'")
        env = _env({"PATH": self.path})
        r = subprocess.run(["bash", "-c", "\n".join(script) + "\n"], cwd=self.workdir, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=SCRIPT_TIMEOUT)
        parts = re.split(rf"\n{re.escape(mark)} (\d+|end)\n", "\n" + r.stdout)
        outs = {}
        for j in range(1, len(parts) - 1, 2):
            if parts[j] != "end":
                outs[int(parts[j])] = parts[j + 1]
        return [(cmd, outs.get(i, "")) for i, (cmd, _) in enumerate(steps)]

    def run_and_check(self, steps):
        """Runs the steps and asserts that each printed what the doc shows."""
        results = self.run(steps)
        problems = []
        for (cmd, expected), (_, out) in zip(steps, results):
            why = match_output(expected, out)
            if why:
                problems.append(f"$ {cmd}\n  {why}\n  doc:\n" + "".join(f"    | {e}\n" for e in expected)
                                + "  printed:\n" + "".join(f"    | {o}\n" for o in out.split("\n")))
        gw = self.gateway
        assert not problems, "\n".join(problems) + ("\ngateway stderr:\n" + gw.stderr()[-3000:] if gw else "")
        return results


class DocGateway(Gateway):
    """A Gateway on a config written by someone else (an example), not by write_config."""

    def __init__(self, workdir, config, port):  # noqa: super().__init__ would write a config
        self.workdir = Path(workdir)
        self.port = port
        self.store_kind = "sqlite"
        self.store = f"sqlite:{self.workdir / 'once.db'}"
        self.config_path = Path(config)       # relative to workdir, as `make run` passes it
        self.url = f"http://127.0.0.1:{port}"
        self.proc = None
        self._terminated = False
        self.runs = 0
        self.stderr_path = None
        self.stderr_paths = []
        self.exit_codes = []

    def secret_warnings(self):
        """The start's warnings that a file with secrets is readable by others."""
        return [ln for ln in self.stderr().splitlines() if "chmod 600" in ln]
