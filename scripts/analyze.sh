#!/bin/sh
# analyze.sh — gcc's static analyzer (-fanalyzer) over the library, the CLI and
# porteirod. Every finding must be fixed, or listed in scripts/analyzer.suppress
# as "FILE FUNCTION -Wanalyzer-KIND  reason" (one line each, with the reason
# why it is a false positive). Exits 1 on a finding not listed there, and on a
# listed line that no longer matches anything (so the list cannot rot).
#   scripts/analyze.sh [BUILD_DIR]
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${1:-build-analyze}
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPORTEIRO_ANALYZER=ON -DPORTEIRO_WERROR=OFF >/dev/null
# A clean build, so that every file is analysed (warnings are not cached).
cmake --build "$dir" --target clean >/dev/null
cmake --build "$dir" -j 2 --target porteiro_cli porteirod >"$dir/analyze.log" 2>&1 || {
    tail -30 "$dir/analyze.log" >&2
    echo "analyze: build failed" >&2
    exit 1
}
# "FILE FUNCTION KIND" per finding; gcc names the function in a line before.
awk -v root="$root/" '
    /: In function / { match($0, /‘[^’]*’/); fn = substr($0, RSTART + 3, RLENGTH - 6)
                       sub(/\.part\.[0-9]+$/, "", fn); sub(/\.constprop\.[0-9]+$/, "", fn) }
    /warning: .*\[-Wanalyzer-/ { f = $1; sub(/:.*/, "", f); sub(root, "", f)
                       match($0, /\[-Wanalyzer-[^]]*\]$/); print f, fn, substr($0, RSTART + 1, RLENGTH - 2) }
' "$dir/analyze.log" | sort -u >"$dir/findings.txt"
grep -v '^[[:space:]]*\(#\|$\)' scripts/analyzer.suppress | awk '{ print $1, $2, $3 }' | sort -u \
    >"$dir/suppressed.txt"
new=$(comm -23 "$dir/findings.txt" "$dir/suppressed.txt")
stale=$(comm -13 "$dir/findings.txt" "$dir/suppressed.txt")
total=$(wc -l <"$dir/findings.txt")
if [ -n "$new" ]; then
    echo "analyze: findings not in scripts/analyzer.suppress (fix them, or list them with a reason):" >&2
    echo "$new" | while read -r f fn kind; do
        grep -n "$f" "$dir/analyze.log" | grep -- "$kind" | head -3 >&2
    done
fi
[ -z "$stale" ] || { echo "analyze: suppressions that match nothing any more (remove them):" >&2; echo "$stale" >&2; }
if [ -n "$new" ] || [ -n "$stale" ]; then
    exit 1
fi
echo "analyze: gcc -fanalyzer: 0 open findings ($total suppressed, each with a reason)"
