#!/usr/bin/env bash
# bench/proxy.sh — the gateway part of `make bench`: once against nginx.
#
#   bench/proxy.sh [BUILD_DIR]        (BUILD_DIR holds the `once` binary; default build)
#
# Starts, as its own children and on 127.0.0.1 only:
#   - nginx (bench/nginx.conf.in): an upstream answering POST with 200
#     {"ok":true}, and a proxy_pass server in front of it (keepalive to the
#     upstream): a proxy hop with no guarantees, the floor;
#   - once serve on a fresh SQLite file, with one upstream `bench` pointing at
#     that nginx upstream, key_required = yes.
# Then runs wrk (1 KB JSON POST) against four targets, in turn, BENCH_REPS
# times (A B C D A B C D …), and prints the medians:
#   direct        the nginx upstream itself
#   proxy_pass    nginx proxy_pass -> upstream
#   once new      once, every request a new Idempotency-Key (bench/wrk/new_keys.lua):
#                 durable reserve, forward, durable record, answer
#   once replay   once, one key over and over (bench/wrk/replay.lua): answered from the ledger
# with the goals of the issue and correctness checks: once's own count of new
# keys (GET /metrics) against wrk's count of answers, rows in the store, and
# that once stops cleanly on SIGTERM. The output is also written to
# bench/out/proxy.txt (and once's log to bench/out/proxy-once.log if once ends
# during the runs).
#
# Under each run: CPU per process (from /proc; 100% = one core) and, for once,
# per thread, labelled by creation order (the threads are unnamed); and the
# store's side from /metrics: commits/s, mean batch, mean commit time and how
# much of the run the writer spent committing, mean upstream call time, and
# the WAL file's size and growth per new key.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS [10]  length of each measured run     BENCH_REPS [2]  repetitions
#   BENCH_WARMUP [1]    seconds of unmeasured warm-up per target (0: none)
#   WRK_THREADS [2]  WRK_CONNECTIONS [64]               ONCE_THREADS [2]  [server] threads
#   NGINX_WORKERS [auto]                                BENCH_ONLY [direct,proxy_pass,once-new,once-replay]
#   ONCE_BENCH_DIR [$TMPDIR or /tmp]  where the temporary directory (and the SQLite file) goes:
#                       a real disk, or fsync costs nothing
#   ONCE_BENCH_LOG [file]  once's request log: `file` (in the temporary directory) or `null`
#   ONCE_BENCH_TIMEOUT [900]  the whole script is stopped after this many seconds
#
# Exit status: 0 when the runs completed (goals met or not: it is a benchmark),
# 1 when something failed (a server did not start, wrong answers, wrk failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build=${1:-build}
once_bin="$build/once"
if [ ! -x "$once_bin" ]; then
  echo "bench/proxy.sh: $once_bin not found; build first (e.g. ninja -C $build once)" >&2
  exit 1
fi

secs=${BENCH_SECONDS:-10}
reps=${BENCH_REPS:-2}
warm=${BENCH_WARMUP:-1}
wthreads=${WRK_THREADS:-2}
conns=${WRK_CONNECTIONS:-64}
othreads=${ONCE_THREADS:-2}
nworkers=${NGINX_WORKERS:-auto}
only=",${BENCH_ONLY:-direct,proxy_pass,once-new,once-replay},"
logmode=${ONCE_BENCH_LOG:-file}
deadline=$((SECONDS + ${ONCE_BENCH_TIMEOUT:-900}))
for v in "$secs" "$reps" "$warm" "$wthreads" "$conns" "$othreads"; do
  case $v in '' | *[!0-9]*)
    echo "bench/proxy.sh: BENCH_SECONDS, BENCH_REPS, BENCH_WARMUP, WRK_*, ONCE_THREADS must be integers" >&2
    exit 1
    ;;
  esac
done
[ "$reps" -ge 1 ] && [ "$secs" -ge 1 ] || { echo "bench/proxy.sh: BENCH_REPS and BENCH_SECONDS must be >= 1" >&2; exit 1; }

if ! command -v wrk >/dev/null || { ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; }; then
  bash scripts/deps --bench # installs wrk and nginx (as root)
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
for t in wrk curl "$nginx_bin"; do
  command -v "$t" >/dev/null || { echo "bench/proxy.sh: $t is missing (bash scripts/deps --bench)" >&2; exit 1; }
