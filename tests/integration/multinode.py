"""Helpers for tests of several `once serve` processes on one PostgreSQL (a module, not tests).

- PgServer: a throwaway PostgreSQL 15 from scripts/pg (start / restart / stop,
  and down / up: stopped for as long as a test wants),
  in a private directory under /tmp (scripts/pg runs it as an unprivileged
  user, which must be able to reach the directory), or an existing server
  given by $ONCE_TEST_PG_URL (never restarted or stopped here).
- with_schema / new_schema: a store URL with ?once_schema=NAME, so that every
  test has tables of its own in a shared database; drop_schema removes them.
- Cluster: N HookGateways (gateway.py / hooks_harness.py, unchanged) on one
  store URL, each on its own loopback port and in its own directory; started
  in parallel (the schema migration is advisory-locked, so N nodes starting at
  once must migrate once), stopped with SIGTERM and checked for a clean exit.

Everything listens on 127.0.0.1 and every wait is bounded.
"""
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import requests

from gateway import REPO_ROOT, require_serve
from hooks_harness import HookGateway

PG_SCRIPT = REPO_ROOT / "scripts" / "pg"
PG_TIMEOUT = 120           # scripts/pg start/restart/stop must finish within this
READY_TIMEOUT = 30         # /readyz must be 200 again within this after the database returns


def _pg_bin(name):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    return shutil.which(name)


