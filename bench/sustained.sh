#!/usr/bin/env bash
# bench/sustained.sh — steady latency under a sustained load (issue 30): the
# store's housekeeping (checkpoints, the WAL bound, sweeps, index growth) must
# not stall callers, so latency is reported per 5-second window, next to what
# the store did in that window.
#
#   bench/sustained.sh BUILD [BASE_BUILD]
#
# BUILD (and BASE_BUILD) hold `once` and `bench_load`; bench_prefill is taken
# from BASE_BUILD when it has one (a template the older schema wrote is
# migrated forward by the newer build, not the other way), else from BUILD.
#
# Runs (SUSTAINED_RUNS, in this order; each on its own copy of a store, with
# once serve as a child on 127.0.0.1 and bench_load against it):
#   hooks        webhooks, GitHub-signed, every event its own ~1 KB body and
#                delivery id, paced at SUSTAINED_RATE new events/s (open loop,
#                latency from each request's due time) for SUSTAINED_SECONDS,
#                on a store pre-filled with SUSTAINED_PREFILL events; side
#                stream: duplicates of accepted events at SUSTAINED_DUP_RATE/s.
#   proxy        new Idempotency-Keys through the proxy to nginx (as
#                bench/proxy.sh), closed loop on SUSTAINED_CONNS connections (as
#                wrk -c64), on a store pre-filled with SUSTAINED_PREFILL
#                completed actions; side stream: replays of completed keys.
#   proxy-fresh  the same on an empty store: the throughput to compare with.
#   With SUSTAINED_PG=1 also hooks-pg: the hooks run on PostgreSQL (scripts/pg,
#   one node), reported without a goal.
# The pre-filled stores are kept as templates in SUSTAINED_DIR
# (sqlite-events-N.db, sqlite-actions-N.db) and copied for every run: made
# once, by bench_prefill; delete them to make new ones.
#
# Every window's row (bench_load): sent, answered, rate, p50/p99/max ms and
# answers that were not right; the side stream's count, p99, max; and from
# GET /metrics, sampled every second: commits/s and their mean time
# (once_store_commit_seconds), the largest WAL seen (once_store_wal_bytes),
# checkpoints by the writer and in the background (count/ms summed, from
# once_store_checkpoint_seconds{by=...}; "absent" when the build does not
# export them).
# After each run, with once stopped (SIGTERM, which must end it cleanly):
# every sampled accepted event id (key) is in the store, the rows the run
# added equal bench_load's accepted count, and the WAL stayed within wal_max.
#
# With BASE_BUILD the builds alternate, base first (A B A B A B for
# SUSTAINED_REPS = 3), and the report prints, per run kind and window, the
# median over the repetitions of each build side by side, and the goals on
# the medians. Files: bench/out/sustained.txt (the report),
# bench/out/sustained-KIND-BUILD-REP.{txt,csv} (each run),
# bench/out/sustained-KIND.csv (all rows: build, rep, window, …) and
# bench/out/sustained-KIND-median.csv (build, window, medians), which
# bench/plot_sustained.sh draws.
#
# Environment (defaults in brackets):
#   SUSTAINED_PREFILL [5000000]   SUSTAINED_SECONDS [60]   SUSTAINED_RATE [10000]
#   SUSTAINED_DUP_RATE [500]      SUSTAINED_CONNS [64]     SUSTAINED_HOOK_CONNS [64]  SUSTAINED_DUP_CONNS [16]
#   SUSTAINED_REPS [3 with BASE_BUILD, else 1]   SUSTAINED_RUNS [hooks,proxy,proxy-fresh]
#   SUSTAINED_WAL_MAX [64MiB]  wal_max of once    ONCE_THREADS [2]  [server] threads
#   SUSTAINED_DIR [${ONCE_BENCH_DIR:-/tmp}/once-sustained]  templates and run copies (a real disk)
#   SUSTAINED_PG [0]  SUSTAINED_PG_PREFILL [SUSTAINED_PREFILL]
#   SUSTAINED_TRACE [0]  1, or a list of calls: `perf trace` follows once's
#                 fsync and fdatasync (1) or the calls listed (fdatasync,pwrite64,...)
#                 for the whole run; the report gets, per thread name, call and
#                 file, how many took over 1 ms and their p50/p99/max
#                 (bench/out/sustained-KIND-BUILD-REP.trace holds each such call).
#                 Tracing pwrite64 or pread64 slows once down: at 5,000 events/s
#                 the run then fell behind, at about 2,500/s
#   SUSTAINED_SERVER_EXTRA []  more [server] lines for once
#   ONCE_BENCH_TIMEOUT [7200]  the whole script is stopped after this many seconds
#
# Exit status: 0 when the runs completed (goals met or not: it is a
# benchmark), 1 when something failed (a server did not start, rows missing,
# once did not stop cleanly).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
prog=bench/sustained.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: bench/sustained.sh BUILD [BASE_BUILD]"
new_build=$1
base_build=${2:-}
for b in "$new_build" $base_build; do
  [ -x "$b/once" ] || die "$b/once not found; build first (ninja -C $b once bench_load bench_prefill)"
  [ -x "$b/bench_load" ] || [ -x "$new_build/bench_load" ] || die "$b/bench_load not found"