done

# ---- the temporary directory, the children, and their end -----------------------------

tmp=$(mktemp -d "${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}/once-proxy-bench.XXXXXX")
nginx_pid=
once_pid=
wrk_pid=

stop_pid() { # pid signal: signal, wait up to 10 s, then SIGKILL
  local pid=$1 sig=$2 i
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$wrk_pid" INT
  stop_pid "$once_pid" TERM
  stop_pid "$nginx_pid" TERM # the master takes its workers down
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench/proxy.sh: interrupted" >&2; exit 130' INT TERM

die() {
  echo "bench/proxy.sh: $*" >&2
  exit 1
}

time_left() {
  [ "$SECONDS" -lt "$deadline" ] || die "ONCE_BENCH_TIMEOUT reached; stopping"
}

# Three free TCP ports on 127.0.0.1 (the kernel picks them).
read -r up_port px_port once_port < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()')

# The 1 KB body, shared by curl and wrk (ONCE_BENCH_BODY).
body="$tmp/body.json"
printf '{"data":"%s"}' "$(head -c $((1024 - 11)) /dev/zero | tr '\0' x)" >"$body"
[ "$(stat -c %s "$body")" -eq 1024 ] || die "body is not 1024 bytes"
export ONCE_BENCH_BODY="$body"
run_id="b$(date +%s)-$$-$RANDOM"

# ---- nginx ----------------------------------------------------------------------------

mkdir -p "$tmp/nginx"
sed -e "s#@PREFIX@#$tmp/nginx#g" -e "s#@UP_PORT@#$up_port#g" -e "s#@PROXY_PORT@#$px_port#g" \
  -e "s#@NGINX_WORKERS@#$nworkers#g" bench/nginx.conf.in >"$tmp/nginx/nginx.conf"
"$nginx_bin" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log" \
  >"$tmp/nginx/stdout.log" 2>&1 &
nginx_pid=$!

wait_http() { # url what pid
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$3" 2>/dev/null || return 1
    if curl -s -o /dev/null --max-time 1 "$1"; then return 0; fi
    sleep 0.1
  done
  return 1
}
wait_http "http://127.0.0.1:$up_port/" nginx "$nginx_pid" ||
  die "nginx did not start: $(tail -n 5 "$tmp/nginx/error.log" "$tmp/nginx/stdout.log" 2>/dev/null)"
wait_http "http://127.0.0.1:$px_port/" nginx "$nginx_pid" || die "nginx proxy_pass did not answer"

# ---- once ------------------------------------------------------------------------------

db="$tmp/once.db"
cat >"$tmp/once.ini" <<EOF
; generated by bench/proxy.sh
[server]
listen = 127.0.0.1:$once_port
store = sqlite:$db
threads = $othreads

[upstream.bench]
url = http://127.0.0.1:$up_port
key_required = yes
EOF
case $logmode in
  null) once_log=/dev/null ;;
  *) once_log="$tmp/once.log" ;;
esac
"$once_bin" serve --config "$tmp/once.ini" 2>"$once_log" >/dev/null &
once_pid=$!
wait_http "http://127.0.0.1:$once_port/healthz" once "$once_pid" ||
  die "once did not start: $(tail -n 5 "$tmp/once.log" 2>/dev/null)"
once_url="http://127.0.0.1:$once_port/v1/proxy/bench/"

# The request once forwards: answered 200 by the upstream, recorded, then replayed.
outcome_of() { # key -> "status outcome"
  curl -s -o /dev/null -D - --max-time 10 -X POST -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $1" --data-binary "@$body" "$once_url" |
    awk 'tolower($1) == "once-outcome:" { o = $2 } NR == 1 { s = $2 } END { gsub(/\r/, "", o); print s, o }'
}
replay_key="$run_id-replay"
got=$(outcome_of "$replay_key")
[ "$got" = "200 completed" ] || die "the first request with a new key answered '$got', not '200 completed'"
got=$(outcome_of "$replay_key")
[ "$got" = "200 replayed" ] || die "the retry answered '$got', not '200 replayed'"
export ONCE_BENCH_KEY="$replay_key"

