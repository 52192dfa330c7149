#!/usr/bin/env bash
# settle [BUILD] — what settle= costs ngx_http_porteiro_module
# (issue 38): requests/s and CPU per request of nginx (one worker) on Redis,
# every request checked with an estimate of 100 units, two ways, in
# interleaved rounds:
#   check    porteiro_limit ... cost=100                (no settle)
#   settle   porteiro_limit ... cost=100 settle=$http_x_used
# The real cost comes in a request header (X-Used, random 1..200 per
# request, never 100, so every request of `settle` sends a settle): the
# module's own cost of a settle, without an upstream's. A settle runs in
# the log phase on the worker's loop; the settles of one loop pass travel
# as one call (settle.lua's batch form), pipelined with that pass's checks.
# Target (issue 38): settle's req/s >= 0.8 x check's.
# wrk -t1 -c32 with a random X-Key over 10 000 clients; the limit
# (token_bucket 1000000000/1s) is high enough that every request passes.
# CPU per request (/work/shared/tools/cpu_per_request.sh) of nginx's worker
# and of Redis beside requests/s, medians of the rounds, and the ratios.
#
# Self-contained (no bench/common.sh). BUILD (default build-release) holds
# nginx/ngx_http_porteiro_module.so; made Release when missing. Env:
# ROUNDS (5), DURATION (s, 5), CONNECTIONS (32), CLIENTS (10000).
# Total by default: 5 rounds x 2 variants x 5 s, under a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-release}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}
CLIENTS=${CLIENTS:-10000}
CPU=${CPU_PER_REQUEST:-/work/shared/tools/cpu_per_request.sh}
VARIANTS="check settle"
for t in wrk nginx redis-server redis-cli curl python3; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || {
        echo "settle_bench: $t not found" >&2
        exit 2
    }
done
PATH=$PATH:/usr/sbin
[ -x "$CPU" ] || { echo "settle_bench: $CPU not found" >&2; exit 2; }
MODULE=$PWD/$BUILD/nginx/ngx_http_porteiro_module.so
if [ ! -f "$MODULE" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j2 --target ngx_http_porteiro_module >/dev/null
fi

DIR=$(mktemp -d /tmp/porteiro-settle-bench-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$DIR" >"$DIR/redis.log" 2>&1 &
PIDS+=($!)
REDIS_PID=$!
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

# A random client and a random real cost (1..200, never the estimate 100).
cat >"$DIR/keys.lua" <<EOF
math.randomseed(os.time())
request = function()
  local used = math.random(1, 199)
  if used >= 100 then used = used + 1 end
  return wrk.format("GET", "/", {["X-Key"] = "c" .. math.random(1, $CLIENTS),
                                 ["X-Used"] = tostring(used)})
end
EOF

# One nginx per variant, one worker each: $1 the variant, $2 its port, $3
# the porteiro_limit line.
start_nginx() {
    local name=$1 port=$2 limit=$3
    mkdir -p "$DIR/$name"
    cat >"$DIR/$name/nginx.conf" <<EOF
load_module $MODULE;
daemon off;
worker_processes 1;
pid $DIR/$name/nginx.pid;
error_log $DIR/$name/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $DIR/$name; proxy_temp_path $DIR/$name;
  fastcgi_temp_path $DIR/$name; uwsgi_temp_path $DIR/$name; scgi_temp_path $DIR/$name;
  porteiro_redis redis://127.0.0.1:$REDIS_PORT;
  porteiro_timeout 200ms;
  server {
    listen 127.0.0.1:$port;
    location / {
      $limit
      empty_gif;
    }
    location = /_probe_ { return 204; }
  }
}
EOF
    nginx -p "$DIR/$name" -c "$DIR/$name/nginx.conf" 2>"$DIR/$name/stderr" &
    PIDS+=($!)
    for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/_probe_" && return; sleep 0.05; done
    echo "settle_bench: nginx for $name did not start:" >&2
    cat "$DIR/$name/stderr" "$DIR/$name/error.log" >&2
    exit 1
}

LIMIT='porteiro_limit $http_x_key "token_bucket 1000000000/1s" cost=100'
declare -A PORT
PORT[check]=$(free_port)
start_nginx check "${PORT[check]}" "$LIMIT;"
PORT[settle]=$(free_port)
start_nginx settle "${PORT[settle]}" "$LIMIT settle=\$http_x_used;"
worker_of() { pgrep -P "$(cat "$DIR/$1/nginx.pid")" | head -1; }

# Settles really travel (and in batches): Redis's calls of the settle
# script, before and after one request of each.
calls() { redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/cmdstat_evalsha/ {print $3}'; }
c0=$(calls)
curl -s -o /dev/null -H 'X-Key: probe' -H 'X-Used: 7' "http://127.0.0.1:${PORT[settle]}/"
sleep 0.2
c1=$(calls)
[ "$((c1 - c0))" -ge 2 ] || { echo "settle_bench: the settle variant made $((c1 - c0)) calls for a request, want a check and a settle" >&2; exit 1; }

echo "# settle_bench: wrk -t1 -c$CONNECTIONS -d${DURATION}s, $CLIENTS random clients, one nginx worker, $ROUNDS interleaved rounds"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# variant round req/s nginx_us_per_req redis_us_per_req redis_calls_per_req"
for round in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
        before=$(calls)
        out=$("$CPU" "$(worker_of "$v"),$REDIS_PID" -- wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
            -s "$DIR/keys.lua" "http://127.0.0.1:${PORT[$v]}/")
        sleep 0.3 # the last settles land
        after=$(calls)
        n=$(echo "$out" | awk '/^requests/ {print $2}')
        rps=$(echo "$out" | awk '/^requests/ {gsub(/[(\/s)]/, "", $6); print $6}')
        us=($(echo "$out" | awk '/us CPU per request/ {print $(NF-4)}'))
        echo "$v $round $rps ${us[0]} ${us[1]} $(awk -v a="$before" -v b="$after" -v n="$n" 'BEGIN {printf "%.3f", (b - a) / n}')"
    done
done | tee "$DIR/results.txt"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# medians"
awk '!/^#/ {k = $1; n[k]++; for (col = 3; col <= 6; col++) v[k, col, n[k]] = $col}
     END {for (k in n) {m = int((n[k] + 1) / 2);
            for (col = 3; col <= 6; col++) {
              for (i = 1; i <= n[k]; i++) a[i] = v[k, col, i];
              for (i = 2; i <= n[k]; i++) { x = a[i]; j = i - 1; while (j > 0 && a[j] + 0 > x + 0) { a[j + 1] = a[j]; j-- } a[j + 1] = x }
              med[k, col] = a[m] }
            printf "%-7s req/s %8.0f  nginx %6.2f us/req  redis %6.2f us/req  %.3f Redis calls/req\n",
                   k, med[k, 3], med[k, 4], med[k, 5], med[k, 6] }
          if (("check", 3) in med && ("settle", 3) in med)
            printf "settle / check: req/s %.2f (target >= 0.80), nginx CPU per request %.2f, Redis CPU per request %.2f\n",
                   med["settle", 3] / med["check", 3], med["settle", 4] / med["check", 4],
                   med["settle", 5] / med["check", 5] }' "$DIR/results.txt"
# Any error the module logged during the run (fallbacks would flatter it).
for v in $VARIANTS; do
    grep -h "porteiro" "$DIR/$v/error.log" | head -3 || true
done
