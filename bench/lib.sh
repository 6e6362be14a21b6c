# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154 # globals shared with the scripts that source this file
# bench/lib.sh — the scaffolding that bench/proxy.sh, bench/hooks.sh and
# bench/pg.sh share, so that each of them holds only what it measures:
# stopping its children, dying with its name, its time budget, free ports,
# waiting for a server, wrk and nginx, the 1 KB body, once and nginx as
# children, CPU from /proc, once's /metrics, wrk's output, medians, and the
# report (bench/out/NAME.txt): its header, the runs' loop and its end.
#
# Sourced, not run: `. "$root/bench/lib.sh"` once the script is in $root.
# The script sets prog (its name in messages, e.g. prog=bench/proxy.sh; the
# report is bench/out/proxy.txt) and, for the functions that use them, the
# globals it already has: deadline, tmp, report, failed, othreads, logmode,
# once_bin, once_pid, once_log, nginx_bin, db, targets, warm, reps, secs and
# run_one. Functions that start a child set its pid (nginx_pid, once_pid).

# Ticks per second of the CPU times in /proc (proc_ticks, thread_ticks).
hz=$(getconf CLK_TCK)

# ---- the script's end and its children ---------------------------------------------------

# Errors name the script that failed, not this file.
die() {
  echo "$prog: $*" >&2
  exit 1
}

# Every script has a budget for the whole run (ONCE_BENCH_TIMEOUT), checked before each run.
time_left() {
  [ "$SECONDS" -lt "$deadline" ] || die "ONCE_BENCH_TIMEOUT reached; stopping"
}

# Children must end with the script: pid signal -> signal, wait up to 10 s, then SIGKILL.
stop_pid() {
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

# ---- servers -------------------------------------------------------------------------------

# Ports the kernel picks, so that nothing else on the machine collides: n -> n free TCP ports on 127.0.0.1.
free_ports() {
  /usr/bin/python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()' "$1"
}

# A server is up once it answers HTTP: url pid [tries, 0.1 s apart; 100] -> 1 if pid ended or it never answered.
wait_http() {
  local i
  for ((i = 0; i < ${3:-100}; i++)); do
    kill -0 "$2" 2>/dev/null || return 1
    if curl -s -o /dev/null --max-time 1 "$1"; then return 0; fi
    sleep 0.1
  done
  return 1
}

# wrk and nginx come from scripts/deps when missing; sets nginx_bin.
need_wrk_nginx() {
  local t
  if ! command -v wrk >/dev/null || { ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; }; then
    bash scripts/deps --bench # installs wrk and nginx (as root)
  fi
  nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
  for t in wrk curl "$nginx_bin"; do
    command -v "$t" >/dev/null || die "$t is missing (bash scripts/deps --bench)"
  done
}

# The upstream (200 {"ok":true}) and a proxy_pass in front of it, from
# bench/nginx.conf.in in $tmp/nginx: up-port proxy-port workers -> sets nginx_pid.
start_nginx() {
  mkdir -p "$tmp/nginx"
  sed -e "s#@PREFIX@#$tmp/nginx#g" -e "s#@UP_PORT@#$1#g" -e "s#@PROXY_PORT@#$2#g" \
    -e "s#@NGINX_WORKERS@#$3#g" bench/nginx.conf.in >"$tmp/nginx/nginx.conf"
  "$nginx_bin" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log" \
    >"$tmp/nginx/stdout.log" 2>&1 &
  nginx_pid=$!
}

# once serve on $tmp/once.ini, its log as ONCE_BENCH_LOG says: port -> sets
# once_log and once_pid; dies if /healthz does not answer.
start_once() {
  case $logmode in
    null) once_log=/dev/null ;;
    *) once_log="$tmp/once.log" ;;
  esac
  "$once_bin" serve --config "$tmp/once.ini" 2>"$once_log" >/dev/null &
  once_pid=$!
  wait_http "http://127.0.0.1:$1/healthz" "$once_pid" ||
    die "once did not start: $(tail -n 5 "$tmp/once.log" 2>/dev/null)"
}