metric() { # outcome -> once_actions_total{scope="bench",outcome=...}
  curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics" |
    awk -v want="once_actions_total{scope=\"bench\",outcome=\"$1\"}" '$1 == want { v = $2 } END { print v + 0 }'
}

# new replayed in_flight commit_sum commit_count batch_sum batch_count upstream_sum upstream_count
metrics_snap() {
  curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics" | awk '
    $1 == "once_actions_total{scope=\"bench\",outcome=\"new\"}" { n = $2 }
    $1 == "once_actions_total{scope=\"bench\",outcome=\"replayed\"}" { r = $2 }
    $1 == "once_actions_total{scope=\"bench\",outcome=\"in_flight\"}" { f = $2 }
    $1 == "once_store_commit_seconds_sum" { cs = $2 } $1 == "once_store_commit_seconds_count" { cc = $2 }
    $1 == "once_group_commit_batch_size_sum" { bs = $2 } $1 == "once_group_commit_batch_size_count" { bc = $2 }
    $1 == "once_upstream_seconds_sum{scope=\"bench\"}" { us = $2 } $1 == "once_upstream_seconds_count{scope=\"bench\"}" { uc = $2 }
    END { print n + 0, r + 0, f + 0, cs + 0, cc + 0, bs + 0, bc + 0, us + 0, uc + 0 }'
}
wal_bytes() { stat -c %s "$db-wal" 2>/dev/null || echo 0; }

# ---- CPU accounting (from /proc: ticks of user + system time) ---------------------------

