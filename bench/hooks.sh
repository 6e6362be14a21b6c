#!/usr/bin/env bash
# bench/hooks.sh — the webhook part of `make bench`: how fast once acknowledges
# signed webhooks, new events and duplicates.
#
#   bench/hooks.sh [BUILD_DIR]        (BUILD_DIR holds the `once` binary; default build)
#
# Starts, as its own child and on 127.0.0.1 only, once serve on a fresh SQLite
# file with one pull source `bench`: verify = hmac-sha256, signature_header =
# X-Signature, signature_prefix = sha256=, event_id = header:X-Event-Id. The
# 1 KB JSON body is signed once here (openssl dgst -hmac); wrk sends that body
# and its signature with every request, so once checks a real HMAC each time.
# Then runs wrk against four targets, in turn, BENCH_REPS times
# (A B C D A B C D …), and prints the medians:
#   new            every request a new event id (bench/wrk/hooks_new.lua):
#                  signature, id, durable insert, 200 {"status":"accepted"}
#   dup            one event id over and over (bench/wrk/hooks_dup.lua):
#                  signature, id, found, 200 {"status":"duplicate"}
#   new@RATE       as new, paced at BENCH_RATE events/s (the issue's 5000)
#   dup@RATE       as dup, paced
# The first two are the maximum rate (wrk -c connections, each sending its next
# request as soon as the answer is in). wrk cannot send at a fixed rate (and
# Debian has no wrk2), so the paced runs define wrk's Lua delay(): each wrk
# thread sends on a fixed schedule of RATE / threads per second
# (bench/wrk/hooks_common.lua); the achieved rate is reported, and a paced
# goal is met only if the run reached 95% of RATE. Latencies are wrk's
# (--latency: from writing the request to the whole answer), per request.
#
# Checks: once's own counts (once_webhooks_total on GET /metrics) against wrk's
# count of answers — a new run adds `accepted` and no `duplicate`, a duplicate
# run adds `duplicate`, no `accepted` and no row; no bad_signature or
# no_event_id ever; at the end the source's rows in the store (sqlite3 and
# `once hooks ls --json | jq length`) equal the accepted count; and once stops
# cleanly on SIGTERM. The output is also written to bench/out/hooks.txt (and
# once's log to bench/out/hooks-once.log if once ends during the runs).
#
# Under each run: CPU of once (from /proc; 100% = one core) and per thread,
# labelled by creation order (the threads are unnamed), of wrk, and of other
# work on the machine (a contended run shows there); and from /metrics:
# commits/s, mean batch, mean commit time and how much of the run the writer
# spent committing, once's own acknowledgement time (mean, and the share under
# 10 ms) and the WAL file's size and growth per new event.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS [10]  length of each measured run     BENCH_REPS [2]  repetitions
#   BENCH_WARMUP [1]    seconds of unmeasured warm-up per target (0: none)
#   BENCH_RATE [5000]   the paced runs' target, events/s (0: no paced runs)
#   WRK_THREADS [2]  WRK_CONNECTIONS [64]               ONCE_THREADS [2]  [server] threads
#   BENCH_ONLY [new,dup,new-paced,dup-paced]
#   ONCE_BENCH_DIR [$TMPDIR or /tmp]  where the temporary directory (and the SQLite file) goes:
#                       a real disk, or fsync costs nothing
#   ONCE_BENCH_LOG [file]  once's request log: `file` (in the temporary directory) or `null`
#   ONCE_BENCH_TIMEOUT [900]  the whole script is stopped after this many seconds
#
# Exit status: 0 when the runs completed (goals met or not: it is a benchmark),
# 1 when something failed (once did not start, wrong answers or counts, wrk failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build=${1:-build}
once_bin="$build/once"
if [ ! -x "$once_bin" ]; then
  echo "bench/hooks.sh: $once_bin not found; build first (e.g. ninja -C $build once)" >&2
  exit 1
fi

