#!/bin/sh
# test.sh — the tests. Both forms end with
# "porteiro: N passed, N failed, N skipped": a skipped test (ctest's
# SKIP_RETURN_CODE, exit 77) is counted as skipped, never as passed. A test
# skips only when what it needs is not installed; where scripts/deps.sh
# installed it, the test fails instead of skipping.
#
#   ./scripts/test.sh          one gcc build with -Werror, then every ctest,
#                              run in parallel where the tests allow it (a
#                              test that must run alone says so in
#                              CMakeLists.txt: RUN_SERIAL or RESOURCE_LOCK)
#   ./scripts/test.sh --full   what CI runs (.ci/run): the same suite twice, a
#                              gcc -Werror build and a clang AddressSanitizer +
#                              UBSan build, with a 60 s soak (bench/run.sh soak)
#                              between them; gcc's static analyzer; a short
#                              fuzz run; then, as root, the Debian packages
#                              built, installed, used and purged
#
# Tests start their own redis-server (and nginx) on loopback ports.
set -eu
cd "$(dirname "$0")/.."
full=0
case "${1:-}" in
--full) full=1 ;;
"") ;;
*)
    echo "usage: $0 [--full]" >&2
    exit 2
    ;;
esac
. scripts/deps.sh
porteiro_deps test
. scripts/ctest_tally.sh

jobs=$(nproc 2>/dev/null || echo 2)
# Most tests wait on their servers more than they compute: twice the cores.
parallel=${PORTEIRO_TEST_JOBS:-$((2 * jobs))}
passed=0
failed=0
skipped=0
flaky_list=$(mktemp)
trap 'rm -f "$flaky_list"' EXIT
count() { # exit status of one step -> the tally
    if [ "$1" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
# Tests labelled "full" (minutes, failovers: CMakeLists.txt) run with --full only.
labels="-LE full"
[ "$full" -eq 1 ] && labels=""
run_suite() { # name, C compiler, sanitizers, tests at a time
    dir="build-test-$1"
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPORTEIRO_WERROR=ON -DPORTEIRO_SANITIZE="$3" >/dev/null
    cmake --build "$dir" -j "$jobs"
    echo "== tests: $1 ($2${3:+, $3}), $4 at a time"
    # A failing suite does not stop the other one: the summary counts both.
    # shellcheck disable=SC2086 # $labels: none, or two words
    (cd "$dir" && ctest -j "$4" $labels --output-on-failure --timeout 600) | tee "$dir/ctest.out" || true
    # total, bad, skips (scripts/ctest_tally.sh); ctest itself failed: the
    # suite counts as one failure.
    if ! ctest_tally "$dir/ctest.out"; then
        :
    elif [ "$bad" -gt 0 ] && [ "$bad" -le 8 ]; then
        # Up to 8 failures: each run again, alone, once. A test that fails
        # twice is a failure; one that passes alone is named as flaky in
        # the summary (2 cores shared by servers, load and sanitizers make
        # timing tests miss; a broken test fails both times).
        echo "== $1: $bad failed; each run again, alone"
        (cd "$dir" && ctest --rerun-failed -j 1 --output-on-failure --timeout 600) |
            tee "$dir/ctest.rerun" || true
        again=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$dir/ctest.rerun" |
            sed -E 's/.*, ([0-9]+) tests failed.*/\1/' || true)
        if [ -n "$again" ]; then
            grep -E '^[[:space:]]*[0-9]+/[0-9]+ Test +#[0-9]+: [^ ]+ \.+ +Passed' "$dir/ctest.rerun" |
                sed -E 's/.*: ([^ ]+) .*/\1/' | sed "s/^/$1:/" >>"$flaky_list"
            bad=$again
        fi
    fi
    if [ "$skips" -gt 0 ]; then
        echo "== skipped, not passed ($1):"
        ctest_skipped "$dir/ctest.out"
    fi
    tally_add "$total" "$bad" "$skips"
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite gcc gcc "" "$parallel"

if [ "$full" -eq 1 ]; then
    # The soak, 60 s (bench/run.sh soak): porteirod of the gcc build under load while
    # Redis restarts and porteirod reloads; every answer 2xx/429/503, RSS and fds flat.
    rc=0
    SOAK_SECONDS=${SOAK_SECONDS:-60} BUILD=build-test-gcc sh bench/run.sh soak || rc=$?
    count $rc

    # The ABI of libporteiro.so against the committed baseline (abi/, with
    # libabigail's abidiff): a break that keeps the SONAME fails
    # (scripts/abi_check.sh; docs/api.md, "The SONAME rule").
    rc=0
    sh scripts/abi_check.sh build-test-gcc || rc=$?
    count $rc

    # Sanitized tests run 2-5x slower: one per core, so that their waits
    # (a reload, a failover) are not starved by the others.
    # The sanitizer suite leaves out the tests labelled long (minutes of
    # load the gcc suite has just run): CI stays within 30 minutes.
    labels="-LE long"
    run_suite asan clang "address,undefined" "$jobs"

    # gcc's static analyzer: 0 findings not listed with a reason (scripts/analyze.sh).
    rc=0
    ./scripts/analyze.sh || rc=$?
    count $rc

    # The fuzz targets, briefly (scripts/fuzz.sh).
    rc=0
    PORTEIRO_FUZZ_SECONDS=${PORTEIRO_FUZZ_SECONDS:-10} ./scripts/fuzz.sh || rc=$?
    count $rc

    # The Debian packages built, installed, used and purged (tests/house/package_test.sh;
    # root only, as in CI: otherwise it says so and is counted as skipped).
    rc=0
    sh tests/house/package_test.sh || rc=$?
    if [ "$rc" -eq 77 ]; then skipped=$((skipped + 1)); else count $rc; fi
fi

if [ -s "$flaky_list" ]; then
    echo "== flaky: failed in the parallel run, passed run again alone:"
    sed 's/^/   /' "$flaky_list"
fi
echo "porteiro: $passed passed, $failed failed, $skipped skipped$(
    [ -s "$flaky_list" ] && echo " ($(wc -l <"$flaky_list") of the passed only on a rerun)")"
[ "$failed" -eq 0 ]
