"""No tokens, no network: without a tokens_file every route is open, so every listen
address must be loopback, unless `insecure_no_auth = yes` says otherwise.

`once serve` is only ever pointed at 192.0.2.1 (TEST-NET-1, not an address of this
machine: a bind would fail anyway), so a binary without the check cannot end up
listening beyond loopback. 0.0.0.0 and [::] are only given to `once check-config`,
which binds nothing.
"""
import re

import pytest

from gateway import free_port, write_config
import security_harness as sh

UNBINDABLE = "192.0.2.1"        # TEST-NET-1: not ours, so even a failed check binds nothing
REMEDY = re.compile(r"loopback|tokens_file|insecure_no_auth|auth", re.I)


def config(tmp_path, listen="127.0.0.1", up_listen=None, **server):
    """A config file whose server (and, with up_listen, upstream) listens on HOST:PORT."""
    server = dict({"listen": f"{listen}:{free_port()}", "store": f"sqlite:{tmp_path / 'once.db'}"}, **server)
    up = {"url": "http://127.0.0.1:9"}
    if up_listen:
        up["listen"] = f"{up_listen}:{free_port()}"
    return write_config(tmp_path / "once.ini", server, {"pay": up})


def listen_of(cfg, section="[server]"):
    """The listen address written in a section of cfg."""
    lines = cfg.read_text().splitlines()
    i = lines.index(section)
    for ln in lines[i + 1:]:
        if ln.startswith("listen = "):
            return ln.split(" = ", 1)[1]
    raise AssertionError(f"no listen in {section}")


def assert_refused(r, address, what):
    out = sh.output_of(r)
    assert r.returncode not in (0, None), f"{what}: accepted (exit {r.returncode}) without tokens:\n{out}"
    assert address in out, f"{what}: the refusal does not name {address}:\n{out}"
    assert REMEDY.search(out), f"{what}: not refused for want of auth (a bind failure?):\n{out}"


def assert_serve_refused(r, address, what):
    """`once serve` refused: exit 2 and one line naming the address."""
    assert_refused(r, address, what)
    assert r.returncode == 2, f"{what}: exit {r.returncode}, not 2:\n{sh.output_of(r)}"
    lines = [ln for ln in sh.output_of(r).splitlines() if ln.strip()]
    assert len(lines) == 1, f"{what}: {len(lines)} lines, not one:\n{sh.output_of(r)}"


# ----------------------------------------------------------------------------- once serve

def test_serve_refuses_non_loopback_listen_without_tokens(tmp_path):
    """[server] listen on a non-loopback address, no tokens_file: every route would be
    open to the network; once serve must refuse to start."""
    cfg = config(tmp_path, listen=UNBINDABLE)
    assert_serve_refused(sh.run_serve(cfg, cwd=tmp_path), listen_of(cfg), "[server] listen")


def test_serve_refuses_listen_flag_without_tokens(tmp_path):
    """`once serve --listen ADDR` overriding a loopback config with a non-loopback address."""
    addr = f"{UNBINDABLE}:{free_port()}"
    r = sh.run_serve(config(tmp_path), "--listen", addr, cwd=tmp_path)
    assert_serve_refused(r, addr, "--listen")


def test_serve_refuses_once_listen_env_without_tokens(tmp_path):
    """ONCE_LISTEN naming a non-loopback address."""
    addr = f"{UNBINDABLE}:{free_port()}"
    r = sh.run_serve(config(tmp_path), env={"ONCE_LISTEN": addr}, cwd=tmp_path)
    assert_serve_refused(r, addr, "ONCE_LISTEN")


def test_serve_refuses_upstream_listen_without_tokens(tmp_path):
    """An upstream's own listen on a non-loopback address (the proxy with its injected
    credentials, open to the network)."""
    cfg = config(tmp_path, up_listen=UNBINDABLE)
    r = sh.run_serve(cfg, cwd=tmp_path)
    assert_serve_refused(r, listen_of(cfg, "[upstream.pay]"), "[upstream.pay] listen")


# ----------------------------------------------------------------------------- once check-config

OPEN_ADDRESSES = ["0.0.0.0", "[::]", UNBINDABLE, "10.1.2.3"]


@pytest.mark.parametrize("host", OPEN_ADDRESSES)
@pytest.mark.parametrize("where", ["server", "upstream"])
def test_check_config_refuses_non_loopback_without_tokens(tmp_path, host, where):
    """check-config must refuse what serve would refuse: a non-loopback listen, no tokens."""
    cfg = config(tmp_path, **({"listen": host} if where == "server" else {"up_listen": host}))
    section = "[server]" if where == "server" else "[upstream.pay]"
    assert_refused(sh.run_once("check-config", cfg), listen_of(cfg, section), f"{section} listen {host}")


def test_check_config_refuses_once_listen_env_without_tokens(tmp_path):
    """check-config applies the environment, so ONCE_LISTEN=0.0.0.0:P is refused too."""
    addr = f"0.0.0.0:{free_port()}"
    r = sh.run_once("check-config", config(tmp_path), env={"ONCE_LISTEN": addr})
    assert_refused(r, addr, "ONCE_LISTEN")


def test_check_config_refuses_explicit_insecure_no_auth_no(tmp_path):
    """insecure_no_auth = no is the default spelled out: still refused."""
    cfg = config(tmp_path, listen="0.0.0.0", insecure_no_auth=False)
    assert_refused(sh.run_once("check-config", cfg), listen_of(cfg), "insecure_no_auth = no")


@pytest.mark.parametrize("host", OPEN_ADDRESSES)
@pytest.mark.parametrize("where", ["server", "upstream"])
@pytest.mark.parametrize("how", ["insecure_no_auth", "tokens_file"])
def test_check_config_accepts_non_loopback_when_told(tmp_path, host, where, how):
    """A non-loopback listen is fine with a tokens_file, or with insecure_no_auth = yes."""
    extra = {"insecure_no_auth": True} if how == "insecure_no_auth" else {
        "tokens_file": str(sh.write_tokens(tmp_path / "tokens", ["tok-listen-policy-0123456789"]))}
    cfg = config(tmp_path, **({"listen": host} if where == "server" else {"up_listen": host}), **extra)
    r = sh.run_once("check-config", cfg)
    assert r.returncode == 0, f"refused with {how}:\n{cfg.read_text()}\n{sh.output_of(r)}"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "[::1]", "localhost"])
def test_check_config_accepts_loopback_without_tokens(tmp_path, host):
    """Every loopback address (127.0.0.0/8, ::1, localhost) is fine without tokens."""
    cfg = config(tmp_path, listen=host, up_listen=host)
    r = sh.run_once("check-config", cfg)
    assert r.returncode == 0, f"loopback {host} refused:\n{sh.output_of(r)}"
