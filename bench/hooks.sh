#!/usr/bin/env bash
# bench/hooks.sh — the webhook part of `make bench`: how fast once acknowledges
# webhooks, new events and duplicates.
#
#   bench/hooks.sh [BUILD_DIR]        (BUILD_DIR holds the `once` binary; default build)
#
# Starts, as its own child and on 127.0.0.1 only, once serve on a fresh SQLite
# file with one pull source `bench`: verify = none (insecure = yes), event_id =
# header:X-Event-Id. wrk sends one 1 KB JSON body with every request. Why not
# a signed source: an event id in a header that the signature does not cover
# (hmac-sha256's X-Event-Id, GitHub's delivery id) is backed by a unique digest
# of the body (issue 12: a captured delivery replayed under fresh ids is a
# duplicate), so new events need new bodies, each signed — an HMAC per request
# that wrk's Lua cannot compute. Verifying one HMAC-SHA256 of 1 KB costs about
# 2 µs; the durable insert is what is measured here.
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
#   BENCH_SOAK [0]      instead of the runs above: new events at the maximum rate for this many
#                       seconds, the WAL file's size printed every 10 s, and at the end whether it
#                       is below [server] wal_max (ONCE_WAL_MAX [64MiB])
#
# Exit status: 0 when the runs completed (goals met or not: it is a benchmark),
# 1 when something failed (once did not start, wrong answers or counts, wrk failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
prog=bench/hooks.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

build=${1:-build}
once_bin="$build/once"
[ -x "$once_bin" ] || die "$once_bin not found; build first (e.g. ninja -C $build once)"

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
  case $v in '' | *[!0-9]*) die "BENCH_SECONDS, BENCH_REPS, BENCH_WARMUP, BENCH_RATE, WRK_*, ONCE_THREADS must be integers" ;; esac
done
[ "$reps" -ge 1 ] && [ "$secs" -ge 1 ] || die "BENCH_REPS and BENCH_SECONDS must be >= 1"
[ "$conns" -ge "$wthreads" ] && [ "$wthreads" -ge 1 ] || die "WRK_CONNECTIONS must be >= WRK_THREADS >= 1"

if ! command -v wrk >/dev/null; then
  bash scripts/deps --bench # installs wrk (as root)
fi
for t in wrk curl openssl sqlite3 jq; do
  command -v "$t" >/dev/null || die "$t is missing (bash scripts/deps --bench; apt-get install $t)"
done

# ---- the temporary directory, the children, and their end -----------------------------

tmp=$(mktemp -d "${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}/once-hooks-bench.XXXXXX")
once_pid=
wrk_pid=

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

# A free TCP port on 127.0.0.1 (the kernel picks it).
once_port=$(free_ports 1)

# The 1 KB body, shared by curl and wrk (ONCE_BENCH_BODY).
make_body
export ONCE_BENCH_THREADS="$wthreads" ONCE_BENCH_CONNECTIONS="$conns"
run_id="h$(date +%s)-$$-$RANDOM"
source=bench

# ---- once ------------------------------------------------------------------------------

db="$tmp/once.db"
wal_max=${ONCE_WAL_MAX:-64MiB}
cat >"$tmp/once.ini" <<EOF
; generated by bench/hooks.sh
[server]
listen = 127.0.0.1:$once_port
store = sqlite:$db
threads = $othreads
wal_max = $wal_max

[source.$source]
verify = none
insecure = yes
event_id = header:X-Event-Id
EOF
start_once "$once_port"
hook_url="http://127.0.0.1:$once_port/v1/hooks/$source"

