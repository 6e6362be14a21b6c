#!/usr/bin/env python3
"""bench/compare.py — once side by side with the tools users would pick instead.

    bench/compare.py BUILD_DIR           (make bench-compare runs it; see bench/README.md)

Starts, as its own children and on 127.0.0.1 only: nginx (the upstream that
answers {"ok":true}, and a proxy_pass server in front of it), a 200 ms counting
upstream (a thread of this script), Redis, a throwaway PostgreSQL (scripts/pg),
the three Node.js peers of bench/peers/, once on SQLite, once on PostgreSQL
with one node and with three nodes on one database. Then, for every
repetition, for new keys and for replays, it runs wrk against each contender
in turn (A B C … A B C …, so drift hits all alike), and afterwards fires 50
concurrent requests with one key at each contender in front of the slow
upstream and counts how many reached it.

Prints a table and writes bench/results/compare.csv (bench/plot_compare.sh
turns it into the charts of docs/benchmarks.md).

Environment (defaults in brackets):
  BENCH_SECONDS [10]  one measured run    BENCH_REPS [3]   repetitions
  BENCH_WARMUP [2]    unmeasured seconds per contender and mode before the first run
  WRK_THREADS [2]  WRK_CONNECTIONS [64]   ONCE_THREADS [4]  (once's [server] threads)
  PEER_WORKERS [cores] Node.js processes per peer (node:cluster when > 1): one per core,
                      as Node services are deployed (with 1 they reached 45-70% of it here)
  REDIS_FSYNC [no]    `always`: Redis with appendonly yes, appendfsync always
  BENCH_ONLY [all]    comma-separated contenders (direct,proxy_pass,node-idempotency,
                      powertools,express-idempotency,once-sqlite,once-pg-1,once-pg-3)
  BENCH_CSV [bench/results/compare.csv]
  ONCE_BENCH_DIR [$TMPDIR or /tmp]  where the temporary directory goes (a real disk)
  ONCE_BENCH_TIMEOUT [3600]         the whole run is stopped after this many seconds

Exit status: 0 when every run completed (goals met or not: it is a benchmark),
1 when something failed (a server did not start, wrk failed, once answered an
error or let more than one of the 50 concurrent same-key requests through),
2 on a usage error.
"""

import csv
import datetime
import http.client
import http.server
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = ["direct", "proxy_pass", "node-idempotency", "powertools", "express-idempotency",
       "once-sqlite", "once-pg-1", "once-pg-3"]
PEERS = ["node-idempotency", "powertools", "express-idempotency"]
ONCE = ["once-sqlite", "once-pg-1", "once-pg-3"]
CONCURRENT = 50
SLOW_MS = 200


class BenchError(Exception):
    """Something the figures cannot be trusted after: a server that did not start, a failed run."""


def env_int(name, default, minimum=1):
    raw = os.environ.get(name, str(default))
    try:
        v = int(raw)
    except ValueError:
        v = None
    if v is None or v < minimum:
        print(f"bench/compare.py: {name} must be an integer >= {minimum} (got {raw!r})", file=sys.stderr)
        sys.exit(2)
    return v


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def log(msg):
    print(msg, flush=True)


# ---- the slow counting upstream (a thread of this process) ------------------------------

class SlowUpstream:
    """POST anything: waits SLOW_MS, counts the call under its path, answers {"ok":true}.

    The concurrency test asks it how many calls reached it for one path, so it
    runs here rather than in nginx (which cannot count per path without a module).
    """

    def __init__(self, port):
        counts = self.counts = {}
        lock = self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                with lock:
                    counts[self.path] = counts.get(self.path, 0) + 1
                time.sleep(SLOW_MS / 1000)
                body = b'{"ok":true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def calls(self, path):
        with self.lock:
            return self.counts.get(path, 0)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ---- HTTP from this script (set-up checks and the concurrency test) ---------------------

