#!/bin/sh
# readme_haproxy_test.sh BUILD_DIR — docs/haproxy.md's quick start as a
# newcomer runs it: the ```sh block under "## Quick start", read from the doc
# itself and run through /bin/sh in a folder that looks like the repository
# (examples/haproxy/ copied, porteirod and haproxy on PATH), beside a Redis
# of its own. Only the ports are moved (Redis 6379, HAProxy's front 8000 and
# its demo app 8001, porteirod's SPOE 12345 and HTTP 8080), in the block and
# in the copies of examples/haproxy/'s three files. The block's answers must
# be the documented ones, in order: a 200 with the documented
# RateLimit-Policy and RateLimit headers, 19 more 200s with RateLimit's
# remaining from 18 down to 0, then 429s with Retry-After 1; and porteirod
# decided them in Redis (no fallback). Exit 77 (skipped) only without haproxy.
set -eu
build=$(cd "${1:?usage: readme_haproxy_test.sh BUILD_DIR}" && pwd)
src=${PORTEIRO_SOURCE_DIR:?}
PATH="$PATH:/usr/sbin:/usr/local/sbin"
if ! command -v haproxy >/dev/null; then
    echo "SKIP: haproxy is not installed"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-readme-haproxy.XXXXXX")
# Five free loopback ports, in one python3 (its start is slow on a loaded
# machine), each held until all five are chosen so they differ.
set -- $(python3 -S -c 'import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
redis=$1 front=$2 app=$3 spoe=$4 http=$5
[ -n "$http" ] || { echo "FAIL: no free ports"; exit 1; }
redis_pid=
cleanup() {
    # What the block left running (porteirod, haproxy: their pids written
    # by the shims below), and the Redis: by their ids.
    for pid in $(cat "$tmp/pids" 2>/dev/null) $redis_pid; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    sleep 0.2
    for pid in $(cat "$tmp/pids" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# The block: the first ```sh fence after the "## Quick start" heading.
awk '/^## Quick start$/ { in_section = 1; next }
     in_section && /^```sh$/ { in_block = 1; next }
     in_block && /^```$/ { exit }
     in_block { print }' "$src/docs/haproxy.md" >"$tmp/block.sh"
[ -s "$tmp/block.sh" ] || { echo "FAIL: no \`\`\`sh block under '## Quick start' in docs/haproxy.md"; exit 1; }

# Moves each of FROM to TO in FILE; FROM must be there (so the doc, the
# examples and this test cannot drift apart silently).
move() { # file from to
    grep -qF "$2" "$1" || { echo "FAIL: '$2' is not in $1 any more"; exit 1; }
    sed "s#$2#$3#g" "$1" >"$1.new" && mv "$1.new" "$1"
}
move "$tmp/block.sh" 127.0.0.1:8000 "127.0.0.1:$front"

ex="$tmp/repo/examples/haproxy"
mkdir -p "$ex" "$tmp/bin"
cp "$src/examples/haproxy/haproxy.cfg" "$src/examples/haproxy/spoe.conf" \
    "$src/examples/haproxy/porteirod.yaml" "$ex/"
move "$ex/haproxy.cfg" 127.0.0.1:8000 "127.0.0.1:$front"
move "$ex/haproxy.cfg" 127.0.0.1:8001 "127.0.0.1:$app"
move "$ex/haproxy.cfg" 127.0.0.1:12345 "127.0.0.1:$spoe"
move "$ex/porteirod.yaml" 127.0.0.1:12345 "127.0.0.1:$spoe"
move "$ex/porteirod.yaml" 127.0.0.1:8080 "127.0.0.1:$http"
move "$ex/porteirod.yaml" 127.0.0.1:6379 "127.0.0.1:$redis"
# porteirod and haproxy as the block calls them, through shims that note
# their pid (for the cleanup) and exec the real program.
shim() { # name program
    printf '#!/bin/sh\necho $$ >>"%s/pids"\nexec "%s" "$@"\n' "$tmp" "$2" >"$tmp/bin/$1"
    chmod +x "$tmp/bin/$1"
}
shim porteirod "$build/porteirod"
shim haproxy "$(command -v haproxy)"

redis-server --port "$redis" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
i=0
until redis-cli -p "$redis" ping >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || { echo "FAIL: redis-server did not start"; cat "$tmp/redis.log"; exit 1; }
    sleep 0.05
done

echo "== docs/haproxy.md, Quick start (ports moved):"
cat "$tmp/block.sh"
echo "=="
(cd "$tmp/repo" && PATH="$tmp/bin:$PATH" timeout 60 sh "$tmp/block.sh") >"$tmp/out" 2>&1 || true
tr -d '\r' <"$tmp/out" >"$tmp/out.txt"
cat "$tmp/out.txt"

fail() { echo "FAIL: $*"; exit 1; }
# The second curl's t= (seconds until the burst is whole again) depends on
# how long the curls took: not compared.
norm() { sed -e 's/ *$//' -E -e '/^[0-9]{3} /s/;t=[0-9]+/;t=T/'; }
norm <"$tmp/out.txt" >"$tmp/answers"
# The documented answers (the block after the sh block), in their order;
# what varies is shown with "...", skipped here.
awk '/^## Quick start$/ { s = 1; next }
     s && /^```/ { b++; next }
     s && b == 3 { print }
     b >= 4 { exit }' "$src/docs/haproxy.md" | norm >"$tmp/documented"
[ -s "$tmp/documented" ] || fail "no answer block after the quick start's sh block"
at=0
while IFS= read -r line; do
    case "$line" in
        ""|*...*) continue ;;
    esac
    n=$(tail -n "+$((at + 1))" "$tmp/answers" | grep -nxF -m1 -e "$line" | cut -d: -f1)
    [ -n "$n" ] || fail "documented line '$line' is not in the answers (after line $at)"
    at=$((at + n))
done <"$tmp/documented"
# The 22 of the second curl: the 19 left of the burst of 20, remaining
# 18 down to 0, then 429s told to retry after 1 s.
grep -E '^(200|429) ' "$tmp/answers" >"$tmp/codes" || true
[ "$(wc -l <"$tmp/codes")" -eq 22 ] || fail "$(wc -l <"$tmp/codes") answers of the 22, not 22"
i=0
while IFS= read -r line; do
    if [ "$i" -lt 19 ]; then
        want="200 \"api\";r=$((18 - i));t="
    else
        want="429 \"api\";r=0;t="
    fi
    case "$line" in
        "$want"*) ;;
        *) fail "answer $((i + 1)) of the 22 is '$line', not '$want...'" ;;
    esac
    i=$((i + 1))
done <"$tmp/codes"
grep -qxF '429 "api";r=0;t=T 1' "$tmp/codes" || fail "no Retry-After 1 on the 429s"
# Decided in Redis: porteirod made no decision without it.
metrics=$(curl -s "http://127.0.0.1:$http/metrics")
echo "$metrics" | grep -q '^porteiro_decisions_total' || fail "no porteiro_decisions_total in porteirod's /metrics"
if echo "$metrics" | grep -E '^porteiro_fallback_decisions_total' | grep -qvE ' 0$'; then
    fail "porteirod decided without Redis: $(echo "$metrics" | grep '^porteiro_fallback_decisions_total')"
fi
echo "PASS: docs/haproxy.md's quick start: the documented answers, 20 x 200 then 429s with Retry-After 1, decided in Redis"