hz=$(getconf CLK_TCK)
proc_ticks() { # pid... -> summed utime+stime of the processes (all their threads)
  local p s=0 t
  for p in "$@"; do
    t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    s=$((s + t))
  done
  echo "$s"
}
nginx_workers() { pgrep -P "$nginx_pid" | tr '\n' ' '; }
thread_ticks() { # -> "tid ticks" per thread of once, by tid
  local f
  for f in /proc/"$once_pid"/task/*/stat; do
    awk '{ tid = $1; sub(/^.*\) /, ""); print tid, $12 + $13 }' "$f" 2>/dev/null || true
  done | sort -n
}
# once's threads are unnamed; they are created in this order (src/server/server.c,
# src/store/sqlite_store.c): main, checkpointer, store writer, outbound (curl),
# waiters, worker, the MHD pool (threads), the background loop.
thread_label() { # index (0-based, by tid) -> name
  local i=$1
  local names=(main checkpointer writer outbound waiters worker)
  if [ "$i" -lt 6 ]; then echo "${names[$i]}"
  elif [ "$i" -lt $((6 + othreads)) ]; then echo "http$((i - 5))"
  elif [ "$i" -eq $((6 + othreads)) ]; then echo loop
  else echo "t$i"; fi
}

# ---- the runs --------------------------------------------------------------------------

to_ms() { # wrk's 712.00us / 1.02ms / 1.50s / 2.00m -> milliseconds
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
    else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
    else printf "nan" }'
}

declare -A RPS P50 P99
failed=0
out="$tmp/wrk.txt"

run_one() { # target seconds record(0|1) rep
  local target=$1 d=$2 record=$3 rep=$4 url script
  case $target in
    direct) url="http://127.0.0.1:$up_port/" script=bench/wrk/post.lua ;;
    proxy_pass) url="http://127.0.0.1:$px_port/" script=bench/wrk/post.lua ;;
    once-new) url=$once_url script=bench/wrk/new_keys.lua ;;
    once-replay) url=$once_url script=bench/wrk/replay.lua ;;
  esac
  time_left
  local m0="" wal0=0
  if [ "$record" = 1 ] && [ "${target#once-}" != "$target" ]; then
    m0=$(metrics_snap) wal0=$(wal_bytes)
  fi
  local o0 n0 th0 idle0 tot0 a b c i e f g h
  read -r _ a b c i e f g h _ </proc/stat
  tot0=$((a + b + c + i + e + f + g + h)) idle0=$((i + e))
  o0=$(proc_ticks "$once_pid"); n0=$(proc_ticks $(nginx_workers))
  th0=$(thread_ticks)
  ONCE_BENCH_RUN="$run_id-$target-$rep" timeout --signal=INT --kill-after=5 $((d + 30)) \
    wrk -t"$wthreads" -c"$conns" -d"${d}s" --timeout 5s --latency -s "$script" "$url" >"$out" 2>&1 &
  wrk_pid=$!
  local rc=0
  wait "$wrk_pid" || rc=$?
  wrk_pid=
  local o1 n1 th1 idle1 tot1
  o1=$(proc_ticks "$once_pid"); n1=$(proc_ticks $(nginx_workers))
  th1=$(thread_ticks)
  read -r _ a b c i e f g h _ </proc/stat
  tot1=$((a + b + c + i + e + f + g + h)) idle1=$((i + e))
  [ "$rc" -eq 0 ] || die "wrk failed on $target (exit $rc): $(tail -n 5 "$out")"
  [ "$record" = 1 ] || return 0

  local rps p50 p99 n non2xx errs
  rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
  p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$out")")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$out")")
  n=$(awk '/ requests in / { print $1 }' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
  errs=$(awk '/Socket errors:/ { sub(/^.*Socket errors: /, ""); print }' "$out")
  [ -n "$rps" ] && [ -n "$n" ] || die "cannot read wrk's output for $target: $(cat "$out")"
  RPS[$target]+="$rps "
  P50[$target]+="$p50 "
  P99[$target]+="$p99 "
  printf '  run %d %-12s %10.0f req/s  p50 %7.2f ms  p99 %7.2f ms  (%s requests%s%s)\n' "$rep" "$target" "$rps" \
    "$p50" "$p99" "$n" "${non2xx:+, $non2xx non-2xx}" "${errs:+, socket errors: $errs}"
  if [ -n "$non2xx" ] || [ -n "$errs" ]; then failed=1; fi

  # Where the CPU went during the run (2 cores = 200%).
  local span=$((tot1 - tot0)) busy
  busy=$(awk -v s="$span" -v i="$((idle1 - idle0))" 'BEGIN { printf "%.0f", s ? 100 * (s - i) / s : 0 }')
  local cpu
  cpu=$(awk -v o=$((o1 - o0)) -v ng=$((n1 - n0)) -v hz="$hz" -v d="$d" \
    'BEGIN { printf "once %.0f%%, nginx %.0f%%", 100 * o / hz / d, 100 * ng / hz / d }')
  local line="      cpu (100% = one core): $cpu; whole machine $((busy * $(nproc)))% of $(($(nproc) * 100))% (wrk, other work)"
  if [ "${target#once-}" != "$target" ]; then
    local per
    per=$(awk -v hz="$hz" -v d="$d" 'NR == FNR { t0[$1] = $2; next } { printf "%s %.0f\n", $1, 100 * ($2 - t0[$1]) / hz / d }' \
      <(echo "$th0") <(echo "$th1"))
    local i=0 parts="" tid pct nth
    nth=$(wc -l <<<"$per")
    while read -r tid pct; do
      # the labels hold for this configuration only (7 threads + the MHD pool + the loop)
      if [ "$nth" -eq $((othreads + 7)) ]; then parts+="$(thread_label $i) ${pct}%, "; else parts+="$tid ${pct}%, "; fi
      i=$((i + 1))
    done <<<"$per"
    line+=$'\n'"      once threads: ${parts%, }"
  fi
  echo "$line"
  [ -n "$m0" ] || return 0

  sleep 0.5 # the calls in flight when wrk stopped are done by now
  local m1 wal1
  m1=$(metrics_snap) wal1=$(wal_bytes)
  # store: commits, their mean batch and duration; upstream call time; WAL growth
  awk -v a="$m0" -v b="$m1" -v w0="$wal0" -v w1="$wal1" -v d="$d" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    cc = y[5] - x[5]; bc = y[7] - x[7]; uc = y[9] - x[9]; ops = y[6] - x[6]; nw = y[1] - x[1]
    printf "      store: %d commits/s, mean batch %.1f ops, mean commit %.2f ms (writer busy %.0f%%)",
      cc / d, bc ? ops / bc : 0, cc ? 1000 * (y[4] - x[4]) / cc : 0, 100 * (y[4] - x[4]) / d
    if (uc) printf "; upstream call mean %.2f ms", 1000 * (y[8] - x[8]) / uc
    printf "; WAL %.0f MB", w1 / 1048576
    if (nw > 0 && w1 > w0) printf " (+%.1f KB per new key)", (w1 - w0) / 1024 / nw
    printf "\n" }'
  read -r new0 rep0 if0 _ <<<"$m0"
  read -r new1 rep1 if1 _ <<<"$m1"

  if [ "$target" = once-new ]; then
    local grew=$((new1 - new0))
    local ok=no
    [ "$grew" -ge "$n" ] && [ "$grew" -le $((n + conns)) ] && ok=yes
    [ "$ok" = yes ] || failed=1
    echo "check: run $rep once new keys: wrk counted $n answers, once_actions_total{outcome=\"new\"} grew by $grew (within [answers, answers + connections]: $ok)"
  elif [ "$target" = once-replay ]; then
    local grew=$((rep1 - rep0)) inf=$((if1 - if0))
    local ok=no
    [ "$grew" -ge "$n" ] && [ "$grew" -le $((n + conns)) ] && [ "$inf" -eq 0 ] && ok=yes
    [ "$ok" = yes ] || failed=1
    echo "check: run $rep once replays: wrk counted $n answers, once_actions_total{outcome=\"replayed\"} grew by $grew, in_flight by $inf (ok: $ok)"
  fi
}

targets=()
for t in direct proxy_pass once-new once-replay; do
  case $only in *",$t,"*) targets+=("$t") ;; esac
done
[ ${#targets[@]} -gt 0 ] || die "BENCH_ONLY selects no target (direct, proxy_pass, once-new, once-replay)"

mkdir -p bench/out
report="$tmp/report.txt"
{
  echo "# bench/proxy.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores," \
    "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet 2>/dev/null || echo '+dirty')"
  echo "# wrk -t$wthreads -c$conns -d${secs}s --latency, 1024-byte JSON POST; once [server] threads = $othreads;" \
    "nginx $("$nginx_bin" -v 2>&1 | sed 's#.*/##'), worker_processes $nworkers; $reps repetitions, medians below"
  echo "# store: $(df -T "$tmp" | awk 'NR == 2 { print $2 }') under ${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}; once log: $logmode"
} | tee "$report"
if [ "$(stat -f -c %T "$tmp")" = tmpfs ]; then
  echo "# warning: the store is on tmpfs, where fsync costs nothing: set ONCE_BENCH_DIR to a real disk" | tee -a "$report"
