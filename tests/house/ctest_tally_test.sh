#!/bin/sh
# ctest_tally_test.sh — test.sh counts skips as skips (issue 40): a real
# ctest run of a tiny project with one test that passes, one that fails and
# one that exits 77 under SKIP_RETURN_CODE 77 (which ctest counts among
# its passed), read by scripts/ctest_tally.sh as test.sh reads a suite:
# 1 passed, 1 failed, 1 skipped, the skipped one named.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/scripts/ctest_tally.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/CMakeLists.txt" <<'EOT'
cmake_minimum_required(VERSION 3.13)
project(tally NONE)
enable_testing()
add_test(NAME passes COMMAND sh -c "exit 0")
add_test(NAME fails COMMAND sh -c "exit 1")
add_test(NAME skips COMMAND sh -c "exit 77")
set_tests_properties(skips PROPERTIES SKIP_RETURN_CODE 77)
EOT
cmake -S "$tmp" -B "$tmp/build" >/dev/null
(cd "$tmp/build" && ctest --output-on-failure >"$tmp/ctest.out" 2>&1) || true
passed=0 failed=0 skipped=0
ctest_tally "$tmp/ctest.out" || {
    echo "FAILED: no ctest summary line in:"
    cat "$tmp/ctest.out"
    exit 1
}
tally_add "$total" "$bad" "$skips"
named=$(ctest_skipped "$tmp/ctest.out")
echo "ctest: $(grep -E 'tests passed' "$tmp/ctest.out")"
echo "counted: $passed passed, $failed failed, $skipped skipped; skipped: $named"
if [ "$passed" -ne 1 ] || [ "$failed" -ne 1 ] || [ "$skipped" -ne 1 ]; then
    echo "FAILED: want 1 passed, 1 failed, 1 skipped"
    exit 1
fi
case "$named" in
*skips*) ;;
*)
    echo "FAILED: the skipped test is not named"
    exit 1
    ;;
esac
# ctest that did not finish: one failure.
: >"$tmp/empty.out"
if ctest_tally "$tmp/empty.out" || [ "$total" -ne 1 ] || [ "$bad" -ne 1 ]; then
    echo "FAILED: a ctest run with no summary is not one failure"
    exit 1
fi
echo "ok"
