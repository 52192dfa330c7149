#!/bin/bash
# bench/run.sh tls [CLI] — what TLS to Redis costs, porteiro and redis-benchmark, plain and TLS
# What TLS to Redis costs on the blocking path: `porteiro
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
# usage: bench/run.sh tls [path/to/porteiro]
# env:   ROUNDS (5), CONNECTIONS (8), KEYS (10000), REQUESTS (40000),
#        ENGINE (blocking | loop), PIPELINES (1; with loop e.g. "1 16")
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
PORTEIRO=${1:-${PORTEIRO_CLI:-$SRC/${BUILD:-build}/porteiro}}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-8}
KEYS=${KEYS:-10000}
REQUESTS=${REQUESTS:-40000}
ENGINE=${ENGINE:-blocking}
PIPELINES=${PIPELINES:-1}
LIMIT=1000000
case "$ENGINE" in blocking | loop) ;; *) bench_die "ENGINE is blocking or loop" ;; esac
[ "$ENGINE" = loop ] || [ "$PIPELINES" = 1 ] || bench_die "the blocking engine runs at pipeline 1 only"
[ -x "$PORTEIRO" ] || bench_die "no porteiro binary at $PORTEIRO"
bench_need redis-server redis-cli redis-benchmark openssl
bench_workdir
TLS=1 # a plain and a TLS port
bench_redis
port=$redis_port tport=$redis_tls_port pid=$redis_pid dir=$work
rcli() { redis-cli -p "$port" "$@"; }
sha=$(rcli script load "$(cat "$BENCH/ceiling/gcra.lua")")
children_cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%d\n", ($16 + $17) * 1e6 / t }' "/proc/$1/stat"; }
redis_cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%d\n", ($14 + $15) * 1e6 / t }' "/proc/$pid/stat"; }

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
        bench_die "a run failed ($1 $2)"
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
        # shellcheck disable=SC2086 # the kinds: words
        order=$(bench_rotate "$round" $kinds)
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
            '$1 == p && $2 == a && $3 == b { print $c }' "$dir/runs" | bench_median; }
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
