#!/bin/sh
# bench/run.sh lease — quota leases in porteirod against memory and Redis: calls per 1 000 decisions
# Quota leases (docs/quota_leasing.md) in porteirod, against the memory
# backend and against Redis without leases:
#
#   hot   one client under a limit it never reaches (gcra 10^8/1h), GET
#         /v1/auth?policy=hot, one API key
#   many  1 000 clients (a key drawn per request), each at about 50 % of its
#         limit: the limit per client is set from the memory backend's
#         req/s on the hot row (2 x that rate / 1 000, per minute)
#
# Each row: req/s (wrk -c32), Redis script calls per 1 000 decisions (INFO
# commandstats: EVALSHA + EVAL, grants included) and porteirod's CPU per
# request (bench_cpu, bench/lib.sh).
#
#   bench/run.sh lease                     # 5 s a row after 2 s of warm-up, 6 rows: about 60 s
#   WARMUP=0 bench/run.sh lease            # no warm-up (a cold start's grants counted too)
#   DURATION=10s CONNS=64 bench/run.sh lease
#   HOT_LEASE="200 1000" MANY_LEASE="1000 1000" bench/run.sh lease
#                                            # max_ms max_units of each row's lease
#   RESULTS=bench/results/lease.tsv bench/run.sh lease
#   REPLICAS=1 bench/run.sh lease          # a replica of the private Redis too, and two
#                                            # more rows: the leases with replicas: 1
#                                            # (docs/quota_leasing.md, "Failover"), their
#                                            # WAITs counted apart
#   ROWS=hot bench/run.sh lease            # the hot rows only
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
BUILD=$SRC/${BUILD:-build}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s} # unmeasured load first: leases reach their size
CONNS=${CONNS:-32}
HOT_LEASE=${HOT_LEASE:-200 1000}
MANY_LEASE=${MANY_LEASE:-1000 1000}
REPLICAS=${REPLICAS:-0}
ROWS=${ROWS:-hot many}
bench_need wrk redis-server redis-cli curl
bench_build "$BUILD" porteirod
bench_workdir
dir=$work
if [ "$REPLICAS" -gt 0 ]; then
    bench_redis
    primary=$redis_port
    bench_redis --replicaof 127.0.0.1 "$primary"
    i=0
    until redis-cli -p "$redis_port" info replication | grep -q 'master_link_status:up'; do
        i=$((i + 1))
        [ $i -gt 200 ] && bench_die "the replica never synced"
        sleep 0.05
    done
    redis_port=$primary
else
    bench_redis
fi
dpid=""
stop_daemon() {
    [ -z "$dpid" ] || bench_stop "$dpid"
    dpid=""
}

http_port=$(bench_free_port)
bench_wrk_keys "$dir/many.lua" "/v1/auth?policy=many" X-Api-Key c 1000

lease_yaml() { # "max_ms max_units" or "" (no lease) [replicas]
    [ -n "$1" ] || return 0
    reps=${2:-0}
    set -- $1
    printf '    lease: { max_ms: %s, max_units: %s, replicas: %s }\n' "$1" "$2" "$reps"
}

config() { # backend(memory|redis|lease|replicas) many-limit-per-minute
    {
        echo "listen: 127.0.0.1:$http_port"
        if [ "$1" != memory ]; then
            printf 'redis:\n  url: redis://127.0.0.1:%s\n' "$redis_port"
        fi
        echo "policies:"
        echo "  hot:"
        echo "    limits:"
        echo "      - gcra 100000000/1h"
        echo "    key: header X-Api-Key"
        if [ "$1" = lease ]; then lease_yaml "$HOT_LEASE"; fi
        if [ "$1" = replicas ]; then lease_yaml "$HOT_LEASE" "$REPLICAS"; fi
        echo "  many:"
        echo "    limits:"
        echo "      - gcra $2/1m"
        echo "    key: header X-Api-Key"
        if [ "$1" = lease ]; then lease_yaml "$MANY_LEASE"; fi
        if [ "$1" = replicas ]; then lease_yaml "$MANY_LEASE" "$REPLICAS"; fi
    } >"$dir/porteirod.yaml"
}

