#!/bin/sh
# bench/run.sh transport_cost — porteirod's instructions per request (callgrind), memory, Redis, TLS
# porteirod's own work per request, counted in machine
# instructions under valgrind's callgrind: unlike CPU time it does not move
# with whatever else runs on the machine (other load, CPU frequency). For
# each build, porteirod on the memory backend and on Redis, wrk -c32 with
# random keys (an API key drawn from 100 000 per request); the counters are
# zeroed after a warm-up and read after the measured run, so start-up is not
# counted. Prints instructions per request, and Redis / memory per build.
#
#   bench/run.sh transport_cost                            # build/porteirod
#   OTHER=/tmp/main-rel/porteirod bench/run.sh transport_cost   # and another build
#   ROWS=top bench/run.sh transport_cost                   # and the top functions
#   FACE=envoy bench/run.sh transport_cost                 # envoy's RLS: POST /json
#   FACE=grpc bench/run.sh transport_cost                  # envoy's RLS over gRPC (h2load)
#   TLS=1 bench/run.sh transport_cost                      # and Redis over TLS (rediss://)
#
# Under callgrind porteirod runs ~50x slower, so more requests arrive per
# loop pass than at full speed: Redis checks share script calls more often
# than they would (the Redis rows are a little flattered); both builds see
# the same. Use the numbers to compare builds and to see where the work
# goes; quote CPU time per request (bench/http_bench.sh) beside them.
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC"
BUILD=${BUILD:-build}
OTHER=${OTHER:-}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
ROWS=${ROWS:-}
FACE=${FACE:-auth} # auth: GET /v1/auth; envoy: POST /json (envoy_rls.c), one descriptor;
                   # grpc: ShouldRateLimit over h2c, KEYS h2load processes of CONNS/KEYS
                   # connections, one stream each, each its own key
KEYS=${KEYS:-8}
TLS=${TLS:-0}
bench_need valgrind callgrind_control callgrind_annotate wrk redis-server curl
bench_build "$BUILD" porteirod
bench_workdir
backends="memory redis"
[ "$TLS" = 1 ] && backends="memory redis tls"
bench_redis
tls_port=${redis_tls_port:-}

bench_envoy_rules
if [ "$FACE" = grpc ]; then
    bench_need h2load protoc-c
    bench_grpc_bodies "$KEYS"
fi
if [ "$FACE" = envoy ]; then
    cat >"$work/random.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  return wrk.format("POST", "/json", {["Content-Type"] = "application/json"},
    '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"k' ..
    math.random(1, 100000) .. '"}]}]}')
end
LUA
else
    bench_wrk_keys "$work/random.lua" "/v1/auth?policy=bench" X-Api-Key k 100000
fi

wait_port() { bench_wait_http "$1" / 30; } # valgrind starts slowly

# load SECONDS OUT: the requests, wrk or h2load; OUT says how many were answered.
load() {
    if [ "$FACE" != grpc ]; then
        wrk -t1 -c"$CONNS" -d"$1" -s "$work/random.lua" "http://127.0.0.1:$port/" >"$2"
        return
    fi
    k=1 hp=""
    while [ "$k" -le "$KEYS" ]; do
        h2load -t1 -c$((CONNS / KEYS > 0 ? CONNS / KEYS : 1)) -m1 -D "${1%s}" -d "$work/body$k" \
            -H 'content-type: application/grpc' -H 'te: trailers' \
            "http://127.0.0.1:$grpc_port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
            >"$2.$k" 2>&1 &
        hp="$hp $!"
        k=$((k + 1))
    done
    for p in $hp; do wait "$p"; done
    cat "$2".* | awk '/^requests: / { n += $8 } END { print n + 0, "requests in" }' >"$2"
}

: >"$work/results"
measure() { # binary name backend
    port=$(bench_free_port) grpc_port=$(bench_free_port)
    {
        echo "listen: 127.0.0.1:$port"
        [ "$3" = redis ] && printf 'redis:\n  url: redis://127.0.0.1:%s\n' "$redis_port"
        [ "$3" = tls ] && printf 'redis:\n  url: rediss://127.0.0.1:%s\n  tls:\n    ca: %s\n' \
            "$tls_port" "$work/ca.crt"
        printf 'policies:\n  bench:\n    limits:\n      - token_bucket 1000000000/1s\n'
        printf '    key: header X-Api-Key\n'
        printf 'envoy:\n  config: %s\n' "$work/rules"
        [ "$FACE" = grpc ] && printf '  grpc_listen: 127.0.0.1:%s\n' "$grpc_port"
    } >"$work/porteirod.yaml"
    out="$work/cg.$2.$3"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$1" \
        --config "$work/porteirod.yaml" --log-level warn 2>"$work/valgrind.log" &
    pid=$!
    bench_track "$pid"
    wait_port "$port"
    load 2s "$work/warm.out"
    callgrind_control --zero "$pid" >/dev/null 2>&1
    load "$DURATION" "$work/wrk.out"
    callgrind_control --dump "$pid" >/dev/null 2>&1
    bench_stop "$pid"
    n=$(awk '/requests in/ { print $1 }' "$work/wrk.out")
    dump=$(ls "$out".* 2>/dev/null | head -1)
    ir=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    echo "$2 $3 $n $ir" >>"$work/results"
    if [ "$ROWS" = top ]; then
        echo "== $2 $3: top functions (inclusive), per request"
        callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
            awk -v n="$n" '/^ *[0-9,]+ \(/ { v = $1; gsub(",", "", v); $1 = ""; $2 = "";
                 if (++k <= 45) printf "%9.0f %s\n", v / n, $0 }'
    fi
}

for backend in $backends; do
    measure "$BUILD/porteirod" porteirod "$backend"
    [ -n "$OTHER" ] && measure "$OTHER" other "$backend"
done

if [ "$FACE" = grpc ]; then
    driver="h2load, $KEYS processes of $((CONNS / KEYS > 0 ? CONNS / KEYS : 1)) connections, one key each"
else
    driver="wrk -t1 -c$CONNS, random keys"
fi
echo "callgrind, $FACE, $driver, $DURATION, $(date -u +%Y-%m-%dT%H:%MZ)"
awk '{ per = $4 / $3; printf "%-10s %-7s %7d requests %9.0f instructions per request\n", $1, $2, $3, per
       v[$1, $2] = per; names[$1] = 1 }
     END { for (b in names) if (v[b, "memory"] > 0)
             printf "%-10s redis / memory: %.2fx\n", b, v[b, "redis"] / v[b, "memory"]
           for (b in names) if (v[b, "memory"] > 0 && v[b, "tls"] > 0)
             printf "%-10s tls / memory: %.2fx\n", b, v[b, "tls"] / v[b, "memory"] }' "$work/results"
