#!/bin/sh
# bench/run.sh cluster [CLI] — one node against a Redis Cluster: does capacity grow with masters?
#
# One plain redis-server and a Redis Cluster of MASTERS masters (no
# replicas), started here on loopback. In interleaved rounds, on each:
#   porteiro   `porteiro bench` (gcra, CONNECTIONS connections, --batch
#              BATCH: the blocking multi-threaded driver, which routes each
#              check to its slot's master; or, with PIPELINE set, --pipeline
#              PIPELINE: the event-loop engine, one thread, the async router)
#   script     redis-benchmark sending EVALSHA of porteiro's own gcra script
#              (`porteiro script --algorithm gcra`), the same arguments
#   ceiling    redis-benchmark sending EVALSHA of bench/ceiling/gcra.lua
#   (both --cluster on the cluster; redis-benchmark puts each node's own
#   tag in {tag}): what cluster mode itself adds to every script call
#   (Redis keeps a per-slot index of keys and checks the slot of every
#   command a script runs), measured apart from porteiro's client
# Redis's own time per decision is cmdstat_evalsha usec summed over the
# masters, divided by the decisions. Prints the medians and the medians of
# the per-round ratios cluster / one node.
#
# usage: bench/run.sh cluster [path/to/porteiro]
# env:   ROUNDS (5), MASTERS (3), CONNECTIONS (8), BATCH (1), PIPELINE (unset),
#        REQUESTS (60000), KEYS (100000)
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cli=${1:-$SRC/${BUILD:-build}/porteiro}
ROUNDS=${ROUNDS:-5} MASTERS=${MASTERS:-3} CONNECTIONS=${CONNECTIONS:-8} BATCH=${BATCH:-1}
REQUESTS=${REQUESTS:-60000} KEYS=${KEYS:-100000} PIPELINE=${PIPELINE:-}
if [ -n "$PIPELINE" ]; then shape="--pipeline $PIPELINE"; else shape="--batch $BATCH"; fi
[ -x "$cli" ] || bench_die "no porteiro at $cli"
bench_need redis-server redis-cli redis-benchmark ss
bench_workdir
bench_redis
base=$redis_port dir=$work
bench_cluster "$MASTERS"
masters=$cluster_ports
one_url="redis://127.0.0.1:$base"

fresh() { bench_fresh "$@"; }
usec() { # total cmdstat_evalsha usec over the ports
    for p in "$@"; do
        redis-cli -p "$p" info commandstats | tr -d '\r' | awk -F'[=,]' '/^cmdstat_evalsha:/ { print $4 }'
    done | awk '{ s += $1 } END { print s + 0 }'
}
porteiro() { # url, ports...
    url=$1; shift
    fresh "$@"
    ops=$("$cli" bench --redis "$url" --algorithm gcra --limit 100000 --period 1s \
        --connections "$CONNECTIONS" $shape --requests "$REQUESTS" --keys "$KEYS" |
        sed -E 's/.*"ops_per_sec":([0-9.]+).*/\1/')
    echo "$ops $(usec "$@" | awk -v n="$REQUESTS" '{ print $1 / n }')"
}
"$cli" script --algorithm gcra >"$dir/porteiro_gcra.lua"
sha=""
script_call() { # script file, cluster flag, ports...; then its arguments after the key
    file=$1 flag=$2; shift 2
    fresh "$@"
    for p in "$@"; do sha=$(redis-cli -p "$p" script load "$(cat "$file")"); done
    # shellcheck disable=SC2086
    rps=$(redis-benchmark -p "$1" $flag -c "$CONNECTIONS" -n "$REQUESTS" -r "$KEYS" --csv \
        EVALSHA "$sha" 1 '{tag}:__rand_int__' $ARGS | tail -1 | cut -d, -f2 | tr -d '"')
    echo "$rps $(usec "$@" | awk -v n="$REQUESTS" '{ print $1 / n }')"
}
ceiling() { ARGS="100000 1000 100000" script_call "$BENCH/ceiling/gcra.lua" "$@"; }
own() { ARGS="1 100000 1000 100000" script_call "$dir/porteiro_gcra.lua" "$@"; }

: >"$dir/pn"; : >"$dir/pc"; : >"$dir/sn"; : >"$dir/sc"; : >"$dir/cn"; : >"$dir/cc"
for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    if [ $((r % 2)) -eq 1 ]; then
        porteiro "$one_url" "$base" >>"$dir/pn"; porteiro "$cluster_url" $masters >>"$dir/pc"
        own "" "$base" >>"$dir/sn"; own --cluster $masters >>"$dir/sc"
        ceiling "" "$base" >>"$dir/cn"; ceiling --cluster $masters >>"$dir/cc"
    else
        ceiling --cluster $masters >>"$dir/cc"; ceiling "" "$base" >>"$dir/cn"
        own --cluster $masters >>"$dir/sc"; own "" "$base" >>"$dir/sn"
        porteiro "$cluster_url" $masters >>"$dir/pc"; porteiro "$one_url" "$base" >>"$dir/pn"
    fi
done
printf '%-34s %12s %18s\n' "" "checks/s" "Redis us/decision"
for f in pn:"porteiro, one node" pc:"porteiro, $MASTERS-master cluster" \
         sn:"its script, one node" sc:"its script, $MASTERS-master cluster" \
         cn:"gcra.lua, one node" cc:"gcra.lua, $MASTERS-master cluster"; do
    printf '%-34s %12.0f %18.2f\n' "${f#*:}" "$(cut -d' ' -f1 "$dir/${f%%:*}" | bench_median)" \
        "$(cut -d' ' -f2 "$dir/${f%%:*}" | bench_median)"
done
paste -d' ' "$dir/pn" "$dir/pc" "$dir/sn" "$dir/sc" "$dir/cn" "$dir/cc" >"$dir/all"
echo "medians of the per-round ratios, cluster / one node:"
echo "  porteiro:   checks/s $(awk '{ print $3 / $1 }' "$dir/all" | bench_median)   Redis time per decision $(awk '{ print $4 / $2 }' "$dir/all" | bench_median)"
echo "  its script: calls/s $(awk '{ print $7 / $5 }' "$dir/all" | bench_median)   Redis time per decision $(awk '{ print $8 / $6 }' "$dir/all" | bench_median)"
echo "  gcra.lua:   calls/s $(awk '{ print $11 / $9 }' "$dir/all" | bench_median)   Redis time per decision $(awk '{ print $12 / $10 }' "$dir/all" | bench_median)"