fi

# A run that fails stops the benchmark; if once is gone, say how it ended and
# keep its log (bench/out/proxy-once.log) for the post-mortem.
run_failed() {
  if [ -n "$once_pid" ] && ! kill -0 "$once_pid" 2>/dev/null; then
    local st=0
    wait "$once_pid" || st=$?
    once_pid=
    local how="exit status $st"
    [ "$st" -gt 128 ] && how="killed by signal $((st - 128)) ($(kill -l $((st - 128)) 2>/dev/null))"
    echo "bench/proxy.sh: once ended during the benchmark: $how; last lines of its log:" | tee -a "$report" >&2
    grep -v '"route"' "$once_log" 2>/dev/null | tail -n 5 | tee -a "$report" >&2
    [ "$once_log" = /dev/null ] || cp "$once_log" bench/out/proxy-once.log
    cp "$report" bench/out/proxy.txt
  fi
  exit 1
}
if [ "$warm" -gt 0 ]; then
  for t in "${targets[@]}"; do (run_one "$t" "$warm" 0 0) || run_failed; done
fi
for ((rep = 1; rep <= reps; rep++)); do
  for t in "${targets[@]}"; do
    run_one "$t" "$secs" 1 "$rep" | tee -a "$report" || run_failed
    kill -0 "$once_pid" 2>/dev/null || run_failed
  done
done
# run_one ran in a pipeline (a subshell): collect what it measured from the report.
for t in "${targets[@]}"; do
  RPS[$t]=$(awk -v t="$t" '$1 == "run" && $3 == t { printf "%s ", $4 }' "$report")
  P50[$t]=$(awk -v t="$t" '$1 == "run" && $3 == t { printf "%s ", $7 }' "$report")
  P99[$t]=$(awk -v t="$t" '$1 == "run" && $3 == t { printf "%s ", $10 }' "$report")
