#!/bin/sh
# fuzz.sh — builds the libFuzzer targets (clang, ASan+UBSan) and runs each
# for a short time over a copy of its corpus in fuzz/corpus/. A crash, a
# leak or a sanitizer report fails the run (the input is kept in build-fuzz/).
#   PORTEIRO_FUZZ_SECONDS=300 scripts/fuzz.sh    # longer, by hand
set -eu
cd "$(dirname "$0")/.."
seconds=${PORTEIRO_FUZZ_SECONDS:-20}
dir=build-fuzz
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPORTEIRO_FUZZ=ON >/dev/null
cmake --build "$dir" -j 2 --target fuzz_request fuzz_http fuzz_reply fuzz_config fuzz_transport \
    fuzz_envoy_config fuzz_grpc >/dev/null
for target in request http reply config transport envoy_config grpc; do
    work="$dir/corpus-$target"
    rm -rf "$work" && mkdir -p "$work" && cp fuzz/corpus/"$target"/* "$work"/
    echo "== fuzz: $target, ${seconds}s"
    if ! (cd "$dir" && ./fuzz_"$target" -max_total_time="$seconds" -max_len=4096 \
        "corpus-$target" >"fuzz-$target.log" 2>&1); then
        tail -40 "$dir/fuzz-$target.log" >&2
        echo "fuzz: $target failed (log: $dir/fuzz-$target.log)" >&2
        exit 1
    fi
    tail -1 "$dir/fuzz-$target.log"
done
