#!/bin/sh
# bench/run.sh grpc — porteirod's gRPC ShouldRateLimit (h2load) against its HTTP /v1/auth (wrk)
# porteirod's gRPC ShouldRateLimit (h2load, unary gRPC POSTs)
# against its HTTP /v1/auth (wrk) for the same limit on the same backend, in
# interleaved rounds, on the memory backend and on Redis; the medians, the
# gRPC/HTTP ratios of requests/s and of porteirod's CPU per request, Redis's
# own time per script call, and gRPC's p99 at half its measured maximum.
#
#   bench/run.sh grpc                        # 5 s per run, 3 rounds, 32 connections
#   DURATION=10 ROUNDS=5 bench/run.sh grpc
#
# The same limit: envoy ratelimit's rule "user" (1 000 000 000 per second,
# a fixed window) and the policy "bench" (fixed_window 1000000000/1s keyed by
# X-Api-Key): nobody reaches it, both paths make one decision (one script
# call on Redis) per request. The values: h2load cannot vary a request body,
# so KEYS pre-built bodies (user = k1 .. kKEYS) are sent by KEYS h2load
# processes at once, CONNS/KEYS connections each; wrk draws the X-Api-Key of
# each request from the same KEYS values (Lua). Rows:
#   http        wrk -c CONNS, GET /v1/auth?policy=bench
#   grpc        h2load, CONNS connections, 1 stream each (as wrk: 1 request
#               in flight per connection)
#   grpc-mux    h2load, KEYS connections, CONNS/KEYS streams each (as Envoy:
#               few connections, many streams)
# Every gRPC answer is checked once beforehand with the Python client (an
# OK decision); h2load itself only sees HTTP 200s.
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC"
BUILD=${BUILD:-build}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
KEYS=${KEYS:-4}
PY=/usr/bin/python3

bench_need h2load wrk redis-server redis-cli protoc-c curl
bench_build "$BUILD" porteirod
bench_workdir
bench_redis
pid="" # the porteirod running

bench_envoy_rules

# One framed gRPC message per key (body1 .. bodyKEYS).
bench_grpc_bodies "$KEYS"
bench_wrk_keys "$work/keys.lua" "/v1/auth?policy=bench" X-Api-Key k "$KEYS"

config() { # file http-port grpc-port redis-url-or-empty
    {
        echo "listen: 127.0.0.1:$2"
        [ -n "$4" ] && printf 'redis:\n  url: %s\n  timeout_ms: 1000\n' "$4"
        echo "policies:"
        echo "  bench:"
        echo "    limits:"
        echo "      - fixed_window 1000000000/1s"
        echo "    key: header X-Api-Key"
        echo "envoy:"
        echo "  config: $work/rules"
        echo "  grpc_listen: 127.0.0.1:$3"
    } >"$1"
}

wait_port() { bench_wait_http "$1"; }

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
redis_calls() { # script calls and their total usec, from INFO commandstats
    redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
        awk -F'[=,:]' '/^cmdstat_(evalsha|eval|fcall):/ { c += $3; u += $5 } END { print c + 0, u + 0 }'
}

results="$work/results"
: >"$results"
# run label backend pid command...: requests/s, us CPU per request (porteirod),
# and Redis's us per script call, as one line of $results.
run() {
    label=$1 backend=$2 pid=$3
    shift 3
    [ "$backend" = redis ] && redis-cli -p "$redis_port" config resetstat >/dev/null
    t0=$(ticks "$pid")
    start=$(date +%s.%N)
    "$@" >"$work/out" 2>&1
    end=$(date +%s.%N)
    t1=$(ticks "$pid")
    n=$(awk '/requests in/ { n += $1 } /^requests: / { n += $8 } END { print n + 0 }' "$work/out")
    fail=$(awk '/^requests: / { f += $10 + $12 } /Non-2xx/ { f += $5 } END { print f + 0 }' "$work/out")
    [ "$fail" = 0 ] || echo "grpc_bench: $label $backend: $fail failed or non-2xx requests" >&2
    [ "$n" -gt 0 ] || { echo "grpc_bench: $label: no requests counted" >&2; cat "$work/out" >&2; exit 1; }
    set -- $(redis_calls)
    rcalls=$1 rus=$2
    [ "$backend" = redis ] || rcalls=0
    awk -v l="$label-$backend" -v r="$round" -v n="$n" -v a="$start" -v b="$end" \
        -v d="$((t1 - t0))" -v tck="$(getconf CLK_TCK)" -v rc="$rcalls" -v ru="$rus" \
        'BEGIN { printf "%s %s %.0f %.2f %.2f %.3f\n", r, l, n / (b - a), d / tck * 1e6 / n,
                 (rc > 0 ? ru / rc : 0), rc / n }' >>"$results"
}

