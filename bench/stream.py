#!/usr/bin/python3
"""bench/stream.py — streamed answers through once (issue 15): time to first byte of an
event stream, direct and through once, and once's CPU per streamed MB against its CPU per
MB of the same answers buffered whole.

    bench/stream.py [BUILD_DIR]          (default build; `make bench` runs it)

Starts, as its own children on 127.0.0.1: the fake provider (tests/fakes/provider.py) and
once serve on a fresh SQLite file with one upstream. Then, in turn:

  ttfb    BENCH_TTFB_N [40] streamed chat completions (6 frames, 100 ms apart after the
          first), each a new Idempotency-Key, alternately direct to the provider and
          through once; the time from sending the request to the first body byte, median
          and p90, and the ratio once / direct. The gap is where a buffering proxy would
          add 500 ms; once adds a durable reservation.
  cpu     BENCH_MB [64] MB in streams of 4 MiB (256 frames of 16 KiB), through once, and
          the same bytes as ordinary (buffered) answers of 4 MiB: once's CPU time
          (user + system, /proc) per MB each way, and the ratio streamed / buffered.

Bounded: every request has a 60 s timeout and the script stops after BENCH_TIMEOUT [600] s.
Output goes to stdout and bench/out/stream.txt.
"""
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else "build")
ONCE = (ROOT / BUILD / "once") if not BUILD.is_absolute() else BUILD / "once"
TTFB_N = int(os.environ.get("BENCH_TTFB_N", "40"))
MB = int(os.environ.get("BENCH_MB", "64"))
DEADLINE = time.monotonic() + int(os.environ.get("BENCH_TIMEOUT", "600"))
OUT = ROOT / "bench" / "out"
TICK = os.sysconf("SC_CLK_TCK")

lines = []


def say(s=""):
    print(s, flush=True)
    lines.append(s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_http(url, proc, what):
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except Exception:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start")


def first_byte(host, port, path, body, headers):
    """Sends a POST on a fresh connection; returns (seconds to the first body byte,
    total body bytes). Reads the chunked body to its end."""
    if time.monotonic() > DEADLINE:
        raise SystemExit("bench/stream.py: BENCH_TIMEOUT passed")
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    req = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\n{head}Connection: close\r\n\r\n").encode() + data
    s = socket.create_connection((host, port), timeout=60)
    t0 = time.perf_counter()
    s.sendall(req)
    buf, t_first = b"", None
    while True:
        piece = s.recv(262144)
        if not piece:
            break
        buf += piece if t_first is None or len(buf) < 65536 else b""
        if t_first is None:
            i = buf.find(b"\r\n\r\n")
            if i >= 0 and len(buf) > i + 4:
                t_first = time.perf_counter() - t0
    s.close()
    if not buf.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"bench/stream.py: unexpected answer: {buf[:300]!r}")
    return t_first


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    if not ONCE.exists():
        raise SystemExit(f"bench/stream.py: no {ONCE} (make build)")
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="once-bench-stream.", dir=os.environ.get("ONCE_BENCH_DIR")))
    prov = subprocess.Popen([sys.executable, str(ROOT / "tests/fakes/provider.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    m = re.match(r"listening on (\S+):(\d+)", prov.stdout.readline())
    pport = int(m.group(2))
    oport = free_port()
    (tmp / "once.ini").write_text(
        f"[server]\nlisten = 127.0.0.1:{oport}\nstore = sqlite:{tmp}/once.db\nthreads = 2\n\n"
        f"[upstream.llm]\nurl = http://127.0.0.1:{pport}\ntimeout = 60s\nmax_response = 8MiB\n")
    log = open(tmp / "once.log", "w")
    once = subprocess.Popen([str(ONCE), "serve", "--config", str(tmp / "once.ini")], stderr=log,
                            stdout=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{oport}/healthz", once, "once")
        say(f"bench/stream.py — {time.strftime('%Y-%m-%d %H:%M:%S')}, load {open('/proc/loadavg').read().split()[0]}, "
            f"store on {tmp}")
        chat = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        gap = {"X-Fake-Stream-Frames": "6", "X-Fake-Stream-Gap-Ms": "100"}
        direct, through = [], []
        for i in range(TTFB_N):
            direct.append(first_byte("127.0.0.1", pport, "/v1/chat/completions", chat, gap))
            through.append(first_byte("127.0.0.1", oport, "/v1/proxy/llm/v1/chat/completions", chat,
                                      dict(gap, **{"Idempotency-Key": f"ttfb-{os.getpid()}-{i}"})))
        say("")
        say(f"time to first byte, {TTFB_N} streamed chat completions each way (6 frames, 100 ms apart):")
        say(f"  {'':10} {'median ms':>10} {'p90 ms':>10}")
        for name, xs in (("direct", direct), ("once", through)):
            say(f"  {name:10} {statistics.median(xs) * 1e3:10.2f} {pct(xs, 0.9) * 1e3:10.2f}")
        say(f"  once / direct (median): {statistics.median(through) / statistics.median(direct):.2f}; "
            f"once adds {(statistics.median(through) - statistics.median(direct)) * 1e3:.2f} ms "
            f"(a buffering proxy would add the 500 ms of the stream)")

        n = max(1, MB // 4)
        big = {"X-Fake-Stream-Frames": "256", "X-Fake-Stream-Frame-Bytes": "16384"}
        cpu = {}
        for mode in ("streamed", "buffered"):
            c0 = cpu_seconds(once.pid)
            t0 = time.monotonic()
            for i in range(n):
                if mode == "streamed":
                    first_byte("127.0.0.1", oport, "/v1/proxy/llm/v1/chat/completions", chat,
                               dict(big, **{"Idempotency-Key": f"mb-{os.getpid()}-{i}"}))
                else:
                    first_byte("127.0.0.1", oport, "/v1/proxy/llm/v1/charges", {"n": i},
                               {"X-Fake-Body-Size": str(4 * 1024 * 1024),
                                "Idempotency-Key": f"buf-{os.getpid()}-{i}"})
            cpu[mode] = (cpu_seconds(once.pid) - c0, time.monotonic() - t0)
        say("")
        say(f"once's CPU per MB relayed, {n} answers of 4 MiB each way ({n * 4} MiB):")
        for mode, (c, wall) in cpu.items():
            say(f"  {mode:10} {c * 1e3 / (n * 4):8.2f} ms CPU/MiB   ({n * 4 / wall:6.1f} MiB/s end to end)")
        say(f"  streamed / buffered: {cpu['streamed'][0] / max(cpu['buffered'][0], 1e-9):.2f}")
    finally:
        once.send_signal(signal.SIGTERM)
        rc = once.wait(30)
        prov.terminate()
        prov.wait(10)
        say(f"\nonce stopped on SIGTERM with status {rc}")
        (OUT / "stream.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