secs=${BENCH_SECONDS:-10}
reps=${BENCH_REPS:-2}
warm=${BENCH_WARMUP:-1}
rate=${BENCH_RATE:-5000}
wthreads=${WRK_THREADS:-2}
conns=${WRK_CONNECTIONS:-64}
othreads=${ONCE_THREADS:-2}
only=",${BENCH_ONLY:-new,dup,new-paced,dup-paced},"
logmode=${ONCE_BENCH_LOG:-file}
deadline=$((SECONDS + ${ONCE_BENCH_TIMEOUT:-900}))
for v in "$secs" "$reps" "$warm" "$rate" "$wthreads" "$conns" "$othreads"; do
  case $v in '' | *[!0-9]*)
    echo "bench/hooks.sh: BENCH_SECONDS, BENCH_REPS, BENCH_WARMUP, BENCH_RATE, WRK_*, ONCE_THREADS must be integers" >&2
    exit 1
    ;;
  esac
done
[ "$reps" -ge 1 ] && [ "$secs" -ge 1 ] || { echo "bench/hooks.sh: BENCH_REPS and BENCH_SECONDS must be >= 1" >&2; exit 1; }
[ "$conns" -ge "$wthreads" ] && [ "$wthreads" -ge 1 ] || { echo "bench/hooks.sh: WRK_CONNECTIONS must be >= WRK_THREADS >= 1" >&2; exit 1; }

if ! command -v wrk >/dev/null; then
  bash scripts/deps --bench # installs wrk (as root)
fi
for t in wrk curl openssl sqlite3 jq; do
  command -v "$t" >/dev/null || { echo "bench/hooks.sh: $t is missing (bash scripts/deps --bench; apt-get install $t)" >&2; exit 1; }
done

# ---- the temporary directory, the children, and their end -----------------------------

tmp=$(mktemp -d "${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}/once-hooks-bench.XXXXXX")
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
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench/hooks.sh: interrupted" >&2; exit 130' INT TERM

die() {
  echo "bench/hooks.sh: $*" >&2
  exit 1
}

time_left() {
  [ "$SECONDS" -lt "$deadline" ] || die "ONCE_BENCH_TIMEOUT reached; stopping"
}

# A free TCP port on 127.0.0.1 (the kernel picks it).
once_port=$(/usr/bin/python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')

# The 1 KB body, shared by curl and wrk (ONCE_BENCH_BODY), and its signature,
# computed once (ONCE_BENCH_SIG): "sha256=" + hex HMAC-SHA256 of the body bytes.
body="$tmp/body.json"
printf '{"data":"%s"}' "$(head -c $((1024 - 11)) /dev/zero | tr '\0' x)" >"$body"
[ "$(stat -c %s "$body")" -eq 1024 ] || die "body is not 1024 bytes"
secret="bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
sig="sha256=$(openssl dgst -sha256 -hmac "$secret" -r "$body" | awk '{ print $1 }')"
[[ $sig =~ ^sha256=[0-9a-f]{64}$ ]] || die "cannot sign the body with openssl (got '$sig')"
export ONCE_BENCH_BODY="$body" ONCE_BENCH_SIG="$sig"
export ONCE_BENCH_THREADS="$wthreads" ONCE_BENCH_CONNECTIONS="$conns"
run_id="h$(date +%s)-$$-$RANDOM"
source=bench

# ---- once ------------------------------------------------------------------------------

db="$tmp/once.db"
printf '%s\n' "$secret" >"$tmp/secret"
cat >"$tmp/once.ini" <<EOF
; generated by bench/hooks.sh
[server]
listen = 127.0.0.1:$once_port
store = sqlite:$db
threads = $othreads

[source.$source]
verify = hmac-sha256
secret_file = secret
signature_header = X-Signature
signature_prefix = sha256=
event_id = header:X-Event-Id
EOF
case $logmode in
  null) once_log=/dev/null ;;
  *) once_log="$tmp/once.log" ;;
esac

wait_http() { # url what pid
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$3" 2>/dev/null || return 1
    if curl -s -o /dev/null --max-time 1 "$1"; then return 0; fi
    sleep 0.1
  done
  return 1
}
"$once_bin" serve --config "$tmp/once.ini" 2>"$once_log" >/dev/null &
once_pid=$!
wait_http "http://127.0.0.1:$once_port/healthz" once "$once_pid" ||
  die "once did not start: $(tail -n 5 "$tmp/once.log" 2>/dev/null)"
hook_url="http://127.0.0.1:$once_port/v1/hooks/$source"

