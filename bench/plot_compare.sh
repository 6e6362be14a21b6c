#!/usr/bin/env bash
# bench/plot_compare.sh — draws the comparison benchmark as SVG charts (gnuplot).
#
#   bench/plot_compare.sh [CSV] [OUTDIR]
#       CSV     default bench/results/compare.csv
#       OUTDIR  default docs/img (created if missing)
#
# Reads the CSV written by the comparison run (once against the peers and
# the direct / proxy_pass baselines) and writes three charts:
#   OUTDIR/compare-throughput.svg   requests/s (median of the runs, min–max
#                                   error bars), new keys and replays side by side
#   OUTDIR/compare-latency.svg      p50 and p99 latency (ms) with new keys, log y
#   OUTDIR/compare-correctness.svg  upstream calls for 50 concurrent requests with
#                                   one key (1 = exactly once)
# Each chart says "measured <date> on <machine>", from the CSV. The output
# depends only on the CSV (no timestamps of its own), so re-running on the
# same CSV gives the same files. Needs gnuplot (apt-get install gnuplot-nox).
set -euo pipefail

prog=plot_compare.sh
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
csv=${1:-$root/bench/results/compare.csv}
outdir=${2:-$root/docs/img}

header='contender,mode,rps_median,rps_min,rps_max,p50_ms,p99_ms,errors,ratio_proxy_pass,ratio_best_peer,upstream_calls_50,answers_50,durable_before_forward,atomic_reservation,date,machine'

die() { echo "$prog: $*" >&2; exit 1; }

command -v gnuplot >/dev/null 2>&1 ||
    die "gnuplot not found; install it with: apt-get install gnuplot-nox"
[[ -f $csv && -r $csv ]] || die "$csv: no such readable file"
first=$(head -n 1 -- "$csv")
first=${first%$'\r'}
[[ $first == "$header" ]] ||
    die "$csv: unexpected header (want: $header)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot_compare.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