done
load_bin="$new_build/bench_load" # one load generator for both builds: only the server differs
[ -x "$load_bin" ] || die "$load_bin not found (ninja -C $new_build bench_load)"
prefill_bin="$new_build/bench_prefill"
[ -n "$base_build" ] && [ -x "$base_build/bench_prefill" ] && prefill_bin="$base_build/bench_prefill"
[ -x "$prefill_bin" ] || die "$prefill_bin not found (ninja -C $new_build bench_prefill)"

prefill=${SUSTAINED_PREFILL:-5000000}
secs=${SUSTAINED_SECONDS:-60}
rate=${SUSTAINED_RATE:-10000}
dup_rate=${SUSTAINED_DUP_RATE:-500}
conns=${SUSTAINED_CONNS:-64}
hook_conns=${SUSTAINED_HOOK_CONNS:-64}
dup_conns=${SUSTAINED_DUP_CONNS:-16}
othreads=${ONCE_THREADS:-2}
if [ -n "$base_build" ]; then reps=${SUSTAINED_REPS:-3}; else reps=${SUSTAINED_REPS:-1}; fi
runs=${SUSTAINED_RUNS:-hooks,proxy,proxy-fresh}
[ "${SUSTAINED_PG:-0}" = 1 ] && runs+=",hooks-pg"
pg_prefill=${SUSTAINED_PG_PREFILL:-$prefill}
wal_max=${SUSTAINED_WAL_MAX:-64MiB}
dir=${SUSTAINED_DIR:-${ONCE_BENCH_DIR:-/tmp}/once-sustained}
deadline=$((SECONDS + ${ONCE_BENCH_TIMEOUT:-7200}))
for v in "$prefill" "$secs" "$rate" "$dup_rate" "$conns" "$hook_conns" "$dup_conns" "$othreads" "$reps" "$pg_prefill"; do
  case $v in '' | *[!0-9]*) die "SUSTAINED_* sizes, rates and counts must be whole numbers" ;; esac
done
trace=${SUSTAINED_TRACE:-0}
case $trace in
  0) ;;
  1) trace=fsync,fdatasync ;;
  *[!a-z0-9_,]* | ,* | *, | *,,*) die "SUSTAINED_TRACE: 0, 1 or a comma-separated list of system calls" ;;
esac
[ "$trace" = 0 ] || command -v perf >/dev/null || die "SUSTAINED_TRACE needs perf (apt-get install linux-perf)"
[ "$secs" -ge 5 ] && [ "$reps" -ge 1 ] || die "SUSTAINED_SECONDS must be >= 5, SUSTAINED_REPS >= 1"
secret=bench-secret
source=gh
scope=bench
logmode=${ONCE_BENCH_LOG:-file} # once's request log: file (in the run's directory) or null

for t in curl sqlite3 python3; do command -v "$t" >/dev/null || die "$t is missing (bash scripts/deps --bench)"; done
case ",$runs," in *,proxy*) need_wrk_nginx ;; esac

# ---- the directories, the children, and their end ----------------------------------------

