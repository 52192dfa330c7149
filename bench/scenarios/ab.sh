#!/bin/sh
# bench/run.sh ab OLD NEW — two builds of the CLI on one Redis: did a change slow the path down?
# Two builds of porteiro against one private Redis, interleaved: `porteiro
# bench` throughput (checks/s) and Redis's own time per script call (INFO
# commandstats), medians over ROUNDS and the medians of the per-round ratios
# new/old. Run it with the CLI built before and after the change.
# usage: bench/run.sh ab OLD_PORTEIRO NEW_PORTEIRO
# env:   ROUNDS (5), CONNECTIONS (50), PIPELINE (1), REQUESTS (100000),
#        KEYS (100000), ALGORITHM (gcra)
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
[ $# -eq 2 ] || bench_die "usage: bench/run.sh ab OLD_PORTEIRO NEW_PORTEIRO"
old=$1 new=$2
ROUNDS=${ROUNDS:-5} CONNECTIONS=${CONNECTIONS:-50} PIPELINE=${PIPELINE:-1}
REQUESTS=${REQUESTS:-100000} KEYS=${KEYS:-100000} ALGORITHM=${ALGORITHM:-gcra}
bench_need redis-server redis-cli
bench_workdir
bench_redis

one() { # binary -> "checks/s usec_per_call"
    bench_fresh "$redis_port"
    ops=$("$1" bench --redis "redis://127.0.0.1:$redis_port" --algorithm "$ALGORITHM" \
        --connections "$CONNECTIONS" --pipeline "$PIPELINE" --requests "$REQUESTS" --keys "$KEYS" |
        sed -E 's/.*"ops_per_sec":([0-9.]+).*/\1/')
    echo "$ops $(bench_usec_per_call evalsha "$redis_port")"
}
for r in $(seq "$ROUNDS"); do
    for who in $(bench_rotate "$r" old new); do
        if [ "$who" = old ]; then one "$old" >>"$work/old"; else one "$new" >>"$work/new"; fi
    done
done
paste -d" " "$work/old" "$work/new" | awk '{ print $3 / $1, $4 / $2 }' >"$work/ratio"
printf '%-8s %12s %12s\n' "" "checks/s" "us/call"
for f in old new ratio; do
    printf '%-8s %12s %12s\n' "$(echo "$f" | sed 's#ratio#new/old#')" "$(bench_col "$work/$f" 1)" \
        "$(bench_col "$work/$f" 2)"
done
