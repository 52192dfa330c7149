#!/bin/sh
# plot_test.sh — bench/run.sh plot on the small result files of tests/data/bench
# (the formats of the peers, batch and http scenarios): four
# PNG files come out; a result file with no rows and a folder with no result
# files are errors. Exit 77 (skipped) only when gnuplot-nox is not installed
# (scripts/deps.sh installs it); installed but no gnuplot is a failure.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v gnuplot >/dev/null; then
    if dpkg-query -W -f='${Status}' gnuplot-nox 2>/dev/null | grep -q "install ok installed"; then
        echo "FAIL: gnuplot-nox is installed but gnuplot is not on PATH ($PATH)"
        exit 1
    fi
    echo "SKIP: gnuplot is not installed (apt-get install gnuplot-nox)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-plot-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

sh "$src/bench/run.sh" plot "$src/tests/data/bench" "$tmp/img" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail=1; }
for png in decisions batch_sweep http_nginx latency; do
    f=$tmp/img/$png.png
    # A PNG starts with \211PNG; an empty plot is still a few kB of axes.
    if [ "$(head -c 4 "$f" 2>/dev/null | tail -c 3)" != PNG ] || [ "$(wc -c <"$f")" -lt 5000 ]; then
        echo "FAIL: $png.png is missing or not a PNG"
        fail=1
    fi
done

mkdir -p "$tmp/empty" "$tmp/blank"
: >"$tmp/blank/batch.tsv"
if sh "$src/bench/run.sh" plot "$tmp/empty" "$tmp/out" >/dev/null 2>&1; then
    echo "FAIL: no result files, yet plot.sh succeeded"
    fail=1
fi
if sh "$src/bench/run.sh" plot "$tmp/blank" "$tmp/out" >/dev/null 2>&1; then
    echo "FAIL: an empty batch.tsv, yet plot.sh succeeded"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "plot.sh: 4 PNGs from tests/data/bench; empty inputs refused"
exit "$fail"
