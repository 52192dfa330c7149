#!/usr/bin/env bash
# bench/run.sh nginx [BUILD] — nginx limiting every request: limit_req, the module, auth_request, OpenResty
# Requests/s and CPU per request of nginx (one worker) limiting every
# request, seven ways, in interleaved rounds:
#   alone        nginx with no limit (the ceiling)
#   limit_req    nginx's own limit_req, a local zone (not fleet-wide)
#   mod_memory   ngx_http_porteiro_module with no Redis (on_error local)
#   mod_redis    ngx_http_porteiro_module on Redis
#   mod_lease    the same with quota leases (porteiro_lease max_ms=200
#                max_units=1000; docs/quota_leasing.md): it pays where a key
#                is hot, so run it with CLIENTS=1 (one client, or a
#                service-wide limit) as well as with the default 10 000
#   auth_request auth_request -> porteirod on Redis (examples/auth_request/nginx.conf)
#   openresty    access_by_lua (libnginx-mod-http-lua + lua-nginx-redis):
#                an INCR+PEXPIRE script per request, keepalive pool
# wrk -t1 -c32 with a random X-Key over 10 000 clients; every limit is high
# enough that all requests pass (the cost of deciding, not of denying).
# CPU per request (bench_cpu, bench/lib.sh) of nginx's worker and of Redis
# (and porteirod) beside requests/s.
#
# BUILD (default build) holds nginx/ngx_http_porteiro_module.so and
# porteirod; Release when configured here. Env: ROUNDS (3), DURATION (s, 5),
# CONNECTIONS (32), CLIENTS (10000), VARIANTS (all seven, space-separated).
# Total by default: 3 rounds x 7 variants x 5 s, about 2 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC"
BUILD=${1:-${BUILD:-build}}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}
CLIENTS=${CLIENTS:-10000}
VARIANTS=${VARIANTS:-"alone limit_req mod_memory mod_redis mod_lease auth_request openresty"}
bench_need wrk nginx redis-server redis-cli curl
bench_build "$BUILD" porteirod ngx_http_porteiro_module
MODULE=$PWD/$BUILD/nginx/ngx_http_porteiro_module.so
bench_workdir
DIR=$work
bench_redis
REDIS_PORT=$redis_port REDIS_PID=$redis_pid
DAEMON_PORT=$(bench_free_port)
cat >"$DIR/porteirod.yaml" <<EOF
listen: 127.0.0.1:$DAEMON_PORT
redis:
  url: redis://127.0.0.1:$REDIS_PORT
policies:
  api:
    limits:
      - gcra 1000000/1s
    key: header X-Key
EOF
"$BUILD/porteirod" --config "$DIR/porteirod.yaml" >"$DIR/porteirod.log" 2>&1 &
DAEMON_PID=$!
bench_track $DAEMON_PID

# The wrk script: a random client per request.
bench_wrk_keys "$DIR/keys.lua" "/" X-Key c "$CLIENTS"

# One nginx per variant, one worker each; $1 the variant, $2 its port, then
# its http-level lines, its location lines, lines before http (load_module)
# and more server lines.
start_nginx() {
    local name=$1 port=$2 http=$3 loc=$4 pre=${5:-} server=${6:-}
    mkdir -p "$DIR/$name"
    cat >"$DIR/$name/nginx.conf" <<EOF
$pre
daemon off;
worker_processes 1;
pid $DIR/$name/nginx.pid;
error_log $DIR/$name/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $DIR/$name; proxy_temp_path $DIR/$name;
  fastcgi_temp_path $DIR/$name; uwsgi_temp_path $DIR/$name; scgi_temp_path $DIR/$name;
  $http
  server {
    listen 127.0.0.1:$port;
    location / {
      $loc
      empty_gif;
    }
    location = /_probe_ { return 204; }
    $server
  }
}
EOF
    nginx -p "$DIR/$name" -c "$DIR/$name/nginx.conf" 2>"$DIR/$name/stderr" &
    bench_track $!
    for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/_probe_" && return; sleep 0.05; done
    echo "nginx_bench: nginx for $name did not start:" >&2
    cat "$DIR/$name/stderr" "$DIR/$name/error.log" >&2
    exit 1
}

