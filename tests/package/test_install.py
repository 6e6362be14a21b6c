"""`make install` and the man pages (issue 31), without root and without dpkg.

- `make install PREFIX=/usr DESTDIR=D` puts exactly the expected files under D (the binary,
  libonce.so with its soname link, include/once, once.pc with the prefix, the man pages, the
  examples, the unit with this prefix's binary), and `make uninstall DESTDIR=D` removes them.
- once(1) describes every command `once help` lists; once.ini(5) lists exactly the keys the
  loader's tables hold (config_keys prints them), each with its meaning from docs/config.md,
  under every section docs/config.md documents; `mandoc -T lint` finds nothing.

Run: /usr/bin/python3 -m pytest -q tests/package/test_install.py   (uses and updates build/)
"""
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


def run(*argv, check=True, timeout=900, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def dest(tmp_path_factory):
    d = tmp_path_factory.mktemp("destdir")
    run("make", "-C", REPO, "install", "PREFIX=/usr", f"DESTDIR={d}", f"BUILD={BUILD}")
    return d


def test_make_install_file_list_and_uninstall(dest):
    multiarch = run("gcc", "-print-multiarch").stdout.strip()
    lib = f"usr/lib/{multiarch}"
    examples = sorted(p.name for p in (REPO / "examples").iterdir() if p.suffix in (".c", ".ini"))
    secrets = sorted(p.name for p in (REPO / "examples" / "secrets").iterdir())
    want = {"usr/bin/once", f"{lib}/libonce.so", f"{lib}/libonce.so.0", f"{lib}/libonce.so.0.1.0",
            f"{lib}/pkgconfig/once.pc", "usr/include/once/once.h", "usr/share/man/man1/once.1",
            "usr/share/man/man5/once.ini.5", "usr/lib/systemd/system/once.service"}
    want |= {f"usr/share/doc/once/examples/{n}" for n in examples}
    want |= {f"usr/share/doc/once/examples/secrets/{n}" for n in secrets}
    got = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() or p.is_symlink()}
    assert got == want, f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
    assert (dest / lib / "libonce.so.0").readlink() == Path("libonce.so.0.1.0")
    assert (dest / lib / "libonce.so").readlink() == Path("libonce.so.0")
    soname = run("objdump", "-p", dest / lib / "libonce.so.0.1.0").stdout
    assert re.search(r"SONAME\s+libonce\.so\.0\n", soname), soname
    pc = (dest / lib / "pkgconfig" / "once.pc").read_text()
    assert "prefix=/usr\n" in pc and "libdir=${prefix}/lib/" + multiarch in pc and "Version: 0.1.0" in pc, pc
    unit = (dest / "usr/lib/systemd/system/once.service").read_text()
    assert "ExecStart=/usr/bin/once serve --config /etc/once/once.ini\n" in unit
    # Only once_* leaves the shared library.
    syms = run("nm", "-D", "--defined-only", dest / lib / "libonce.so.0.1.0").stdout.split("\n")
    exported = [ln.split()[-1] for ln in syms if re.match(r"^\S+ [TDBR] ", ln)]
    assert exported and all(s.startswith("once_") for s in exported), [s for s in exported if not s.startswith("once_")]

    run("make", "-C", REPO, "uninstall", f"DESTDIR={dest}", f"BUILD={BUILD}")
    left = [p for p in dest.rglob("*") if p.is_file() or p.is_symlink()]
    assert left == [], left
    run("make", "-C", REPO, "install", "PREFIX=/usr", f"DESTDIR={dest}", f"BUILD={BUILD}")  # for the tests below


def man(dest, page):
    return (dest / "usr/share/man" / page).read_text()


def test_mandoc_lint_clean(dest):
    for page in ("man1/once.1", "man5/once.ini.5"):
        r = run("mandoc", "-T", "lint", "-W", "warning", dest / "usr/share/man" / page, check=False)
        assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
        # The style level too, but for the cross-reference this machine's man database lacks.
        r = run("mandoc", "-T", "lint", dest / "usr/share/man" / page, check=False)
        rest = [ln for ln in r.stdout.splitlines() if "referenced manual not found" not in ln]
        assert rest == [], r.stdout


def test_once_1_describes_every_command(dest):
    helptext = run(BUILD / "once", "help").stdout
    commands = re.findall(r"^  (\S+)\s", helptext.split("Commands:")[1].split("Options:")[0], re.M)
    assert len(commands) >= 10, helptext
    page = man(dest, "man1/once.1")
    items = re.findall(r"^\.It Ic (\S+)", page, re.M)
    assert set(commands) == set(items), f"missing {set(commands) - set(items)}, not commands {set(items) - set(commands)}"
    for opt in ("--store", "--config", "--help", "--version"):
        assert f"Fl {opt[1:]}" in page, opt
    for env in ("ONCE_STORE", "ONCE_LISTEN", "NOTIFY_SOCKET"):
        assert f".It Ev {env}" in page, env
    assert ".Sh EXIT STATUS" in page


def test_once_ini_5_lists_exactly_the_loaders_keys(dest):
    tsv = (BUILD / "config_keys.tsv").read_text().splitlines()
    want = {}
    for ln in tsv:
        section, key, _typ, _default, flags = (ln.split("\t") + [""] * 5)[:5]
        want.setdefault(section, []).append(key + "TOOL" if "prefix" in flags.split() else key)
    page = man(dest, "man5/once.ini.5")
    keys_part = page.split(".Sh KEYS")[1].split(".Sh ENVIRONMENT")[0]
    got = {}
    for block in re.split(r"^\.Ss ", keys_part, flags=re.M)[1:]:
        section = re.match(r"\\&\[([^\]]+)\]\\&", block).group(1)
        got[section] = re.findall(r"^\.It Cm (\S+)", block, re.M)
    assert got == want
    assert "See docs/config.md." not in keys_part, "a key docs/config.md does not describe"
    doc_sections = re.findall(r"^## `\[([^\]]+)\]`", (REPO / "docs" / "config.md").read_text(), re.M)
    assert set(doc_sections) == set(got), f"docs/config.md documents {set(doc_sections) - set(got)} the page lacks"
    assert "log_format" in want["server"]
