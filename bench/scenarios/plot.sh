#!/bin/sh
# bench/run.sh plot [RESULTS_DIR] [OUT_DIR] — the figures of docs/img/ from the scenarios' raw results
# The scenarios' raw result files as PNG plots (gnuplot, Debian: gnuplot-nox). Each plot is made when its
# file is in RESULTS_DIR (default bench/results), into OUT_DIR (default
# docs/img); the numbers are medians over the rounds of each file.
#
#   peers.tsv        RESULTS= of peers                 -> decisions.png
#   peers_batch.tsv  the same with PORTEIRO_BATCH=1    -> (added to decisions.png)
#   batch.tsv        RESULTS= of batch with BATCHES="1 2 4 ... 256"
#                                                      -> batch_sweep.png
#   http.tsv         RESULTS= of http                  -> http_nginx.png, latency.png
#                    (round label req/s p99 p50 p75 p90 cpu)
#
# PLOT_NOTE="..." is added under every title (say the machine and its load).
# Exits 1 when no plot could be made, a file has no rows, or gnuplot fails.
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
in=${1:-$BENCH/results}
out=${2:-$SRC/docs/img}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
made=0
note=${PLOT_NOTE:+\\n$PLOT_NOTE} # gnuplot: a second title line

# gnuplot's terminal: cairo when this gnuplot has it, else libgd.
if gnuplot -e 'set terminal pngcairo' 2>/dev/null; then
    term="pngcairo size 960,540 font 'sans,10' noenhanced"
else
    term="png size 960,540 noenhanced"
fi

# median KEY-COLUMNS VALUE-COLUMN < rows: "key... median" per key, in the
# order keys first appear (plain awk: mawk has no asort). Fields are split on
# blanks, or on $MFS when set (tab-separated labels with spaces).
median() {
    awk -F "${MFS:- }" -v keys="$1" -v col="$2" '
        { k = ""; n = split(keys, kc, " ")
          for (i = 1; i <= n; i++) k = k (i > 1 ? SUBSEP : "") $kc[i]
          if (!(k in cnt)) order[++nk] = k
          v[k, ++cnt[k]] = $col + 0 }
        END { for (j = 1; j <= nk; j++) { k = order[j]; m = cnt[k]
                for (a = 1; a <= m; a++) s[a] = v[k, a]
                for (a = 2; a <= m; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) {
                    t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
                med = m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
                gsub(SUBSEP, "\t", k); printf "%s\t%.2f\n", k, med } }'
}

rows() { # FILE: fails the run when FILE has no data rows
    if ! grep -q '[0-9]' "$1"; then
        echo "plot.sh: $1 has no result rows" >&2
        exit 1
    fi
}

plot() { # NAME: runs $tmp/NAME.gp, checks the PNG
    if ! gnuplot "$tmp/$1.gp" 2>"$tmp/$1.err" || [ ! -s "$out/$1.png" ]; then
        cat "$tmp/$1.err" >&2
        echo "plot.sh: gnuplot failed on $1" >&2
        exit 1
    fi
    echo "plot.sh: $out/$1.png"
    made=$((made + 1))
}

# ---- decisions/s per contestant, per call (pipeline 1 and 16) and batched
if [ -f "$in/peers.tsv" ]; then
    rows "$in/peers.tsv"
    # pipeline round name algorithm pair ops ...: label = porteiro's
    # algorithm, a peer's script (and its shape), or the minimal script.
    label() {
        awk -F'\t' -v tag="$1" 'NF >= 6 && $6 ~ /^[0-9.]+$/ {
            name = $3 == "porteiro" ? "porteiro " $4 tag : $3 == "redis-benchmark" ? "minimal script (INCR)" : $3 " (" $4 ")"
            print $1 "\t" name "\t" $6 }' "$2"
    }
    label "" "$in/peers.tsv" >"$tmp/dec_rows"
    [ -f "$in/peers_batch.tsv" ] && label " --batch" "$in/peers_batch.tsv" | awk -F'\t' '$2 ~ /--batch/' >>"$tmp/dec_rows"
    # label p1 p16 (columns by pipeline, in the order they appear)
    FS_TAB=$(printf '\t')
    MFS=$FS_TAB median "1 2" 3 <"$tmp/dec_rows" | awk -F'\t' '
        { if (!($1 in seenp)) { seenp[$1] = 1; ps[++np] = $1 }
          if (!($2 in seenl)) { seenl[$2] = 1; ls[++nl] = $2 }
          v[$1, $2] = $3 }
        END { printf "\"contestant\""; for (i = 1; i <= np; i++) printf "\t\"pipeline %s\"", ps[i]; print ""
              for (j = 1; j <= nl; j++) { printf "\"%s\"", ls[j]
                for (i = 1; i <= np; i++) printf "\t%s", ((ps[i], ls[j]) in v) ? v[ps[i], ls[j]] : "-"
                print "" } }' >"$tmp/decisions.dat"
    ncols=$(head -1 "$tmp/decisions.dat" | awk -F"$FS_TAB" '{ print NF }')
    cat >"$tmp/decisions.gp" <<EOF
