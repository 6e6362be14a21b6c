#!/usr/bin/env bash
# bench/run.sh — the ledger part of `make bench`.
#
#   bench/run.sh [BUILD_DIR] [bench_ledger options...]
#
# BUILD_DIR (default build/release) must already hold bench_ledger: the caller
# builds. Runs it and tees its output to bench/out/ledger.txt. Extra arguments
# go to bench_ledger (e.g. --threads 1,64 --seconds 2). ONCE_BENCH_DIR picks
# the directory for the temporary database files (default $TMPDIR or /tmp;
# it must be on a real disk: on tmpfs fsync costs nothing).
#
# Bounded: every run inside stops after --seconds (default 5) or --cycles, and
# the whole thing is killed after ONCE_BENCH_TIMEOUT seconds (default 300).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

build=${1:-build/release}
[ $# -gt 0 ] && shift
bin="$build/bench_ledger"
if [ ! -x "$bin" ]; then
  echo "bench/run.sh: $bin not found; build first (e.g. ninja -C $build bench_ledger)" >&2
  exit 1
fi

args=()
if [ -n "${ONCE_BENCH_DIR:-}" ]; then
  args+=(--dir "$ONCE_BENCH_DIR")
fi

mkdir -p bench/out
out=bench/out/ledger.txt
{
  echo "# bench_ledger $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores," \
       "commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
} >"$out"

# SIGINT first so bench_ledger removes its temporary files; SIGKILL 10 s later.
set +e
timeout --signal=INT --kill-after=10 "${ONCE_BENCH_TIMEOUT:-300}" \
  "$bin" "${args[@]}" "$@" 2>&1 | tee -a "$out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "bench/run.sh: bench_ledger failed (exit $rc); output in $out" >&2
  exit "$rc"
fi
echo "bench/run.sh: output in $out"
