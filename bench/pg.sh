#!/usr/bin/env bash
# bench/pg.sh — the PostgreSQL part of `make bench`: once on PostgreSQL with
# 1, 2 and 3 gateway nodes, beside once on SQLite, and the ledger's durable
# cycles/s on PostgreSQL against a one-commit-per-operation baseline.
#
#   bench/pg.sh [BUILD_DIR]     (BUILD_DIR holds once, bench_pg and, optionally, bench_ledger)
#
# Starts, as its own children, on 127.0.0.1 only:
#   - nginx (bench/nginx.conf.in): the upstream answering POST with 200 {"ok":true};
#   - a throwaway PostgreSQL 15 (scripts/pg) in the temporary directory;
#   - once serve on SQLite (one node), then once serve on PostgreSQL with
#     1, 2 and 3 nodes on one database (a fresh once_schema per configuration),
#     each node on its own port, upstream `bench` -> nginx, key_required = yes.
# For each configuration, wrk runs new keys (bench/wrk/new_keys.lua) and then
# replays of one key (bench/wrk/replay.lua). With k nodes, k wrk processes run
# in parallel, one per node, each with WRK_CONNECTIONS / k connections (and a
# run prefix of its own, so keys never collide); their rates are summed.
# Then bench_pg (durable reserve+complete cycles/s through libonce on
# PostgreSQL, group commit, against libpq with one transaction per
# operation), and bench_ledger's SQLite figures at the same thread counts
# when BUILD_DIR has bench_ledger.
#
# Everything shares this machine's cores: the nodes, nginx, wrk and
# PostgreSQL. The CPU line under each run says who used what; on 2 cores
# more nodes mostly add contention (see bench/README.md).
#
# Environment (defaults in brackets): BENCH_SECONDS [10]  BENCH_WARMUP [1]
#   WRK_CONNECTIONS [64]  ONCE_THREADS [2]  NGINX_WORKERS [1]  BENCH_NODES [1,2,3]
#   BENCH_LEDGER_THREADS [1,64]  BENCH_LEDGER_SECONDS [5]
#   ONCE_BENCH_DIR [$TMPDIR or /tmp]  (a real disk: on tmpfs fsync costs nothing)
#   ONCE_BENCH_TIMEOUT [1200]  the whole script is stopped after this many seconds
# Output also in bench/out/pg.txt. Exit 0 when the runs completed (goals met
# or not), 1 when something failed (a server did not start, non-2xx answers,
# a count did not match, a node did not stop cleanly).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
prog=bench/pg.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
build=${1:-build}
once_bin="$build/once"
[ -x "$once_bin" ] || die "$once_bin not found; build first"
[ -x "$build/bench_pg" ] || die "$build/bench_pg not found; build first (ninja -C $build bench_pg)"

secs=${BENCH_SECONDS:-10}
warm=${BENCH_WARMUP:-1}
conns=${WRK_CONNECTIONS:-64}
othreads=${ONCE_THREADS:-2}
nworkers=${NGINX_WORKERS:-1}
node_counts=${BENCH_NODES:-1,2,3}
lthreads=${BENCH_LEDGER_THREADS:-1,64}
lsecs=${BENCH_LEDGER_SECONDS:-5}
deadline=$((SECONDS + ${ONCE_BENCH_TIMEOUT:-1200}))

need_wrk_nginx
psql_bin=$(ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -1)
[ -n "$psql_bin" ] || die "PostgreSQL is not installed (bash scripts/deps)"

tmp=$(mktemp -d "${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}}/once-pg-bench.XXXXXX")
chmod 755 "$tmp" # scripts/pg runs PostgreSQL as an unprivileged user
nginx_pid=
once_pids=()
wrk_pids=()
pg_dir="$tmp/pg"
pg_started=

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${wrk_pids[@]}"; do stop_pid "$p" INT; done
  for p in "${once_pids[@]}"; do stop_pid "$p" TERM; done
  stop_pid "$nginx_pid" TERM
  [ -n "$pg_started" ] && bash scripts/pg stop "$pg_dir" || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench/pg.sh: interrupted" >&2; exit 130' INT TERM

make_body
run_id="p$(date +%s)-$$-$RANDOM"
mkdir -p bench/out
report="$tmp/report.txt"

# ---- nginx, PostgreSQL ------------------------------------------------------------------

read -r up_port px_port < <(free_ports 2)
start_nginx "$up_port" "$px_port" "$nworkers"
wait_http "http://127.0.0.1:$up_port/" "$nginx_pid" 150 || die "nginx did not start"