# The 1 KB JSON body, the same for curl and wrk (ONCE_BENCH_BODY): sets body.
make_body() {
  body="$tmp/body.json"
  printf '{"data":"%s"}' "$(head -c $((1024 - 11)) /dev/zero | tr '\0' x)" >"$body"
  [ "$(stat -c %s "$body")" -eq 1024 ] || die "body is not 1024 bytes"
  export ONCE_BENCH_BODY="$body"
}

# ---- once's answers and counts -------------------------------------------------------------

# The request once forwards, to check it before the runs: url key -> "status outcome".
outcome_of() {
  curl -s -o /dev/null -D - --max-time 10 -X POST -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $2" --data-binary "@$body" "$1" |
    awk 'tolower($1) == "once-outcome:" { o = $2 } NR == 1 { s = $2 } END { gsub(/\r/, "", o); print s, o }'
}

# once's own count, against wrk's: port outcome -> once_actions_total{scope="bench",outcome=...}.
actions_metric() {
  curl -s --max-time 10 "http://127.0.0.1:$1/metrics" |
    awk -v want="once_actions_total{scope=\"bench\",outcome=\"$2\"}" '$1 == want { v = $2 } END { print v + 0 }'
}

# The SQLite store's WAL, for its growth per new key or event: -> bytes of $db-wal.
wal_bytes() { stat -c %s "$db-wal" 2>/dev/null || echo 0; }

# ---- CPU accounting (from /proc: ticks of user + system time) ---------------------------

# CPU of processes over a run: pid... -> summed utime+stime of the processes (all their threads).
proc_ticks() {
  local p s=0 t
  for p in "$@"; do
    t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    s=$((s + t))
  done
  echo "$s"
}

# CPU of the whole machine, so that other work shows: -> "total idle" ticks from /proc/stat.
machine_ticks() {
  local a b c i e f g h
  read -r _ a b c i e f g h _ </proc/stat
  echo "$((a + b + c + i + e + f + g + h)) $((i + e))"
}

# How busy the machine was over a run: total0 idle0 total1 idle1 -> percent (100 = all cores).
machine_busy() {
  local span=$(($3 - $1))
  awk -v s="$span" -v i="$(($4 - $2))" 'BEGIN { printf "%.0f", s ? 100 * (s - i) / s : 0 }'
}

# CPU per thread of once, to see which thread is busy: pid -> "tid ticks name" per thread,
# by tid. once names its threads (once-writer, once-sync, once-ckpt, once-outbound, …); the
# ones it does not name are the main thread and libmicrohttpd's pool (http).
thread_ticks() {
  local f t name
  for f in /proc/"$1"/task/*/stat; do
    t=${f%/stat}
    name=$(cat "$t/comm" 2>/dev/null) || continue
    case $name in
      once-*) name=${name#once-} ;;
      *) if [ "${t##*/}" = "$1" ]; then name=main; else name=http; fi ;;
    esac
    awk -v n="$name" '{ tid = $1; sub(/^.*\) /, ""); print tid, $12 + $13, n }' "$f" 2>/dev/null || true
  done | sort -n
}

# once's CPU per thread over a run, by name, idle threads left out:
# thread_ticks-before thread_ticks-after seconds -> "writer 16%, sync 9%, http 22%, …".
thread_cpu() {
  local per
  per=$(awk -v hz="$hz" -v d="$3" 'NR == FNR { t0[$1] = $2; next }
    { p = 100 * ($2 - t0[$1]) / hz / d; if (p >= 0.5) printf "%s %.0f%%, ", $3, p }' <(echo "$1") <(echo "$2"))
  echo "${per%, }"
}

# ---- wrk's output and the figures ---------------------------------------------------------

# wrk prints latencies with units: 712.00us / 1.02ms / 1.50s / 2.00m -> milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
    else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
    else printf "nan" }'
}

# One run's line in the report, read from wrk's output: file target rep name ->
# prints "  run …", sets the caller's rps p50 p99 n non2xx errs, and failed=1
# on non-2xx answers or socket errors.
wrk_result() {
  local out=$1 target=$2 rep=$3 name=$4
  rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
  p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$out")")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$out")")
  n=$(awk '/ requests in / { print $1 }' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
  errs=$(awk '/Socket errors:/ { sub(/^.*Socket errors: /, ""); print }' "$out")
  [ -n "$rps" ] && [ -n "$n" ] || die "cannot read wrk's output for $target: $(cat "$out")"
  printf '  run %d %-12s %10.0f req/s  p50 %7.2f ms  p99 %7.2f ms  (%s requests%s%s)\n' "$rep" "$name" \
    "$rps" "$p50" "$p99" "$n" "${non2xx:+, $non2xx non-2xx}" "${errs:+, socket errors: $errs}"
  if [ -n "$non2xx" ] || [ -n "$errs" ]; then failed=1; fi
}

