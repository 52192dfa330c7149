#!/usr/bin/env bash
# bench/run.sh haproxy [BUILD] — HAProxy limiting every request: stick table, SPOE → porteirod, Lua
# Requests/s and CPU per request of HAProxy (one thread) limiting every
# request, in interleaved rounds:
#   alone       HAProxy answering by itself (http-request return): the ceiling
#   stick       a local stick table (http_req_rate, track-sc0 on the key):
#               HAProxy's own limit, not fleet-wide
#   spoe        the SPOE filter asking porteirod (one worker) on Redis
#               (docs/haproxy.md), policy gcra 1000000/1s
#   spoe_lease  the same with a quota lease (lease: max_ms 200, max_units
#               1000; docs/quota_leasing.md): it pays where a key is hot, so
#               run it with CLIENTS=1 as well as with the default 10 000
#   lua_http    an http-request Lua action asking porteirod's /v1/auth with
#               HAProxy's own non-blocking HTTP client (core.httpclient, 2.5+:
#               the action yields while it waits)
# wrk -t1 -c32 with a random X-Key over CLIENTS clients; every limit is high
# enough that all requests pass (the cost of deciding, not of denying). CPU
# per request (bench_cpu, bench/lib.sh) of HAProxy, Redis and porteirod
# beside requests/s.
#
# BUILD (default build) holds porteirod; Release when configured here.
# Env: ROUNDS (3), DURATION (s, 5), CONNECTIONS (32), CLIENTS (10000),
# VARIANTS (all five). Note `uptime` with any number: on a loaded machine
# requests/s mean little; CPU per request holds better.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC"
BUILD=${1:-${BUILD:-build}}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}
CLIENTS=${CLIENTS:-10000}
VARIANTS=${VARIANTS:-"alone stick spoe spoe_lease lua_http"}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
bench_need wrk redis-server redis-cli curl
[ -x "$HAPROXY" ] || bench_die "haproxy is not installed"
bench_build "$BUILD" porteirod
bench_workdir
DIR=$work
bench_redis
REDIS_PORT=$redis_port REDIS_PID=$redis_pid
SPOE_PORT=$(bench_free_port)
HTTP_PORT=$(bench_free_port)
cat >"$DIR/porteirod.yaml" <<EOF
listen: 127.0.0.1:$HTTP_PORT
spoe:
  listen: 127.0.0.1:$SPOE_PORT
redis:
  url: redis://127.0.0.1:$REDIS_PORT
policies:
  api:
    limits:
      - gcra 1000000/1s
    key: header X-Key
  hot:
    limits:
      - gcra 1000000/1s
    lease: { max_ms: 200, max_units: 1000 }
EOF
"$BUILD/porteirod" --config "$DIR/porteirod.yaml" >"$DIR/porteirod.log" 2>&1 &
DAEMON_PID=$!
bench_track $DAEMON_PID
bench_wait_http "$HTTP_PORT" /healthz

bench_wrk_keys "$DIR/keys.lua" "/" X-Key c "$CLIENTS"

cat >"$DIR/porteiro.lua" <<EOF
-- One /v1/auth call per request, on HAProxy's own HTTP client.
core.register_action("porteiro", {"http-req"}, function(txn)
  local key = txn.sf:req_hdr("x-key") or ""
  local res = core.httpclient():get{url = "http://127.0.0.1:$HTTP_PORT/v1/auth?policy=api",
                                    headers = {["x-key"] = {key}}}
  if res == nil or res.status ~= 204 then txn:set_var("txn.denied", 1) end
end)
EOF

# One HAProxy per variant, one thread each; $1 the variant, $2 its port,
# then its frontend lines and its global lines.
start_haproxy() {
    local name=$1 port=$2 lines=$3 global=${4:-}
    mkdir -p "$DIR/$name"
    cat >"$DIR/$name/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 4096
$global
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
frontend www
    bind 127.0.0.1:$port
$lines
    http-request return status 200 content-type text/plain string "ok"
backend porteiro-agents
    mode tcp
    timeout connect 1s
    timeout server 1m
    server porteirod 127.0.0.1:$SPOE_PORT
EOF
    (cd "$DIR/$name" && exec "$HAPROXY" -db -f haproxy.cfg) >"$DIR/$name/stderr" 2>&1 &
    bench_track $!
    HAP_PID[$name]=$!
    for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/" && return; sleep 0.05; done
    echo "haproxy_bench: haproxy for $name did not start:" >&2
    cat "$DIR/$name/stderr" >&2
    exit 1
}