mkdir -p "$dir" bench/out
tmp=$(mktemp -d "$dir/run.XXXXXX")
once_pid='' nginx_pid='' load_pid='' trace_pid='' pg_dir=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$load_pid" INT
  stop_pid "$trace_pid" INT
  stop_pid "$once_pid" TERM
  stop_pid "$nginx_pid" TERM
  [ -n "$pg_dir" ] && bash scripts/pg stop "$pg_dir" >/dev/null 2>&1
  rm -rf "$tmp"
  [ -n "$pg_dir" ] && rm -rf "$pg_dir"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench/sustained.sh: interrupted" >&2; exit 130' INT TERM

# wal_max in bytes, to check the WAL against it.
wal_bound=$(awk -v v="$wal_max" 'BEGIN { n = v + 0; u = v; sub(/^[0-9]+/, "", u)
  m = u == "GiB" ? 1073741824 : u == "MiB" ? 1048576 : u == "KiB" ? 1024 : 1; print n * m }')

# ---- templates: pre-filled stores, made once ---------------------------------------------

# kind (events|actions) count -> the template's path, made if missing.
template() {
  local kind=$1 n=$2 f
  f="$dir/sqlite-$kind-$n.db"
  if [ ! -f "$f" ]; then
    time_left
    echo "# pre-filling $f with $n $kind ($prefill_bin; kept for later runs)" | tee -a "$report" >&2
    rm -f "$f.tmp" "$f.tmp-wal" "$f.tmp-shm"
    local args=(--events "$n" --source "$source" --secret "$secret")
    [ "$kind" = actions ] && args=(--actions "$n" --scope "$scope")
    timeout $((deadline - SECONDS)) "$prefill_bin" --store "sqlite:$f.tmp" "${args[@]}" 2>"$tmp/prefill.log" |
      tee -a "$report" >&2 || die "bench_prefill failed: $(tail -n 3 "$tmp/prefill.log")"
    [ ! -e "$f.tmp-wal" ] || [ ! -s "$f.tmp-wal" ] || die "the template's WAL was not checkpointed at close"
    rm -f "$f.tmp-wal" "$f.tmp-shm"
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# ---- one run -----------------------------------------------------------------------------

# once's config for a run: port store -> $run/once.ini
write_ini() {
  cat >"$run/once.ini" <<EOF
; generated by bench/sustained.sh
[server]
listen = 127.0.0.1:$1
store = $2
threads = $othreads
wal_max = $wal_max
${SUSTAINED_SERVER_EXTRA:-}

[source.$source]
verify = github
secret = $secret

[upstream.$scope]
url = http://127.0.0.1:$up_port
key_required = yes
EOF
}

# kind build-label build-dir rep -> runs it; its rows in bench/out/sustained-KIND-LABEL-REP.{txt,csv}
run_one() {
  local kind=$1 label=$2 bdir=$3 rep=$4 store port prefix url rc=0
  time_left
  run="$tmp/$kind-$label-$rep"
  mkdir -p "$run"
  local base="bench/out/sustained-$kind-$label-$rep"
  prefix="s$(date +%s)$RANDOM"
  case $kind in
    hooks) cp --sparse=always "$(template events "$prefill")" "$run/once.db"; store="sqlite:$run/once.db" ;;
    proxy) cp --sparse=always "$(template actions "$prefill")" "$run/once.db"; store="sqlite:$run/once.db" ;;
    proxy-fresh) store="sqlite:$run/once.db" ;;
    hooks-pg)
      local dbname="run_${label}_$rep"
      "$psql" "$pg_admin" -qc "DROP DATABASE IF EXISTS $dbname" -c "CREATE DATABASE $dbname TEMPLATE once" >/dev/null 2>"$tmp/psql.err" ||
        die "cannot copy the PostgreSQL template: $(cat "$tmp/psql.err")"
      store="${pg_url%/once}/$dbname"
      ;;
  esac
  # The copy's pages are written back now, not during the run (where they
  # would compete with the store's own fsyncs).
  [ -f "$run/once.db" ] && sync "$run/once.db"
  port=$(free_ports 1)
  write_ini "$port" "$store"
  start_once_slow "$port"
  url="http://127.0.0.1:$port"
  local args=(--url "$url" --seconds "$secs" --dup-rate "$dup_rate" --dup-connections "$dup_conns" --metrics "$url/metrics"
    --csv "$base.csv" --ids "$run/ids.txt" --prefix "$prefix" --grace 15)
  case $kind in
    hooks*) args+=(--mode hooks --source "$source" --secret "$secret" --rate "$rate" --connections "$hook_conns") ;;
    proxy*) args+=(--mode proxy --upstream "$scope" --connections "$conns") ;;
  esac
  echo "## $kind, $label ($bdir/once), run $rep of $reps; load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$report"
  local o0 o1 tot0 idle0 tot1 idle1 t_start=$SECONDS
  [ "$trace" != 0 ] && trace_start "$base"
  o0=$(proc_ticks "$once_pid")
  read -r tot0 idle0 < <(machine_ticks)
  timeout --signal=INT --kill-after=10 $((secs + 60)) "$load_bin" "${args[@]}" >"$base.txt" 2>&1 &
  load_pid=$!
  wait "$load_pid" || rc=$?
  load_pid=
  o1=$(proc_ticks "$once_pid")
  read -r tot1 idle1 < <(machine_ticks)
  [ "$trace" != 0 ] && trace_stop "$base"
  tee -a "$report" <"$base.txt"
  [ "$trace" != 0 ] && tee -a "$report" <"$base.trace.txt"
  # Where the CPU went (lib.sh): once, the load generator (its own figure), everything else.
  awk -v o=$((o1 - o0)) -v hz="$hz" -v d=$((SECONDS - t_start)) -v busy="$(machine_busy "$tot0" "$idle0" "$tot1" "$idle1")" \
    -v n="$(nproc)" -v lg="$(awk '/^bench_load cpu:/ { print $3 }' "$base.txt")" 'BEGIN {
      if (d < 1) d = 1
      once = 100 * o / hz / d; gen = 100 * lg / d; m = busy * n; other = m - once - gen
      printf "cpu (100%% = one core): once %.0f%%, bench_load %.0f%%, other work %.0f%%; machine %.0f%% of %d%%\n",
        once, gen, other < 0 ? 0 : other, m, 100 * n }' | tee -a "$report"
  [ "$rc" -eq 0 ] || { echo "check: bench_load exited $rc" | tee -a "$report"; failed=1; }
  kill -0 "$once_pid" 2>/dev/null || run_failed
  check_sigterm
  check_rows "$kind" "$store" "$prefix" "$base"
  rm -rf "$run"
  [ "$kind" = hooks-pg ] && "$psql" "$pg_admin" -qc "DROP DATABASE IF EXISTS run_${label}_$rep" >/dev/null 2>&1
  return 0
}