done
grep -q '^check: .*: no)$\|(ok: no)$\|non-2xx\|socket errors' "$report" && failed=1

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A MR M50 M99
for t in "${targets[@]}"; do
  MR[$t]=$(median <<<"${RPS[$t]}")
  M50[$t]=$(median <<<"${P50[$t]}")
  M99[$t]=$(median <<<"${P99[$t]}")
done
base=${MR[proxy_pass]:-}
ratio() { [ -n "$base" ] && awk -v a="$1" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }' || echo "-"; }
label() {
  case $1 in
    direct) echo "direct (nginx return 200)" ;;
    proxy_pass) echo "nginx proxy_pass" ;;
    once-new) echo "once, new keys" ;;
    once-replay) echo "once, replays" ;;
  esac
}
{
  echo
  printf '%-27s %10s %9s %9s %14s\n' target "req/s" "p50 ms" "p99 ms" "x proxy_pass"
  for t in "${targets[@]}"; do
    printf '%-27s %10.0f %9.2f %9.2f %14s\n' "$(label "$t")" "${MR[$t]}" "${M50[$t]}" "${M99[$t]}" "$(ratio "${MR[$t]}")"
  done
  echo
  yn() { awk -v c="$1" 'BEGIN { print (c ? "yes" : "no") }'; }
  if [ -n "$base" ] && [ -n "${MR[once-replay]:-}" ]; then
    r=$(ratio "${MR[once-replay]}")
    echo "goal: replays >= 0.8x proxy_pass: $(yn "$(awk -v r="$r" 'BEGIN { print (r >= 0.8) }')") (${r}x)"
  fi
  if [ -n "$base" ] && [ -n "${MR[once-new]:-}" ]; then
    r=$(ratio "${MR[once-new]}")
    echo "goal: new keys >= 0.3x proxy_pass: $(yn "$(awk -v r="$r" 'BEGIN { print (r >= 0.3) }')") (${r}x)"
  fi
  if [ -n "${M99[once-new]:-}" ]; then
    echo "goal: new keys p99 < 20 ms: $(yn "$(awk -v p="${M99[once-new]}" 'BEGIN { print (p < 20) }')") ($(printf '%.2f' "${M99[once-new]}") ms)"
  fi
} | tee -a "$report"

if [ -n "${MR[once-new]:-}" ] || [ -n "${MR[once-replay]:-}" ]; then
  {
    echo
    grep '^check: ' "$report" || true # printed by the runs above; repeated here
    rows=$(sqlite3 "file:$db?mode=ro" "SELECT count(*) FROM actions" 2>/dev/null || echo "?")
    completed=$(sqlite3 "file:$db?mode=ro" "SELECT count(*) FROM actions WHERE state = 'completed'" 2>/dev/null || echo "?")
    total_new=$(metric new)
    ok=no
    [ "$rows" = "$total_new" ] && [ "$completed" = "$rows" ] && ok=yes
    echo "check: rows in the store: $rows ($completed completed); once_actions_total{outcome=\"new\"} since start: $total_new (equal, all completed: $ok)"
  } | tee -a "$report.checks"
  cat "$report.checks" >>"$report"
  grep -q 'all completed: no)$' "$report.checks" && failed=1
fi

# once must stop on SIGTERM (drain, then exit 0) — not be killed by the trap.
if [ -n "$once_pid" ]; then
  kill -TERM "$once_pid" 2>/dev/null || true
  stopped=no
  for ((i = 0; i < 150; i++)); do
    kill -0 "$once_pid" 2>/dev/null || { stopped=yes; break; }
    sleep 0.1
  done
  st=killed
  if [ "$stopped" = yes ]; then st=0; wait "$once_pid" || st=$?; once_pid=; fi
  echo "check: once stopped within 15 s of SIGTERM: $stopped (exit status $st)" | tee -a "$report"
  [ "$stopped" = yes ] && [ "$st" = 0 ] || { failed=1; grep -v '"route"' "$once_log" 2>/dev/null | tail -n 3 | tee -a "$report"; }
fi

cp "$report" bench/out/proxy.txt
echo "bench/proxy.sh: output in bench/out/proxy.txt"
if [ "$failed" -ne 0 ]; then
  echo "bench/proxy.sh: some answers were wrong or a check failed (see above)" >&2
  exit 1
fi
