#!/usr/bin/env bash
# bench/mcp.sh — the MCP gateway (issue 17): tools/call per second of the official MCP
# TypeScript SDK client, direct to an SDK server and through once.
#
#   bench/mcp.sh [BUILD_DIR]        (BUILD_DIR holds the `once` binary; default build)
#
# Starts, as its own children and on 127.0.0.1 only:
#   - tests/clients/mcp_server.mjs (an @modelcontextprotocol/sdk McpServer, Streamable HTTP,
#     stateful sessions) twice: `--http --json` (answers as application/json) and `--http`
#     (the SDK's default: every answer an SSE stream), each with --effects FILE (one line per
#     effect) and a read-only tool `peek` added (add_tool; readOnlyHint: true);
#   - once serve on a fresh SQLite file with [mcp.bench] -> the JSON server and
#     [mcp.bench_sse] -> the SSE server.
# Then, for each server mode (BENCH_MODES), drives bench/mcp_load.mjs — BENCH_SESSIONS client
# sessions of the SDK's Client + StreamableHTTPClientTransport in one Node process, each
# calling back to back for BENCH_WARMUP s (not measured) then BENCH_SECONDS s (measured), at
# most BENCH_MAX_CALLS calls — against five targets, in turn, BENCH_REPS times:
#   direct        the SDK server itself: charge with new arguments every call
#   once-new      once, charge with new arguments every call: each a new ledger key
#                 (durable reserve, the call to the server, durable record, the answer)
#   once-replay   once, one charge (arguments fixed) made once before the run, then repeated:
#                 every call answered from the ledger, the server not called
#   direct-read   the SDK server itself: peek, a read-only tool (no effect, no output schema)
#   once-read     once, peek: passed through unrecorded
# and prints calls/s, p50 and p99 latency, the ratio to direct (for once-read: to direct-read),
# and CPU per call of the client, the SDK server and once (from /proc and the driver's
# process.cpuUsage()); for once, its durable commits and its requests to the SDK server.
#
# Checks, printed: every call answered with the expected _meta["once/outcome"] (completed,
# replayed, none) and no errors; the effects file grew by exactly the calls that completed in
# the direct and once-new runs, and not at all in the replay and read runs;
# once_mcp_calls_total{outcome=completed|replayed|readonly} grew by the calls answered so; at
# the end, the effects through once = ledger rows = once's completed count; once stops on SIGTERM.
# The output is also written to bench/out/mcp.txt.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS [10]  measured seconds per run        BENCH_WARMUP [1]  seconds of unmeasured calls first
#   BENCH_SESSIONS [8]  concurrent client sessions      BENCH_REPS [3]    repetitions (medians below)
#   BENCH_MAX_CALLS [200000]  calls per run at most     BENCH_MODES [json,sse]  server answer modes
#   BENCH_ONLY [direct,once-new,once-replay,direct-read,once-read]   ONCE_THREADS [2]  [server] threads
#   ONCE_BENCH_DIR [$TMPDIR or /tmp]  where the temporary directory (and the SQLite file) goes
#   ONCE_BENCH_LOG [file]  once's request log: `file` (in the temporary directory) or `null`
#   ONCE_BENCH_TIMEOUT [900]  the whole script is stopped after this many seconds
#
# Needs Node.js >= 18 and tests/clients/node_modules (cd tests/clients && npm ci).
# Exit status: 0 when the runs completed and the checks held (fast or not: it is a benchmark),
# 1 when something failed (a server did not start, an error or a wrong answer, a check).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
prog=bench/mcp.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

build=${1:-build}
once_bin="$build/once"
[ -x "$once_bin" ] || die "$once_bin not found; build first (e.g. ninja -C $build once)"

secs=${BENCH_SECONDS:-10}
warm=${BENCH_WARMUP:-1}
sessions=${BENCH_SESSIONS:-8}
reps=${BENCH_REPS:-3}
maxcalls=${BENCH_MAX_CALLS:-200000}
othreads=${ONCE_THREADS:-2}
only=",${BENCH_ONLY:-direct,once-new,once-replay,direct-read,once-read},"
modes_in=",${BENCH_MODES:-json,sse},"
logmode=${ONCE_BENCH_LOG:-file}
deadline=$((SECONDS + ${ONCE_BENCH_TIMEOUT:-900}))
for v in "$secs" "$warm" "$sessions" "$reps" "$maxcalls" "$othreads"; do
  case $v in '' | *[!0-9]*) die "BENCH_SECONDS, BENCH_WARMUP, BENCH_SESSIONS, BENCH_REPS, BENCH_MAX_CALLS, ONCE_THREADS must be integers" ;; esac