class PgServer:
    """A PostgreSQL for the tests: owned (scripts/pg, restartable) or external ($ONCE_TEST_PG_URL)."""

    def __init__(self, url, directory=None):
        self.url = url
        self.dir = directory
        self.owned = directory is not None

    @classmethod
    def start_private(cls):
        """A fresh server of our own (scripts/pg start), in a new directory under /tmp."""
        d = tempfile.mkdtemp(prefix="once-mn-pg-", dir="/tmp")
        os.chmod(d, 0o755)
        pgdir = os.path.join(d, "pg")
        try:
            r = subprocess.run(["bash", str(PG_SCRIPT), "start", pgdir], capture_output=True, text=True,
                               timeout=PG_TIMEOUT)
        except subprocess.TimeoutExpired:
            subprocess.run(["bash", str(PG_SCRIPT), "stop", pgdir], capture_output=True, timeout=PG_TIMEOUT)
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(f"scripts/pg start did not finish within {PG_TIMEOUT} s")
        urls = [ln for ln in r.stdout.splitlines() if ln.startswith("postgres://")]
        if r.returncode != 0 or not urls:
            subprocess.run(["bash", str(PG_SCRIPT), "stop", pgdir], capture_output=True, timeout=PG_TIMEOUT)
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(f"scripts/pg start failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
        s = cls(urls[-1], pgdir)
        s._top = d
        return s

    @classmethod
    def shared(cls):
        """$ONCE_TEST_PG_URL when set (scripts/test sets it), else a private server."""
        url = os.environ.get("ONCE_TEST_PG_URL")
        if url:
            return cls(url)
        return cls.start_private()

    def _script(self, cmd):
        assert self.owned, "only a server started here may be restarted or stopped"
        r = subprocess.run(["bash", str(PG_SCRIPT), cmd, self.dir], capture_output=True, text=True,
                           timeout=PG_TIMEOUT)
        assert r.returncode == 0, f"scripts/pg {cmd} exited {r.returncode}: {r.stdout} {r.stderr}"

    def restart(self):
        """Stops PostgreSQL (fast: every session is cut) and starts it again on the same port."""
        self._script("restart")

    def down(self):
        """Stops PostgreSQL (fast: every session is cut) and leaves it down until up()."""
        self._script("stop")

    def up(self):
        """Starts a server that down() stopped, on the same port, and waits until it
        accepts connections: the second half of scripts/pg restart (same options)."""
        assert self.owned, "only a server started here may be started again"
        with open(os.path.join(self.dir, "port")) as f:
            port = f.read().strip()
        argv = [_pg_bin("pg_ctl"), "-D", os.path.join(self.dir, "data"), "-l", os.path.join(self.dir, "server.log"),
                "-w", "-t", "60", "-o", f"-c listen_addresses=127.0.0.1 -c port={port} "
                f"-c unix_socket_directories={self.dir} -c max_connections=300 -c fsync=on", "start"]
        if os.geteuid() == 0:  # scripts/pg runs PostgreSQL as an unprivileged user
            argv = ["runuser", "-u", os.environ.get("ONCE_PG_USER", "oncepg"), "--"] + argv
        r = subprocess.run(argv, capture_output=True, text=True, timeout=PG_TIMEOUT)
        assert r.returncode == 0, f"pg_ctl start exited {r.returncode}: {r.stdout} {r.stderr}"

    def stop(self):
        if self.owned:
            try:
                self._script("stop")
            finally:
                shutil.rmtree(self._top, ignore_errors=True)

    def psql(self, sql, timeout=30):
        """Runs sql with psql on the database (the URL without once_schema); returns stdout."""
        psql = _pg_bin("psql")
        assert psql, "psql not found"
        r = subprocess.run([psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", base_url(self.url), "-c", sql],
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"psql {sql!r} exited {r.returncode}: {r.stderr}"
        return r.stdout


def base_url(url):
    """The URL without a once_schema parameter (what libpq and psql accept)."""
    head, _, query = url.partition("?")
    parts = [p for p in query.split("&") if p and not p.startswith("once_schema=")]
    return head + ("?" + "&".join(parts) if parts else "")


def with_schema(url, schema):
    return url + ("&" if "?" in url else "?") + f"once_schema={schema}"


def new_schema(prefix="mn"):
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def drop_schema(pg, schema):
    assert re.fullmatch(r"[a-z0-9_]+", schema)
    try:
        pg.psql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except (AssertionError, subprocess.TimeoutExpired):
        pass  # best effort: the server may be gone


class Cluster:
    """n gateways on one PostgreSQL store URL: nodes[i] is a HookGateway (with no
    sources it is a plain gateway), its CLI pointed at the same store."""

    def __init__(self, workdir, url, n, upstreams=None, sources=None, server=None):
        require_serve()
        self.url = url
        self.nodes = []
        for i in range(n):
            cfg = {"store": url}
            cfg.update(server or {})
            g = HookGateway(os.path.join(str(workdir), f"node{i}"), dict(sources or {}), upstreams=upstreams,
                            server=cfg)
            g.store = url  # gateway.Gateway.cli passes --store self.store
            self.nodes.append(g)

    def __getitem__(self, i):
        return self.nodes[i]

    def __len__(self):
        return len(self.nodes)

    def start(self):
        """Starts every node at the same time (each waits for its /healthz)."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as ex:
            for f in [ex.submit(g.start) for g in self.nodes]:
                f.result()
        return self

    def ready(self, g):
        try:
            return requests.get(g.url + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout=READY_TIMEOUT):
        """Waits until every node answers /readyz 200; returns the seconds it took."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            pending = [g for g in pending if not self.ready(g)]
            if pending:
                time.sleep(0.1)
        assert not pending, (f"/readyz not 200 within {timeout} s on "
                             f"{[g.url for g in pending]}:\n" + "\n".join(g.stderr()[-2000:] for g in pending))
        return time.monotonic() - t0

    def stop_clean(self):
        """SIGTERM to every live node; each must exit 0 without sanitizer reports."""
        problems = []
        for g in self.nodes:
            if g.alive():
                rc = g.stop()
                if rc != 0:
                    problems.append(f"{g.url} exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}")
            reports = g.sanitizer_reports()
            if reports:
                problems.append(f"{g.url}: {reports}\n{g.stderr(all_runs=True)[-6000:]}")
        assert not problems, "\n".join(problems)

    def kill_all(self):
        for g in self.nodes:
            g.kill()


def log_counts(g, pattern):
    """Sums, over the JSON log lines of every run of g, the integer groups of pattern
    (a regex on the msg field with named integer groups): {group: total}."""
    rx = re.compile(pattern)
    out = {}
    import json
    for line in g.stderr(all_runs=True).splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            msg = json.loads(line).get("msg", "")
        except ValueError:
            continue
        m = rx.search(msg or "")
        if m:
            for k, v in m.groupdict().items():
                out[k] = out.get(k, 0) + int(v)
    return out
