#!/bin/sh
# bench/run.sh top_cost — porteirod's CPU (or instructions) per request with the top keys on and off
# porteirod's CPU per request with the top keys on (admin
# listener, top.keys 64, the default) against off (top.keys 0), on random
# keys (the structure's worst case: nearly every decision evicts a counter).
#
#   bench/run.sh top_cost
#
# A private redis-server; per round, porteirod started with each config in
# turn (the order alternates), wrk -t1 -c32 for DURATION (10) seconds on
# GET /v1/auth with X-User drawn from KEYS (1 000 000) keys; CPU per
# request (bench_cpu, bench/lib.sh). ROUNDS (3) rounds; prints each run and
# the median ratio on / off (the budget: <= 1.03). BUILD: a build folder
# (default build; Release when configured here). Also runs the structure's
# micro-benchmark (ns per decision), topkeys_bench.
#
#   CALLGRIND=1 bench/run.sh top_cost
#
# counts instructions instead of CPU time: porteirod runs under valgrind
# --tool=callgrind (wrk -c8 for DURATION seconds, a few thousand requests
# under valgrind), and each run's instructions per request are (its total
# less an idle run's: start, one probe, stop) / the requests wrk made. The
# count does not move with the machine's load, where CPU time does by
# +-15 % on 2 shared cores. CG_KEEP=/tmp/top keeps each loaded run's
# callgrind file as /tmp/top.on and /tmp/top.off (callgrind_annotate).
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
BUILD=$SRC/${BUILD:-build}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
KEYS=${KEYS:-1000000}
CALLGRIND=${CALLGRIND:-0}
bench_need wrk redis-server redis-cli curl
[ "$CALLGRIND" = 0 ] || bench_need valgrind
bench_build "$BUILD" porteirod topkeys_bench
bench_workdir
bench_redis
rport=$redis_port dir=$work
dpid=""

bench_wrk_keys "$dir/random.lua" "/v1/auth?policy=api" X-User u "$KEYS"

# config MODE PORT APORT: on = an admin listener and top.keys 64; off = top.keys 0.
config() {
    top="top:\n  keys: 0\n"
    [ "$1" = on ] && top="admin:\n  listen: 127.0.0.1:$3\ntop:\n  keys: 64\n"
    printf "listen: 127.0.0.1:%s\nredis:\n  url: redis://127.0.0.1:%s\npolicies:\n  api:\n    limits: [fixed_window 100/1s]\n    key: header X-User\n$top" \
        "$2" "$rport" >"$dir/$1.yaml"
}

# run MODE [idle]: prints "us_per_request requests_per_s", or under
# CALLGRIND "instructions requests" (idle: no load, the run's fixed cost)
run() {
    port=$(bench_free_port) aport=$(bench_free_port)
    config "$1" "$port" "$aport"
    if [ "$CALLGRIND" = 0 ]; then
        "$BUILD/porteirod" --config "$dir/$1.yaml" --log-level warn 2>>"$dir/porteirod.log" &
    else
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
            "$BUILD/porteirod" --config "$dir/$1.yaml" --log-level warn 2>>"$dir/porteirod.log" &
    fi
    dpid=$!
    bench_track "$dpid"
    bench_wait_http "$port" /healthz 30
    redis-cli -p "$rport" flushall >/dev/null
    if [ "$CALLGRIND" != 0 ]; then
        reqs=0
        if [ "${2:-}" != idle ]; then
            out=$(wrk -t1 -c8 -d"${DURATION}s" -s "$dir/random.lua" "http://127.0.0.1:$port")
            reqs=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
        fi
        bench_stop "$dpid"
        dpid=""
        echo "$(sed -n 's/^\(totals\|summary\): *\([0-9]*\).*/\2/p' "$dir/cg.out" | head -1) $reqs"
        [ -z "${CG_KEEP:-}" ] || [ "${2:-}" = idle ] || cp "$dir/cg.out" "$CG_KEEP.$1"
        rm -f "$dir/cg.out"
        return
    fi
    out=$(bench_cpu "$dpid" -- wrk -t1 -c32 -d"${DURATION}s" -s "$dir/random.lua" \
        "http://127.0.0.1:$port")
    if [ "$1" = on ]; then # the structure saw the traffic
        curl -s "http://127.0.0.1:$aport/v1/top?outcome=allowed&n=1" | grep -q '"count"' ||
            bench_die "/v1/top shows nothing"
    fi
    bench_stop "$dpid"
    dpid=""
    us=$(echo "$out" | sed -n 's/.*: \([0-9.]*\) us CPU per request.*/\1/p')
    rps=$(echo "$out" | sed -n 's/.*(\([0-9]*\)\/s).*/\1/p')
    echo "$us $rps"
}


uptime
if [ "$CALLGRIND" != 0 ]; then
    for mode in off on; do
        set -- $(run "$mode" idle)
        idle=$1
        set -- $(run "$mode")
        per=$(awk -v t="$1" -v i="$idle" -v n="$2" 'BEGIN { printf "%.0f", (t - i) / n }')
        echo "top $mode: $per instructions per request ($2 requests; idle run $idle)"
        echo "$per" >"$dir/ir.$mode"
    done
    awk -v a="$(cat "$dir/ir.on")" -v b="$(cat "$dir/ir.off")" \
        'BEGIN { printf "instructions per request, top on / off: %.4f (budget <= 1.03)\n", a / b }'
    exit 0
fi
: >"$dir/ratios"
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then off=$(run off); on=$(run on); else on=$(run on); off=$(run off); fi
    set -- $off; off_us=$1 off_rps=$2
    set -- $on; on_us=$1 on_rps=$2
    echo "round $r: top off ${off_us} us CPU/request (${off_rps} req/s), on ${on_us} us (${on_rps} req/s)"
    awk -v a="$on_us" -v b="$off_us" 'BEGIN { printf "%.4f\n", a / b }' >>"$dir/ratios"
done
echo "median CPU per request, top on / off: $(bench_median <"$dir/ratios") (budget <= 1.03)"
[ ! -x "$BUILD/topkeys_bench" ] || "$BUILD/topkeys_bench"
uptime