# perf trace on once for the run: base -> trace_pid. The calls that return
# in under 1 ms are left out of the file (--duration): they are most calls,
# and not what stalls a caller.
trace_start() {
  perf trace -p "$once_pid" -e "$trace" --duration 1 -o "$1.trace" 2>"$tmp/trace.err" &
  trace_pid=$!
}

# Stops the trace and summarizes it per thread, call and file (once's
# descriptors read from /proc while it still runs): base -> base.trace.txt.
trace_stop() {
  local fds="$tmp/fds" fd
  : >"$fds"
  for fd in /proc/"$once_pid"/fd/*; do echo "${fd##*/} $(readlink "$fd" 2>/dev/null)"; done >"$fds" 2>/dev/null || true
  stop_pid "$trace_pid" INT
  trace_pid=
  [ -s "$1.trace" ] || { echo "trace: perf trace wrote nothing: $(tail -n 2 "$tmp/trace.err")" >"$1.trace.txt"; return 0; }
  python3 - "$1.trace" "$fds" >"$1.trace.txt" <<'PY'
import re, sys
from collections import defaultdict
files = {}
for line in open(sys.argv[2]):
    n, _, target = line.rstrip("\n").partition(" ")
    files[n] = target.rsplit("/", 1)[-1] or target
call = re.compile(r"^\s*[\d.]+ \(\s*([\d.]+) ms\): (?:([^ ]+)/\d+ )?(\w+)\(fd: (\d+)")
by = defaultdict(list)
for line in open(sys.argv[1]):
    m = call.match(line)
    if m:
        by[(m.group(2) or "once", m.group(3), files.get(m.group(4), "fd " + m.group(4)))].append(float(m.group(1)))
def q(xs, p):
    return xs[min(len(xs) - 1, int(p * len(xs)))]
print("trace (perf trace, calls over 1 ms): thread  call  file  count  p50 ms  p99 ms  max ms")
for (thread, name, f), xs in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    xs.sort()
    print(f"trace: {thread:<14} {name:<10} {f:<20} {len(xs):6d} {q(xs, .5):7.1f} {q(xs, .99):7.1f} {xs[-1]:7.1f}")
