#!/bin/sh
# bench/run.sh cluster_spread [CLI] — one envoy domain, one nginx location on a cluster: each master's share
# One envoy domain and one nginx location on a Redis Cluster: does each
# master get its share of the calls and keys,
# what does Redis spend per decision on each master against one node, and
# how many decisions a second do MASTERS masters give against one?
#
# One plain redis-server and a cluster of MASTERS masters (no replicas),
# started here on loopback. `porteiro bench` (the event-loop engine, the
# async router; CONNECTIONS connections x PIPELINE in flight) sends what the
# faces send, fixed_window 10^6 an hour:
#   envoy, 1 descriptor   --items 1 --tag edge: a request of one descriptor
#                         (a single check of its counter key)
#   envoy, 2 descriptors  --items 2 --tag edge: two counters, one multi-key
#                         check (two slots on a cluster: a call per slot)
#   nginx, 2 lines        --items 2 --tag ngx: a location with two
#                         porteiro_limit lines
# each item a random key of KEYS (client addresses), in interleaved rounds
# on the node and on the cluster. Per run: decisions/s; per node, from INFO
# commandstats (EVALSHA and EVAL), its calls and usec, and DBSIZE. Prints
# medians: decisions/s, Redis us per decision (usec summed over the nodes /
# decisions), and per master its share of the calls and of the keys and its
# usec_per_call, beside the one node's.
#
# usage: bench/run.sh cluster_spread [path/to/porteiro]
# env:   ROUNDS (3), MASTERS (3), CONNECTIONS (8), PIPELINE (8),
#        REQUESTS (40000), KEYS (100000)
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cli=${1:-$SRC/${BUILD:-build}/porteiro}
ROUNDS=${ROUNDS:-3} MASTERS=${MASTERS:-3} CONNECTIONS=${CONNECTIONS:-8} PIPELINE=${PIPELINE:-8}
REQUESTS=${REQUESTS:-40000} KEYS=${KEYS:-100000}
[ -x "$cli" ] || bench_die "no porteiro at $cli"
bench_need redis-server redis-cli ss
echo "load before: $(uptime | sed 's/.*load average/load average/')"
bench_workdir
bench_redis
base=$redis_port dir=$work
bench_cluster "$MASTERS"
masters=$cluster_ports

fresh() { bench_fresh "$@"; }
# "calls usec" of one node: EVALSHA and EVAL (a NOSCRIPT's resend).
stats() {
    redis-cli -p "$1" info commandstats | tr -d '\r' |
        awk -F'[:=,]' '/^cmdstat_eval(sha)?:/ { c += $3; u += $5 } END { print c + 0, u + 0 }'
}
# run NAME URL ITEMS TAG PORTS...: one bench; appends to $dir/NAME
# "ops total_usec decisions" then per port "calls usec keys".
run() {
    r_name=$1 r_url=$2 r_items=$3 r_tag=$4; shift 4
    fresh "$@"
    out=$("$cli" bench --redis "$r_url" --algorithm fixed_window --limit 1000000 --period 1h \
        --connections "$CONNECTIONS" --pipeline "$PIPELINE" --requests "$REQUESTS" \
        --keys "$KEYS" --items "$r_items" --tag "$r_tag")
    ops=$(echo "$out" | sed -E 's/.*"ops_per_sec":([0-9]+).*/\1/')
    errors=$(echo "$out" | sed -E 's/.*"errors":([0-9]+).*/\1/')
    [ "$errors" = 0 ] || { echo "cluster_spread.sh: $r_name: $out" >&2; exit 1; }
    line="$ops"
    total=0
    for p in "$@"; do
        set -- $(stats "$p")
        keys=$(redis-cli -p "$p" dbsize | tr -d '\r')
        line="$line $1 $2 $keys"
        total=$((total + $2))
    done
    echo "$line $total" >>"$dir/$r_name"
}
col() { awk -v c="$2" '{ print $c }' "$dir/$1" | bench_median; }

for shape in "1 edge envoy-1" "2 edge envoy-2" "2 ngx nginx-2"; do
    # shellcheck disable=SC2086
    set -- $shape
    items=$1 tag=$2 name=$3
    for r in $(seq "$ROUNDS"); do
        # shellcheck disable=SC2086
        if [ $((r % 2)) -eq 1 ]; then
            run "$name.one" "redis://127.0.0.1:$base" "$items" "$tag" "$base"
            run "$name.cl" "$cluster_url" "$items" "$tag" $masters
        else
            run "$name.cl" "$cluster_url" "$items" "$tag" $masters
            run "$name.one" "redis://127.0.0.1:$base" "$items" "$tag" "$base"
        fi
    done
    one_ops=$(col "$name.one" 1)
    one_calls=$(col "$name.one" 2)
    one_usec=$(col "$name.one" 3)
    cl_ops=$(col "$name.cl" 1)
    last=$((2 + 3 * MASTERS))
    cl_usec=$(col "$name.cl" "$last")
    echo
    echo "$name (--items $items --tag $tag), medians of $ROUNDS rounds, $REQUESTS decisions each:"
    awk -v o="$one_ops" -v c="$one_calls" -v u="$one_usec" -v n="$REQUESTS" 'BEGIN {
        printf "  one node:   %8.0f decisions/s   Redis %.2f us/decision, %.2f us/call (%.2f calls/decision)\n",
            o, u / n, u / c, c / n }'
    awk -v o="$cl_ops" -v u="$cl_usec" -v n="$REQUESTS" -v r="$(echo "$cl_ops $one_ops" | awk '{ print $1 / $2 }')" 'BEGIN {
        printf "  cluster:    %8.0f decisions/s   Redis %.2f us/decision   (%.2fx the node'"'"'s decisions/s)\n",
            o, u / n, r }'
    i=0
    for p in $masters; do
        ci=$((2 + 3 * i)) ui=$((3 + 3 * i))
        share() { # column: this master's share of it, per round
            awk -v c="$1" -v M="$MASTERS" -v i="$i" '{ t = 0
                for (j = 0; j < M; j++) t += $(c + 3 * j)
                print 100 * $(c + 3 * i) / t }' "$dir/$name.cl" | bench_median
        }
        upc=$(awk -v ci="$ci" -v ui="$ui" '{ print $ui / $ci }' "$dir/$name.cl" | bench_median)
        printf '    master %d: %5.1f %% of the calls, %5.1f %% of the keys, %.2f us/call\n' \
            $((i + 1)) "$(share 2)" "$(share 4)" "$upc"
        i=$((i + 1))
    done
done
echo
echo "load after: $(uptime | sed 's/.*load average/load average/')"