# The webhook as wrk sends it: accepted the first time, a duplicate the second;
# refused with a wrong signature.
post_hook() { # event-id [signature] -> "status body"
  curl -s --max-time 10 -w ' %{http_code}' -X POST -H 'Content-Type: application/json' \
    -H "X-Signature: ${2:-$sig}" -H "X-Event-Id: $1" --data-binary "@$body" "$hook_url" |
    awk '{ s = $NF; $NF = ""; sub(/ $/, ""); print s, $0 }'
}
dup_id="$run_id-dup"
got=$(post_hook "$dup_id")
[ "$got" = '200 {"status":"accepted"}' ] || die "the first delivery of an event answered '$got', not 200 accepted"
got=$(post_hook "$dup_id")
[ "$got" = '200 {"status":"duplicate"}' ] || die "its second delivery answered '$got', not 200 duplicate"
got=$(post_hook "$run_id-forged" "sha256=$(printf '%064d' 0)")
[ "${got%% *}" = 401 ] || die "a wrong signature answered '$got', not 401"
export ONCE_BENCH_EVENT_ID="$dup_id"

metrics_get() { curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics"; }

# accepted duplicate bad_signature no_event_id commit_sum commit_count batch_sum batch_count
#   ack_sum ack_count ack_le_10ms
metrics_snap() {
  metrics_get | awk -v s="$source" '
    $1 == "once_webhooks_total{source=\"" s "\",result=\"accepted\"}" { a = $2 }
    $1 == "once_webhooks_total{source=\"" s "\",result=\"duplicate\"}" { d = $2 }
    $1 == "once_webhooks_total{source=\"" s "\",result=\"bad_signature\"}" { bs = $2 }
    $1 == "once_webhooks_total{source=\"" s "\",result=\"no_event_id\"}" { ni = $2 }
    $1 == "once_store_commit_seconds_sum" { cs = $2 } $1 == "once_store_commit_seconds_count" { cc = $2 }
    $1 == "once_group_commit_batch_size_sum" { bsum = $2 } $1 == "once_group_commit_batch_size_count" { bc = $2 }
    $1 == "once_webhook_ack_seconds_sum" { as = $2 } $1 == "once_webhook_ack_seconds_count" { ac = $2 }
    $1 == "once_webhook_ack_seconds_bucket{le=\"0.01\"}" { a10 = $2 }
    END { print a + 0, d + 0, bs + 0, ni + 0, cs + 0, cc + 0, bsum + 0, bc + 0, as + 0, ac + 0, a10 + 0 }'
}
wal_bytes() { stat -c %s "$db-wal" 2>/dev/null || echo 0; }
rows_of_source() { sqlite3 "file:$db?mode=ro" "SELECT count(*) FROM events WHERE source = '$source'" 2>/dev/null || echo "?"; }

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
thread_ticks() { # -> "tid ticks" per thread of once, by tid
  local f
  for f in /proc/"$once_pid"/task/*/stat; do
    awk '{ tid = $1; sub(/^.*\) /, ""); print tid, $12 + $13 }' "$f" 2>/dev/null || true
  done | sort -n
}
# once's threads are unnamed; they are created in this order (src/server/server.c,
# src/store/sqlite_store.c): main, checkpointer, store writer, outbound (curl),
# waiters, worker, the MHD pool (threads), the background loop. A pull source
# adds no thread (the delivery thread runs only for push sources).
thread_label() { # index (0-based, by tid) -> name
  local i=$1
  local names=(main checkpointer writer outbound waiters worker)
  if [ "$i" -lt 6 ]; then echo "${names[$i]}"
  elif [ "$i" -lt $((6 + othreads)) ]; then echo "http$((i - 5))"
  elif [ "$i" -eq $((6 + othreads)) ]; then echo loop
  else echo "t$i"; fi
}

child_cpu() { # -> user + system seconds of this shell's finished children (bash's `times`, 2nd line)
  times >"$tmp/times" # in this shell: in $(…) it would count the subshell's children
  awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$tmp/times"
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

failed=0
out="$tmp/wrk.txt"

name_of() { # target -> the name printed in the runs' lines
  case $1 in
    new | dup) echo "$1" ;;
    new-paced) echo "new@$rate" ;;
    dup-paced) echo "dup@$rate" ;;
  esac
}

run_one() { # target seconds record(0|1) rep
  local target=$1 d=$2 record=$3 rep=$4 script pace=0
  case $target in
    new) script=bench/wrk/hooks_new.lua ;;
    dup) script=bench/wrk/hooks_dup.lua ;;
    new-paced) script=bench/wrk/hooks_new.lua pace=$rate ;;
    dup-paced) script=bench/wrk/hooks_dup.lua pace=$rate ;;
  esac
  time_left
  local m0="" wal0=0 rows0=""
  if [ "$record" = 1 ]; then
    m0=$(metrics_snap) wal0=$(wal_bytes)
    case $target in dup*) rows0=$(rows_of_source) ;; esac
  fi
  local o0 th0 idle0 tot0 a b c i e f g h c0 c1
  read -r _ a b c i e f g h _ </proc/stat
  tot0=$((a + b + c + i + e + f + g + h)) idle0=$((i + e))
  o0=$(proc_ticks "$once_pid")
  th0=$(thread_ticks)
  child_cpu >"$tmp/c0"
  ONCE_BENCH_RUN="$run_id-$target-$rep" ONCE_BENCH_RATE="$pace" timeout --signal=INT --kill-after=5 $((d + 30)) \
    wrk -t"$wthreads" -c"$conns" -d"${d}s" --timeout 5s --latency -s "$script" "$hook_url" >"$out" 2>&1 &
  wrk_pid=$!
  local rc=0
  wait "$wrk_pid" || rc=$?
  wrk_pid=
  child_cpu >"$tmp/c1" # only wrk (and timeout) ended since c0
  c0=$(cat "$tmp/c0") c1=$(cat "$tmp/c1")
  local o1 th1 idle1 tot1
  o1=$(proc_ticks "$once_pid")
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
  printf '  run %d %-12s %10.0f req/s  p50 %7.2f ms  p99 %7.2f ms  (%s requests%s%s)\n' "$rep" "$(name_of "$target")" \
    "$rps" "$p50" "$p99" "$n" "${non2xx:+, $non2xx non-2xx}" "${errs:+, socket errors: $errs}"
  if [ -n "$non2xx" ] || [ -n "$errs" ]; then failed=1; fi

  # Where the CPU went during the run (2 cores = 200%).
  local span=$((tot1 - tot0)) busy
  busy=$(awk -v s="$span" -v i="$((idle1 - idle0))" 'BEGIN { printf "%.0f", s ? 100 * (s - i) / s : 0 }')
  local line
  line=$(awk -v o=$((o1 - o0)) -v hz="$hz" -v d="$d" -v w="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" \
    -v m=$((busy * $(nproc))) -v cap=$(($(nproc) * 100)) 'BEGIN {
    once = 100 * o / hz / d; wrk = 100 * w / d; other = m - once - wrk
    printf "      cpu (100%% = one core): once %.0f%%, wrk %.0f%%, other work %.0f%%; whole machine %d%% of %d%%",
      once, wrk, other < 0 ? 0 : other, m, cap }')
  local per
  per=$(awk -v hz="$hz" -v d="$d" 'NR == FNR { t0[$1] = $2; next } { printf "%s %.0f\n", $1, 100 * ($2 - t0[$1]) / hz / d }' \
    <(echo "$th0") <(echo "$th1"))
  local j=0 parts="" tid pct nth
  nth=$(wc -l <<<"$per")
  while read -r tid pct; do
    # the labels hold for this configuration only (7 threads + the MHD pool + the loop)
    if [ "$nth" -eq $((othreads + 7)) ]; then parts+="$(thread_label $j) ${pct}%, "; else parts+="$tid ${pct}%, "; fi
    j=$((j + 1))
  done <<<"$per"
  line+=$'\n'"      once threads: ${parts%, }"
  echo "$line"

  sleep 0.5 # the requests in flight when wrk stopped are answered by now
  local m1 wal1
  m1=$(metrics_snap) wal1=$(wal_bytes)
  # store: commits, their mean batch and duration; once's own ack time; WAL growth
  awk -v a="$m0" -v b="$m1" -v w0="$wal0" -v w1="$wal1" -v d="$d" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    cc = y[6] - x[6]; bc = y[8] - x[8]; ops = y[7] - x[7]; nw = y[1] - x[1]; ac = y[10] - x[10]
    printf "      store: %d commits/s, mean batch %.1f ops, mean commit %.2f ms (writer busy %.0f%%)",
      cc / d, bc ? ops / bc : 0, cc ? 1000 * (y[5] - x[5]) / cc : 0, 100 * (y[5] - x[5]) / d
    if (ac) printf "; once ack mean %.2f ms, %.1f%% <= 10 ms", 1000 * (y[9] - x[9]) / ac, 100 * (y[11] - x[11]) / ac
    printf "; WAL %.0f MB", w1 / 1048576
    if (nw > 0 && w1 > w0) printf " (+%.1f KB per new event)", (w1 - w0) / 1024 / nw
    printf "\n" }'
  local acc0 dup0 bad0 noid0 acc1 dup1 bad1 noid1
  read -r acc0 dup0 bad0 noid0 _ <<<"$m0"
  read -r acc1 dup1 bad1 noid1 _ <<<"$m1"
  local dacc=$((acc1 - acc0)) ddup=$((dup1 - dup0)) dbad=$((bad1 - bad0 + noid1 - noid0)) ok=no
  # wrk stops with up to one request per connection unanswered (counted by once, not by wrk)
  case $target in
    new*)
      [ "$dacc" -ge "$n" ] && [ "$dacc" -le $((n + conns)) ] && [ "$ddup" -eq 0 ] && [ "$dbad" -eq 0 ] && ok=yes
      echo "check: run $rep $(name_of "$target"): wrk counted $n answers; accepted grew by $dacc (within [answers, answers + connections]), duplicate by $ddup, bad_signature + no_event_id by $dbad (ok: $ok)"
      ;;
    dup*)
      local rows1
      rows1=$(rows_of_source)
      [ "$ddup" -ge "$n" ] && [ "$ddup" -le $((n + conns)) ] && [ "$dacc" -eq 0 ] && [ "$dbad" -eq 0 ] &&
        [ "$rows0" = "$rows1" ] && ok=yes
      echo "check: run $rep $(name_of "$target"): wrk counted $n answers; duplicate grew by $ddup, accepted by $dacc, bad_signature + no_event_id by $dbad; rows $rows0 -> $rows1 (ok: $ok)"
      ;;
  esac
  [ "$ok" = yes ] || failed=1
}

targets=()
for t in new dup new-paced dup-paced; do
  case $t in *-paced) [ "$rate" -gt 0 ] || continue ;; esac
  case $only in *",$t,"*) targets+=("$t") ;; esac
done
[ ${#targets[@]} -gt 0 ] || die "BENCH_ONLY selects no target (new, dup, new-paced, dup-paced; the paced ones need BENCH_RATE > 0)"

mkdir -p bench/out
report="$tmp/report.txt"
{
  echo "# bench/hooks.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores," \
    "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet 2>/dev/null || echo '+dirty')"
  echo "# wrk -t$wthreads -c$conns -d${secs}s --latency, 1024-byte JSON webhook, HMAC-SHA256 checked on each;" \
    "once [server] threads = $othreads; paced runs at $rate events/s; $reps repetitions, medians below"
  echo "# store: $(df -T "$tmp" | awk 'NR == 2 { print $2 }') under ${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}; once log: $logmode;" \
    "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$report"
if [ "$(stat -f -c %T "$tmp")" = tmpfs ]; then
  echo "# warning: the store is on tmpfs, where fsync costs nothing: set ONCE_BENCH_DIR to a real disk" | tee -a "$report"
fi

# A run that fails stops the benchmark; if once is gone, say how it ended and
# keep its log (bench/out/hooks-once.log) for the post-mortem.
run_failed() {
  if [ -n "$once_pid" ] && ! kill -0 "$once_pid" 2>/dev/null; then
    local st=0
    wait "$once_pid" || st=$?
    once_pid=
    local how="exit status $st"
    [ "$st" -gt 128 ] && how="killed by signal $((st - 128)) ($(kill -l $((st - 128)) 2>/dev/null))"
    echo "bench/hooks.sh: once ended during the benchmark: $how; last lines of its log:" | tee -a "$report" >&2
    grep -v '"route"' "$once_log" 2>/dev/null | tail -n 5 | tee -a "$report" >&2
    [ "$once_log" = /dev/null ] || cp "$once_log" bench/out/hooks-once.log
    cp "$report" bench/out/hooks.txt
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
grep -q '(ok: no)$\|non-2xx\|socket errors' "$report" && failed=1

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run_one ran in a pipeline (a subshell): collect what it measured from the report.
declare -A MR M50 M99
for t in "${targets[@]}"; do
  nm=$(name_of "$t")
  MR[$t]=$(awk -v t="$nm" '$1 == "run" && $3 == t { printf "%s ", $4 }' "$report" | median)
  M50[$t]=$(awk -v t="$nm" '$1 == "run" && $3 == t { printf "%s ", $7 }' "$report" | median)
  M99[$t]=$(awk -v t="$nm" '$1 == "run" && $3 == t { printf "%s ", $10 }' "$report" | median)
done
label() {
  case $1 in
    new) echo "new events, max rate" ;;
    dup) echo "duplicates, max rate" ;;
    new-paced) echo "new events, $rate/s paced" ;;
    dup-paced) echo "duplicates, $rate/s paced" ;;
  esac
}
{
  echo
  printf '%-28s %10s %9s %9s\n' target "req/s" "p50 ms" "p99 ms"
  for t in "${targets[@]}"; do
    printf '%-28s %10.0f %9.2f %9.2f\n' "$(label "$t")" "${MR[$t]}" "${M50[$t]}" "${M99[$t]}"
  done
  echo
  yn() { awk -v c="$1" 'BEGIN { print (c ? "yes" : "no") }'; }
  for t in new-paced dup-paced; do
    [ -n "${M99[$t]:-}" ] || continue
    kind=new
    [ "$t" = dup-paced ] && kind=duplicates
    met=$(awk -v p="${M99[$t]}" -v r="${MR[$t]}" -v want="$rate" 'BEGIN { print (p < 10 && r >= 0.95 * want) }')
    echo "goal: p99 ack < 10 ms at $rate events/s ($kind): $(yn "$met")" \
      "($(printf '%.2f' "${M99[$t]}") ms at $(printf '%.0f' "${MR[$t]}")/s achieved; the rate must reach 95% of $rate)"
  done
  for t in new dup; do
    [ -n "${MR[$t]:-}" ] || continue
    kind=new
    [ "$t" = dup ] && kind=duplicates
    echo "max rate ($kind): $(printf '%.0f' "${MR[$t]}") events/s, p99 $(printf '%.2f' "${M99[$t]}") ms" \
      "($conns connections: p99 there is queueing, not the goal's figure)"
  done
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$report"

# The store's side, after every run: rows of the source against once's count.
read -r total_acc total_dup total_bad total_noid _ < <(metrics_snap)
rows=$(rows_of_source)
{
  echo
  grep '^check: ' "$report" || true # printed by the runs above; repeated here
  ok=no
  [ "$rows" = "$total_acc" ] && ok=yes
  echo "check: rows of source $source in the store: $rows; once_webhooks_total accepted since start: $total_acc" \
    "(duplicate $total_dup, bad_signature $total_bad incl. the one forged at start, no_event_id $total_noid) (equal: $ok)"
} | tee -a "$report.checks"
cat "$report.checks" >>"$report"
grep -q '(equal: no)$' "$report.checks" && failed=1

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

# Once stopped, the CLI reads the same rows (it lists at most 100000).
if [ -z "$once_pid" ]; then
  listed=$("$once_bin" --store "sqlite:$db" hooks ls --source "$source" --json --limit 100000 2>/dev/null | jq length 2>/dev/null || echo "?")
  want=$total_acc
  [ "$want" -gt 100000 ] && want=100000
  ok=no
  [ "$listed" = "$want" ] && ok=yes
  echo "check: once hooks ls --source $source --json --limit 100000 | jq length: $listed (expected $want: $ok)" | tee -a "$report"
  [ "$ok" = yes ] || failed=1
fi

cp "$report" bench/out/hooks.txt
echo "bench/hooks.sh: output in bench/out/hooks.txt"
if [ "$failed" -ne 0 ]; then
  echo "bench/hooks.sh: some answers were wrong or a check failed (see above)" >&2
  exit 1
fi
