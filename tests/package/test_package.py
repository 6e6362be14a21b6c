"""The Debian package, installed on this machine as an operator would (issue 31).

`scripts/deb` builds it once for the module (dpkg-buildpackage -b, debhelper), `dpkg -i`
installs it, and the tests check what the operator gets: the binary and its config, the user
and the store directory, the unit as systemd-analyze sees it, the installed binary started as
the unit's ExecStart says (as the user once, NOTIFY_SOCKET on a datagram socket the test holds:
READY=1 only once /readyz answers 200, SIGHUP reloads, SIGTERM sends STOPPING=1 and exits 0),
a proxied call through the packaged config with its commented examples switched on, the
library through pkg-config, the man pages, and `dpkg -r` / `dpkg -P` last. The package is
purged at the end whatever happens.

It changes the machine (a package, a user, /etc/once, /var/lib/once), so it runs as root only
(make test on CI is root); otherwise it is skipped, saying so. No running systemd is needed.

Run: sudo /usr/bin/python3 -m pytest -q tests/package/test_package.py
Everything listens on 127.0.0.1; every wait is bounded.
"""
import hashlib
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from gateway import Provider

REPO = Path(__file__).resolve().parents[2]
UNIT = Path("/lib/systemd/system/once.service")
CONFIG = Path("/etc/once/once.ini")
STATE = Path("/var/lib/once")
SLOW_MCP = Path(__file__).with_name("slow_mcp.py")
INIT_DELAY_MS = 1500   # how late the variant's stdio MCP server answers initialize
WAIT_S = 30            # bound on every start, reload and stop

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installs a Debian package with dpkg -i (root only)")