spoe_conf() { # $1 the variant, $2 the policy
    cat >"$DIR/$1.spoe.conf" <<EOF
[porteiro]
spoe-agent porteiro-agent
    messages check
    option var-prefix porteiro
    option set-on-error agent_error
    timeout processing 1s
    timeout hello 1s
    timeout idle 30s
    use-backend porteiro-agents
spoe-message check
    args policy=str($2) key=req.hdr(x-key) cost=int(1)
    event on-frontend-http-request
EOF
}

declare -A PORT HAP_PID
for v in $VARIANTS; do
    PORT[$v]=$(bench_free_port)
    case $v in
    alone) start_haproxy alone "${PORT[$v]}" "" ;;
    stick)
        start_haproxy stick "${PORT[$v]}" \
"    stick-table type string len 32 size 200k expire 10s store http_req_rate(1s)
    http-request track-sc0 req.hdr(x-key)
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000 }" ;;
    spoe | spoe_lease)
        policy=api
        [ "$v" = spoe_lease ] && policy=hot
        spoe_conf "$v" "$policy"
        start_haproxy "$v" "${PORT[$v]}" \
"    filter spoe engine porteiro config $DIR/$v.spoe.conf
    http-request deny deny_status 429 if { var(txn.porteiro.allowed) -m int 0 }
    http-request deny deny_status 503 if { var(txn.porteiro.agent_error) -m found }" ;;
    lua_http)
        start_haproxy lua_http "${PORT[$v]}" \
"    http-request lua.porteiro
    http-request deny deny_status 429 if { var(txn.denied) -m int 1 }" \
"    lua-load $DIR/porteiro.lua" ;;
    *) echo "haproxy_bench: unknown variant $v" >&2; exit 1 ;;
    esac
done

echo "# haproxy_bench: wrk -t1 -c$CONNECTIONS -d${DURATION}s, $CLIENTS random clients, HAProxy nbthread 1, $ROUNDS interleaved rounds; load: $(uptime | sed 's/.*load average: //')"
echo "# variant round req/s haproxy_us_per_req redis_us_per_req porteirod_us_per_req non2xx"
for round in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
        pids="${HAP_PID[$v]},$REDIS_PID,$DAEMON_PID"
        out=$(bench_cpu "$pids" -- wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$DIR/keys.lua" \
            "http://127.0.0.1:${PORT[$v]}/")
        rps=$(echo "$out" | awk '/^requests/ {gsub(/[(\/s)]/, "", $6); print $6}')
        us=($(echo "$out" | awk '/us CPU per request/ {print $(NF-4)}'))
        bad=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
        echo "$v $round $rps ${us[0]} ${us[1]} ${us[2]} ${bad:-0}"
    done
done | tee "$DIR/results.txt"
echo "# medians (and the ratio of req/s to stick's)"
# shellcheck disable=SC2016 # an awk condition
stick=$(bench_col "$DIR/results.txt" 3 '$1 == "stick"')
for v in $VARIANTS; do
    m() { bench_col "$DIR/results.txt" "$1" "\$1 == \"$v\""; }
    printf '%-11s req/s %8.0f (%sx stick)  haproxy %6.2f us/req  redis %6.2f us/req  porteirod %6.2f us/req\n' \
        "$v" "$(m 3)" "$(bench_ratio "$(m 3)" "${stick:-0}")" "$(m 4)" "$(m 5)" "$(m 6)"
done
# What porteirod logged at warn or worse during the run (fallbacks would flatter it).
grep -E " (warn|error): " "$DIR/porteirod.log" | head -3 || true