if not by:
    print("trace: no call took over 1 ms")
PY
}

# lib.sh's start_once gives a server 10 s; one opening (and maybe migrating) a
# store of millions of rows gets 300 s: port -> once_pid.
start_once_slow() {
  # shellcheck disable=SC2034 # read by lib.sh (check_sigterm, run_failed)
  once_log=/dev/null
  [ "$logmode" = file ] && once_log="$run/once.log"
  "$once_bin" serve --config "$run/once.ini" 2>"$once_log" >/dev/null &
  once_pid=$!
  wait_http "http://127.0.0.1:$1/healthz" "$once_pid" 3000 ||
    die "once did not start: $(tail -n 5 "$once_log" 2>/dev/null)"
}

# After a run, once stopped: the sampled ids are stored, the run's rows equal
# bench_load's accepted count, the WAL stayed within wal_max.
check_rows() {
  local kind=$1 store=$2 prefix=$3 base=$4 accepted rows missing sampled q ok late
  accepted=$(awk '/^accepted: / { print $2 + 8 }' "$base.txt") # + the seeds
  # Requests still unanswered when bench_load gave up may have been stored since.
  late=$(sed -n 's/^unanswered after .* grace: \([0-9]*\) new.*/\1/p' "$base.txt")
  late=${late:-0}
  sampled=$(grep -c . "$run/ids.txt" || true)
  case $kind in
    hooks*) q="SELECT count(*) FROM events WHERE source = '$source' AND event_id >= '$prefix-' AND event_id < '$prefix.'" ;;
    proxy*) q="SELECT count(*) FROM actions WHERE scope = '$scope' AND key >= '$prefix-' AND key < '$prefix.' AND state = 'completed'" ;;
  esac
  # The sampled ids as one IN list, given on stdin (too long for an argument).
  local inlist qs found
  inlist=$(sed "s/.*/'&'/" "$run/ids.txt" | paste -sd, -)
  case $kind in
    hooks*) qs="SELECT count(*) FROM events WHERE source = '$source' AND event_id IN ($inlist);" ;;
    proxy*) qs="SELECT count(*) FROM actions WHERE scope = '$scope' AND key IN ($inlist) AND state = 'completed';" ;;
  esac
  if [ "$kind" = hooks-pg ]; then
    local db="${pg_url%/once}/run_${label}_$rep"
    rows=$("$psql" "$db" -tAc "$q" 2>/dev/null || echo "?")
    found=$(echo "$qs" | "$psql" "$db" -tA 2>/dev/null || echo 0)
  else
    rows=$(sqlite3 "file:$run/once.db?mode=ro" "$q" 2>/dev/null || echo "?")
    found=$(echo "$qs" | sqlite3 "file:$run/once.db?mode=ro" 2>/dev/null || echo 0)
  fi
  missing=$((sampled - found))
  ok=no
  [ "$rows" != "?" ] && [ "$rows" -ge "$accepted" ] && [ "$rows" -le $((accepted + late)) ] && [ "$missing" -eq 0 ] && ok=yes
  echo "check: $sampled sampled ids, $missing missing; rows of this run $rows, accepted by bench_load $accepted (incl. 8 seeds)" \
    "+ up to $late unanswered (stored: $ok)" | tee -a "$report"
  [ "$ok" = yes ] || failed=1
  if [ "$kind" != hooks-pg ]; then
    local peak
    peak=$(awk -F, 'NR > 1 && $18 != "nan" && $18 > m { m = $18 } END { print m + 0 }' "$base.csv")
    ok=$(yn "$(awk -v p="$peak" -v b="$wal_bound" 'BEGIN { print (p <= b) }')")
    echo "check: largest WAL sampled $(awk -v p="$peak" 'BEGIN { printf "%.1f", p / 1048576 }') MB; within wal_max ($wal_max): $ok" | tee -a "$report"
  fi
}

# ---- the report --------------------------------------------------------------------------

