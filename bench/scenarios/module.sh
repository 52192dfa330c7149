#!/bin/sh
# bench/run.sh module [CLI [MODULE]] — the Redis module against the flat scripts: Redis time, CPU, memory
# The Redis module porteiro.so (docs/module.md) against the
# flat Lua scripts, on one private redis-server that has the module loaded,
# every comparison in the same run, rounds interleaved (the order
# alternating), medians printed:
#
#   cost   Redis's own time per call (INFO commandstats usec_per_call) of a
#          single check, gcra, token_bucket and fixed_window: EVALSHA of
#          the flat script (`porteiro script --algorithm A`) against the
#          module's command (porteiro.A, the same arguments), with INCR as
#          the yardstick of the cheapest write Redis has. redis-benchmark,
#          pipeline 16, random keys; the database emptied and the
#          statistics zeroed before each run.
#   batch  32 checks per call: porteiro.batch.gcra with 32 random keys
#          (redis-benchmark), Redis time per decision = usec_per_call / 32;
#          and `porteiro bench --batch 32` through the module and through
#          the scripts (--redis-module auto / off): usec per call / 32, and
#          the CPU redis-server used per decision (/proc, user+system).
#          usec_per_call is wall time inside the call: on an overloaded
#          machine a long call (a batch, a script) is preempted more often
#          than a short one, which inflates it; the CPU columns are not.
#   path   `porteiro bench` (the library's whole client path) at pipeline
#          16, through the module and through the scripts: decisions/s,
#          and the CPU redis-server used per decision (/proc, user+system).
#   memory MEMORY USAGE of one key of each algorithm written by the script
#          and by the module: equal.
#
# usage: bench/run.sh module [path/to/porteiro [path/to/porteiro.so]]  (default: BUILD's)
# env:   ROUNDS (5), CONNECTIONS (50), KEYS (100000), REQUESTS (200000),
#        REQUESTS_PATH (200000), PARTS ("cost batch path memory")
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
BUILD=$SRC/${BUILD:-build}
PORTEIRO=${1:-${PORTEIRO_CLI:-$BUILD/porteiro}}
MODULE=${2:-${PORTEIRO_MODULE_SO:-$BUILD/porteiro.so}}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-50}
KEYS=${KEYS:-100000}
REQUESTS=${REQUESTS:-200000}
REQUESTS_PATH=${REQUESTS_PATH:-200000}
PARTS=${PARTS:-cost batch path memory}
# L = 10^6 per 10^9 ms: a unit keeps a key for 1 s, so the keys a run hits
# stay (no expiry churn) and no check is denied.
L=1000000
P=1000000000

bench_need redis-server redis-cli redis-benchmark
[ -x "$PORTEIRO" ] || bench_die "no porteiro binary at $PORTEIRO"
[ -f "$MODULE" ] || [ $# -ge 2 ] || bench_build "$BUILD" porteiro_module
[ -f "$MODULE" ] || bench_die "no module at $MODULE"
MODULE=$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE") # redis-server runs in its folder
bench_workdir
bench_redis --loadmodule "$MODULE"
port=$redis_port pid=$redis_pid dir=$work
url="redis://127.0.0.1:$port"
rcli() { redis-cli -p "$port" "$@"; }
usec_of() { # command name -> usec_per_call
    rcli info commandstats | sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }

# One redis-benchmark run on an empty, zeroed Redis: prints usec_per_call of
# the command named $1 (as commandstats names it).
bench_run() { # stat_name args...
    name=$1
    shift
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNECTIONS" -P 16 -n "$REQUESTS" \
        -r "$KEYS" --csv "$@" >/dev/null
    u=$(usec_of "$name")
    [ -n "$u" ] || bench_die "no commandstats for $name"
    echo "$u"
}

echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $CONNECTIONS connections," \
    "$KEYS keys, $ROUNDS rounds, L=$L P=${P}ms B=L; load: $(uptime | sed 's/.*load average: //')"

cost_part() {
    echo
    echo "Redis time per single check (usec_per_call), pipeline 16:"
    printf '%-13s %-6s %9s %9s %9s %7s\n' algorithm round script_us module_us incr_us ratio
    for alg in gcra token_bucket fixed_window; do
        case "$alg" in
        gcra | token_bucket) burst=$L ;;
        *) burst= ;;
        esac
        sha=$("$PORTEIRO" script --algorithm "$alg" | rcli -x SCRIPT LOAD)
        key="porteiro:{b:__rand_int__}:$alg:$P"
        for round in $(seq 1 "$ROUNDS"); do
            s() { bench_run evalsha EVALSHA "$sha" 1 "$key" 1 "$L" "$P" $burst; }
            m() { bench_run "porteiro.$alg" "porteiro.$alg" 1 "$key" 1 "$L" "$P" $burst; }
            if [ $((round % 2)) = 1 ]; then a=$(s); b=$(m); else b=$(m); a=$(s); fi
            i=$(bench_run incr INCR "i:__rand_int__")
            r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
            printf '%-13s %-6s %9s %9s %9s %7s\n' "$alg" "$round" "$a" "$b" "$i" "$r"
            echo "$alg $a $b $i $r" >>"$dir/cost"
        done
    done
    echo "medians (ratio: module / script):"
    for alg in gcra token_bucket fixed_window; do
        col() { awk -v a="$alg" -v c="$1" '$1 == a { print $c }' "$dir/cost" | bench_median; }
        printf '  %-13s script %6s us   module %6s us   INCR %6s us   ratio %s\n' \
            "$alg" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)"
    done
}

