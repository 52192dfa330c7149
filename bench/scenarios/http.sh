#!/bin/sh
# bench/run.sh http — porteirod (memory, Redis, TLS) against nginx's return 204, wrk
# wrk against porteirod (memory backend, then Redis) and
# against nginx answering 204 on the same machine, one run each, and the
# ratios to nginx (the ceiling of a small HTTP answer here).
#
#   bench/run.sh http                 # 5 s per target, 1 wrk thread, 32 connections
#   DURATION=10s CONNS=64 bench/run.sh http
#   WORKERS="1 2" bench/run.sh http   # porteirod --workers N (SO_REUSEPORT)
#   ROUNDS=3 OTHER=/tmp/main-rel/porteirod bench/run.sh http
#                                       # a second build in the same interleaved
#                                       # rounds (rows "other-..."); medians at the end
#   ROWS="random" bench/run.sh http   # only some rows (auth check random hotdeny)
#   TLS=1 bench/run.sh http           # a third backend: the same Redis over
#                                       # TLS (rediss://, a CA made for the run)
#   RESULTS=bench/results/http.tsv bench/run.sh http
#                                       # keep the raw rows: round label req/s
#                                       # p99 p50 p75 p90 (µs), for bench/plot.sh
#
# Every target is asked GET /v1/auth?policy=bench (or / for nginx) with one
# API key and a limit nobody reaches: the allowed path, as nginx
# auth_request uses it. POST /v1/check is measured too (wrk Lua script).
# Two more rows per backend: random keys (an API key drawn from 100 000 per
# request), and one hot key that is being denied (policy "hot", 1 per hour:
# on Redis the deny cache answers it; the Redis calls it made are printed).
# Each row also gives the server's own CPU time per request (user + system
# from /proc/PID/stat around the wrk run), the number that other load on the
# machine barely moves; at the end, each build's CPU per request on Redis
# over the same on the memory backend, per row.
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC"
BUILD=${BUILD:-build}
DURATION=${DURATION:-5s}
THREADS=${THREADS:-1}
CONNS=${CONNS:-32}
WORKERS=${WORKERS:-1}
ROUNDS=${ROUNDS:-1}
OTHER=${OTHER:-}
ROWS=${ROWS:-auth check random hotdeny}

bench_need wrk nginx redis-server redis-cli curl
bench_build "$BUILD" porteirod
bench_workdir
TLS=${TLS:-0}
BACKENDS="memory redis"
[ "$TLS" = 1 ] && BACKENDS="memory redis tls"
bench_redis
tls_port=${redis_tls_port:-}
nginx_port=$(bench_free_port)
wait_port() { bench_wait_http "$1"; }

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
nginx_pid=$!
bench_track "$nginx_pid"

config() { # file port redis-url-or-empty
    {
        echo "listen: 127.0.0.1:$2"
        [ -n "$3" ] && printf 'redis:\n  url: %s\n' "$3"
        case "$3" in rediss://*) printf '  tls:\n    ca: %s\n' "$work/ca.crt" ;; esac
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

bench_wrk_keys "$work/random.lua" "/v1/auth?policy=bench" X-Api-Key k 100000

# wrk's "99%" latency in microseconds.
pct_us() { # PERCENT wrk-output: that percentile of wrk --latency, in µs
    awk -v p="$1%" '$1 == p { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
         m = (u == "us") ? 1 : (u == "ms") ? 1000 : (u == "s") ? 1000000 : 1;
         printf "%d\n", v * m }' "$2"
}
p99_us() { pct_us 99 "$1"; }
rps() { awk '$1 == "Requests/sec:" { printf "%d\n", $2 }' "$1"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# CPU microseconds per request: ticks used over wrk's request count.
cpu_us() { # ticks-before ticks-after wrk-output
    awk -v d="$(($2 - $1))" -v t="$(getconf CLK_TCK)" '/requests in/ { n = $1 }
        END { printf "%.2f\n", (n > 0 ? d / t * 1e6 / n : 0) }' "$3"
}

results=${RESULTS:-$work/results} # RESULTS=FILE keeps the raw rows (bench/plot.sh)
: >"$results"
round=1
wants() { case " $ROWS " in *" $1 "*) return 0 ;; esac; return 1; }
script_calls() { # EVALSHA and EVAL calls Redis has run so far
    redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
        awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { n += $3 } END { print n + 0 }'
}
run_wrk() { # label url [lua] [expect-denials]; the server's pid in $server_pid
    out="$work/wrk.out"
    s0=$(script_calls)
    t0=$(cpu_ticks "$server_pid")
    if [ -n "${3:-}" ]; then
        wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$3" "$2" >"$out"
    else
        wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "X-Api-Key: bench-key" "$2" >"$out"
    fi
    if [ -z "${4:-}" ] && grep -q "Non-2xx" "$out"; then
        echo "http_bench: $1: some answers were not 2xx:" >&2
        grep "Non-2xx" "$out" >&2
    fi
    t1=$(cpu_ticks "$server_pid")
    s1=$(script_calls)
    # Checks per script call: what coalescing gave (fewer calls, less work
    # per check, at a higher rate).
    case "$1" in *-redis-* | *-tls-*)
        awk -v l="$1" -v c="$((s1 - s0))" '/requests in/ { n = $1 }
            END { if (c > 0) printf "http_bench: %s: %d requests, %d script calls, %.1f checks per call\n", l, n, c, n / c }' "$out" >&2 ;;
    esac
    # round label req/s p99 p50 p75 p90 (µs) cpu (µs of the server's CPU per
    # request); bench/plot.sh reads them all.
    echo "$round $1 $(rps "$out") $(p99_us "$out") $(pct_us 50 "$out") $(pct_us 75 "$out") $(pct_us 90 "$out") $(cpu_us "$t0" "$t1" "$out")" >>"$results"
}