report="$tmp/report.txt"
failed=0
{
  report_head
  echo "# sustained load: $secs s per run, windows of 5 s; hooks at $rate new events/s (open loop, $hook_conns connections)," \
    "proxy closed loop on $conns connections; duplicates/replays at $dup_rate/s; prefill $prefill rows; wal_max $wal_max;" \
    "once threads $othreads; $reps repetition(s)${base_build:+, builds alternated (base $base_build, new $new_build)}"
  echo "# store: $(fs_type "$dir") under $dir; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" \
    "(a shared machine: other work shows in the figures)"
} | tee "$report"
[ "$(stat -f -c %T "$dir")" = tmpfs ] && echo "# warning: the store is on tmpfs, where fsync costs nothing" | tee -a "$report"

case ",$runs," in
  *,proxy*)
    read -r up_port px_port < <(free_ports 2)
    start_nginx "$up_port" "$px_port" 1
    wait_http "http://127.0.0.1:$up_port/" "$nginx_pid" || die "nginx did not start: $(tail -n 5 "$tmp/nginx/error.log")"
    ;;
  *) up_port=9 ;; # unused: no proxy run
esac

if [[ ",$runs," == *,hooks-pg,* ]]; then
  pg_dir=$(mktemp -d /tmp/once-sustained-pg.XXXXXX)
  pg_url=$(bash scripts/pg start "$pg_dir" | tail -n 1) || die "scripts/pg start failed"
  pg_admin="${pg_url%/once}/postgres"
  psql=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)/psql
  echo "# PostgreSQL: pre-filling $pg_prefill events" | tee -a "$report"
  timeout $((deadline - SECONDS)) "$prefill_bin" --store "$pg_url" --events "$pg_prefill" --source "$source" \
    --secret "$secret" 2>"$tmp/prefill-pg.log" | tee -a "$report" || die "bench_prefill (PostgreSQL) failed"
fi

# Templates first, so that no run waits for one.
case ",$runs," in *,hooks,*) template events "$prefill" >/dev/null ;; esac
case ",$runs," in *,proxy,*) template actions "$prefill" >/dev/null ;; esac

kinds=()
IFS=, read -ra kinds <<<"$runs"
labels=(new)
[ -n "$base_build" ] && labels=(base new)
for kind in "${kinds[@]}"; do
  case $kind in hooks | proxy | proxy-fresh | hooks-pg) ;; *) die "unknown run '$kind' in SUSTAINED_RUNS" ;; esac
  for ((rep = 1; rep <= reps; rep++)); do
    for label in "${labels[@]}"; do
      once_bin="$new_build/once"
      [ "$label" = base ] && once_bin="$base_build/once"
      run_one "$kind" "$label" "${once_bin%/once}" "$rep"
    done
  done
done

# ---- medians per window, the goals ---------------------------------------------------------

python3 - "$report" "$rate" "$reps" "${labels[@]}" -- "${kinds[@]}" <<'EOF' | tee -a "$report"
import csv, statistics, sys
args = sys.argv[1:]
report, rate, reps = args[0], float(args[1]), int(args[2])
sep = args.index("--")
labels, kinds = args[3:sep], args[sep + 1:]

def num(v):
    try:
        x = float(v)
        return None if x != x else x
    except ValueError:
        return None

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

cols = ["rate", "p50_ms", "p99_ms", "max_ms", "errors", "side_p99_ms", "side_max_ms", "side_errors",
        "commits_per_s", "commit_mean_ms", "wal_max_bytes", "ckpt_writer_n", "ckpt_writer_ms", "ckpt_bg_n", "ckpt_bg_ms"]
