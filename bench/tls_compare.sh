#!/bin/bash
# tls_compare.sh — what TLS to Redis costs on the blocking path: `porteiro
# bench --batch 1` (one check per blocking call, the threads engine: the
# blocking connection of src/redis/conn.c) over TLS and plain, beside
# redis-benchmark sending EVALSHA of bench/ceiling/gcra.lua over TLS and
# plain, all at pipeline 1 against one private redis-server that has a plain
# and a TLS port (certificates made with openssl for the run). The four runs
# of a round are interleaved, their order rotating from round to round.
#
# Per run: checks/s; the client's CPU per check (user + system of the load
# program, from this shell's children's times); Redis's CPU per check
# (/proc/PID/stat) and its own time per EVALSHA (INFO commandstats). Medians
# over the rounds, and the TLS/plain ratios of the medians.
#
# ENGINE=loop measures the event-loop path instead (`porteiro bench
# --pipeline P`: one check per script call, P in flight per connection)
# against redis-benchmark -P P, for each P in PIPELINES.
#
# usage: bench/tls_compare.sh [path/to/porteiro]
# env:   ROUNDS (5), CONNECTIONS (8), KEYS (10000), REQUESTS (40000),
#        ENGINE (blocking | loop), PIPELINES (1; with loop e.g. "1 16")
set -eu

here=$(cd "$(dirname "$0")" && pwd)
PORTEIRO=${1:-${PORTEIRO_CLI:-$here/../build/porteiro}}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-8}
KEYS=${KEYS:-10000}
REQUESTS=${REQUESTS:-40000}
ENGINE=${ENGINE:-blocking}
PIPELINES=${PIPELINES:-1}
LIMIT=1000000
case "$ENGINE" in blocking | loop) ;; *) echo "tls_compare.sh: ENGINE is blocking or loop" >&2; exit 2 ;; esac
[ "$ENGINE" = loop ] || [ "$PIPELINES" = 1 ] ||
    { echo "tls_compare.sh: the blocking engine runs at pipeline 1 only" >&2; exit 2; }

[ -x "$PORTEIRO" ] || { echo "tls_compare.sh: no porteiro binary at $PORTEIRO" >&2; exit 2; }
for tool in redis-server redis-cli redis-benchmark openssl; do
    command -v "$tool" >/dev/null || { echo "tls_compare.sh: $tool is missing" >&2; exit 2; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-tlsbench.XXXXXX")
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A CA and a server certificate for 127.0.0.1 (EC P-256).
(
    cd "$dir"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out ca.key
    openssl req -x509 -new -key ca.key -subj "/CN=porteiro bench CA" -days 1 -out ca.crt
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out server.key
    openssl req -new -key server.key -subj "/CN=127.0.0.1" -out server.csr
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
        -extfile server.ext -out server.crt
) >"$dir/openssl.log" 2>&1 || { echo "tls_compare.sh: openssl failed" >&2; exit 3; }

free_port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 )); }
for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(free_port); tport=$(free_port)
    redis-server --port "$port" --tls-port "$tport" --bind 127.0.0.1 --save '' --appendonly no \
        --tls-cert-file "$dir/server.crt" --tls-key-file "$dir/server.key" \
        --tls-ca-cert-file "$dir/ca.crt" --tls-auth-clients no \
        --dir "$dir" --logfile "$dir/redis.log" &
    pid=$!
    for _ in $(seq 20); do
        redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break 2
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
done
[ -n "$pid" ] || { echo "tls_compare.sh: redis-server did not start" >&2; exit 3; }

rcli() { redis-cli -p "$port" "$@"; }
sha=$(rcli script load "$(cat "$here/ceiling/gcra.lua")")
children_cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%d\n", ($16 + $17) * 1e6 / t }' "/proc/$1/stat"; }
redis_cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%d\n", ($14 + $15) * 1e6 / t }' "/proc/$pid/stat"; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
    else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One run: prints "ops/s client_us_per_check redis_us_per_check usec_per_call".
