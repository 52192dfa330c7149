#!/usr/bin/env bash
# bench/run.sh peers [CLI] — porteiro beside Redis rate limiters from npm and the least script
# porteiro bench beside Redis rate limiters from npm and a
# redis-benchmark EVALSHA ceiling, on one private redis-server, interleaved
# over R rounds; prints medians and ratios. Not a test: never run in CI.
#
# usage: bench/run.sh peers [PATH_TO_PORTEIRO_CLI]      (or env PORTEIRO_CLI; default $BUILD/porteiro)
# env:   ROUNDS (5)  CONNECTIONS (50)  PIPELINES ("1 16")  REQUESTS (30000)
#        KEYS (1000)  LIMIT (1000000)  PERIOD_MS (60000)  RESULTS (raw TSV path)
#        PORTEIRO_ALGORITHMS ("fixed_window gcra sliding_log": those porteiro
#        bench cannot run are skipped with a message)
#        PORTEIRO_BATCH (0): 1 runs porteiro with --batch P instead of
#        --pipeline P (the same checks in flight, sent as batches)
#        PEER_SHAPES ("same shared"): "same" runs each peer like porteiro (C
#        connections, P in flight on each); "shared" runs it the way a Node
#        process usually does, one shared client with the same C*P in flight.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
peers_dir="$BENCH/peers"
cli=${1:-${PORTEIRO_CLI:-$SRC/${BUILD:-build}/porteiro}}
rounds=${ROUNDS:-5}
connections=${CONNECTIONS:-50}
pipelines=${PIPELINES:-"1 16"}
requests=${REQUESTS:-30000}
keys=${KEYS:-1000}
limit=${LIMIT:-1000000}
period_ms=${PERIOD_MS:-60000}
peer_shapes=${PEER_SHAPES:-"same shared"}
porteiro_batch=${PORTEIRO_BATCH:-0}
step_timeout=120 # seconds: bounds every single measurement

# The ceiling: the least a Redis limiter can do per decision, one EVALSHA of
# INCR plus a TTL on a key's first hit, without any client-side work.
ceiling_lua="local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return c"

# Each contestant: name, algorithm, the porteiro algorithm it is paired with.
# Peers are paired with porteiro's algorithm of the same family.
# PEERS="" runs porteiro and the ceiling only (no node, no npm ci).
all_peers=${PEERS-"rate_limiter_flexible:fixed_window redis_gcra:gcra async_ratelimiter:sliding_log"}
porteiro_algorithms=${PORTEIRO_ALGORITHMS:-"fixed_window gcra sliding_log"}

say() { printf '%s\n' "$*" >&2; }

bench_workdir
workdir=$work

rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@"; }

# Field NAME of a one-line JSON object of numbers.
json_field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

# porteiro rows run only when the CLI exists and its bench answers.
check_porteiro() {
    porteiro_ok=()
    if [ -z "$cli" ] || [ ! -x "$cli" ]; then
        say "porteiro CLI not found (${cli:-no path given}): porteiro rows skipped"
        return
    fi
    local alg out
    for alg in $porteiro_algorithms; do
        out=$(timeout 20 "$cli" bench --redis "$redis_url" --algorithm "$alg" --connections 1 \
            --pipeline 1 --requests 10 --keys 1 2>/dev/null || true)
        if printf '%s' "$out" | grep -q '"ops_per_sec"'; then
            porteiro_ok+=("$alg")
        else
            say "porteiro bench --algorithm $alg did not answer: skipped"
        fi
    done
    # Optional flags: pass the peers' limit when porteiro bench takes one.
    porteiro_extra=()
    if "$cli" bench --help 2>&1 | grep -q -- '--limit'; then
        porteiro_extra=(--limit "$limit" --period "${period_ms}ms")
    fi
}

# Peers need node and their npm packages (installed from the lock file).
check_peers() {
    peers_ok=()
    [ -n "$all_peers" ] || return 0
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        say "node/npm not installed: peer rows skipped"
        return
    fi
    if [ ! -f "$peers_dir/node_modules/.package-lock.json" ] ||
        [ "$peers_dir/package-lock.json" -nt "$peers_dir/node_modules/.package-lock.json" ]; then
        say "installing the peers' npm packages (npm ci)"
        if ! (cd "$peers_dir" && npm ci --no-audit --no-fund --loglevel=error >&2); then
            say "npm ci failed: peer rows skipped"
            return
        fi
    fi
    local entry
    for entry in $all_peers; do peers_ok+=("$entry"); done
}

# Redis's own time in scripts per decision, µs: the usec of EVAL and EVALSHA
# in INFO commandstats (reset before each measurement) over N. It leaves out
# network and client costs, so it is far less noisy than ops/s here.
script_us_per_op() {
    rcli info commandstats | tr -d '\r' | awk -F'[:,=]' -v n="$requests" '
        $1 == "cmdstat_eval" || $1 == "cmdstat_evalsha" { us += $5 }
        END { printf "%.2f", us / n }'
}

