#!/bin/sh
# bench/run.sh batch [CLI] — many decisions per call: porteiro --batch against the batch and one-call ceilings
# Many decisions per script call, side by side on one private Redis,
# interleaved over ROUNDS:
#   porteiro bench --batch B          (B gcra checks per porteiro_check_many)
#   redis-benchmark, gcra_batch.lua   (B keys per call: the ceiling for batches)
#   redis-benchmark, gcra.lua         (one decision per call: the ceiling per call)
# Prints, per contestant, the medians of decisions/s and of Redis's own time
# per decision (INFO commandstats), then the ratios of porteiro to each.
# Usage: bench/run.sh batch [PORTEIRO_CLI]   env: ROUNDS CONNECTIONS BATCH KEYS CALLS BUILD
#   BATCHES="1 2 4 8 16 32 64 128 256": one table per batch size (a sweep)
#   DECISIONS=N: CALLS = N / batch size (at least CONNECTIONS), for a sweep
#   RESULTS=FILE: the raw rows, appended, for bench/plot.sh
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cli=${1:-$SRC/${BUILD:-build}/porteiro}
ROUNDS=${ROUNDS:-3} CONNECTIONS=${CONNECTIONS:-50} BATCH=${BATCH:-32}
KEYS=${KEYS:-100000} CALLS=${CALLS:-10000}
BATCHES=${BATCHES:-$BATCH} RESULTS=${RESULTS:-}
bench_need redis-server redis-cli redis-benchmark
bench_workdir
bench_redis
port=$redis_port dir=$work
rc() { redis-cli -p "$port" "$@"; }
batch_sha=$(rc script load "$(cat "$BENCH/ceiling/gcra_batch.lua")")
one_sha=$(rc script load "$(cat "$BENCH/ceiling/gcra.lua")")
fresh() { bench_fresh "$port"; }
us_per_call() { bench_usec_per_call evalsha "$port"; }

porteiro() {
    fresh
    ops=$("$cli" bench --redis "redis://127.0.0.1:$port" --algorithm gcra --connections "$CONNECTIONS" \
        --batch "$BATCH" --requests $((CALLS * BATCH)) --keys "$KEYS" |
        sed -E 's/.*"ops_per_sec":([0-9.]+).*/\1/')
    echo "$ops $(us_per_call | awk -v b="$BATCH" '{ print $1 / b }')"
}
ceiling_batch() {
    fresh
    # shellcheck disable=SC2086
    rps=$(redis-benchmark -p "$port" -c "$CONNECTIONS" -P 1 -n "$CALLS" -r "$KEYS" --csv \
        EVALSHA "$batch_sha" "$BATCH" $keys 100000 1000 100000 | tail -1 | cut -d, -f2 | tr -d '"')
    echo "$(echo "$rps $BATCH" | awk '{ print $1 * $2 }') $(us_per_call | awk -v b="$BATCH" '{ print $1 / b }')"
}
ceiling_one() {
    fresh
    # As many decisions as the others make with DECISIONS; else 4 x CALLS.
    rps=$(redis-benchmark -p "$port" -c "$CONNECTIONS" -P 1 -n "${DECISIONS:-$((CALLS * 4))}" -r "$KEYS" --csv \
        EVALSHA "$one_sha" 1 key:__rand_int__ 100000 1000 100000 | tail -1 | cut -d, -f2 | tr -d '"')
    echo "$rps $(us_per_call)"
}

# One batch size: ROUNDS interleaved rounds, then the table.
compare() {
    # DECISIONS: the same number of decisions at every batch size.
    if [ -n "${DECISIONS:-}" ]; then
        CALLS=$((DECISIONS / BATCH))
        [ "$CALLS" -ge "$CONNECTIONS" ] || CALLS=$CONNECTIONS
    fi
    keys=""
    for i in $(seq "$BATCH"); do keys="$keys k$i:__rand_int__"; done
    : >"$dir/p"; : >"$dir/b"; : >"$dir/o"
    for r in $(seq "$ROUNDS"); do
        porteiro >>"$dir/p"
        ceiling_batch >>"$dir/b"
        ceiling_one >>"$dir/o"
        # Raw rows for bench/plot.sh: batch round contestant decisions/s us/decision
        [ -n "$RESULTS" ] && for f in p:porteiro b:gcra_batch o:gcra_one; do
            echo "$BATCH $r ${f#*:} $(tail -1 "$dir/${f%%:*}")" >>"$RESULTS"
        done
    done
    paste "$dir/p" "$dir/b" "$dir/o" >"$dir/all"
    echo "batch $BATCH:"
    printf '%-26s %14s %16s\n' "" "decisions/s" "Redis us/decision"
    for f in p:"porteiro --batch $BATCH" b:"gcra_batch.lua x$BATCH" o:"gcra.lua (one per call)"; do
        printf '%-26s %14.0f %16.2f\n' "${f#*:}" "$(cut -f1 -d' ' "$dir/${f%%:*}" | bench_median)" \
            "$(cut -f2 -d' ' "$dir/${f%%:*}" | bench_median)"
    done
    echo "medians of the per-round ratios (porteiro / other):"
    echo "  decisions/s vs gcra_batch: $(awk '{ print $1 / $3 }' "$dir/all" | bench_median)   vs gcra.lua: $(awk '{ print $1 / $5 }' "$dir/all" | bench_median)"
    echo "  Redis time vs gcra_batch:  $(awk '{ print $2 / $4 }' "$dir/all" | bench_median)   vs gcra.lua: $(awk '{ print $2 / $6 }' "$dir/all" | bench_median)"
}
for BATCH in $BATCHES; do
    compare
done
