#!/bin/sh
# ab.sh — two builds of porteiro against one private Redis, interleaved:
# `porteiro bench` throughput (checks/s) and Redis's own time per script call
# (INFO commandstats), medians over ROUNDS. For "did this change slow the
# path down?": run it with the CLI built before and after the change.
# Usage: bench/ab.sh OLD_PORTEIRO NEW_PORTEIRO   (env: ROUNDS, CONNECTIONS,
# PIPELINE, REQUESTS, KEYS, ALGORITHM)
set -eu
old=$1 new=$2
ROUNDS=${ROUNDS:-5} CONNECTIONS=${CONNECTIONS:-50} PIPELINE=${PIPELINE:-1}
REQUESTS=${REQUESTS:-100000} KEYS=${KEYS:-100000} ALGORITHM=${ALGORITHM:-gcra}

dir=$(mktemp -d)
port=$(( 20000 + $$ % 20000 ))
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

one() { # binary → "checks/s usec_per_call"
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
    ops=$("$1" bench --redis "redis://127.0.0.1:$port" --algorithm "$ALGORITHM" \
        --connections "$CONNECTIONS" --pipeline "$PIPELINE" --requests "$REQUESTS" --keys "$KEYS" |
        sed -E 's/.*"ops_per_sec":([0-9.]+).*/\1/')
    us=$(redis-cli -p "$port" info commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_evalsha:/ { print $6 }')
    echo "$ops $us"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: > "$dir/old" ; : > "$dir/new"
for r in $(seq "$ROUNDS"); do
    one "$old" >> "$dir/old"
    one "$new" >> "$dir/new"
done
paste "$dir/old" "$dir/new" | awk '{ print $3 / $1, $4 / $2 }' > "$dir/ratio"
printf '%-8s %12s %12s\n' "" "checks/s" "us/call"
printf '%-8s %12s %12s\n' old "$(cut -d' ' -f1 "$dir/old" | median)" "$(cut -d' ' -f2 "$dir/old" | median)"
printf '%-8s %12s %12s\n' new "$(cut -d' ' -f1 "$dir/new" | median)" "$(cut -d' ' -f2 "$dir/new" | median)"
printf '%-8s %12s %12s\n' new/old "$(cut -d' ' -f1 "$dir/ratio" | median)" "$(cut -d' ' -f2 "$dir/ratio" | median)"