# One measurement; appends "pipeline round name algorithm pair ops p50 p99
# allowed denied script_us".
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$(script_us_per_op)" >>"$raw"
}

measure_porteiro() { # pipeline round algorithm
    local out shape=--pipeline
    [ "$porteiro_batch" = 1 ] && shape=--batch
    out=$(timeout "$step_timeout" "$cli" bench --redis "$redis_url" --algorithm "$3" \
        --connections "$connections" "$shape" "$1" --requests "$requests" --keys "$keys" \
        "${porteiro_extra[@]}") || { say "porteiro $3 failed"; return 0; }
    record "$1" "$2" porteiro "$3" "$3" "$(json_field ops_per_sec <<<"$out")" \
        "$(json_field p50_us <<<"$out")" "$(json_field p99_us <<<"$out")" \
        "$(json_field allowed <<<"$out")" "$(json_field denied <<<"$out")"
}

measure_peer() { # pipeline round script:algorithm shape
    local script=${3%%:*} alg=${3#*:} conns=$connections inflight=$1 out
    local name=$script
    if [ "$4" = shared ]; then
        name="$script/1conn" conns=1 inflight=$((connections * $1))
    fi
    out=$(timeout "$step_timeout" node "$peers_dir/$script.js" --redis "$redis_url" \
        --connections "$conns" --pipeline "$inflight" --requests "$requests" --keys "$keys" \
        --limit "$limit" --period-ms "$period_ms") || { say "$name failed"; return 0; }
    record "$1" "$2" "$name" "$alg" "$alg" "$(json_field ops_per_sec <<<"$out")" \
        "$(json_field p50_us <<<"$out")" "$(json_field p99_us <<<"$out")" \
        "$(json_field allowed <<<"$out")" "$(json_field denied <<<"$out")"
}

# redis-benchmark reports ms; keys ceil:000000000042 come from -r.
measure_ceiling() { # pipeline round
    local line nums
    line=$(timeout "$step_timeout" redis-benchmark -h 127.0.0.1 -p "$redis_port" -c "$connections" \
        -P "$1" -n "$requests" -r "$keys" --csv \
        EVALSHA "$ceiling_sha" 1 ceil:__rand_int__ "$period_ms" | tail -n 1) ||
        { say "redis-benchmark failed"; return 0; }
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
    read -r -a nums <<<"$(awk -F'","' '{ printf "%d %d %d", $2, $5 * 1000, $7 * 1000 }' <<<"$line")"
    record "$1" "$2" redis-benchmark ceiling - "${nums[@]}" - -
}

# The contestants of one round, rotated so that none always runs first.
round() { # pipeline round
    local list=() i n start shape
    for i in ${porteiro_ok[@]+"${porteiro_ok[@]}"}; do list+=("porteiro:$i"); done
    for i in ${peers_ok[@]+"${peers_ok[@]}"}; do
        for shape in $peer_shapes; do list+=("peer:$i:$shape"); done
    done
    list+=("ceiling")
    n=${#list[@]}
    start=$((($2 - 1) % n)) # round 1 keeps the listed order: the table's order
    for ((i = 0; i < n; i++)); do
        local c=${list[$(((start + i) % n))]}
        # Every measurement starts from empty state and zeroed command stats.
        rcli flushdb >/dev/null
        rcli config resetstat >/dev/null
        case $c in
        porteiro:*) measure_porteiro "$1" "$2" "${c#porteiro:}" ;;
        peer:*) c=${c#peer:} && measure_peer "$1" "$2" "${c%:*}" "${c##*:}" ;;
        ceiling) measure_ceiling "$1" "$2" ;;
        esac
    done
    say "  round $2 done"
}

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    say "redis-server and redis-benchmark are needed (Debian: apt-get install redis-server redis-tools)"
    exit 1
fi
for shape in $peer_shapes; do
    case $shape in same | shared) ;; *) say "PEER_SHAPES: unknown shape '$shape' (same, shared)"; exit 2 ;; esac
done
bench_redis
redis_url="redis://127.0.0.1:$redis_port"
ceiling_sha=$(rcli script load "$ceiling_lua")
raw=${RESULTS:-$workdir/results.tsv}
: >"$raw"
check_porteiro
check_peers

say "redis-server pid $redis_pid on 127.0.0.1:$redis_port; $rounds rounds; $connections connections;" \
    "pipelines $pipelines; $requests requests over $keys keys; peers' limit $limit per $period_ms ms"
for p in $pipelines; do
    say "pipeline $p:"
    for ((r = 1; r <= rounds; r++)); do round "$p" "$r"; done
done
awk -f "$peers_dir/summarize.awk" "$raw"