declare -A PORT
for v in $VARIANTS; do
    PORT[$v]=$(bench_free_port)
    case $v in
    alone) start_nginx alone "${PORT[$v]}" "" "" ;;
    limit_req)
        start_nginx limit_req "${PORT[$v]}" \
            'limit_req_zone $http_x_key zone=z:10m rate=1000000r/s;' \
            'limit_req zone=z burst=1000000 nodelay;' ;;
    mod_memory)
        start_nginx mod_memory "${PORT[$v]}" 'porteiro_on_error local;' \
            'porteiro_limit $http_x_key "gcra 1000000/1s";' "load_module $MODULE;" ;;
    mod_redis)
        start_nginx mod_redis "${PORT[$v]}" \
            "porteiro_redis redis://127.0.0.1:$REDIS_PORT; porteiro_timeout 200ms;" \
            'porteiro_limit $http_x_key "gcra 1000000/1s";' "load_module $MODULE;" ;;
    mod_lease)
        start_nginx mod_lease "${PORT[$v]}" \
            "porteiro_redis redis://127.0.0.1:$REDIS_PORT; porteiro_timeout 200ms;" \
            'porteiro_limit $http_x_key "gcra 1000000/1s"; porteiro_lease max_ms=200 max_units=1000;' \
            "load_module $MODULE;" ;;
    auth_request)
        start_nginx auth_request "${PORT[$v]}" \
            "upstream porteirod { server 127.0.0.1:$DAEMON_PORT; keepalive 32; }" \
            'auth_request /_porteiro;' "" \
            'location = /_porteiro { internal;
             proxy_pass http://porteirod/v1/auth?policy=api; proxy_pass_request_body off;
             proxy_set_header Content-Length ""; proxy_http_version 1.1;
             proxy_set_header Connection ""; }' ;;
    openresty)
        start_nginx openresty "${PORT[$v]}" 'lua_package_path "/usr/share/lua/5.1/?.lua;;";' \
            "access_by_lua_block {
               local redis = require \"nginx.redis\"
               local red = redis:new()
               red:set_timeout(200)
               local ok, err = red:connect(\"127.0.0.1\", $REDIS_PORT)
               if not ok then return ngx.exit(500) end
               local n = red:eval(\"local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], 1000) end return n\", 1, \"lua:\" .. (ngx.var.http_x_key or \"\"))
               red:set_keepalive(10000, 64)
               if n and tonumber(n) > 1000000 then return ngx.exit(429) end
             }" \
            "load_module /usr/lib/nginx/modules/ndk_http_module.so; load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;" ;;
    *) echo "nginx_bench: unknown variant $v" >&2; exit 1 ;;
    esac
done

worker_of() { pgrep -P "$(cat "$DIR/$1/nginx.pid")" | head -1; }

echo "# nginx_bench: wrk -t1 -c$CONNECTIONS -d${DURATION}s, $CLIENTS random clients, one nginx worker, $ROUNDS interleaved rounds"
echo "# variant round req/s nginx_us_per_req redis_us_per_req porteirod_us_per_req"
for round in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
        pids="$(worker_of "$v"),$REDIS_PID"
        [ "$v" = auth_request ] && pids="$pids,$DAEMON_PID"
        out=$(bench_cpu "$pids" -- wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$DIR/keys.lua" \
            "http://127.0.0.1:${PORT[$v]}/")
        rps=$(echo "$out" | awk '/^requests/ {gsub(/[(\/s)]/, "", $6); print $6}')
        us=($(echo "$out" | awk '/us CPU per request/ {print $(NF-4)}'))
        echo "$v $round $rps ${us[0]} ${us[1]} ${us[2]:--}"
    done
done | tee "$DIR/results.txt"
echo "# medians"
for v in $VARIANTS; do
    m() { bench_col "$DIR/results.txt" "$1" "\$1 == \"$v\""; }
    printf '%-12s req/s %8.0f  nginx %6.2f us/req  redis %6.2f us/req\n' "$v" "$(m 3)" "$(m 4)" "$(m 5)"
done
# Any error the module logged during the run (fallbacks would flatter it).
for v in mod_redis mod_lease mod_memory; do
    [ -f "$DIR/$v/error.log" ] && grep -h "porteiro" "$DIR/$v/error.log" | head -3 || true
done