def post(port, path, key, body, timeout=30):
    """One POST; returns (status, headers dict lower-cased, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        if key is not None:
            h["Idempotency-Key"] = key
        c.request("POST", path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def wait_http(port, path, proc, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode} while starting")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", path)
            c.getresponse().read()
            c.close()
            return
        except OSError:
            time.sleep(0.1)
    raise BenchError(f"{what} did not answer on 127.0.0.1:{port} within {seconds} s")


def concurrent_same_key(ports, path, key, body, n=CONCURRENT):
    """n requests with one key, released together, spread over ports (one per node);
    returns the list of statuses (0: no answer)."""
    barrier = threading.Barrier(n)
    statuses = [0] * n

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=30)
        try:
            c.connect()  # connect first, so the barrier releases requests, not handshakes
            barrier.wait(timeout=30)
            c.request("POST", path, body=body,
                      headers={"Content-Type": "application/json", "Idempotency-Key": key})
            r = c.getresponse()
            r.read()
            statuses[i] = r.status
        except (OSError, threading.BrokenBarrierError, http.client.HTTPException):
            statuses[i] = 0
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return statuses


def summarize_statuses(statuses):
    counts = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return " ".join(f"{counts[s]}x{s if s else 'none'}" for s in sorted(counts))


# ---- wrk ------------------------------------------------------------------------------

UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_latency(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise BenchError(f"wrk printed a latency I cannot read: {text!r}")
    return float(m.group(1)) * UNIT[m.group(2)]


def parse_wrk(out):
    """wrk --latency output -> dict(requests, seconds, rps, p50, p99, non2xx, socket_errors)."""
    r = {"non2xx": 0, "socket_errors": 0}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if not m:
        raise BenchError("wrk printed no request count:\n" + out[-500:])
    r["requests"] = int(m.group(1))
    r["seconds"] = float(m.group(2)) * UNIT[m.group(3)] / 1000
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        if not m:
            raise BenchError(f"wrk printed no {pct}th percentile:\n" + out[-500:])
        r["p" + pct] = parse_latency(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["socket_errors"] = sum(int(x) for x in m.groups())
    r["rps"] = (r["requests"] - r["non2xx"]) / r["seconds"] if r["seconds"] > 0 else 0.0
    return r


# ---- the bench ------------------------------------------------------------------------

class Compare:
    def __init__(self, build):
        self.build = build
        self.once_bin = os.path.join(build, "once")
        self.secs = env_int("BENCH_SECONDS", 10)
        self.reps = env_int("BENCH_REPS", 3)
        self.warm = env_int("BENCH_WARMUP", 2, minimum=0)
        self.wthreads = env_int("WRK_THREADS", 2)
        self.conns = env_int("WRK_CONNECTIONS", 64)
        self.othreads = env_int("ONCE_THREADS", 4)
        self.peer_workers = env_int("PEER_WORKERS", os.cpu_count() or 1)
        self.redis_fsync = os.environ.get("REDIS_FSYNC", "no")
        if self.redis_fsync not in ("no", "always"):
            print("bench/compare.py: REDIS_FSYNC must be `no` or `always`", file=sys.stderr)
            sys.exit(2)
        only = [c for c in os.environ.get("BENCH_ONLY", ",".join(ALL)).split(",") if c]
        bad = [c for c in only if c not in ALL]
        if bad:
            print(f"bench/compare.py: unknown contender(s) in BENCH_ONLY: {', '.join(bad)}", file=sys.stderr)
            sys.exit(2)
        self.only = [c for c in ALL if c in only]
        self.csv_path = os.environ.get("BENCH_CSV", os.path.join(ROOT, "bench/results/compare.csv"))
        self.deadline = time.monotonic() + env_int("ONCE_BENCH_TIMEOUT", 3600)
        self.procs = []  # (name, Popen)
        self.tmp = tempfile.mkdtemp(prefix="once-compare.",
                                    dir=os.environ.get("ONCE_BENCH_DIR") or os.environ.get("TMPDIR") or "/tmp")
        os.chmod(self.tmp, 0o755)  # scripts/pg runs PostgreSQL as an unprivileged user
        self.pg_dir = None
        self.slow = None
        self.run_id = f"c{int(time.time())}-{os.getpid()}"
        self.targets = {}  # contender -> list of (port, path prefix)
        self.body = ('{"data":"' + "x" * (1024 - 11) + '"}').encode()
        assert len(self.body) == 1024
        self.body_file = os.path.join(self.tmp, "body.json")
        with open(self.body_file, "wb") as f:
            f.write(self.body)

    # -- children --

    def spawn(self, name, argv, env=None, logname=None):
        logf = open(os.path.join(self.tmp, (logname or name) + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                             start_new_session=True)
        logf.close()
        self.procs.append((name, p))
        return p

    def log_tail(self, name, lines=5):
        try:
            with open(os.path.join(self.tmp, name + ".log"), "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def close(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if self.slow:
            self.slow.close()
        if self.pg_dir:
            subprocess.run(["bash", "scripts/pg", "stop", self.pg_dir], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_left(self):
        if time.monotonic() > self.deadline:
            raise BenchError("ONCE_BENCH_TIMEOUT reached; stopping")

    # -- start-up --

    def start_nginx(self, up_port, px_port, slow_port):
        with open(os.path.join(ROOT, "bench/nginx.conf.in")) as f:
            conf = f.read()
        prefix = os.path.join(self.tmp, "nginx")
        os.makedirs(prefix)
        conf = (conf.replace("@PREFIX@", prefix).replace("@UP_PORT@", str(up_port))
                .replace("@PROXY_PORT@", str(px_port)).replace("@NGINX_WORKERS@", "1"))
        # The proxy_pass server also fronts the slow upstream, for the concurrency test.
        anchor = "        location / {\n            proxy_pass http://bench_up;"
        if anchor not in conf:
            raise BenchError("bench/nginx.conf.in changed: cannot find its proxy_pass location")
        conf = conf.replace(anchor, (
            "        location /slow/ {\n"
            f"            proxy_pass http://127.0.0.1:{slow_port};\n"
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Connection \"\";\n"
            "        }\n") + anchor)
        path = os.path.join(prefix, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        p = self.spawn("nginx", [nginx, "-p", prefix, "-c", path, "-e", os.path.join(prefix, "error.log")])
        wait_http(up_port, "/", p, "nginx")
        wait_http(px_port, "/", p, "nginx proxy_pass")

    def start_redis(self, port):
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                "--dir", self.tmp, "--protected-mode", "yes"]
        if self.redis_fsync == "always":
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        p = self.spawn("redis", argv)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise BenchError("redis-server exited: " + self.log_tail("redis"))
            try:
                with socket.create_connection(("127.0.0.1", port), 1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.1)
        raise BenchError("redis-server did not answer PING")

    def start_peer(self, name, port, up_port, slow_port, redis_port):
        env = dict(os.environ, PORT=str(port), UPSTREAM=f"http://127.0.0.1:{up_port}",
                   SLOW_UPSTREAM=f"http://127.0.0.1:{slow_port}",
                   REDIS_URL=f"redis://127.0.0.1:{redis_port}",
                   PEER_WORKERS=str(self.peer_workers), NODE_ENV="production")
        p = self.spawn(name, ["node", os.path.join(ROOT, "bench/peers", name + ".js")], env=env)
        # Any path answers; a POST without a key is refused (400) or passed (200): both show it is up.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise BenchError(f"{name} exited: " + self.log_tail(name))
            try:
                post(port, "/ping", None, b"{}", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        raise BenchError(f"{name} did not start: " + self.log_tail(name))

    def start_once(self, name, store, port, up_port, slow_port):
        ini = os.path.join(self.tmp, name + ".ini")
        with open(ini, "w") as f:
            f.write(f"""; generated by bench/compare.py