summary = {}
for kind in kinds:
    rows = []  # build, rep, row
    for label in labels:
        for rep in range(1, reps + 1):
            try:
                with open(f"bench/out/sustained-{kind}-{label}-{rep}.csv") as f:
                    for r in csv.DictReader(f):
                        rows.append((label, rep, r))
            except FileNotFoundError:
                pass
    if not rows:
        continue
    with open(f"bench/out/sustained-{kind}.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        head = list(rows[0][2].keys())
        w.writerow(["build", "rep"] + head)
        for label, rep, r in rows:
            w.writerow([label, rep] + [r[h] for h in head])
    # full windows only (the last, partial one holds the stragglers)
    wins = sorted({float(r["t_s"]) for _, _, r in rows if abs(float(r["seconds"]) - 5) < 0.01})
    medians = {}
    for label in labels:
        for t in wins:
            sel = [r for l, _, r in rows if l == label and float(r["t_s"]) == t and abs(float(r["seconds"]) - 5) < 0.01]
            medians[(label, t)] = {c: med([num(r.get(c, "")) for r in sel]) for c in cols}
    with open(f"bench/out/sustained-{kind}-median.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["build", "t_s"] + cols)
        for label in labels:
            for t in wins:
                m = medians[(label, t)]
                w.writerow([label, int(t)] + ["" if m[c] is None else f"{m[c]:.3f}" for c in cols])
    def f(v, p=2):
        return "-" if v is None else f"{v:.{p}f}"
    print()
    print(f"### {kind}: per-window medians of {reps} run(s)" + (" — " + " | ".join(labels) if len(labels) > 1 else ""))
    hdr = f"{'t_s':>4}"
    for label in labels:
        hdr += f" | {label:>4} {'rate/s':>7} {'p50':>6} {'p99':>7} {'max':>7} {'err':>4} {'dup99':>6} {'c/s':>5} {'c_ms':>6} {'walMB':>6} {'ckw n/ms':>10} {'ckb n/ms':>10}"
    print(hdr)
    for t in wins:
        line = f"{int(t):>4}"
        for label in labels:
            m = medians[(label, t)]
            ckw = "absent" if m["ckpt_writer_n"] is None else f"{m['ckpt_writer_n']:.0f}/{m['ckpt_writer_ms']:.0f}"
            ckb = "absent" if m["ckpt_bg_n"] is None else f"{m['ckpt_bg_n']:.0f}/{m['ckpt_bg_ms']:.0f}"
            wal = None if m["wal_max_bytes"] is None else m["wal_max_bytes"] / 1048576
            line += (f" | {'':>4} {f(m['rate'], 0):>7} {f(m['p50_ms']):>6} {f(m['p99_ms']):>7} {f(m['max_ms']):>7}"
                     f" {f(m['errors'], 0):>4} {f(m['side_p99_ms']):>6} {f(m['commits_per_s'], 0):>5} {f(m['commit_mean_ms']):>6}"
                     f" {f(wal, 1):>6} {ckw:>10} {ckb:>10}")
        print(line)
    for label in labels:
        ms = [medians[(label, t)] for t in wins]
        worst = max((m["p99_ms"] for m in ms if m["p99_ms"] is not None), default=None)
        dup = max((m["side_p99_ms"] for m in ms if m["side_p99_ms"] is not None), default=None)
        thr = statistics.mean([m["rate"] for m in ms if m["rate"] is not None] or [0])
        errs = sum(m["errors"] or 0 for m in ms)
        summary[(kind, label)] = thr
        goal = {"hooks": 10, "proxy": 20}.get(kind)
        line = f"{kind} {label}: worst window p99 {f(worst)} ms, mean rate {thr:.0f}/s, duplicates/replays worst p99 {f(dup)} ms, errors {errs:.0f}"
        print(line)
        if goal is not None and worst is not None:
            ok = worst < goal
            if kind == "hooks":
                ok = ok and min(m["rate"] or 0 for m in ms) >= 0.95 * rate
            print(f"goal: {kind} {label}: every window's p99 < {goal} ms" + (f" at >= 95% of {rate:.0f}/s" if kind == "hooks" else "")
                  + f": {'yes' if ok else 'no'}")
        if kind in ("hooks", "proxy") and dup is not None:
            print(f"goal: {kind} {label}: {'duplicates' if kind == 'hooks' else 'replays'} p99 < 5 ms in every window: {'yes' if dup < 5 else 'no'}")
for label in labels:
    if ("proxy", label) in summary and ("proxy-fresh", label) in summary and summary[("proxy-fresh", label)] > 0:
        r = summary[("proxy", label)] / summary[("proxy-fresh", label)]
        print(f"goal: proxy {label}: throughput on the pre-filled store within 10% of a fresh store's: {'yes' if r >= 0.9 else 'no'} ({r:.2f}x)")
EOF

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$report"
grep -q '(stored: no)' "$report" && failed=1
cp "$report" bench/out/sustained.txt
echo "$prog: output in bench/out/sustained.txt (rows: bench/out/sustained-*.csv; chart: bench/plot_sustained.sh)"
[ "$failed" -eq 0 ] || { echo "$prog: a check failed (see above)" >&2; exit 1; }
