#!/bin/sh
# fuzz.sh — builds the libFuzzer targets (clang, ASan+UBSan) and runs each
# over a copy of its corpus in fuzz/corpus/. A crash, a leak or a sanitizer
# report fails the run (the input is kept in build-fuzz/; add it to the
# target's corpus once fixed: the fuzz_replay_* ctests replay every corpus).
#   scripts/fuzz.sh                               # CI: 20 s per target
#   FUZZ_SECONDS=300 scripts/fuzz.sh              # longer
#   FUZZ_RUNS=10000000 FUZZ_SECONDS=3600 scripts/fuzz.sh   # the long run:
#       until 10^7 executions per target (or the time), numbers in docs/faults.md
#   FUZZ_TARGETS="reply config" scripts/fuzz.sh   # some targets only
# Each target ends with one line: executions, seconds, executions per second,
# coverage (edges, features), corpus size (the seeds and what the run added).
set -eu
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-${PORTEIRO_FUZZ_SECONDS:-20}}
runs=${FUZZ_RUNS:-}
targets=${FUZZ_TARGETS:-request http reply config transport envoy_config grpc spoe}
dir=build-fuzz
# ASan keeps 256 MB of freed memory by default before reusing it: the targets
# that make a connection per input then spend half their time faulting fresh
# pages in. 16 MB still holds a hundred inputs' frees (a use after free within
# an input, or from the one before, is caught as before) and halves the CPU
# per execution of fuzz_transport and fuzz_http. ASAN_OPTIONS given win.
ASAN_OPTIONS="quarantine_size_mb=16${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export ASAN_OPTIONS
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPORTEIRO_FUZZ=ON >/dev/null
build=""
for target in $targets; do build="$build fuzz_$target"; done
# shellcheck disable=SC2086 # one word per target
cmake --build "$dir" -j 2 --target $build >/dev/null
for target in $targets; do
    work="$dir/corpus-$target"
    rm -rf "$work" && mkdir -p "$work" && cp fuzz/corpus/"$target"/* "$work"/
    echo "== fuzz: $target, ${seconds}s${runs:+ or $runs runs}"
    if ! (cd "$dir" && ./fuzz_"$target" -max_total_time="$seconds" ${runs:+-runs=$runs} \
        -max_len=4096 -print_final_stats=1 "corpus-$target" >"fuzz-$target.log" 2>&1); then
        tail -40 "$dir/fuzz-$target.log" >&2
        echo "fuzz: $target failed (log: $dir/fuzz-$target.log)" >&2
        exit 1
    fi
    awk -v t="$target" -v n="$(ls "$work" | wc -l)" '
        /^Done [0-9]+ runs in / { secs = $5 }
        /^stat::number_of_executed_units:/ { runs = $2 }
        /^stat::average_exec_per_sec:/ { rate = $2 }
        / cov: / { for (i = 1; i < NF; i++) { if ($i == "cov:") cov = $(i + 1); if ($i == "ft:") ft = $(i + 1) } }
        END { printf "fuzz: %s: %d executions in %d s (%d/s), coverage %s edges, %s features, corpus %d\n",
                     t, runs, secs, rate, cov, ft, n }' "$dir/fuzz-$target.log"
done