[server]
listen = 127.0.0.1:{port}
store = {store}
threads = {self.othreads}

[upstream.bench]
url = http://127.0.0.1:{up_port}
key_required = yes

[upstream.slow]
url = http://127.0.0.1:{slow_port}
key_required = yes
timeout = 10s
""")
        p = self.spawn(name, [self.once_bin, "serve", "--config", ini])
        wait_http(port, "/healthz", p, name)
        wait_http(port, "/readyz", p, name)

    def start(self):
        (up_port, px_port, slow_port, redis_port, p_ni, p_pt, p_ei, o_sq, o_p1,
         o_p3a, o_p3b, o_p3c) = free_ports(12)
        self.slow = SlowUpstream(slow_port)
        self.start_nginx(up_port, px_port, slow_port)
        self.targets["direct"] = [(up_port, "/")]
        self.slow_direct = slow_port
        self.targets["proxy_pass"] = [(px_port, "/")]
        if any(c in PEERS for c in self.only):
            self.start_redis(redis_port)
        for name, port in (("node-idempotency", p_ni), ("powertools", p_pt), ("express-idempotency", p_ei)):
            if name in self.only:
                self.start_peer(name, port, up_port, slow_port, redis_port)
                self.targets[name] = [(port, "/")]
        if "once-sqlite" in self.only:
            self.start_once("once-sqlite", "sqlite:" + os.path.join(self.tmp, "once.db"), o_sq, up_port, slow_port)
            self.targets["once-sqlite"] = [(o_sq, "/v1/proxy/bench/")]
        if "once-pg-1" in self.only or "once-pg-3" in self.only:
            self.pg_dir = os.path.join(self.tmp, "pg")
            r = subprocess.run(["bash", "scripts/pg", "start", self.pg_dir], cwd=ROOT,
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.pg_dir = None
                raise BenchError("scripts/pg start failed: " + r.stderr.strip()[-300:])
            pg_url = r.stdout.strip().splitlines()[-1]
            if "once-pg-1" in self.only:
                self.start_once("once-pg-1", pg_url + "?once_schema=cmp1", o_p1, up_port, slow_port)
                self.targets["once-pg-1"] = [(o_p1, "/v1/proxy/bench/")]
            if "once-pg-3" in self.only:
                nodes = []
                for i, port in enumerate((o_p3a, o_p3b, o_p3c)):
                    self.start_once(f"once-pg-3.{i + 1}", pg_url + "?once_schema=cmp3", port, up_port, slow_port)
                    nodes.append((port, "/v1/proxy/bench/"))
                self.targets["once-pg-3"] = nodes

    # -- checks before the runs --

    def check_replay(self, name):
        """The replay key's first answer is recorded; the second must be its replay."""
        port, prefix = self.targets[name][0]
        key = f"{self.run_id}-{name}-replay"
        path = prefix + "bench"
        for attempt in ("first", "repeat"):
            status, headers, data = post(port, path, key, self.body)
            if status != 200:
                raise BenchError(f"{name}: the {attempt} request with the replay key answered {status}: {data[:200]!r}")
            if name in ONCE and attempt == "repeat" and headers.get("once-outcome") != "replayed":
                raise BenchError(f"{name}: the repeat answered Once-Outcome {headers.get('once-outcome')!r}, not replayed")
        return key

    # -- one measured run --

    def wrk(self, name, mode, seconds, key):
        """Runs wrk against every node of `name` at once; returns the merged figures."""
        self.time_left()
        nodes = self.targets[name]
        script = os.path.join(ROOT, "bench/wrk", "new_keys.lua" if mode == "new" else "replay.lua")
        procs = []
        per = max(1, self.conns // len(nodes))
        threads = self.wthreads if len(nodes) == 1 else 1
        for i, (port, prefix) in enumerate(nodes):
            env = dict(os.environ, ONCE_BENCH_BODY=self.body_file, ONCE_BENCH_KEY=key,
                       ONCE_BENCH_RUN=f"{self.run_id}-{name}-{time.monotonic_ns()}-{i}")
            argv = ["wrk", f"-t{threads}", f"-c{per}", f"-d{seconds}s", "--timeout", "5s", "--latency",
                    "-s", script, f"http://127.0.0.1:{port}{prefix}bench"]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          env=env, text=True))
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                raise BenchError(f"wrk against {name} did not finish")
            if p.returncode != 0:
                raise BenchError(f"wrk against {name} failed ({p.returncode}): {out[-300:]}")
            outs.append(parse_wrk(out))
        # Rates add up; for latency keep the worst node's percentile (a conservative merge).
        return {
            "rps": sum(o["rps"] for o in outs),
            "p50": max(o["p50"] for o in outs),
            "p99": max(o["p99"] for o in outs),
            "errors": sum(o["non2xx"] + o["socket_errors"] for o in outs),
            "requests": sum(o["requests"] for o in outs),
        }

    def run(self):
        self.start()
        contenders = self.only
        replay_keys = {c: self.check_replay(c) for c in contenders}
        log(f"bench/compare.py: {len(contenders)} contenders, {self.reps} × {self.secs} s per mode, "
            f"wrk -t{self.wthreads} -c{self.conns}, 1 KB POST, once threads {self.othreads}, "
            f"peer workers {self.peer_workers}, Redis fsync {self.redis_fsync}")
        results = {(c, m): [] for c in contenders for m in ("new", "replay")}
        if self.warm:
            for m in ("new", "replay"):
                for c in contenders:
                    self.wrk(c, m, self.warm, replay_keys[c])
        for rep in range(self.reps):
            for m in ("new", "replay"):
                for c in contenders:
                    r = self.wrk(c, m, self.secs, replay_keys[c])
                    results[(c, m)].append(r)
                    log(f"  rep {rep + 1}/{self.reps} {m:6} {c:20} {r['rps']:10.0f} req/s  "
                        f"p50 {r['p50']:7.2f} ms  p99 {r['p99']:7.2f} ms  errors {r['errors']}")
        correctness = {c: self.concurrency(c) for c in contenders}
        return results, correctness

    # -- the concurrency test --

    def concurrency(self, name):
        """BENCH_REPS rounds of 50 concurrent requests with one key in front of the 200 ms
        upstream; returns (worst upstream call count, answers of that round, all counts)."""
        rounds = []
        for rnd in range(self.reps):
            self.time_left()
            tag = f"{self.run_id}-{name}-{rnd}"
            ports = [port for port, _ in self.targets[name]]  # three nodes share the requests
            if name == "direct":
                ports, path, seen = [self.slow_direct], f"/slow/{tag}", f"/slow/{tag}"
            elif name in ONCE:
                # once forwards the path after /v1/proxy/slow/
                path, seen = f"/v1/proxy/slow/{tag}", f"/{tag}"
            else:
                path, seen = f"/slow/{tag}", f"/slow/{tag}"
            statuses = concurrent_same_key(ports, path, tag, self.body)
            time.sleep(0.5)  # a late forward still counts
            rounds.append((self.slow.calls(seen), summarize_statuses(statuses)))
            log(f"  concurrency {name:20} round {rnd + 1}: {rounds[-1][0]} upstream calls; answers {rounds[-1][1]}")
        worst = max(rounds, key=lambda r: r[0])
        return worst[0], worst[1], [r[0] for r in rounds]


