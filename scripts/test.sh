#!/bin/sh
# test.sh — every test, twice: a gcc build with -Werror, then a clang build
# under AddressSanitizer + UBSan. Tests start their own redis-server.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
porteiro_deps

jobs=$(nproc 2>/dev/null || echo 2)
run_suite() { # name, C compiler, sanitizers
    dir="build-test-$1"
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPORTEIRO_WERROR=ON -DPORTEIRO_SANITIZE="$3" >/dev/null
    cmake --build "$dir" -j "$jobs"
    echo "== tests: $1 ($2${3:+, $3})"
    (cd "$dir" && ctest --output-on-failure --timeout 600)
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite gcc gcc ""
run_suite asan clang "address,undefined"

# The request-handling fuzz target, briefly (scripts/fuzz.sh).
PORTEIRO_FUZZ_SECONDS=${PORTEIRO_FUZZ_SECONDS:-15} ./scripts/fuzz.sh