script_calls() {
    redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
        awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { n += $3 } END { print n + 0 }'
}
wait_calls() {
    redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
        awk -F'[=,:]' '/^cmdstat_wait:/ { n += $3 } END { print n + 0 }'
}

start_daemon() {
    "$BUILD/porteirod" --config "$dir/porteirod.yaml" --log-level warn &
    dpid=$!
    bench_track "$dpid"
    bench_wait_http "$http_port" /healthz
}

results=${RESULTS:-$dir/results}
: >"$results"
row() { # label url [lua]
    out="$dir/wrk.out"
    if [ -n "${3:-}" ]; then
        set -- "$1" "$2" -s "$3"
    else
        set -- "$1" "$2" -H "X-Api-Key: hot-client"
    fi
    label=$1
    url=$2
    shift 2
    if [ "$WARMUP" != 0 ]; then
        wrk -t1 -c"$CONNS" -d"$WARMUP" "$@" "$url" >/dev/null 2>&1
    fi
    s0=$(script_calls)
    w0=$(wait_calls)
    bench_cpu "$dpid" -- wrk -t1 -c"$CONNS" -d"$DURATION" "$@" "$url" >"$out" 2>&1
    s1=$(script_calls)
    w1=$(wait_calls)
    awk -v l="$label" -v c="$((s1 - s0))" -v w="$((w1 - w0))" '
        /requests [0-9]+ in/ { n = $2; r = $6; gsub(/[(\/s)]/, "", r) }
        /requests in/ { n = $1 }
        $1 == "Requests/sec:" { r = $2 }
        /us CPU per request/ { cpu = $(NF - 4) }
        END { printf "%-14s %9.0f req/s  %7.2f Redis calls / 1000 decisions  %6s us CPU / request  %5.2f WAITs / 1000\n",
                     l, r, (n > 0 ? c * 1000 / n : 0), (cpu == "" ? "-" : cpu), (n > 0 ? w * 1000 / n : 0) }' "$out" |
        tee -a "$results"
}

# The memory backend first: its hot rate sets the many clients' limit.
config memory 1000000
start_daemon
row hot-memory "http://127.0.0.1:$http_port/v1/auth?policy=hot"
rate=$(awk '/hot-memory/ { print int($2) }' "$results")
per_minute=$(( rate * 2 * 60 / 1000 ))
[ "$per_minute" -ge 10 ] || per_minute=10
stop_daemon
echo "many: 1000 clients, each limited to gcra $per_minute/1m (about twice its share of $rate req/s)"
config memory "$per_minute"
start_daemon
row many-memory "http://127.0.0.1:$http_port/" "$dir/many.lua"
stop_daemon
backends="redis lease"
[ "$REPLICAS" -gt 0 ] && backends="$backends replicas"
for backend in $backends; do
    redis-cli -p "$redis_port" flushall >/dev/null
    config "$backend" "$per_minute"
    start_daemon
    case " $ROWS " in *" hot "*) row "hot-$backend" "http://127.0.0.1:$http_port/v1/auth?policy=hot" ;; esac
    case " $ROWS " in *" many "*) row "many-$backend" "http://127.0.0.1:$http_port/" "$dir/many.lua" ;; esac
    stop_daemon
done
echo "hot lease: $HOT_LEASE (max_ms max_units); many lease: $MANY_LEASE"
awk '{ r[$1] = $2 } END {
    if (r["hot-memory"] > 0) printf "hot:  Redis %.2fx memory, leases %.2fx memory\n", r["hot-redis"] / r["hot-memory"], r["hot-lease"] / r["hot-memory"]
    if (r["many-memory"] > 0) printf "many: Redis %.2fx memory, leases %.2fx memory\n", r["many-redis"] / r["many-memory"], r["many-lease"] / r["many-memory"]
    if (r["hot-replicas"] > 0 && r["hot-lease"] > 0) printf "hot:  replicas %.2fx leases\n", r["hot-replicas"] / r["hot-lease"]
    if (r["many-replicas"] > 0 && r["many-lease"] > 0) printf "many: replicas %.2fx leases\n", r["many-replicas"] / r["many-lease"] }' "$results"