done
[ "$reps" -ge 1 ] && [ "$secs" -ge 1 ] && [ "$sessions" -ge 1 ] && [ "$maxcalls" -ge 1 ] ||
  die "BENCH_REPS, BENCH_SECONDS, BENCH_SESSIONS and BENCH_MAX_CALLS must be >= 1"

command -v node >/dev/null || die "node is missing (Node.js >= 18)"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 18 ] || die "Node.js >= 18 is needed ($(node --version))"
[ -d tests/clients/node_modules/@modelcontextprotocol/sdk ] ||
  die "tests/clients/node_modules/@modelcontextprotocol/sdk is missing (cd tests/clients && npm ci)"
sdk_version=$(node -p 'require("./tests/clients/node_modules/@modelcontextprotocol/sdk/package.json").version')

# ---- the temporary directory, the children, and their end -----------------------------

tmp=$(mktemp -d "${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}/once-mcp-bench.XXXXXX")
once_pid=
driver_pid=
declare -A SDK_PID SDK_PORT EFFECTS SCOPE

cleanup() {
  local rc=$? m
  trap - EXIT INT TERM
  stop_pid "$driver_pid" INT
  stop_pid "$once_pid" TERM
  for m in "${!SDK_PID[@]}"; do stop_pid "${SDK_PID[$m]}" TERM; done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench/mcp.sh: interrupted" >&2; exit 130' INT TERM

modes=()
for m in json sse; do
  case $modes_in in *",$m,"*) modes+=("$m") ;; esac
done
[ ${#modes[@]} -gt 0 ] || die "BENCH_MODES selects no mode (json, sse)"
targets=()
for t in direct once-new once-replay direct-read once-read; do
  case $only in *",$t,"*) targets+=("$t") ;; esac
done
[ ${#targets[@]} -gt 0 ] || die "BENCH_ONLY selects no target (direct, once-new, once-replay, direct-read, once-read)"

read -r once_port < <(free_ports 1)
run_id="m$(date +%s)-$$-$RANDOM"

# The driver, bounded twice: its own deadline and timeout(1). args... -> sets result (its
# `result` line) and driver_rc; its stderr (samples of errors) goes to $tmp/driver.err.
# Not in a subshell, so that the trap can stop it.
drive() {
  time_left
  local out="$tmp/driver.out"
  timeout --signal=INT --kill-after=5 $((warm + secs + 90)) \
    node bench/mcp_load.mjs --deadline-ms $(((warm + secs + 80) * 1000)) "$@" >"$out" 2>"$tmp/driver.err" &
  driver_pid=$!
  driver_rc=0
  wait "$driver_pid" || driver_rc=$?
  driver_pid=
  result=$(grep '^result ' "$out" | tail -n 1 || true)
}
# One field of a `result` line: line key -> value.
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print }'; }

# ---- the SDK servers ---------------------------------------------------------------------

for m in "${modes[@]}"; do
  EFFECTS[$m]="$tmp/effects-$m.jsonl"
  : >"${EFFECTS[$m]}"
  flags=(--http)
  [ "$m" = json ] && flags+=(--json)
  node tests/clients/mcp_server.mjs "${flags[@]}" --port 0 --effects "${EFFECTS[$m]}" \
    >"$tmp/sdk-$m.out" 2>"$tmp/sdk-$m.err" &
  SDK_PID[$m]=$!
  for ((i = 0; i < 150; i++)); do
    SDK_PORT[$m]=$(awk '$1 == "listening" { print $2 }' "$tmp/sdk-$m.out")
    [ -n "${SDK_PORT[$m]}" ] && break
    kill -0 "${SDK_PID[$m]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "${SDK_PORT[$m]}" ] || die "the SDK server ($m) did not start: $(tail -n 5 "$tmp/sdk-$m.err")"
  # The read-only tool of the once-read runs: one add_tool, direct (never through once).
  drive --url "http://127.0.0.1:${SDK_PORT[$m]}/mcp" --mode add-tool --expect none
  r=$result
  [ "$driver_rc" = 0 ] || die "add_tool on the SDK server ($m) failed: $r $(cat "$tmp/driver.err")"
done
SCOPE[json]=bench
SCOPE[sse]=bench_sse

# ---- once ------------------------------------------------------------------------------

db="$tmp/once.db"
{
  echo "; generated by bench/mcp.sh"
  echo "[server]"
  echo "listen = 127.0.0.1:$once_port"
  echo "store = sqlite:$db"
  echo "threads = $othreads"
  for m in "${modes[@]}"; do
    echo
    echo "[mcp.${SCOPE[$m]}]"
    echo "url = http://127.0.0.1:${SDK_PORT[$m]}/mcp"
    echo "readonly = peek"
  done
} >"$tmp/once.ini"
start_once "$once_port"

# once_mcp_calls_total of a server: scope -> "completed replayed readonly other" (all tools).
mcp_metrics() {
  curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics" | awk -v s="$1" '
    index($1, "once_mcp_calls_total{server=\"" s "\",") == 1 {
      if ($1 ~ /outcome="completed"/) c += $2; else if ($1 ~ /outcome="replayed"/) r += $2
      else if ($1 ~ /outcome="readonly"/) ro += $2; else o += $2 }
    END { print c + 0, r + 0, ro + 0, o + 0 }'
}
# The store's and the upstream's side: scope -> "commit_sum commit_count batch_sum batch_count upstream_sum upstream_count".
store_snap() {
  curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics" | awk -v s="$1" '
    $1 == "once_store_commit_seconds_sum" { cs = $2 } $1 == "once_store_commit_seconds_count" { cc = $2 }
    $1 == "once_group_commit_batch_size_sum" { bs = $2 } $1 == "once_group_commit_batch_size_count" { bc = $2 }
    $1 == "once_upstream_seconds_sum{scope=\"" s "\"}" { us = $2 } $1 == "once_upstream_seconds_count{scope=\"" s "\"}" { uc = $2 }
    END { print cs + 0, cc + 0, bs + 0, bc + 0, us + 0, uc + 0 }'
}
# once's upstream histogram of a server: scope -> "le=cumulative …" (every request once relayed:
# tools/call, and the sessions' initialize, tools/list, notifications, standing GET streams, DELETE).
upstream_buckets() {
  curl -s --max-time 10 "http://127.0.0.1:$once_port/metrics" | awk -v s="$1" '
    index($1, "once_upstream_seconds_bucket{scope=\"" s "\",le=\"") == 1 {
      le = $1; sub(/^.*le="/, "", le); sub(/".*$/, "", le); printf "%s=%s ", le, $2 }'
}
# The bucket of the median of what was added to the histogram between two snapshots: a b -> "(lo, hi] ms".
median_bucket() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(b, y, " "); split(a, x, " ")
    for (i = 1; i <= n; i++) { split(y[i], p, "="); split(x[i], q, "="); le[i] = p[1]; d[i] = p[2] - q[2] }
    if (d[n] <= 0) { print "-"; exit }
    lo = 0
    for (i = 1; i <= n; i++) {
      if (d[i] >= d[n] / 2) { printf "(%g, %s] ms", lo * 1000, le[i] == "+Inf" ? "inf" : le[i] * 1000; exit }
      lo = le[i]
    } }'
}
lines_of() { wc -l <"$1" | tr -d ' '; }
rows_of() { sqlite3 "file:$db?mode=ro" "SELECT count(*) FROM actions WHERE scope = '$1'" 2>/dev/null || echo "?"; }