# The webhook as wrk sends it: accepted the first time, a duplicate the second;
# refused without an event id.
post_hook() { # event-id -> "status body"
  curl -s --max-time 10 -w ' %{http_code}' -X POST -H 'Content-Type: application/json' \
    -H "X-Event-Id: $1" --data-binary "@$body" "$hook_url" |
    awk '{ s = $NF; $NF = ""; sub(/ $/, ""); print s, $0 }'
}
dup_id="$run_id-dup"
got=$(post_hook "$dup_id")
[ "$got" = '200 {"status":"accepted"}' ] || die "the first delivery of an event answered '$got', not 200 accepted"
got=$(post_hook "$dup_id")
[ "$got" = '200 {"status":"duplicate"}' ] || die "its second delivery answered '$got', not 200 duplicate"
got=$(post_hook "")
[ "${got%% *}" = 400 ] || die "an event without an id answered '$got', not 400"
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
rows_of_source() { sqlite3 "file:$db?mode=ro" "SELECT count(*) FROM events WHERE source = '$source'" 2>/dev/null || echo "?"; }

# ---- CPU accounting (lib.sh: proc_ticks, thread_ticks, thread_cpu) ---------------------

child_cpu() { # -> user + system seconds of this shell's finished children (bash's `times`, 2nd line)
  times >"$tmp/times" # in this shell: in $(…) it would count the subshell's children
  awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$tmp/times"
}

# ---- the runs --------------------------------------------------------------------------

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
  local o0 th0 idle0 tot0 c0 c1
  read -r tot0 idle0 < <(machine_ticks)
  o0=$(proc_ticks "$once_pid")
  th0=$(thread_ticks "$once_pid")
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
  th1=$(thread_ticks "$once_pid")
  read -r tot1 idle1 < <(machine_ticks)
  [ "$rc" -eq 0 ] || die "wrk failed on $target (exit $rc): $(tail -n 5 "$out")"
  [ "$record" = 1 ] || return 0

  local rps p50 p99 n non2xx errs
  wrk_result "$out" "$target" "$rep" "$(name_of "$target")"

  # Where the CPU went during the run (2 cores = 200%).
  local busy
  busy=$(machine_busy "$tot0" "$idle0" "$tot1" "$idle1")
  local line
  line=$(awk -v o=$((o1 - o0)) -v hz="$hz" -v d="$d" -v w="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" \
    -v m=$((busy * $(nproc))) -v cap=$(($(nproc) * 100)) 'BEGIN {
    once = 100 * o / hz / d; wrk = 100 * w / d; other = m - once - wrk
    printf "      cpu (100%% = one core): once %.0f%%, wrk %.0f%%, other work %.0f%%; whole machine %d%% of %d%%",
      once, wrk, other < 0 ? 0 : other, m, cap }')
  line+=$'\n'"      once threads: $(thread_cpu "$th0" "$th1" "$d")"
  echo "$line"

  sleep 0.5 # the requests in flight when wrk stopped are answered by now
  local m1 wal1
  m1=$(metrics_snap) wal1=$(wal_bytes)
  # store: commits, their mean batch and duration; once's own ack time; WAL growth
  awk -v a="$m0" -v b="$m1" -v w0="$wal0" -v w1="$wal1" -v d="$d" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    cc = y[6] - x[6]; bc = y[8] - x[8]; ops = y[7] - x[7]; nw = y[1] - x[1]; ac = y[10] - x[10]
    printf "      store: %d commits/s, mean batch %.1f ops, mean commit to durable %.2f ms (%.1f batches in flight)",
      cc / d, bc ? ops / bc : 0, cc ? 1000 * (y[5] - x[5]) / cc : 0, (y[5] - x[5]) / d
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

# ---- the soak (BENCH_SOAK): the WAL under a sustained load ------------------------------