# ---- the report -----------------------------------------------------------------------

def machine():
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    osname = platform.system()
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    text = f"{os.cpu_count()}-core {platform.machine()} ({model}) {osname}"
    return re.sub(r"[,\s]+", " ", text).strip()


def durability(name, redis_fsync):
    """(fsynced before forwarding, atomic reservation) for the table and the CSV."""
    if name == "direct":
        return "n/a", "n/a"
    if name == "proxy_pass":
        return "no", "no"
    if name in ("node-idempotency", "powertools"):
        return ("yes" if redis_fsync == "always" else "no"), "yes"
    if name == "express-idempotency":
        return "no", "no"
    return "yes", "yes"


def report(cmp, results, correctness):
    date = datetime.date.today().isoformat()
    mach = machine()
    rows = []
    med = {}
    for (c, m), runs in results.items():
        rps = [r["rps"] for r in runs]
        med[(c, m)] = statistics.median(rps)
    for m in ("new", "replay"):
        base = med.get(("proxy_pass", m))
        peers = [med[(c, m)] for c in PEERS if (c, m) in med]
        best_peer = max(peers) if peers else None
        for c in cmp.only:
            runs = results[(c, m)]
            rps = [r["rps"] for r in runs]
            fsynced, atomic = durability(c, cmp.redis_fsync)
            calls, answers, _ = correctness[c]
            rows.append({
                "contender": c, "mode": m,
                "rps_median": round(med[(c, m)], 1), "rps_min": round(min(rps), 1), "rps_max": round(max(rps), 1),
                "p50_ms": round(statistics.median(r["p50"] for r in runs), 2),
                "p99_ms": round(statistics.median(r["p99"] for r in runs), 2),
                "errors": sum(r["errors"] for r in runs),
                "ratio_proxy_pass": round(med[(c, m)] / base, 3) if base else "",
                "ratio_best_peer": round(med[(c, m)] / best_peer, 3) if best_peer else "",
                "upstream_calls_50": calls, "answers_50": answers,
                "durable_before_forward": fsynced, "atomic_reservation": atomic,
                "date": date, "machine": mach,
            })
    os.makedirs(os.path.dirname(cmp.csv_path), exist_ok=True)
    with open(cmp.csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)

    log("")
    log(f"measured {date} on {mach}")
    log(f"{cmp.reps} × {cmp.secs} s per contender and mode, alternating; wrk -t{cmp.wthreads} -c{cmp.conns}, "
        f"1 KB JSON POST; median (min–max) of the runs")
    hdr = (f"{'contender':20} {'mode':6} {'req/s':>8} {'(min–max)':>17} {'p50 ms':>7} {'p99 ms':>7} "
           f"{'×proxy':>7} {'×peer':>6} {'errors':>6} {'fsync':>5} {'atomic':>6} {'calls/50':>8}  answers")
    log(hdr)
    log("-" * len(hdr))
    for r in rows:
        log(f"{r['contender']:20} {r['mode']:6} {r['rps_median']:8.0f} "
            f"{'(' + format(r['rps_min'], '.0f') + '–' + format(r['rps_max'], '.0f') + ')':>17} "
            f"{r['p50_ms']:7.2f} {r['p99_ms']:7.2f} "
            f"{r['ratio_proxy_pass'] if r['ratio_proxy_pass'] == '' else format(r['ratio_proxy_pass'], '.2f'):>7} "
            f"{r['ratio_best_peer'] if r['ratio_best_peer'] == '' else format(r['ratio_best_peer'], '.2f'):>6} "
            f"{r['errors']:6d} {r['durable_before_forward']:>5} {r['atomic_reservation']:>6} "
            f"{r['upstream_calls_50']:8d}  {r['answers_50']}")
    log("")
    log(f"concurrency test: {CONCURRENT} concurrent requests with one key, upstream answering after "
        f"{SLOW_MS} ms, {cmp.reps} rounds; calls/50 is the worst round "
        f"({'; '.join(c + ' ' + '/'.join(map(str, correctness[c][2])) for c in cmp.only)})")
    log(f"CSV: {os.path.relpath(cmp.csv_path, ROOT)}")

    failed = False
    by = {(r["contender"], r["mode"]): r for r in rows}
    for c in ONCE:
        for m in ("new", "replay"):
            r = by.get((c, m))
            if r and r["errors"]:
                log(f"FAILED: {c} {m} answered {r['errors']} errors")
                failed = True
        if c in correctness and correctness[c][0] != 1:
            log(f"FAILED: {c} let {correctness[c][0]} of {CONCURRENT} concurrent same-key requests reach the upstream")
            failed = True
    if ("once-sqlite", "new") in by and by[("once-sqlite", "new")]["ratio_best_peer"] != "":
        n, rp = by[("once-sqlite", "new")]["ratio_best_peer"], by[("once-sqlite", "replay")]["ratio_best_peer"]
        log(f"goal: once (SQLite) ≥ 2.5× the best peer on new keys, durable before forwarding: "
            f"{n:.2f}× — {'met' if n >= 2.5 else 'NOT met'}")
        log(f"goal: once (SQLite) ≥ 5× the best peer on replays: {rp:.2f}× — {'met' if rp >= 5 else 'NOT met'}")
    return 1 if failed else 0


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build = sys.argv[1]
    if not os.access(os.path.join(build, "once"), os.X_OK):
        print(f"bench/compare.py: {build}/once not found; build first (make build)", file=sys.stderr)
        return 1
    for tool in ("wrk", "node", "redis-server"):
        if not shutil.which(tool):
            print(f"bench/compare.py: {tool} is missing (make bench-compare installs it)", file=sys.stderr)
            return 1
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    m = re.match(r"v(\d+)\.", node)
    if not m or int(m.group(1)) < 20:
        print(f"bench/compare.py: Node.js {node or '?'} is too old: the peers need >= 20 "
              "(@redis/client 6, required by Powertools; Debian 12's nodejs is 18)", file=sys.stderr)
        return 1
    if not os.path.isdir(os.path.join(ROOT, "bench/peers/node_modules")):
        print("bench/compare.py: bench/peers/node_modules is missing (cd bench/peers && npm ci)", file=sys.stderr)
        return 1
    cmp = Compare(build)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        results, correctness = cmp.run()
        return report(cmp, results, correctness)
    except BenchError as e:
        print(f"bench/compare.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/compare.py: interrupted", file=sys.stderr)
        return 130
    finally:
        cmp.close()


if __name__ == "__main__":
    sys.exit(main())