# --- CSV -> whitespace-separated data for gnuplot -------------------------------
# data.dat, one line per contender in the CSV's order:
#   1 idx  2 "name"  3 group (0 baseline, 1 peer, 2 once)
#   4-6 new rps median/min/max   7-9 replay rps median/min/max
#   10 new p50 ms  11 new p99 ms  12 upstream_calls_50 (new row)
#   13 label new rps  14 label replay rps  15 label p50  16 label p99
#   17 label calls   18 correctness class (0 baseline, 1 exactly once, 2 not)
# meta.gp: n, the subtitle ("measured <date> on <machine>", from the first data
# row) and the ranges the axes need, as gnuplot assignments.
# Missing or non-numeric numbers become NaN (gnuplot skips them).
awk -F, -v prog="$prog" -v src="$csv" -v data="$tmp/data.dat" -v meta="$tmp/meta.gp" '
function fail(msg) { printf "%s: %s\n", prog, msg > "/dev/stderr"; bad = 1; exit 1 }
function num(x) { return (x ~ /^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/) ? x + 0 : "NaN" }
function rpslab(v) {
    if (v == "NaN") return "\"\""
    return (v >= 1000) ? sprintf("\"%.1fk\"", v / 1000) : sprintf("\"%.0f\"", v)
}
function mslab(v) {
    if (v == "NaN") return "\"\""
    return (v < 10) ? sprintf("\"%.2f\"", v) : (v < 100) ? sprintf("\"%.1f\"", v) : sprintf("\"%.0f\"", v)
}
function gpstr(s) { gsub(/\047/, "\047\047", s); return "\047" s "\047" }
function val(k) { return (k in v) ? v[k] : "NaN" }
BEGIN { n = 0 }
{ sub(/\r$/, "") }
NR == 1 { next }
/^[ \t]*$/ { next }
{
    if (NF != 16) fail(src ":" NR ": expected 16 fields, found " NF)
    c = $1; m = $2
    if (c == "") fail(src ":" NR ": empty contender")
    if (m != "new" && m != "replay") fail(src ":" NR ": mode must be new or replay, not \"" m "\"")
    if ((c, m) in seen) fail(src ":" NR ": second " m " row for " c)
    seen[c, m] = 1
    if (!(c in idx)) { idx[c] = n; name[n] = c; n++ }
    v[c, m, "med"] = num($3); v[c, m, "min"] = num($4); v[c, m, "max"] = num($5)
    v[c, m, "p50"] = num($6); v[c, m, "p99"] = num($7); v[c, m, "calls"] = num($11)
    if (date == "") date = $15
    if (machine == "") machine = $16
}
END {
    if (bad) exit 1
    if (n == 0) fail(src ": no data rows")
    rmax = 0; pmin = ""; pmax = ""; cmax = 50
    for (i = 0; i < n; i++) {
        c = name[i]
        g = (c == "direct" || c == "proxy_pass") ? 0 : (c ~ /^once/) ? 2 : 1
        nm = val(c SUBSEP "new" SUBSEP "med"); nl = val(c SUBSEP "new" SUBSEP "min"); nh = val(c SUBSEP "new" SUBSEP "max")
        rm = val(c SUBSEP "replay" SUBSEP "med"); rl = val(c SUBSEP "replay" SUBSEP "min"); rh = val(c SUBSEP "replay" SUBSEP "max")
        p50 = val(c SUBSEP "new" SUBSEP "p50"); p99 = val(c SUBSEP "new" SUBSEP "p99")
        calls = val(c SUBSEP "new" SUBSEP "calls")
        if (p50 != "NaN" && p50 <= 0) p50 = "NaN"   # log axis
        if (p99 != "NaN" && p99 <= 0) p99 = "NaN"
        split(nm " " nl " " nh " " rm " " rl " " rh, r, " ")
        for (j = 1; j <= 6; j++) if (r[j] != "NaN" && r[j] > rmax) rmax = r[j]
        if (p50 != "NaN") { if (pmin == "" || p50 < pmin) pmin = p50; if (pmax == "" || p50 > pmax) pmax = p50 }
        if (p99 != "NaN") { if (pmin == "" || p99 < pmin) pmin = p99; if (pmax == "" || p99 > pmax) pmax = p99 }
        if (calls != "NaN" && calls > cmax) cmax = calls
        cl = (g == 0) ? 0 : (calls == 1) ? 1 : 2
        printf "%d \"%s\" %d %s %s %s %s %s %s %s %s %s %s %s %s %s %s %d\n", \
            i, c, g, nm, nl, nh, rm, rl, rh, p50, p99, calls, \
            rpslab(nm), rpslab(rm), mslab(p50), mslab(p99), \
            (calls == "NaN") ? "\"\"" : "\"" calls "\"", cl > data
    }
    if (rmax <= 0) rmax = 1
    if (pmin == "") { pmin = 1; pmax = 10 }
    if (date == "") date = "?"
    if (machine == "") machine = "?"
    printf "n = %d\nsub = %s\nrmax = %s\npmin = %s\npmax = %s\ncmax = %s\n", \
        n, gpstr("measured " date " on " machine), rmax, pmin, pmax, cmax > meta
}
' "$csv" || exit 1

# --- gnuplot ---------------------------------------------------------------------
cat > "$tmp/plot.gp" <<'EOF'
load 'meta.gp'

set terminal svg size 900,480 fixed noenhanced font 'sans-serif,11' background rgb 'white'
set datafile missing 'NaN'

# colours: baselines grey, peers blue, once orange; new keys dark, replays light
set linetype 11 lc rgb '#6b6b6b'
set linetype 12 lc rgb '#3b6ea8'
set linetype 13 lc rgb '#d9731a'
set linetype 21 lc rgb '#bdbdbd'
set linetype 22 lc rgb '#9dbde0'
set linetype 23 lc rgb '#f4be8c'
set linetype 31 lc rgb '#2e8b57'
set linetype 32 lc rgb '#c0392b'

common_x = 'set xrange [-0.6:n-0.4]; set xtics rotate by 30 right nomirror scale 0 font ",11"; unset x2tics'
common = 'set lmargin 10; set rmargin 3; set border 3; set ytics nomirror; set grid ytics lc rgb "#dddddd" lt 1; set style fill solid 1.0 border -1; set key bmargin center horizontal maxrows 1 samplen 1.5 nobox'
# title, and under it "measured <date> on <machine>" in smaller type (all text is
# noenhanced, so names and the machine string are printed as they are)
heading = 'set tmargin 4.5; set label 101 ttl at screen 0.5, screen 1 offset 0,-1.4 center font ",14"; set label 102 sub at screen 0.5, screen 1 offset 0,-2.8 center font ",11" tc rgb "#333333"'
# The key entries for the three colour groups, shared by the bar charts.
groups = "keyentry with boxes lc 11 title 'baselines', keyentry with boxes lc 12 title 'peers', keyentry with boxes lc 13 title 'once'"