pg_started=1
pg_url=$(bash scripts/pg start "$pg_dir" | tail -1) || die "scripts/pg start failed"
pg_pm=$(head -1 "$pg_dir/data/postmaster.pid")

{
  report_head
  echo "# wrk: $conns connections in all (split over the nodes), ${secs}s per run, 1024-byte JSON POST;" \
    "once [server] threads = $othreads; nginx worker_processes $nworkers"
  echo "# PostgreSQL $("$psql_bin" -X -At -d "$pg_url" -c 'SHOW server_version' 2>/dev/null)" \
    "(fsync on, synchronous_commit $("$psql_bin" -X -At -d "$pg_url" -c 'SHOW synchronous_commit'))" \
    "on $(fs_type "$tmp") under ${ONCE_BENCH_DIR:-${TMPDIR:-/tmp}};" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$report"

# ---- CPU accounting (lib.sh: proc_ticks, machine_ticks) ---------------------------------

pg_procs() { echo "$pg_pm $(pgrep -P "$pg_pm" | tr '\n' ' ')"; }
nginx_procs() { echo "$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')"; }

# ---- nodes ------------------------------------------------------------------------------

node_ports=()
start_nodes() { # store-url count
  local url=$1 k=$2 i
  read -r -a node_ports < <(free_ports "$k")
  once_pids=()
  for ((i = 0; i < k; i++)); do
    cat >"$tmp/node$i.ini" <<EOF
[server]
listen = 127.0.0.1:${node_ports[$i]}
store = $url
threads = $othreads

[upstream.bench]
url = http://127.0.0.1:$up_port
key_required = yes
EOF
    "$once_bin" serve --config "$tmp/node$i.ini" 2>"$tmp/node$i.log" >/dev/null &
    once_pids+=($!)
  done
  for ((i = 0; i < k; i++)); do
    wait_http "http://127.0.0.1:${node_ports[$i]}/readyz" "${once_pids[$i]}" 150 ||
      die "node $i did not start: $(tail -n 5 "$tmp/node$i.log")"
  done
}

stop_nodes() { # -> checks a clean exit of each
  local i p st ok
  for ((i = 0; i < ${#once_pids[@]}; i++)); do
    p=${once_pids[$i]}
    kill -TERM "$p" 2>/dev/null || true
    ok=no
    for ((j = 0; j < 150; j++)); do kill -0 "$p" 2>/dev/null || { ok=yes; break; }; sleep 0.1; done
    st=killed
    if [ $ok = yes ]; then st=0; wait "$p" || st=$?; else stop_pid "$p" KILL; fi
    [ "$st" = 0 ] || { echo "check: node $i did not stop cleanly (exit $st): $(grep -v '"route"' "$tmp/node$i.log" | tail -n 3)" | tee -a "$report"; failed=1; }
  done
  once_pids=()
}

metric_sum() { # outcome -> sum over the nodes of once_actions_total{scope="bench",outcome=...}
  local s=0 v p
  for p in "${node_ports[@]}"; do
    v=$(actions_metric "$p" "$1")
    s=$((s + ${v%.*}))
  done
  echo "$s"
}

node_url() { echo "http://127.0.0.1:$1/v1/proxy/bench/"; } # port -> the proxy URL of that node

# ---- one measured run: k wrk in parallel, one per node ----------------------------------

declare -A RATE
failed=0

run_wrk() { # label mode(new|replay) seconds record
  local label=$1 mode=$2 d=$3 record=$4 k=${#node_ports[@]} i c script
  time_left
  script=bench/wrk/new_keys.lua
  [ "$mode" = replay ] && script=bench/wrk/replay.lua
  c=$((conns / k))
  [ "$c" -ge 1 ] || c=1
  local m0 o0 p0 n0 mt0 mi0
  m0=$(metric_sum "$([ "$mode" = new ] && echo new || echo replayed)")
  o0=$(proc_ticks "${once_pids[@]}"); p0=$(proc_ticks $(pg_procs)); n0=$(proc_ticks $(nginx_procs))
  read -r mt0 mi0 < <(machine_ticks)
  wrk_pids=()
  for ((i = 0; i < k; i++)); do
    ONCE_BENCH_RUN="$run_id-$label-$mode-$record-n$i" timeout --signal=INT --kill-after=5 $((d + 30)) \
      wrk -t"$([ "$c" -ge 2 ] && echo 2 || echo 1)" -c"$c" -d"${d}s" --timeout 5s --latency -s "$script" \
      "$(node_url "${node_ports[$i]}")" >"$tmp/wrk$i.txt" 2>&1 &
    wrk_pids+=($!)
  done
  local rc=0
  for i in "${!wrk_pids[@]}"; do wait "${wrk_pids[$i]}" || rc=$?; done
  wrk_pids=()
  [ "$rc" -eq 0 ] || die "wrk failed on $label $mode: $(tail -n 3 "$tmp"/wrk*.txt)"
  [ "$record" = 1 ] || return 0
  local o1 p1 n1 mt1 mi1
  o1=$(proc_ticks "${once_pids[@]}"); p1=$(proc_ticks $(pg_procs)); n1=$(proc_ticks $(nginx_procs))
  read -r mt1 mi1 < <(machine_ticks)
  local rps=0 n=0 p99max=0 bad="" r q l
  for ((i = 0; i < k; i++)); do
    r=$(awk '/^Requests\/sec:/ { print $2 }' "$tmp/wrk$i.txt")
    q=$(awk '/ requests in / { print $1 }' "$tmp/wrk$i.txt")
    l=$(awk '$1 == "99%" { v = $2 } END { if (v ~ /us$/) { sub(/us/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms/, "", v) } else if (v ~ /s$/) { sub(/s/, "", v); v *= 1000 } print v + 0 }' "$tmp/wrk$i.txt")
    [ -n "$r" ] && [ -n "$q" ] || die "cannot read wrk's output: $(cat "$tmp/wrk$i.txt")"
    grep -q 'Non-2xx\|Socket errors' "$tmp/wrk$i.txt" && bad+=" node$i: $(grep 'Non-2xx\|Socket errors' "$tmp/wrk$i.txt" | tr -s ' ')"
    rps=$(awk -v a="$rps" -v b="$r" 'BEGIN { print a + b }')
    n=$((n + q))
    p99max=$(awk -v a="$p99max" -v b="$l" 'BEGIN { print (b > a ? b : a) }')
  done
  RATE[$label-$mode]=$rps
  printf '  %-14s %-7s %9.0f req/s  p99 (worst node) %7.2f ms  (%d requests%s)\n' "$label" "$mode" "$rps" "$p99max" "$n" "$bad" | tee -a "$report"
  [ -z "$bad" ] || failed=1
  local busy
  busy=$(awk -v t=$((mt1 - mt0)) -v i=$((mi1 - mi0)) -v c="$(nproc)" 'BEGIN { printf "%.0f", t ? 100 * c * (t - i) / t : 0 }')
  awk -v o=$((o1 - o0)) -v p=$((p1 - p0)) -v g=$((n1 - n0)) -v hz="$hz" -v d="$d" -v b="$busy" -v c="$(nproc)" 'BEGIN {
    printf "      cpu (100%% = one core): once nodes %.0f%%, postgres %.0f%%, nginx %.0f%%; machine %d%% of %d%% (the rest: wrk)\n",
      100 * o / hz / d, 100 * p / hz / d, 100 * g / hz / d, b, c * 100 }' | tee -a "$report"
  sleep 0.5
  local m1 grew
  m1=$(metric_sum "$([ "$mode" = new ] && echo new || echo replayed)")
  grew=$((m1 - m0))
  local ok=no
  [ "$grew" -ge "$n" ] && [ "$grew" -le $((n + conns)) ] && ok=yes
  [ $ok = yes ] || failed=1
  echo "check: $label $mode: wrk counted $n answers, once_actions_total{outcome=\"$([ "$mode" = new ] && echo new || echo replayed)\"} summed over the nodes grew by $grew (ok: $ok)" | tee -a "$report"
}

bench_config() { # label store-url nodes
  local label=$1 url=$2 k=$3
  start_nodes "$url" "$k"
  local key="$run_id-$label-replay" got i
  got=$(outcome_of "$(node_url "${node_ports[0]}")" "$key")
  [ "$got" = "200 completed" ] || die "$label: the first request answered '$got', not '200 completed'"
  for ((i = 0; i < k; i++)); do
    got=$(outcome_of "$(node_url "${node_ports[$i]}")" "$key")
    [ "$got" = "200 replayed" ] || die "$label: node $i answered the retry '$got', not '200 replayed'"
  done
  export ONCE_BENCH_KEY="$key"
  if [ "$warm" -gt 0 ]; then run_wrk "$label" new "$warm" 0; fi
  run_wrk "$label" new "$secs" 1
  run_wrk "$label" replay "$secs" 1
  cfg_total=$(metric_sum new)
  stop_nodes
}

echo "== proxy: once on SQLite (1 node) and on PostgreSQL (${node_counts//,/, } nodes)" | tee -a "$report"
bench_config sqlite "sqlite:$tmp/once.db" 1
total=$cfg_total
rows=$(sqlite3 "file:$tmp/once.db?mode=ro" "SELECT count(*) FROM actions WHERE state = 'completed'" 2>/dev/null || echo "?")
all=$(sqlite3 "file:$tmp/once.db?mode=ro" "SELECT count(*) FROM actions" 2>/dev/null || echo "?")
ok=no; [ "$rows" = "$all" ] && [ "$all" = "$total" ] && ok=yes; [ $ok = yes ] || failed=1
echo "check: sqlite: $all rows, $rows completed, once_actions_total{outcome=\"new\"} $total (equal: $ok)" | tee -a "$report"
IFS=, read -r -a counts <<<"$node_counts"
for k in "${counts[@]}"; do
  schema="bench_${k}n_$$"
  bench_config "postgres-${k}n" "$pg_url?once_schema=$schema" "$k"
  total=$cfg_total
  read -r all rows < <("$psql_bin" -X -At -F ' ' -d "$pg_url" -c \
    "SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM \"$schema\".actions")
  ok=no; [ "$rows" = "$all" ] && [ "$all" = "$total" ] && ok=yes; [ $ok = yes ] || failed=1
  echo "check: postgres ${k} node(s): $all rows, $rows completed, once_actions_total{outcome=\"new\"} summed $total (equal: $ok)" | tee -a "$report"
  "$psql_bin" -X -q -d "$pg_url" -c "SET client_min_messages TO warning; DROP SCHEMA \"$schema\" CASCADE" >/dev/null 2>&1 || true
done
declare -A R
while read -r label mode rate; do R[$label-$mode]=$rate; done < <(awk '$1 ~ /^(sqlite|postgres-[0-9]+n)$/ && $4 == "req/s" { print $1, $2, $3 }' "$report")
grep -q '(ok: no)\|(equal: no)\|did not stop cleanly\|Non-2xx\|Socket errors' "$report" && failed=1

{
  echo
  printf '%-24s %12s %12s %16s\n' "once on" "new req/s" "replay req/s" "new x 1 PG node"
  one=${R[postgres-1n-new]:-0}
  for label in sqlite $(for k in "${counts[@]}"; do echo "postgres-${k}n"; done); do
    printf '%-24s %12.0f %12.0f %16s\n' "$label" "${R[$label-new]:-0}" "${R[$label-replay]:-0}" \
      "$(awk -v a="${R[$label-new]:-0}" -v b="$one" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
  done
  echo
  if [ -n "${R[postgres-3n-new]:-}" ] && [ -n "${R[postgres-1n-new]:-}" ]; then
    r=$(awk -v a="${R[postgres-3n-new]}" -v b="${R[postgres-1n-new]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    echo "goal: 3 nodes >= 2x 1 node new-key throughput: $(awk -v r="$r" 'BEGIN { print (r >= 2 ? "yes" : "no") }') (${r}x; $(nproc) cores shared by the nodes, nginx, wrk and PostgreSQL)"
  fi
} | tee -a "$report"

echo | tee -a "$report"
echo "== ledger: durable reserve+complete cycles/s through libonce, PostgreSQL (bench_pg)" | tee -a "$report"
time_left
set +e
timeout --signal=INT --kill-after=10 600 "$build/bench_pg" --url "$pg_url" --threads "$lthreads" --seconds "$lsecs" 2>&1 |
  tee -a "$report"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "bench/pg.sh: bench_pg failed (exit $rc)" | tee -a "$report"; failed=1; }
if [ -x "$build/bench_ledger" ]; then
  echo | tee -a "$report"
  echo "== ledger: the same on SQLite (bench_ledger, for comparison)" | tee -a "$report"
  set +e
  timeout --signal=INT --kill-after=10 600 "$build/bench_ledger" --threads "$lthreads" --seconds "$lsecs" \
    ${ONCE_BENCH_DIR:+--dir "$ONCE_BENCH_DIR"} 2>&1 | grep -E '^ *(threads|[0-9]+ +\|)|^goal' | tee -a "$report"
  set -e
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$report"

finish