# ---- the runs --------------------------------------------------------------------------

declare -A RATE P50 P99 CCPU SCPU OCPU NEWOK DIRECT_N
failed=0
report="$tmp/report.txt"
say() { echo "$*" | tee -a "$report"; }

run_one() { # mode target rep
  local m=$1 t=$2 rep=$3 url dmode expect tag=$run_id-$1-$2-$3
  case $t in
    direct) url="http://127.0.0.1:${SDK_PORT[$m]}/mcp" dmode=new expect=none ;;
    once-new) url="http://127.0.0.1:$once_port/v1/mcp/${SCOPE[$m]}" dmode=new expect=completed ;;
    once-replay) url="http://127.0.0.1:$once_port/v1/mcp/${SCOPE[$m]}" dmode=replay expect=replayed ;;
    direct-read) url="http://127.0.0.1:${SDK_PORT[$m]}/mcp" dmode=read expect=none ;;
    once-read) url="http://127.0.0.1:$once_port/v1/mcp/${SCOPE[$m]}" dmode=read expect=none ;;
  esac
  local r
  if [ "$t" = once-replay ]; then # the call that is replayed: made (and recorded) first
    drive --url "$url" --mode prime --tag "$tag" --expect completed
    r=$result
    [ "$driver_rc" = 0 ] || { say "  run $rep $m $t: the first call failed: $r $(head -c 600 "$tmp/driver.err")"; failed=1; return 0; }
    NEWOK[$m]=$((${NEWOK[$m]:-0} + 1))
  fi
  local e0 m0 o0 s0 tot0 idle0 st0 ub0
  e0=$(lines_of "${EFFECTS[$m]}")
  m0=$(mcp_metrics "${SCOPE[$m]}") st0=$(store_snap "${SCOPE[$m]}") ub0=$(upstream_buckets "${SCOPE[$m]}")
  read -r tot0 idle0 < <(machine_ticks)
  o0=$(proc_ticks "$once_pid") s0=$(proc_ticks "${SDK_PID[$m]}")
  drive --url "$url" --mode "$dmode" --tag "$tag" --expect "$expect" --sessions "$sessions" \
    --seconds "$secs" --warmup "$warm" --max-calls "$maxcalls"
  r=$result
  local o1 s1 tot1 idle1
  o1=$(proc_ticks "$once_pid") s1=$(proc_ticks "${SDK_PID[$m]}")
  read -r tot1 idle1 < <(machine_ticks)
  kill -0 "$once_pid" 2>/dev/null || run_failed
  [ -n "$r" ] || die "the driver gave no result ($m $t, exit $driver_rc): $(head -c 800 "$tmp/driver.err")"
  sleep 0.3 # effects of calls the server finished after the driver's last answer (none expected)
  local e1 m1 st1 ub1
  e1=$(lines_of "${EFFECTS[$m]}")
  m1=$(mcp_metrics "${SCOPE[$m]}") st1=$(store_snap "${SCOPE[$m]}") ub1=$(upstream_buckets "${SCOPE[$m]}")

  local rate p50 p99 calls ok bad errs cms outc
  rate=$(field "$r" rate) p50=$(field "$r" p50) p99=$(field "$r" p99) calls=$(field "$r" calls)
  ok=$(field "$r" ok) bad=$(field "$r" bad) errs=$(field "$r" errors) cms=$(field "$r" cpu_ms) outc=$(field "$r" outcomes)
  [ -n "$rate" ] && [ -n "$ok" ] || die "cannot read the driver's result ($m $t): $r"
  local k="$m/$t"
  RATE[$k]+="$rate " P50[$k]+="$p50 " P99[$k]+="$p99 "
  local cpu
  cpu=$(awk -v c="$cms" -v s=$((s1 - s0)) -v o=$((o1 - o0)) -v hz="$hz" -v n="$ok" 'BEGIN {
    if (n < 1) n = 1; printf "%.3f %.3f %.3f", c / n, 1000 * s / hz / n, 1000 * o / hz / n }')
  local cc sc oc
  read -r cc sc oc <<<"$cpu"
  CCPU[$k]+="$cc " SCPU[$k]+="$sc " OCPU[$k]+="$oc "
  say "$(printf '  run %d %-4s %-12s %8.1f calls/s  p50 %7.2f ms  p99 %7.2f ms  (%s measured, %s answered in all, %s wrong, %s errors; outcomes %s)' \
    "$rep" "$m" "$t" "$rate" "$p50" "$p99" "$calls" "$ok" "$bad" "$errs" "$outc")"
  say "      cpu ms per call: client $cc, SDK server $sc, once $oc; machine busy $(($(machine_busy "$tot0" "$idle0" "$tot1" "$idle1") * $(nproc)))% of $(($(nproc) * 100))%"
  if [ "${t#once-}" != "$t" ]; then
    # once's side: its durable commits, and how long the SDK server took to answer it
    say "$(awk -v a="$st0" -v b="$st1" -v d="$secs" -v w="$warm" -v mb="$(median_bucket "$ub0" "$ub1")" 'BEGIN {
      split(a, x, " "); split(b, y, " "); cc = y[2] - x[2]; bc = y[4] - x[4]; uc = y[6] - x[6]
      printf "      once: %d durable commits (%.0f/s), mean batch %.1f ops, mean commit %.2f ms", cc, cc / (d + w),
        bc ? (y[3] - x[3]) / bc : 0, cc ? 1000 * (y[1] - x[1]) / cc : 0
      printf "; %d requests to the SDK server (sessions included), median in %s", uc, mb
    }')"
  fi
  if [ "$bad" != 0 ] || [ "$errs" != 0 ] || [ "$driver_rc" != 0 ]; then
    failed=1
    say "      driver exit $driver_rc: $(head -c 600 "$tmp/driver.err" | tr '\n' ' ')"
  fi

  local grew=$((e1 - e0)) want=0 ok_e=no what
  case $t in direct | once-new) want=$ok ;; esac
  [ "$t" = once-new ] && NEWOK[$m]=$((${NEWOK[$m]:-0} + ok))
  [ "$t" = direct ] && DIRECT_N[$m]=$((${DIRECT_N[$m]:-0} + ok))
  [ "$grew" -eq "$want" ] && ok_e=yes
  [ "$ok_e" = yes ] || failed=1
  case $t in
    direct | once-new) what="$ok calls completed" ;;
    once-replay) what="$ok calls replayed, so 0" ;;
    *-read) what="$ok read-only calls, so 0" ;;
  esac
  say "      check: effects file grew by $grew; $what (equal: $ok_e)"
  if [ "${t#once-}" != "$t" ]; then
    local a b col name ok_m=no
    case $t in once-new) col=1 name=completed ;; once-replay) col=2 name=replayed ;; once-read) col=3 name=readonly ;; esac
    a=$(awk -v c="$col" '{ print $c }' <<<"$m0") b=$(awk -v c="$col" '{ print $c }' <<<"$m1")
    [ $((b - a)) -eq "$ok" ] && [ "$(awk '{ print $4 }' <<<"$m0")" = "$(awk '{ print $4 }' <<<"$m1")" ] && ok_m=yes
    [ "$ok_m" = yes ] || failed=1
    say "      check: once_mcp_calls_total{server=\"${SCOPE[$m]}\",outcome=\"$name\"} grew by $((b - a)), other outcomes unchanged (= answers: $ok_m)"
  fi
}