soak=${BENCH_SOAK:-0}
case $soak in '' | *[!0-9]*) die "BENCH_SOAK must be a number of seconds" ;; esac
if [ "$soak" -gt 0 ]; then
  bound=$(awk -v v="$wal_max" 'BEGIN { n = v + 0; u = v; sub(/^[0-9]+/, "", u)
    m = u == "GiB" ? 1073741824 : u == "MiB" ? 1048576 : u == "KiB" ? 1024 : 1; print n * m }')
  mkdir -p bench/out
  report="$tmp/report.txt"
  {
    report_head
    echo "# soak: new events at the maximum rate for ${soak}s (wrk -t$wthreads -c$conns), 1024-byte webhook (verify = none);" \
      "wal_max = $wal_max; store: $(fs_type "$tmp")"
    printf '%8s %12s %12s %10s\n' "t (s)" "accepted" "events/s" "WAL MB"
  } | tee "$report"
  ONCE_BENCH_RUN="$run_id-soak" ONCE_BENCH_RATE=0 timeout --signal=INT --kill-after=5 $((soak + 30)) \
    wrk -t"$wthreads" -c"$conns" -d"${soak}s" --timeout 5s -s bench/wrk/hooks_new.lua "$hook_url" >"$out" 2>&1 &
  wrk_pid=$!
  t0=$SECONDS prev=0 peak=0
  while kill -0 "$wrk_pid" 2>/dev/null && [ $((SECONDS - t0)) -le $((soak + 20)) ]; do
    sleep 10
    read -r acc _ < <(metrics_snap)
    w=$(wal_bytes)
    [ "$w" -gt "$peak" ] && peak=$w
    printf '%8d %12d %12.0f %10.1f\n' $((SECONDS - t0)) "$acc" "$(awk -v a="$acc" -v p="$prev" 'BEGIN { print (a - p) / 10 }')" \
      "$(awk -v w="$w" 'BEGIN { print w / 1048576 }')" | tee -a "$report"
    prev=$acc
  done
  rc=0
  wait "$wrk_pid" || rc=$?
  wrk_pid=
  [ "$rc" -eq 0 ] || die "wrk failed during the soak (exit $rc): $(tail -n 5 "$out")"
  sleep 2 # the checkpointer's next round
  w=$(wal_bytes)
  ok=$(awk -v w="$w" -v b="$bound" 'BEGIN { print (w <= b) }')
  {
    echo "WAL at the end: $(awk -v w="$w" 'BEGIN { printf "%.1f", w / 1048576 }') MB, peak seen" \
      "$(awk -v w="$peak" 'BEGIN { printf "%.1f", w / 1048576 }') MB; below wal_max ($wal_max): $(yn "$ok")"
  } | tee -a "$report"
  [ "$ok" = 1 ] || failed=1
  check_sigterm
  finish
  exit
fi

targets=()
for t in new dup new-paced dup-paced; do
  case $t in *-paced) [ "$rate" -gt 0 ] || continue ;; esac
  case $only in *",$t,"*) targets+=("$t") ;; esac
done
[ ${#targets[@]} -gt 0 ] || die "BENCH_ONLY selects no target (new, dup, new-paced, dup-paced; the paced ones need BENCH_RATE > 0)"

mkdir -p bench/out
report="$tmp/report.txt"
{
  report_head
  echo "# wrk -t$wthreads -c$conns -d${secs}s --latency, 1024-byte JSON webhook (verify = none);" \
    "once [server] threads = $othreads; paced runs at $rate events/s; $reps repetitions, medians below"
  echo "# store: $(fs_type "$tmp") under ${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}; once log: $logmode;" \
    "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$report"
warn_tmpfs

# A run that fails stops the benchmark (lib.sh: run_failed keeps once's log in
# bench/out/hooks-once.log if once is gone).
run_targets
grep -q '(ok: no)$\|non-2xx\|socket errors' "$report" && failed=1

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
    "(duplicate $total_dup, bad_signature $total_bad, no_event_id $total_noid incl. the one sent at start) (equal: $ok)"
} | tee -a "$report.checks"
cat "$report.checks" >>"$report"
grep -q '(equal: no)$' "$report.checks" && failed=1

# once must stop on SIGTERM (drain, then exit 0) — not be killed by the trap.
check_sigterm

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

finish
