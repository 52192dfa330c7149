# shellcheck shell=sh
# shellcheck disable=SC2034 # total, bad, skips: set for the caller
# ctest_tally.sh — how test.sh counts a ctest run (sourced; POSIX sh).
# ctest counts a test that exited with its SKIP_RETURN_CODE among the passed
# ones; here a skip is a skip, never a pass. tests/house/ctest_tally_test.sh runs
# a real ctest with a test that passes, one that fails and one that skips,
# and checks these functions count 1, 1 and 1.

# ctest_tally FILE: ctest's output FILE -> total, bad (failed) and skips.
# ctest itself failed (no summary line): one failure, returns 1.
ctest_tally() {
    line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$1" || true)
    if [ -z "$line" ]; then
        total=1 bad=1 skips=0
        return 1
    fi
    total=$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')
    bad=$(echo "$line" | sed -E 's/.*, ([0-9]+) tests failed.*/\1/')
    # ctest lists skipped tests under "The following tests did not run:"
    # as "NN - name (Skipped)".
    skips=$(grep -cE '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$1" || true)
    return 0
}

# The skipped tests of ctest's output FILE, one a line.
ctest_skipped() {
    grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$1" | sed 's/^[[:space:]]*/   /'
}

# tally_add TOTAL BAD SKIPS: into the running passed, failed, skipped.
tally_add() {
    passed=$((passed + $1 - $2 - $3))
    failed=$((failed + $2))
    skipped=$((skipped + $3))
}