# --- 1. throughput -------------------------------------------------------------
set output 'compare-throughput.svg'
@common; @common_x
ttl = 'Throughput: requests per second (median of runs, bars = min to max)'
@heading
set ylabel 'requests / s'
set yrange [0:rmax*1.12]
set format y '%.0s%c'
set boxwidth 0.38 absolute
plot \
    'data.dat' using ($1-0.2):4:(11+$3):xtic(2) with boxes lc variable notitle, \
    ''         using ($1+0.2):7:(21+$3)         with boxes lc variable notitle, \
    ''         using ($1-0.2):5:(0):($6-$5) with vectors heads size screen 0.006,90 lc rgb '#222222' lw 1 notitle, \
    ''         using ($1+0.2):8:(0):($9-$8) with vectors heads size screen 0.006,90 lc rgb '#222222' lw 1 notitle, \
    ''         using ($1-0.2):($6 > $4 ? $6 : $4):13 with labels offset 0,0.7 font ',9' notitle, \
    ''         using ($1+0.2):($9 > $7 ? $9 : $7):14 with labels offset 0,0.7 font ',9' notitle, \
    keyentry with boxes lc rgb '#555555' title 'new keys (left)', \
    keyentry with boxes lc rgb '#c8c8c8' title 'replays (right)', \
    @groups

# --- 2. latency ----------------------------------------------------------------
reset
@common; @common_x
set output 'compare-latency.svg'
ttl = 'Latency with new keys: p50 and p99 (ms, log scale)'
@heading
set ylabel 'milliseconds'
set logscale y
set yrange [10**floor(log10(pmin)) : pmax*3]
set format y '%g'
set ytics add (0.002, 0.005, 0.02, 0.05, 0.2, 0.5, 2, 5, 20, 50, 200, 500, 2000, 5000)
set mytics 1
set boxwidth 0.38 absolute
plot \
    'data.dat' using ($1-0.2):10:(11+$3):xtic(2) with boxes lc variable notitle, \
    ''         using ($1+0.2):11:(21+$3)         with boxes lc variable notitle, \
    ''         using ($1-0.2):10:15 with labels offset 0,0.7 font ',9' notitle, \
    ''         using ($1+0.2):11:16 with labels offset 0,0.7 font ',9' notitle, \
    keyentry with boxes lc rgb '#555555' title 'p50 (left)', \
    keyentry with boxes lc rgb '#c8c8c8' title 'p99 (right)', \
    @groups

# --- 3. correctness ------------------------------------------------------------
reset
@common; @common_x
set output 'compare-correctness.svg'
ttl = 'Upstream calls for 50 concurrent requests with one key (new key)'
@heading
set ylabel 'requests that reached the upstream'
set rmargin 14
set yrange [0:cmax*1.12]
set ytics 10
set y2range [0:cmax*1.12]
set y2tics ('exactly once' 1) scale 0 tc rgb '#2e8b57' font ',11'
set boxwidth 0.6 absolute
plot \
    1 with lines lc rgb '#2e8b57' dt 2 lw 1.5 notitle, \
    'data.dat' using 1:12:($18 == 0 ? 11 : 30+$18):xtic(2) with boxes lc variable notitle, \
    ''         using 1:12:17 with labels offset 0,0.8 font ',11' notitle, \
    keyentry with boxes lc 11 title 'baselines (no idempotency)', \
    keyentry with boxes lc 31 title 'exactly once', \
    keyentry with boxes lc 32 title 'not exactly once'
EOF

(cd "$tmp" && gnuplot plot.gp) || die "gnuplot failed"

mkdir -p -- "$outdir"
for f in compare-throughput.svg compare-latency.svg compare-correctness.svg; do
    mv -f -- "$tmp/$f" "$outdir/$f"
    echo "wrote $outdir/$f"
done
