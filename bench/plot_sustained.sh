#!/usr/bin/env bash
# bench/plot_sustained.sh — draws bench/sustained.sh's per-window medians as
# SVG charts (gnuplot), for docs/benchmarks.md.
#
#   bench/plot_sustained.sh [OUTDIR] [INDIR]
#       OUTDIR  default docs/img (created if missing)
#       INDIR   default bench/out (where sustained-KIND-median.csv are)
#
# For each run kind with a median CSV (hooks, proxy, proxy-fresh, hooks-pg),
# OUTDIR/sustained-KIND.svg: per 5-second window, the p99 latency of the new
# events (keys) for each build (base and new, or the one build), solid, and
# of the duplicates (replays), dashed; the issue's goal as a dotted line
# (hooks 10 ms, proxy 20 ms; replays and duplicates 5 ms); log y. The
# subtitle says when and on which machine the report was made (from
# bench/out/sustained.txt when present). The output depends only on the
# inputs. Needs gnuplot (bash scripts/deps --compare, or apt-get install gnuplot-nox).
set -euo pipefail

prog=bench/plot_sustained.sh
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-$root/docs/img}
indir=${2:-$root/bench/out}
header='build,t_s,rate,p50_ms,p99_ms,max_ms,errors,side_p99_ms,side_max_ms,side_errors,commits_per_s,commit_mean_ms,wal_max_bytes,ckpt_writer_n,ckpt_writer_ms,ckpt_bg_n,ckpt_bg_ms'

die() { echo "$prog: $*" >&2; exit 1; }
command -v gnuplot >/dev/null 2>&1 || die "gnuplot not found; install it with: bash scripts/deps --compare"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot_sustained.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

# "measured DATE on MACHINE, commit C" from the report's first line, if any.
sub="bench/sustained.sh"
if [[ -f $indir/sustained.txt ]]; then
  sub=$(awk 'NR == 1 { printf "measured %s on %s %s %s %s %s", $3, $5, $6, $7, $8, $9 }' "$indir/sustained.txt")
fi

drawn=0
for kind in hooks proxy proxy-fresh hooks-pg; do
  csv="$indir/sustained-$kind-median.csv"
  [[ -f $csv ]] || continue
  first=$(head -n 1 -- "$csv")
  first=${first%$'\r'}
  [[ $first == "$header" ]] || die "$csv: unexpected header (want: $header)"
  case $kind in
    hooks) goal=10 title="Webhooks: new events paced, on a pre-filled store" ;;
    proxy) goal=20 title="Proxy: new keys, 64 connections, on a pre-filled store" ;;
    proxy-fresh) goal=20 title="Proxy: new keys, 64 connections, on a fresh store" ;;
    hooks-pg) goal=NaN title="Webhooks on PostgreSQL (no goal)" ;;
  esac
  # One data file per build: t_s p99 side_p99 (empty or non-positive -> NaN: log axis).
  builds=$(awk -F, 'NR > 1 && !seen[$1]++ { printf "%s ", $1 }' "$csv")
  plots=() i=0
  for b in $builds; do
    awk -F, -v b="$b" 'function v(x) { return (x == "" || x + 0 <= 0) ? "NaN" : x }
      NR > 1 && $1 == b { print $2, v($5), v($8) }' "$csv" >"$tmp/$kind-$b.dat"
    lc=$([ "$b" = base ] && echo "#6b6b6b" || echo "#d9731a")
    [ "$i" -ge 2 ] && lc="#3b6ea8"
    plots+=("'$tmp/$kind-$b.dat' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '$lc' title '$b build: p99 of new $([ "${kind#hooks}" != "$kind" ] && echo events || echo keys)'")
    plots+=("'$tmp/$kind-$b.dat' using 1:3 with linespoints lw 1.5 dt 2 pt 6 ps 0.6 lc rgb '$lc' title '$b build: p99 of $([ "${kind#hooks}" != "$kind" ] && echo duplicates || echo replays)'")
    i=$((i + 1))
  done
  if [ "$goal" != NaN ]; then
    plots+=("$goal with lines lc rgb '#2e8b57' dt 3 lw 1.5 title 'goal, new ($goal ms)'")
    plots+=("5 with lines lc rgb '#c0392b' dt 3 lw 1.2 title 'goal, $([ "${kind#hooks}" != "$kind" ] && echo duplicates || echo replays) (5 ms)'")
  fi
  {
    echo "set terminal svg size 900,460 fixed noenhanced font 'sans-serif,11' background rgb 'white'"
    echo "set output '$tmp/sustained-$kind.svg'"
    echo "set datafile missing 'NaN'"
    printf 'set title "%s\\n%s" font ",12"\n' "$title" "$sub"
    echo "set xlabel 'seconds into the run (5-second windows, median of the runs)'"
    echo "set ylabel 'p99 latency, ms (log)'"
    echo "set logscale y"
    echo "set format y '%g'"
    echo "set grid ytics lc rgb '#dddddd' lt 1"
    echo "set border 3; set xtics nomirror; set ytics nomirror"
    echo "set key bmargin center horizontal maxrows 2 samplen 2 nobox"
    echo "set xrange [-1:*]"
    printf 'plot %s\n' "$(IFS=,; echo "${plots[*]}")"
  } >"$tmp/$kind.gp"
  gnuplot "$tmp/$kind.gp" || die "gnuplot failed on $kind"
  mkdir -p -- "$outdir"
  mv -f -- "$tmp/sustained-$kind.svg" "$outdir/sustained-$kind.svg"
  echo "wrote $outdir/sustained-$kind.svg"
  drawn=$((drawn + 1))
done
[ "$drawn" -gt 0 ] || die "no sustained-*-median.csv in $indir (run bench/sustained.sh first)"