run() { # porteiro|ceiling plain|tls pipeline
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    me=$BASHPID # this shell: its waited-for children's CPU grows by the load program's
    c0=$(children_cpu "$me"); r0=$(redis_cpu)
    if [ "$1" = porteiro ]; then
        url="redis://127.0.0.1:$port"; tls=""
        [ "$2" = tls ] && url="rediss://127.0.0.1:$tport" && tls="--cacert $dir/ca.crt"
        how="--batch 1"
        [ "$ENGINE" = loop ] && how="--pipeline $3"
        # shellcheck disable=SC2086
        ops=$("$PORTEIRO" bench --redis "$url" $tls --algorithm gcra --limit "$LIMIT" --period 1s \
            --connections "$CONNECTIONS" $how --requests "$REQUESTS" --keys "$KEYS" |
            sed -n 's/.*"ops_per_sec":\([0-9]*\).*/\1/p')
    else
        p=$port; tls=""
        [ "$2" = tls ] && p=$tport && tls="--tls --cacert $dir/ca.crt"
        # shellcheck disable=SC2086
        ops=$(redis-benchmark -h 127.0.0.1 -p "$p" $tls -c "$CONNECTIONS" -P "$3" -n "$REQUESTS" \
            -r "$KEYS" --csv EVALSHA "$sha" 1 "key:__rand_int__" "$LIMIT" 1000 "$LIMIT" |
            awk -F'"' 'NR == 2 { printf "%d\n", $4 }')
    fi
    c1=$(children_cpu "$me"); r1=$(redis_cpu)
    usec=$(rcli info commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
    [ -n "$ops" ] && [ "$ops" -gt 0 ] && [ -n "$usec" ] ||
        { echo "tls_compare.sh: a run failed ($1 $2)" >&2; exit 3; }
    awk -v o="$ops" -v c=$((c1 - c0)) -v r=$((r1 - r0)) -v n="$REQUESTS" -v u="$usec" \
        'BEGIN { printf "%d %.2f %.2f %s\n", o, c / n, r / n, u }'
}

echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $ENGINE engine, $CONNECTIONS" \
    "connections, pipelines $PIPELINES, $KEYS keys, $REQUESTS checks a run, $ROUNDS rounds;" \
    "load: $(uptime | sed 's/.*load/load/')"
printf '%-5s %-3s %-9s %-5s %10s %12s %12s %10s\n' round P client link checks/s client_us/chk \
    redis_us/chk usec/call
kinds="porteiro:plain porteiro:tls ceiling:plain ceiling:tls"
for round in $(seq 1 "$ROUNDS"); do
    for pl in $PIPELINES; do
        order=$(echo "$kinds" | awk -v s=$(( (round - 1) % 4 )) \
            '{ for (i = 0; i < NF; i++) printf "%s ", $((i + s) % NF + 1) }')
        for k in $order; do
            line=$(run "${k%%:*}" "${k##*:}" "$pl")
            printf '%-5s %-3s %-9s %-5s %10s %12s %12s %10s\n' "$round" "$pl" "${k%%:*}" "${k##*:}" $line
            echo "$pl ${k%%:*} ${k##*:} $line" >>"$dir/runs"
        done
    done
done
r() { awk -v x="$1" -v y="$2" 'BEGIN { printf "%.2f", x / y }'; }
for pl in $PIPELINES; do
    echo "medians, pipeline $pl:"
    for k in $kinds; do
        col() { awk -v p="$pl" -v a="${k%%:*}" -v b="${k##*:}" -v c="$1" \
            '$1 == p && $2 == a && $3 == b { print $c }' "$dir/runs" | median; }
        printf '  %-9s %-5s %10s checks/s  client %6s us/check  redis %6s us/check  %6s us/call\n' \
            "${k%%:*}" "${k##*:}" "$(col 4)" "$(col 5)" "$(col 6)" "$(col 7)"
        echo "$pl ${k%%:*} ${k##*:} $(col 4) $(col 5) $(col 6)" >>"$dir/medians"
    done
    m() { awk -v p="$pl" -v a="$1" -v b="$2" -v c="$3" '$1 == p && $2 == a && $3 == b { print $c }' \
        "$dir/medians"; }
    for who in porteiro ceiling; do
        printf '  %-9s TLS/plain: checks/s %s, client CPU per check %s, Redis CPU per check %s\n' \
            "$who" "$(r "$(m "$who" tls 4)" "$(m "$who" plain 4)")" \
            "$(r "$(m "$who" tls 5)" "$(m "$who" plain 5)")" "$(r "$(m "$who" tls 6)" "$(m "$who" plain 6)")"
    done
    printf '  over TLS, porteiro / redis-benchmark: checks/s %s; plain: %s\n' \
        "$(r "$(m porteiro tls 4)" "$(m ceiling tls 4)")" "$(r "$(m porteiro plain 4)" "$(m ceiling plain 4)")"
done
echo "load after: $(uptime | sed 's/.*load/load/')"