# porteiro bench: prints "ops_per_sec redis_cpu_us_per_decision usec_per_call_of_NAME"
porteiro_run() { # module(auto|off) stat_name args...
    mode=$1 name=$2
    shift 2
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    c0=$(cpu_ticks)
    out=$("$PORTEIRO" bench --redis "$url" --redis-module "$mode" --algorithm gcra \
        --limit "$L" --period "${P}ms" --keys "$KEYS" --connections "$CONNECTIONS" \
        --requests "$REQUESTS_PATH" "$@")
    c1=$(cpu_ticks)
    ops=$(echo "$out" | sed -n 's/.*"ops_per_sec":\([0-9]*\).*/\1/p')
    errs=$(echo "$out" | sed -n 's/.*"errors":\([0-9]*\).*/\1/p')
    [ -n "$ops" ] && [ "$errs" = 0 ] || bench_die "porteiro bench: $out"
    u=$(usec_of "$name")
    awk -v o="$ops" -v d="$((c1 - c0))" -v t="$(getconf CLK_TCK)" -v n="$REQUESTS_PATH" -v u="$u" \
        'BEGIN { printf "%d %.2f %s\n", o, d / t * 1e6 / n, u }'
}

batch_part() {
    echo
    echo "32 checks per call, Redis time per decision (usec_per_call / 32):"
    printf '%-6s %10s %10s %10s %7s %9s %9s\n' round module_rb module_lib script_lib ratio \
        mod_cpu scr_cpu
    keys=""
    for _ in $(seq 1 32); do keys="$keys porteiro:{b:__rand_int__}:gcra:$P"; done
    for round in $(seq 1 "$ROUNDS"); do
        # shellcheck disable=SC2086
        rb=$(bench_run porteiro.batch.gcra porteiro.batch.gcra 32 $keys '' 0 0 1 "$L" "$P" "$L")
        if [ $((round % 2)) = 1 ]; then
            m=$(porteiro_run auto porteiro.batch.gcra --batch 32); s=$(porteiro_run off evalsha --batch 32)
        else
            s=$(porteiro_run off evalsha --batch 32); m=$(porteiro_run auto porteiro.batch.gcra --batch 32)
        fi
        set -- $m $s
        a=$(awk -v u="$rb" 'BEGIN { printf "%.3f", u / 32 }')
        b=$(awk -v u="$3" 'BEGIN { printf "%.3f", u / 32 }')
        c=$(awk -v u="$6" 'BEGIN { printf "%.3f", u / 32 }')
        r=$(awk -v b="$b" -v c="$c" 'BEGIN { printf "%.3f", b / c }')
        printf '%-6s %10s %10s %10s %7s %9s %9s\n' "$round" "$a" "$b" "$c" "$r" "$2" "$5"
        echo "$a $b $c $r $2 $5" >>"$dir/batch"
    done
    col() { awk -v c="$1" '{ print $c }' "$dir/batch" | bench_median; }
    echo "medians: module (redis-benchmark) $(col 1) us, module (porteiro bench) $(col 2) us," \
        "scripts (porteiro bench) $(col 3) us per decision; ratio module / script $(col 4);" \
        "redis-server CPU per decision (porteiro bench): module $(col 5) us, scripts $(col 6) us"
}

path_part() {
    echo
    echo "porteiro bench, gcra, pipeline 16: decisions/s and redis-server CPU per decision:"
    printf '%-6s %10s %10s %12s %12s\n' round module/s script/s module_cpu_us script_cpu_us
    for round in $(seq 1 "$ROUNDS"); do
        if [ $((round % 2)) = 1 ]; then
            m=$(porteiro_run auto porteiro.gcra --pipeline 16); s=$(porteiro_run off evalsha --pipeline 16)
        else
            s=$(porteiro_run off evalsha --pipeline 16); m=$(porteiro_run auto porteiro.gcra --pipeline 16)
        fi
        set -- $m $s
        printf '%-6s %10s %10s %12s %12s\n' "$round" "$1" "$4" "$2" "$5"
        echo "$1 $4 $2 $5" >>"$dir/path"
    done
    col() { awk -v c="$1" '{ print $c }' "$dir/path" | bench_median; }
    echo "medians: module $(col 1)/s at $(col 3) us of redis CPU per decision;" \
        "scripts $(col 2)/s at $(col 4) us"
}

memory_part() {
    echo
    echo "MEMORY USAGE of one key, written by the script and by the module (bytes):"
    for alg in gcra token_bucket fixed_window sliding_window; do
        case "$alg" in # L = 10 per minute: the keys live for seconds
        gcra | token_bucket) burst=10 ;;
        *) burst= ;;
        esac
        sha=$("$PORTEIRO" script --algorithm "$alg" | rcli -x SCRIPT LOAD)
        # shellcheck disable=SC2086
        rcli evalsha "$sha" 1 "s:$alg" 1 10 60000 $burst >/dev/null
        # shellcheck disable=SC2086
        rcli "porteiro.$alg" 1 "m:$alg" 1 10 60000 $burst >/dev/null
        printf '  %-15s script %s  module %s\n' "$alg" "$(rcli memory usage "s:$alg")" \
            "$(rcli memory usage "m:$alg")"
    done
}

for part in $PARTS; do
    case "$part" in
    cost) cost_part ;;
    batch) batch_part ;;
    path) path_part ;;
    memory) memory_part ;;
    *) bench_die "unknown part $part" ;;
    esac
done
echo
echo "load at the end: $(uptime | sed 's/.*load average: //')"
