#!/bin/sh
# test.sh — every test, twice: a gcc build with -Werror, then a clang build
# under AddressSanitizer + UBSan; then a short fuzz run; then, as root, the
# Debian packages (tests/package_test.sh). Tests start their own
# redis-server (and nginx) on loopback. Ends with "N passed, N failed".
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
porteiro_deps

jobs=$(nproc 2>/dev/null || echo 2)
passed=0
failed=0
run_suite() { # name, C compiler, sanitizers
    dir="build-test-$1"
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPORTEIRO_WERROR=ON -DPORTEIRO_SANITIZE="$3" >/dev/null
    cmake --build "$dir" -j "$jobs"
    echo "== tests: $1 ($2${3:+, $3})"
    # A failing suite does not stop the other one: the summary counts both.
    (cd "$dir" && ctest --output-on-failure --timeout 600) | tee "$dir/ctest.out" || true
    line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$dir/ctest.out" || true)
    total=$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')
    bad=$(echo "$line" | sed -E 's/.*, ([0-9]+) tests failed.*/\1/')
    if [ -z "$line" ]; then # ctest itself failed: count the suite as one failure
        total=1 bad=1
    fi
    passed=$((passed + total - bad))
    failed=$((failed + bad))
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite gcc gcc ""
run_suite asan clang "address,undefined"

# gcc's static analyzer: 0 findings not listed with a reason (scripts/analyze.sh).
if ./scripts/analyze.sh; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi

# The request-handling fuzz target, briefly (scripts/fuzz.sh).
if PORTEIRO_FUZZ_SECONDS=${PORTEIRO_FUZZ_SECONDS:-15} ./scripts/fuzz.sh; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi

# The Debian packages built, installed, used and purged (tests/package_test.sh;
# root only, as in CI: otherwise it says it is skipped and is not counted).
package_rc=0
sh tests/package_test.sh || package_rc=$?
case $package_rc in
0) passed=$((passed + 1)) ;;
77) ;;
*) failed=$((failed + 1)) ;;
esac

echo "porteiro: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
