#!/bin/sh
# http_bench.sh — wrk against porteirod (memory backend, then Redis) and
# against nginx answering 204 on the same machine, one run each, and the
# ratios to nginx (the ceiling of a small HTTP answer here).
#
#   bench/http_bench.sh                 # 5 s per target, 1 wrk thread, 32 connections
#   DURATION=10s CONNS=64 bench/http_bench.sh
#   WORKERS="1 2" bench/http_bench.sh   # porteirod --workers N (SO_REUSEPORT)
#
# Every target is asked GET /v1/auth?policy=bench (or / for nginx) with one
# API key and a limit nobody reaches: the allowed path, as nginx
# auth_request uses it. POST /v1/check is measured too (wrk Lua script).
# Two more rows per backend: random keys (an API key drawn from 100 000 per
# request), and one hot key that is being denied (policy "hot", 1 per hour:
# on Redis the deny cache answers it; the Redis calls it made are printed).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DURATION=${DURATION:-5s}
THREADS=${THREADS:-1}
CONNS=${CONNS:-32}
WORKERS=${WORKERS:-1}
BASE_PORT=${BASE_PORT:-18180}

command -v wrk >/dev/null || { echo "http_bench: wrk is not installed" >&2; exit 1; }
if [ ! -x "$BUILD/porteirod" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j2 --target porteirod >/dev/null
fi

work=$(mktemp -d /tmp/porteiro-bench-XXXXXX)
pids=""
cleanup() {
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $pids; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

wait_port() { # port: until anything answers HTTP there
    i=0
    while ! curl -s -o /dev/null "http://127.0.0.1:$1/"; do
        i=$((i + 1))
        [ $i -gt 300 ] && { echo "http_bench: port $1 never opened" >&2; exit 1; }
        sleep 0.01
    done
}

redis_port=$((BASE_PORT + 1))
nginx_port=$((BASE_PORT + 2))
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --logfile redis.log &
pids="$pids $!"

mkdir -p "$work/nginx/tmp"
cat >"$work/nginx/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid nginx.pid;
error_log stderr error;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path tmp; proxy_temp_path tmp; fastcgi_temp_path tmp;
    uwsgi_temp_path tmp; scgi_temp_path tmp;
    server { listen 127.0.0.1:$nginx_port; location / { return 204; } }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids="$pids $!"

config() { # file port redis-url-or-empty
    {
        echo "listen: 127.0.0.1:$2"
        [ -n "$3" ] && printf 'redis:\n  url: %s\n' "$3"
        echo "policies:"
        echo "  bench:"
        echo "    limits:"
        echo "      - token_bucket 1000000000/1s"
        echo "    key: header X-Api-Key"
        echo "  hot:"
        echo "    limits:"
        echo "      - fixed_window 1/1h"
        echo "    key: header X-Api-Key"
    } >"$1"
}

cat >"$work/check.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"policy":"bench","key":"bench-key","cost":1}'
LUA

cat >"$work/random.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/v1/auth?policy=bench", {["X-Api-Key"] = "k" .. math.random(1, 100000)})
end
LUA

# wrk's "99%" latency in microseconds.
p99_us() {
    awk '$1 == "99%" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
         m = (u == "us") ? 1 : (u == "ms") ? 1000 : (u == "s") ? 1000000 : 1;
         printf "%d\n", v * m }' "$1"
}
rps() { awk '$1 == "Requests/sec:" { printf "%d\n", $2 }' "$1"; }

results="$work/results"
: >"$results"
run_wrk() { # label url [lua] [expect-denials]
    out="$work/wrk.out"
    if [ -n "${3:-}" ]; then
        wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$3" "$2" >"$out"
    else
        wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "X-Api-Key: bench-key" "$2" >"$out"
    fi
    if [ -z "${4:-}" ] && grep -q "Non-2xx" "$out"; then
        echo "http_bench: $1: some answers were not 2xx:" >&2
        grep "Non-2xx" "$out" >&2
    fi
    echo "$1 $(rps "$out") $(p99_us "$out")" >>"$results"
}

wait_port "$nginx_port"
run_wrk "nginx-204" "http://127.0.0.1:$nginx_port/"

port=$((BASE_PORT + 10))
for backend in memory redis; do
    for n in $WORKERS; do
        url=""
        [ "$backend" = redis ] && url="redis://127.0.0.1:$redis_port"
        config "$work/porteirod.yaml" "$port" "$url"
        extra=""
        [ "$n" != 1 ] && extra="--workers $n"
        # shellcheck disable=SC2086
        "$BUILD/porteirod" --config "$work/porteirod.yaml" --log-level warn $extra &
        pid=$!
        wait_port "$port"
        run_wrk "porteirod-$backend-auth-w$n" "http://127.0.0.1:$port/v1/auth?policy=bench"
        run_wrk "porteirod-$backend-check-w$n" "http://127.0.0.1:$port/v1/check" "$work/check.lua"
        run_wrk "porteirod-$backend-random-w$n" "http://127.0.0.1:$port/" "$work/random.lua"
        calls_before=$(redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
            awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2 }')
        run_wrk "porteirod-$backend-hotdeny-w$n" "http://127.0.0.1:$port/v1/auth?policy=hot" "" deny
        calls_after=$(redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
            awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2 }')
        [ "$backend" = redis ] &&
            echo "http_bench: hot denied key on Redis: $((${calls_after:-0} - ${calls_before:-0})) script calls" >&2
        # Every answer must have been a real decision, not a fallback.
        fallbacks=$(curl -s "http://127.0.0.1:$port/metrics" |
            awk '/^porteiro_fallback_decisions_total/ { n += $2 } END { print n + 0 }')
        [ "$fallbacks" = 0 ] || echo "http_bench: $backend w$n: $fallbacks fallback decisions" >&2
        kill "$pid"
        wait "$pid" || true
        port=$((port + 1))
    done
done

echo "wrk -t$THREADS -c$CONNS -d$DURATION, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
awk 'NR == 1 { nr = $2; np = $3 }
     { printf "%-30s %9d req/s  p99 %7d us   req/s %5.2fx nginx   p99 %5.2fx nginx\n",
              $1, $2, $3, $2 / nr, (np > 0 ? $3 / np : 0) }' "$results"
