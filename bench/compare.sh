#!/bin/sh
# compare.sh — porteiro's check throughput against the ceiling: redis-benchmark
# sending EVALSHA of the very same script (`porteiro script --algorithm A`) with
# the same arguments, key layout and key count, on the same redis-server. They run
# interleaved over several rounds (the order alternates) at 50 connections,
# pipeline 1 and 16; the medians and the ratio ours / ceiling are printed.
#
# usage: bench/compare.sh [path/to/porteiro]
# env:   ROUNDS (5), CONNECTIONS (50), KEYS (10000), ALGORITHM (gcra),
#        LIMIT (1000000), PERIOD_MS (1000), REQUESTS_P1 (40000),
#        REQUESTS_P16 (150000)
set -eu

PORTEIRO=${1:-${PORTEIRO_CLI:-$(dirname "$0")/../build/porteiro}}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-50}
KEYS=${KEYS:-10000}
ALGORITHM=${ALGORITHM:-gcra}
LIMIT=${LIMIT:-1000000}
PERIOD_MS=${PERIOD_MS:-1000}
REQUESTS_P1=${REQUESTS_P1:-40000}
REQUESTS_P16=${REQUESTS_P16:-150000}

[ -x "$PORTEIRO" ] || { echo "compare.sh: no porteiro binary at $PORTEIRO (build first)" >&2; exit 2; }
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "compare.sh: $tool is missing" >&2; exit 2; }
done

# The state key and arguments the library builds (src/call.c, policy.lua):
# KEYS[1] = prefix:{key}:descriptor, ARGV = now ('' = Redis TIME), cost,
# algorithm code, L, P, B (B = L when not given).
case "$ALGORITHM" in
fixed_window) code=1 desc="fw:$LIMIT:$PERIOD_MS" ;;
token_bucket) code=2 desc="tb:$LIMIT:$PERIOD_MS:$LIMIT" ;;
gcra) code=3 desc="gc:$LIMIT:$PERIOD_MS:$LIMIT" ;;
sliding_window) code=4 desc="sw:$LIMIT:$PERIOD_MS" ;;
*) echo "compare.sh: unknown ALGORITHM $ALGORITHM" >&2; exit 2 ;;
esac

# Our own redis-server on a free loopback port, in a temporary folder,
# stopped by pid whatever happens.
dir=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-bench.XXXXXX")
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_redis() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 ))
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$dir" --logfile "$dir/redis.log" &
        pid=$!
        for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
            if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break # port taken: it exited
            sleep 0.1
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        pid=""
    done
    echo "compare.sh: cannot start redis-server" >&2
    exit 3
}
start_redis
url="redis://127.0.0.1:$port"
# The script a single-limit check of this algorithm runs.
sha=$("$PORTEIRO" script --algorithm "$ALGORITHM" | redis-cli -p "$port" -x SCRIPT LOAD)
[ ${#sha} -eq 40 ] || { echo "compare.sh: SCRIPT LOAD failed: $sha" >&2; exit 3; }

ours() { # pipeline requests -> ops/s
    "$PORTEIRO" bench --redis "$url" --algorithm "$ALGORITHM" --limit "$LIMIT" \
        --period "${PERIOD_MS}ms" --connections "$CONNECTIONS" --pipeline "$1" \
        --requests "$2" --keys "$KEYS" | sed -n 's/.*"ops_per_sec":\([0-9]*\).*/\1/p'
}

ceiling() { # pipeline requests -> ops/s
    redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNECTIONS" -P "$1" -n "$2" -r "$KEYS" --csv \
        EVALSHA "$sha" 1 "porteiro:{bench:__rand_int__}:$desc" '' 1 \
        "$code" "$LIMIT" "$PERIOD_MS" "$LIMIT" |
        awk -F'"' 'NR == 2 { printf "%d\n", $4 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
    else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "porteiro bench vs redis-benchmark EVALSHA ($ALGORITHM $LIMIT/${PERIOD_MS}ms," \
    "$CONNECTIONS connections, $KEYS keys, redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'))"
printf '%-6s %-9s %12s %12s %7s\n' round pipeline porteiro ceiling ratio
for round in $(seq 1 "$ROUNDS"); do
    for pipeline in 1 16; do
        n=$REQUESTS_P1
        [ "$pipeline" = 1 ] || n=$REQUESTS_P16
        # Alternate who goes first, so neither always gets the warmer machine.
        if [ $((round % 2)) = 1 ]; then
            a=$(ours "$pipeline" "$n"); b=$(ceiling "$pipeline" "$n")
        else
            b=$(ceiling "$pipeline" "$n"); a=$(ours "$pipeline" "$n")
        fi
        [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt 0 ] ||
            { echo "compare.sh: a run failed (ours '$a', ceiling '$b')" >&2; exit 3; }
        ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
        printf '%-6s %-9s %12s %12s %7s\n' "$round" "$pipeline" "$a" "$b" "$ratio"
        echo "$pipeline $a $b $ratio" >>"$dir/results"
    done
done

echo "medians over $ROUNDS rounds:"
for pipeline in 1 16; do
    col() { awk -v p="$pipeline" -v c="$1" '$1 == p { print $c }' "$dir/results" | median; }
    a=$(col 2); b=$(col 3); r=$(col 4)
    printf '  pipeline %-3s porteiro %10s ops/s   ceiling %10s ops/s   ratio of medians %s   median ratio %s\n' \
        "$pipeline" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')" "$r"
done