def run(*argv, check=True, timeout=120, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def package_state():
    r = run("dpkg-query", "-W", "-f=${db:Status-Status}", "once", check=False)
    return r.stdout.strip() if r.returncode == 0 else "not-installed"


def purge():
    if package_state() not in ("not-installed", ""):
        run("dpkg", "-P", "once", timeout=300)


@pytest.fixture(scope="module")
def deb():
    for tool in ("dpkg-buildpackage", "dh", "systemd-analyze", "mandoc"):
        assert shutil.which(tool), f"{tool} is missing: scripts/deps --test installs it"
    t0 = time.monotonic()
    r = run("bash", REPO / "scripts" / "deb", REPO / "build" / "deb", timeout=1800)
    path = Path(r.stdout.strip().splitlines()[-1])
    print(f"\npackage built in {time.monotonic() - t0:.0f} s: {path}")
    assert path.is_file(), r.stdout
    return path


@pytest.fixture(scope="module")
def installed(deb):
    # The purge at the end deletes /etc/once, /var/lib/once and the user: never someone's own.
    theirs = [str(p) for p in (Path("/etc/once"), STATE) if p.exists()]
    if package_state() != "not-installed":
        theirs.append("the once package")
    try:
        pwd.getpwnam("once")
        theirs.append("a user once")
    except KeyError:
        pass
    assert not theirs, (f"{', '.join(theirs)} already on this machine: tests/package installs and purges "
                        f"its own; remove them first (dpkg -P once) if they are a test's leftovers")
    run("dpkg", "-i", deb, timeout=300)
    yield deb
    purge()


def unit_service():
    """The [Service] settings of the installed unit: {name: [values]}."""
    out, section = {}, None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def exec_start():
    """argv of the unit's ExecStart (its special prefixes, -@:+!, dropped)."""
    (line,) = unit_service()["ExecStart"]
    return shlex.split(line.lstrip("-@:+!"))


class NotifySocket:
    """What systemd would hold for a Type=notify service: an AF_UNIX datagram socket whose
    path goes in NOTIFY_SOCKET; the user once may send to it."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="once-notify-", dir="/tmp"))
        self.dir.chmod(0o755)
        self.path = self.dir / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.path.chmod(0o777)
        self.messages = []

    def poll(self, timeout):
        """The next message within timeout seconds (0: only one already there), or None."""
        self.sock.settimeout(timeout if timeout > 0 else None)
        if timeout <= 0:
            self.sock.setblocking(False)
        try:
            msg = self.sock.recv(4096).decode()
        except (BlockingIOError, socket.timeout):
            return None
        self.messages.append(msg)
        return msg

    def wait_for(self, state, timeout=WAIT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.poll(max(0.01, deadline - time.monotonic()))
            if msg is not None and state in msg.splitlines():
                return msg
        raise AssertionError(f"no {state} within {timeout} s; got {self.messages}")

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class AsUnit:
    """argv started as the unit starts it: as its User and Group, in its WorkingDirectory,
    with its UMask, a minimal environment and NOTIFY_SOCKET; stdout and stderr in a file."""

    def __init__(self, argv, notify, env=None):
        svc = unit_service()
        self.log_path = notify.dir / "stderr.log"
        self.log = open(self.log_path, "wb")
        e = {"PATH": "/usr/local/bin:/usr/bin:/bin", "NOTIFY_SOCKET": str(notify.path), "LANG": "C.UTF-8"}
        e.update(env or {})
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     cwd=svc["WorkingDirectory"][0], env=e, user=svc["User"][0],
                                     group=svc["Group"][0], extra_groups=[], umask=int(svc["UMask"][0], 8))

    def text(self):
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern, timeout=WAIT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text(), re.M):
                return
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            time.sleep(0.05)
        raise AssertionError(f"no /{pattern}/ in the log within {timeout} s:\n{self.text()[-3000:]}")

    def stop(self, notify):
        """SIGTERM: STOPPING=1 reaches the socket and the process exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        rc = self.proc.wait(WAIT_S)
        assert rc == 0, f"exit {rc} on SIGTERM:\n{self.text()[-3000:]}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT_S)
        self.log.close()


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the tests, in order

def test_installed_binary_config_user_and_store_dir(installed):
    r = run("/usr/bin/once", "version")
    assert r.stdout.strip() == "once 0.1.0", r.stdout
    r = run("/usr/bin/once", "check-config", CONFIG)
    assert r.stdout.startswith(f"{CONFIG}: ok"), r.stdout
    assert run("dpkg-query", "-W", "-f=${Conffiles}", "once").stdout.split()[0] == str(CONFIG)
    user = pwd.getpwnam("once")
    assert user.pw_uid < 1000 and user.pw_shell in ("/usr/sbin/nologin", "/bin/false"), user
    st = STATE.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (user.pw_uid, user.pw_gid, 0o700)


def test_unit_verifies_and_its_exposure_is_ok(installed):
    r = run("systemd-analyze", "verify", UNIT, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr
    r = run("systemd-analyze", "security", "--offline=true", UNIT, check=False)
    m = re.search(r"Overall exposure level for once\.service: (\d+\.\d+) (\w+)", r.stdout)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"\nsystemd-analyze security --offline=true {UNIT}: {m.group(1)} {m.group(2)}")
    assert float(m.group(1)) <= 2.0 and m.group(2) == "OK", r.stdout[-3000:]
    svc = unit_service()
    assert svc["Type"] == ["notify"] and svc["User"] == ["once"] and svc["StateDirectory"] == ["once"]
    assert svc["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_installed_config_started_as_the_unit_says(installed):
    """/usr/bin/once serve --config /etc/once/once.ini as the user once: READY=1 when /readyz
    answers 200, SIGHUP reloads, SIGTERM sends STOPPING=1 and exits 0; the store it made is
    the user's, 0600 (UMask=0077)."""
    argv = exec_start()
    assert argv == ["/usr/bin/once", "serve", "--config", str(CONFIG)], argv
    (pre,) = unit_service()["ExecStartPre"]
    r = subprocess.run(shlex.split(pre), user="once", group="once", extra_groups=[], cwd=STATE,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"{CONFIG}: ok"), r.stdout + r.stderr
    env, port = {}, 7600
    if not port_free(7600):  # another gateway on this machine (make run): ONCE_LISTEN moves it
        port = free_port()
        env["ONCE_LISTEN"] = f"127.0.0.1:{port}"
    notify = NotifySocket()
    p = AsUnit(argv, notify, env)
    try:
        msg = notify.wait_for("READY=1")
        r = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert r.status_code == 200, r.text
        assert "STATUS=0 upstreams" in msg, msg
        assert re.search(r"^info once 0\.1\.0 serving", p.text(), re.M), p.text()  # log_format = text
        db = STATE / "once.db"
        st = db.stat()
        assert st.st_uid == pwd.getpwnam("once").pw_uid and stat.S_IMODE(st.st_mode) == 0o600
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log(r"^info reload: ")
        assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
        p.stop(notify)
    finally:
        p.kill()
        notify.close()


@pytest.fixture
def variant(installed):
    """/etc/once/once.ini with its commented examples switched on: the upstream at a fake
    provider, the MCP stdio server one that answers initialize late, the secrets and the store
    in a directory of the user once, and an operator token."""
    d = Path(tempfile.mkdtemp(prefix="once-pkg-", dir="/tmp"))
    d.chmod(0o755)
    provider = Provider()
    text = CONFIG.read_text()
    lines = [re.sub(r"^; (?=\[|[a-z_.]+ = )", "", ln) for ln in text.splitlines()]
    port = free_port()
    text = "\n".join(lines) + "\n"
    for old, new in [("127.0.0.1:7600", f"127.0.0.1:{port}"), ("sqlite:/var/lib/once/", f"sqlite:{d}/store/"),
                     ("/etc/once/", f"{d}/"), ("https://api.openai.com", provider.url),
                     ("/usr/local/bin/my-mcp-server --stdio", f"/usr/bin/python3 {d}/slow_mcp.py {INIT_DELAY_MS}")]:
        assert old in text, old
        text = text.replace(old, new)
    for section in ("[upstream.openai]", "[source.stripe]", "[mcp.tools]", "[mcp.files]"):
        assert f"\n{section}\n" in text, section
    user = pwd.getpwnam("once")
    token = secrets.token_hex(16)
    files = {"once.ini": text, "tokens": f"sha256:{hashlib.sha256(token.encode()).hexdigest()} operator op\n",
             "stripe.secret": "whsec_dGVzdA==\n", "slow_mcp.py": SLOW_MCP.read_text()}
    for name, content in files.items():
        (d / name).write_text(content)
        os.chown(d / name, user.pw_uid, user.pw_gid)
        (d / name).chmod(0o600 if name != "slow_mcp.py" else 0o644)
    (d / "store").mkdir(mode=0o700)
    os.chown(d / "store", user.pw_uid, user.pw_gid)
    yield d, port, provider, token
    provider.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_examples_switched_on_proxy_reload_and_ready_only_when_ready(variant):
    """The packaged config's examples pass check-config; started as the unit starts once,
    READY=1 waits for the stdio MCP server (/readyz 503 mcp_starting until then), a proxied
    call is sent once and replayed, a token added to tokens_file works after SIGHUP, and
    SIGTERM sends STOPPING=1."""
    d, port, provider, token = variant
    env = {"OPENAI_API_KEY": "sk-test-upstream"}
    r = run("/usr/bin/once", "check-config", d / "once.ini", env={**os.environ, **env})
    assert "1 upstream, 2 MCP servers, 1 webhook source" in r.stdout, r.stdout
    notify = NotifySocket()
    argv = exec_start()
    argv[argv.index(str(CONFIG))] = str(d / "once.ini")
    p = AsUnit(argv, notify, env)
    base = f"http://127.0.0.1:{port}"
    try:
        starting, ready_at, deadline = 0, None, time.monotonic() + WAIT_S
        while ready_at is None and time.monotonic() < deadline:
            assert p.proc.poll() is None, p.text()[-3000:]
            if notify.poll(0) is not None and "READY=1" in notify.messages[-1].splitlines():
                ready_at = time.monotonic()
                break
            try:
                rz = requests.get(f"{base}/readyz", timeout=10)
            except requests.ConnectionError:
                time.sleep(0.02)
                continue
            if rz.status_code == 503:
                assert rz.json()["code"] == "mcp_starting", rz.text
                starting += 1
            time.sleep(0.02)
        assert ready_at is not None, f"no READY=1 within {WAIT_S} s: {notify.messages}\n{p.text()[-3000:]}"
        assert starting > 0, "READY=1 came before /readyz was ever seen waiting for the MCP server"
        assert requests.get(f"{base}/readyz", timeout=10).status_code == 200

        auth = {"Authorization": f"Bearer {token}", "Idempotency-Key": "order-1"}
        r1 = requests.post(f"{base}/v1/proxy/openai/v1/chat/completions", json={"m": 1}, headers=auth, timeout=30)
        r2 = requests.post(f"{base}/v1/proxy/openai/v1/chat/completions", json={"m": 1}, headers=auth, timeout=30)
        assert r1.status_code == 200 and r2.status_code == 200, r1.text + r2.text
        assert r2.headers.get("Idempotent-Replayed") == "true"
        assert provider.count() == 1
        assert provider.effects()[0]["headers"]["authorization"] == "Bearer sk-test-upstream"

        token2 = secrets.token_hex(16)
        h2 = {"Authorization": f"Bearer {token2}", "Idempotency-Key": "order-2"}
        assert requests.post(f"{base}/v1/proxy/openai/x", headers=h2, timeout=30).status_code == 401
        with open(d / "tokens", "a") as f:
            f.write(f"sha256:{hashlib.sha256(token2.encode()).hexdigest()} operator op2\n")
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log(r"^info reload: 2 token")
        assert requests.post(f"{base}/v1/proxy/openai/x", headers=h2, timeout=30).status_code == 200
        assert provider.count() == 2
        assert re.search(r"^request method=POST route=proxy agent=op2 scope=openai .*status=200", p.text(), re.M)
        p.stop(notify)
    finally:
        p.kill()
        notify.close()


def test_example_program_builds_with_pkg_config_only(installed, tmp_path):
    """examples/ledger_demo.c as installed, compiled with `pkg-config --cflags --libs once` and
    nothing else, runs against the installed libonce.so."""
    assert run("pkg-config", "--modversion", "once").stdout.strip() == "0.1.0"
    flags = run("pkg-config", "--cflags", "--libs", "once").stdout.split()
    src = Path("/usr/share/doc/once/examples/ledger_demo.c")
    run("cc", "-o", tmp_path / "ledger_demo", src, *flags)
    ldd = run("ldd", tmp_path / "ledger_demo").stdout
    assert re.search(r"libonce\.so\.0 => (/usr)?/lib/\S+/libonce\.so\.0 ", ldd), ldd
    r = run(tmp_path / "ledger_demo", f"sqlite:{tmp_path}/demo.db")
    assert r.stdout.strip(), r.stdout


def test_installed_man_pages_lint_clean(installed):
    for page in ("/usr/share/man/man1/once.1.gz", "/usr/share/man/man5/once.ini.5.gz"):
        r = run("mandoc", "-T", "lint", "-W", "warning", page, check=False)
        assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
        r = run("mandoc", "-T", "lint", page, check=False)
        rest = [ln for ln in r.stdout.splitlines() if "referenced manual not found" not in ln]
        assert rest == [], r.stdout
    assert run("man", "-w", "5", "once.ini").stdout.strip() == "/usr/share/man/man5/once.ini.5.gz"


def test_remove_keeps_the_store_purge_removes_config_store_and_user(installed):
    assert (STATE / "once.db").exists(), "the earlier test left no store"
    run("dpkg", "-r", "once", timeout=300)
    assert not Path("/usr/bin/once").exists() and not UNIT.exists()
    assert (STATE / "once.db").exists() and CONFIG.exists()
    pwd.getpwnam("once")
    run("dpkg", "-P", "once", timeout=300)
    assert not Path("/etc/once").exists() and not STATE.exists()
    with pytest.raises(KeyError):
        pwd.getpwnam("once")