run_daemon() { # binary name: every row, both backends, each worker count
    for backend in $BACKENDS; do
        for n in $WORKERS; do
            port=$(bench_free_port)
            url=""
            [ "$backend" = redis ] && url="redis://127.0.0.1:$redis_port"
            [ "$backend" = tls ] && url="rediss://127.0.0.1:$tls_port"
            config "$work/porteirod.yaml" "$port" "$url"
            extra=""
            [ "$n" != 1 ] && extra="--workers $n"
            # shellcheck disable=SC2086
            "$1" --config "$work/porteirod.yaml" --log-level warn $extra &
            pid=$!
            bench_track "$pid"
            server_pid=$pid
            wait_port "$port"
            wants auth && run_wrk "$2-$backend-auth-w$n" "http://127.0.0.1:$port/v1/auth?policy=bench"
            wants check && run_wrk "$2-$backend-check-w$n" "http://127.0.0.1:$port/v1/check" "$work/check.lua"
            wants random && run_wrk "$2-$backend-random-w$n" "http://127.0.0.1:$port/" "$work/random.lua"
            if wants hotdeny; then
                calls_before=$(redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
                    awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2 }')
                run_wrk "$2-$backend-hotdeny-w$n" "http://127.0.0.1:$port/v1/auth?policy=hot" "" deny
                calls_after=$(redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
                    awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2 }')
                [ "$backend" != memory ] &&
                    echo "http_bench: $2: hot denied key on Redis: $((${calls_after:-0} - ${calls_before:-0})) script calls" >&2
            fi
            # Every answer must have been a real decision, not a fallback.
            fallbacks=$(curl -s "http://127.0.0.1:$port/metrics" |
                awk '/^porteiro_fallback_decisions_total/ { n += $2 } END { print n + 0 }')
            [ "$fallbacks" = 0 ] || echo "http_bench: $2 $backend w$n: $fallbacks fallback decisions" >&2
            bench_stop "$pid"
        done
    done
}

wait_port "$nginx_port"
while [ "$round" -le "$ROUNDS" ]; do
    server_pid=$nginx_pid
    run_wrk "nginx-204" "http://127.0.0.1:$nginx_port/"
    run_daemon "$BUILD/porteirod" porteirod
    [ -n "$OTHER" ] && run_daemon "$OTHER" other
    round=$((round + 1))
done

echo "wrk -t$THREADS -c$CONNS -d$DURATION, $(nproc) cores, $ROUNDS round(s), $(date -u +%Y-%m-%dT%H:%MZ), load average$(uptime | sed 's/.*load average//')"
[ -n "$OTHER" ] && echo "porteirod = $BUILD/porteirod, other = $OTHER"
# Each row's ratio is to nginx in the same round; with several rounds, the
# medians of the rows' req/s, p99 and ratios (and each round's ratio).
awk '$2 == "nginx-204" { nr[$1] = $3; np[$1] = $4 }
     { if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 }
       k = ++cnt[$2]; r[$2, k] = $3; p[$2, k] = $4; c[$2, k] = $8; x[$2, k] = $3 / nr[$1]
       y[$2, k] = (np[$1] > 0 ? $4 / np[$1] : 0) }
     function median(a, name, m,   i, j, t, v) {
       for (i = 1; i <= m; i++) v[i] = a[name, i]
       for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
         t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
       return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
     END { for (i = 1; i <= n; i++) { name = order[i]; m = cnt[name]; rounds = ""
             for (k = 1; k <= m; k++) rounds = rounds sprintf(" %.2f", x[name, k])
             cpu[name] = median(c, name, m)
             printf "%-30s %9d req/s  p99 %7d us   req/s %5.2fx nginx   p99 %5.2fx nginx   cpu %6.2f us/req%s\n",
                    name, median(r, name, m), median(p, name, m), median(x, name, m),
                    median(y, name, m), cpu[name], (m > 1 ? "   rounds:" rounds : "") }
           # CPU per request on Redis over the memory backend, per build and row.
           for (i = 1; i <= n; i++) { name = order[i]; if (name !~ /-(redis|tls)-/) continue
             mem = name; sub(/-(redis|tls)-/, "-memory-", mem)
             what = (name ~ /-tls-/) ? "redis over TLS" : "redis"
             if (cpu[mem] > 0)
               printf "%-30s cpu per request on %s / memory: %.2fx\n", name, what, cpu[name] / cpu[mem] } }' "$results"