h2() { # connections streams-per-connection [extra h2load args]: KEYS processes at once
    c=$1 m=$2       # (with LOG set, process k logs its latencies to $LOG.k)
    shift 2
    per=$((c / KEYS))
    [ "$per" -ge 1 ] || per=1
    k=1
    hp=""
    while [ "$k" -le "$KEYS" ]; do
        log=""
        [ -n "${LOG:-}" ] && log="--log-file=$LOG.$k"
        h2load -t1 -c"$per" -m"$m" -D "$DURATION" -d "$work/body$k" \
            -H 'content-type: application/grpc' -H 'te: trailers' $log "$@" \
            "http://127.0.0.1:$grpc_port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
            >"$work/h2.$k" 2>&1 &
        hp="$hp $!"
        k=$((k + 1))
    done
    for p in $hp; do wait "$p"; done
    cat "$work"/h2.*
}

round=1
while [ "$round" -le "$ROUNDS" ]; do
    for backend in memory redis; do
        url=""
        [ "$backend" = redis ] && url="redis://127.0.0.1:$redis_port"
        http_port=$(bench_free_port)
        grpc_port=$(bench_free_port)
        config "$work/porteirod.yaml" "$http_port" "$grpc_port" "$url"
        "$BUILD/porteirod" --config "$work/porteirod.yaml" --log-level warn &
        pid=$!
        bench_track "$pid"
        wait_port "$http_port"
        if [ "$round" = 1 ]; then # the answers are decisions: checked once
            printf '{"domain":"bench","descriptors":[{"entries":[["user","k1"]]}]}\n' >"$work/call"
            $PY tests/grpc/rls_client.py "127.0.0.1:$grpc_port" "$BUILD/proto/rls.desc" "$work/call" |
                grep -q '"overall":"OK"' || { echo "grpc_bench: no OK decision over gRPC" >&2; exit 1; }
        fi
        run http "$backend" "$pid" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$work/keys.lua" \
            "http://127.0.0.1:$http_port/"
        run grpc "$backend" "$pid" h2 "$CONNS" 1
        run grpc-mux "$backend" "$pid" h2 "$KEYS" $((CONNS / KEYS))
        bench_stop "$pid"
        pid=""
    done
    round=$((round + 1))
done

echo "grpc_bench: $ROUNDS round(s) of ${DURATION}s, $CONNS connections, $KEYS keys, $(nproc) cores," \
    "$(date -u +%Y-%m-%dT%H:%MZ); load average:$(uptime | sed 's/.*load average://')"
awk 'function median(name,   i, j, t, v, m) {
       m = cnt[name]
       for (i = 1; i <= m; i++) v[i] = val[name, i]
       for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
         t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
       return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
     function add(name, x) { val[name, ++cnt[name]] = x }
     { row = $2; if (!(row in seen)) { seen[row] = 1; order[++n] = row }
       add(row " rps", $3); add(row " cpu", $4); add(row " rus", $5); add(row " rpc", $6)
       rps[$1, row] = $3; cpu[$1, row] = $4; rounds[$1] = 1 }
     END {
       printf "%-16s %10s %14s %16s %14s\n", "row", "req/s", "us CPU/req", "redis us/call", "calls/req"
       for (i = 1; i <= n; i++) { r = order[i]
         printf "%-16s %10d %14.2f %16.2f %14.3f\n", r, median(r " rps"), median(r " cpu"),
                median(r " rus"), median(r " rpc") }
       # Ratios per round (same round, same backend), then their medians.
       split("memory redis", backends, " ")
       for (b = 1; b <= 2; b++) for (g = 1; g <= 2; g++) {
         row = (g == 1 ? "grpc-" : "grpc-mux-") backends[b]; h = "http-" backends[b]
         for (k in rounds) if ((k, row) in rps && (k, h) in rps) {
           add(row " x", rps[k, row] / rps[k, h]); add(row " c", cpu[k, row] / cpu[k, h]) }
         if (cnt[row " x"] > 0)
           printf "%-16s req/s %.2fx http, CPU/req %.2fx http\n", row, median(row " x"), median(row " c") } }' \
    "$results"

# p99 at half the maximum: the median max gRPC req/s on Redis, halved, as a
# fixed rate (h2load --rps per connection), latencies from h2load's log.
max=$(awk '$2 == "grpc-redis" { print $3 }' "$results" | sort -n |
    awk '{ v[++n] = $1 } END { print n ? int(v[int((n + 1) / 2)]) : 0 }')
if [ "${max:-0}" -gt 0 ]; then
    http_port=$(bench_free_port)
    grpc_port=$(bench_free_port)
    config "$work/porteirod.yaml" "$http_port" "$grpc_port" "redis://127.0.0.1:$redis_port"
    "$BUILD/porteirod" --config "$work/porteirod.yaml" --log-level warn &
    pid=$!
    bench_track "$pid"
    wait_port "$http_port"
    rate=$((max / 2 / CONNS))
    [ "$rate" -ge 1 ] || rate=1
    LOG="$work/lat" h2 "$CONNS" 1 --rps="$rate" >/dev/null
    cat "$work"/lat* 2>/dev/null | awk '{ print $3 }' | sort -n |
        awk -v target=$((rate * CONNS)) '{ v[++n] = $1 }
             END { if (n == 0) { print "grpc_bench: no latencies logged"; exit }
                   printf "grpc-redis at %d req/s (half of %d): p50 %d us, p99 %d us, %d requests\n",
                          target, target * 2, v[int(n * 0.5)], v[int(n * 0.99)], n }'
    bench_stop "$pid"
fi