# The figure of a target over the repetitions: numbers (stdin, space-separated) -> their median.
median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Goals are printed met or not: awk condition (0 or 1) -> yes|no.
yn() { awk -v c="$1" 'BEGIN { print (c ? "yes" : "no") }'; }

# ---- the report ---------------------------------------------------------------------------

# The report's first line: which script, when, where, on which commit.
report_head() {
  echo "# $prog $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores," \
    "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet 2>/dev/null || echo '+dirty')"
}

# Where the store is decides what fsync costs: dir -> its file system's type.
fs_type() { df -T "$1" | awk 'NR == 2 { print $2 }'; }

# On tmpfs fsync costs nothing, so the figures flatter the store: say so in the report.
warn_tmpfs() {
  if [ "$(stat -f -c %T "$tmp")" = tmpfs ]; then
    echo "# warning: the store is on tmpfs, where fsync costs nothing: set ONCE_BENCH_DIR to a real disk" | tee -a "$report"
  fi
}

# A run that fails stops the benchmark; if once is gone, say how it ended and
# keep its log (bench/out/NAME-once.log) for the post-mortem.
run_failed() {
  local base=${prog##*/}
  base=${base%.sh}
  if [ -n "$once_pid" ] && ! kill -0 "$once_pid" 2>/dev/null; then
    local st=0
    wait "$once_pid" || st=$?
    once_pid=
    local how="exit status $st"
    [ "$st" -gt 128 ] && how="killed by signal $((st - 128)) ($(kill -l $((st - 128)) 2>/dev/null))"
    echo "$prog: once ended during the benchmark: $how; last lines of its log:" | tee -a "$report" >&2
    grep -v '"route"' "$once_log" 2>/dev/null | tail -n 5 | tee -a "$report" >&2
    [ "$once_log" = /dev/null ] || cp "$once_log" "bench/out/$base-once.log"
    cp "$report" "bench/out/$base.txt"
  fi
  exit 1
}

# The runs against one once: each target warmed up (unmeasured), then
# BENCH_REPS rounds (A B C D A B C D …) of run_one TARGET SECONDS RECORD REP,
# its lines added to the report; a failed run, or once gone, ends it all.
run_targets() {
  local t rep
  if [ "$warm" -gt 0 ]; then
    for t in "${targets[@]}"; do (run_one "$t" "$warm" 0 0) || run_failed; done
  fi
  for ((rep = 1; rep <= reps; rep++)); do
    for t in "${targets[@]}"; do
      run_one "$t" "$secs" 1 "$rep" | tee -a "$report" || run_failed
      kill -0 "$once_pid" 2>/dev/null || run_failed
    done
  done
}

# once must stop on SIGTERM (drain, then exit 0) — not be killed by the trap:
# the check's line goes to the report; failed=1 if it did not.
check_sigterm() {
  [ -n "$once_pid" ] || return 0
  local stopped=no st=killed i
  kill -TERM "$once_pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$once_pid" 2>/dev/null || { stopped=yes; break; }
    sleep 0.1
  done
  if [ "$stopped" = yes ]; then st=0; wait "$once_pid" || st=$?; once_pid=; fi
  echo "check: once stopped within 15 s of SIGTERM: $stopped (exit status $st)" | tee -a "$report"
  [ "$stopped" = yes ] && [ "$st" = 0 ] || { failed=1; grep -v '"route"' "$once_log" 2>/dev/null | tail -n 3 | tee -a "$report"; }
}

# The end of every script: the report kept in bench/out/NAME.txt; exit 1 if a check failed.
finish() {
  local base=${prog##*/}
  base=${base%.sh}
  cp "$report" "bench/out/$base.txt"
  echo "$prog: output in bench/out/$base.txt"
  if [ "$failed" -ne 0 ]; then
    echo "$prog: some answers were wrong or a check failed (see above)" >&2
    exit 1
  fi
}