set terminal $term
set output "$out/decisions.png"
set title "Decisions per second on one Redis: porteiro, npm peers, the minimal script (medians)$note"
set datafile separator "\t"
set datafile missing "-"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "decisions/s"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set grid ytics
set key outside top center horizontal
set xtics rotate by -20 left
set bmargin 10
set rmargin 8
plot for [i=2:$ncols] "$tmp/decisions.dat" using i:xtic(1) title columnheader(i)
EOF
    plot decisions
fi

# ---- decisions/s and Redis time per decision against the batch size
if [ -f "$in/batch.tsv" ]; then
    rows "$in/batch.tsv"
    # batch round contestant ops us -> batch porteiro gcra_batch gcra_one
    for c in 4 5; do
        median "1 3" "$c" <"$in/batch.tsv" | awk -F'\t' '
            { if (!($1 in seenb)) { seenb[$1] = 1; bs[++nb] = $1 } v[$1, $2] = $3 }
            END { print "batch\tporteiro\tgcra_batch\tgcra_one"
                  for (i = 1; i <= nb; i++) { b = bs[i]
                    printf "%s\t%s\t%s\t%s\n", b, v[b, "porteiro"], v[b, "gcra_batch"], v[b, "gcra_one"] } }' \
            >"$tmp/batch_$c.dat"
    done
    cat >"$tmp/batch_sweep.gp" <<EOF
set terminal $term
set output "$out/batch_sweep.png"
set datafile separator "\t"
set multiplot layout 1,2 title "Batch size: decisions per script call (gcra, medians)$note"
set logscale x 2
set xlabel "decisions per call (batch size)"
set grid
set key top left
set ylabel "decisions/s"
set yrange [0:*]
plot "$tmp/batch_4.dat" using 1:2 with linespoints lw 2 title "porteiro bench --batch B", \
     "" using 1:3 with linespoints lw 2 title "minimal script, B keys a call", \
     "" using 1:4 with linespoints lw 1 dt 2 title "minimal script, 1 key a call"
set ylabel "Redis time per decision (µs)"
set key top right
plot "$tmp/batch_5.dat" using 1:2 with linespoints lw 2 title "porteiro", \
     "" using 1:3 with linespoints lw 2 title "minimal, B keys a call", \
     "" using 1:4 with linespoints lw 1 dt 2 title "minimal, 1 key a call"
unset multiplot
EOF
    plot batch_sweep
fi

# ---- porteirod against nginx, and latency percentiles (wrk)
if [ -f "$in/http.tsv" ]; then
    rows "$in/http.tsv"
    # round label req/s p99 [p50 p75 p90 [cpu_us]]
    median 2 3 <"$in/http.tsv" | awk -F'\t' '{ printf "\"%s\"\t%s\n", $1, $2 }' >"$tmp/http.dat"
    cat >"$tmp/http_nginx.gp" <<EOF
set terminal $term
set output "$out/http_nginx.png"
set title "HTTP requests per second (wrk, medians): porteirod against nginx answering 204$note"
set datafile separator "\t"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.7
set ylabel "requests/s"
set yrange [0:*]
set grid ytics
set offsets 0, 0, graph 0.08, 0
set xtics rotate by -20 left
set bmargin 9
set rmargin 8
plot "$tmp/http.dat" using 2:xtic(1) notitle
EOF
    plot http_nginx
    if awk 'NF >= 7 { ok = 1 } END { exit !ok }' "$in/http.tsv"; then
        for c in 5 6 7 4; do median 2 "$c" <"$in/http.tsv" >"$tmp/pct_$c"; done
        paste "$tmp/pct_5" "$tmp/pct_6" "$tmp/pct_7" "$tmp/pct_4" |
            awk -F'\t' 'BEGIN { print "label\tp50\tp75\tp90\tp99" }
                        { printf "\"%s\"\t%s\t%s\t%s\t%s\n", $1, $2, $4, $6, $8 }' >"$tmp/latency.dat"
        cat >"$tmp/latency.gp" <<EOF
set terminal $term
set output "$out/latency.png"
set title "HTTP latency percentiles (wrk --latency, medians of the rounds)$note"
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "latency (µs)"
set logscale y
set grid ytics
set key outside top center horizontal
set xtics rotate by -20 left
set bmargin 9
set rmargin 8
plot for [i=2:5] "$tmp/latency.dat" using i:xtic(1) title columnheader(i)
EOF
        plot latency
    else
        echo "plot.sh: $in/http.tsv has no p50/p75/p90 columns (an older http_bench.sh): no latency.png" >&2
    fi
fi

if [ "$made" -eq 0 ]; then
    echo "plot.sh: no result files in $in (peers.tsv, batch.tsv, http.tsv)" >&2
    exit 1
fi