mkdir -p bench/out
{
  report_head
  echo "# $sessions SDK client sessions (@modelcontextprotocol/sdk $sdk_version, Node $(node --version)) in one process," \
    "calls back to back, ${warm}s warm-up + ${secs}s measured per run, at most $maxcalls calls; once [server] threads = $othreads;" \
    "$reps repetition(s)"
  echo "# store: $(fs_type "$tmp") under ${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}; once log: $logmode; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$report"
warn_tmpfs

for ((rep = 1; rep <= reps; rep++)); do
  for m in "${modes[@]}"; do
    for t in "${targets[@]}"; do run_one "$m" "$t" "$rep"; done
  done
done

label() {
  case $1 in
    direct) echo "direct to the SDK server" ;;
    once-new) echo "once, new calls" ;;
    once-replay) echo "once, replayed calls" ;;
    direct-read) echo "direct, read-only (peek)" ;;
    once-read) echo "once, read-only (peek)" ;;
  esac
}
{
  echo
  printf '%-4s %-26s %9s %8s %8s %9s   %s\n' mode run "calls/s" "p50 ms" "p99 ms" "x direct" "CPU ms per call: client / server / once"
  for m in "${modes[@]}"; do
    for t in "${targets[@]}"; do
      k="$m/$t"
      [ -n "${RATE[$k]:-}" ] || continue
      base=$(median <<<"${RATE[$m/direct]:-}")
      [ "$t" = once-read ] && [ -n "${RATE[$m/direct-read]:-}" ] && base=$(median <<<"${RATE[$m/direct-read]}")
      r=$(median <<<"${RATE[$k]}")
      x=$(awk -v a="$r" -v b="$base" 'BEGIN { if (b == "nan" || b <= 0) print "-"; else printf "%.2f", a / b }')
      printf '%-4s %-26s %9.1f %8.2f %8.2f %9s   %.2f / %.2f / %.2f\n' "$m" "$(label "$t")" "$r" \
        "$(median <<<"${P50[$k]}")" "$(median <<<"${P99[$k]}")" "$x" \
        "$(median <<<"${CCPU[$k]}")" "$(median <<<"${SCPU[$k]}")" "$(median <<<"${OCPU[$k]}")"
    done
  done
  echo "(x direct: calls/s against direct to the SDK server in the same mode; once, read-only against direct, read-only;"
  echo " CPU per call: user + system time of each process over the run / calls answered, warm-up included)"
} | tee -a "$report"

# The whole run: every call that reached the server through once left one effect, one ledger
# row and one `completed` (the replay runs' first calls included); every direct call, one effect.
say
for m in "${modes[@]}"; do
  total=$(lines_of "${EFFECTS[$m]}")
  rows=$(rows_of "${SCOPE[$m]}")
  completed=$(mcp_metrics "${SCOPE[$m]}" | awk '{ print $1 }')
  nd=${DIRECT_N[$m]:-0} no=${NEWOK[$m]:-0}
  ok=no
  [ "$rows" = "$no" ] && [ "$completed" = "$no" ] && [ "$total" -eq $((nd + no)) ] && ok=yes
  [ "$ok" = yes ] || failed=1
  say "check: $m: effects file $total lines = $nd direct + $no through once (new calls and the replay runs' first calls);" \
    "ledger rows $rows, once_mcp_calls_total{outcome=\"completed\"} $completed (all equal: $ok)"
done

check_sigterm
finish
