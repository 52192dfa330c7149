#!/bin/sh
# bench/run.sh soak — porteirod under load while Redis restarts and it reloads: RSS, fds flat, answers sane
# porteirod on Redis at about half its measured maximum for
# SOAK_SECONDS (default 600), while Redis is restarted every 30 s and
# porteirod gets SIGHUP every 20 s. Samples porteirod every second (RSS, open
# fds, /metrics counters; a loaded machine
# skips some seconds) into a TSV, with the deny cache's entries and the
# memory store's keys (the local fallback's); passes when every HTTP answer
# was 2xx, 429 or 503, socket errors stayed few, porteirod never died, RSS
# and fds stayed flat, and the two sizes stayed within their max_keys.
# Ends with "soak: 1 passed, 0 failed" (or 0/1) and that exit.
#
#   bench/run.sh soak                              # 10 minutes, build/porteirod
#   SOAK_SECONDS=60 BUILD=build-test-gcc bench/run.sh soak   # the CI run (scripts/test.sh --full)
#   SAMPLES=/tmp/soak.tsv bench/run.sh soak        # keep the per-second samples
#
# Load: GET /v1/auth?policy=soak with X-Api-Key drawn from 50 000 keys, and 1
# request in 10 on one hot key that is over its limit (so the deny cache
# answers it between Redis's denials). Policy: gcra 50/1s, deny_status 429,
# on_error local (a check Redis cannot answer is decided by the in-process
# memory store, counted as a fallback). A breaker opening sends a few
# thousand keys there within a quarter second, and a key of gcra 50/1s
# expires 20 ms after its last use, so about 400 are live at once:
# MEMORY_KEYS (256) is set below that so that the store must also evict.
# The maximum is wrk -t1 -c32 for 3 s; the soak runs wrk -t1 paced to at
# most half of it (below).
#
# Flat means: the median RSS of the last minute is within RSS_GROWTH_PCT
# (20) % of the second minute's, and the median fd count within FD_GROWTH
# (16); under 180 s the windows are the last 15 s and seconds 10-25.
# Socket errors wrk reports (connect/read/write/timeout) may be at most
# MAX_SOCKET_ERRORS (10): they are reported either way.
set -u
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
cd "$SRC" || exit 1
BUILD=${BUILD:-build}
SOAK_SECONDS=${SOAK_SECONDS:-600}
RSS_GROWTH_PCT=${RSS_GROWTH_PCT:-20}
FD_GROWTH=${FD_GROWTH:-16}
MAX_SOCKET_ERRORS=${MAX_SOCKET_ERRORS:-10}
REDIS_EVERY=${REDIS_EVERY:-30}
HUP_EVERY=${HUP_EVERY:-20}
MEMORY_KEYS=${MEMORY_KEYS:-256}
DENY_CACHE_KEYS=${DENY_CACHE_KEYS:-10000}

fail_early() { echo "soak: $*" >&2; echo "soak: 0 passed, 1 failed"; exit 1; }
for tool in wrk redis-server redis-cli curl; do
    command -v "$tool" >/dev/null || fail_early "$tool is not installed"
done
if [ ! -x "$BUILD/porteirod" ]; then
    (bench_build "$BUILD" porteirod) || fail_early "could not build $BUILD/porteirod"
fi
bench_workdir
daemon_pid=""
wrk_pid=""
http_port=$(bench_free_port)
bench_redis
# Restarted on its port: porteirod keeps its URL.
start_redis() { bench_redis -p "$redis_port"; }
stop_redis() { bench_stop "$redis_pid"; }

cat >"$work/porteirod.yaml" <<CONF
listen: 127.0.0.1:$http_port
redis:
  url: redis://127.0.0.1:$redis_port
  on_error: local
deny_cache:
  max_keys: $DENY_CACHE_KEYS
memory:
  max_keys: $MEMORY_KEYS
policies:
  soak:
    limits:
      - gcra 50/1s
    key: header X-Api-Key
    deny_status: 429
CONF

# Every answer's status, tallied per thread and summed in done() (wrk runs
# each thread in its own Lua state; setup() keeps them, done() reads them).
cat >"$work/soak.lua" <<'LUA'
local threads = {}
function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  statuses = {}
  math.randomseed(os.time() * 1000 + id)
end
function request()
  local key
  if math.random(10) == 1 then key = "hot" else key = "k" .. math.random(1, 50000) end
  return wrk.format("GET", "/v1/auth?policy=soak", {["X-Api-Key"] = key})
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for s, n in pairs(t:get("statuses")) do total[s] = (total[s] or 0) + n end
  end
  local e = summary.errors
  io.write(string.format("socket_errors connect=%d read=%d write=%d timeout=%d\n",
    e.connect, e.read, e.write, e.timeout))
  for s, n in pairs(total) do io.write(string.format("status %d %d\n", s, n)) end
end
LUA

"$BUILD/porteirod" --config "$work/porteirod.yaml" --log-level warn 2>"$work/porteirod.log" &
daemon_pid=$!
bench_track "$daemon_pid"
i=0
until curl -s -o /dev/null "http://127.0.0.1:$http_port/healthz"; do
    i=$((i + 1)); [ $i -gt 500 ] && fail_early "porteirod did not start: $(cat "$work/porteirod.log")"
    kill -0 "$daemon_pid" 2>/dev/null || fail_early "porteirod exited: $(cat "$work/porteirod.log")"
    sleep 0.01
done

url="http://127.0.0.1:$http_port/"
rps() { awk '$1 == "Requests/sec:" { printf "%d\n", $2 }' "$1"; }
wrk -t1 -c32 -d3s -s "$work/soak.lua" "$url" >"$work/max.out" 2>&1
max=$(rps "$work/max.out")
[ -n "$max" ] && [ "$max" -gt 0 ] || fail_early "could not measure the maximum: $(cat "$work/max.out")"
target=$((max / 2))
# Paced: each connection waits PACE_MS (2) before each request, so with C
# connections the rate is at most C * 1000 / PACE_MS: C is chosen for half
# the maximum (what a loaded machine then gives is printed beside it).
PACE_MS=${PACE_MS:-2}
conns=$(((target * PACE_MS + 500) / 1000))
[ "$conns" -lt 1 ] && conns=1
{ cat "$work/soak.lua"; echo "function delay() return $PACE_MS end"; } >"$work/paced.lua"
# A loaded machine's timers run late: one 2 s paced try, and C scaled by what
# it fell short (at most 4 times).
wrk -t1 -c"$conns" -d2s -s "$work/paced.lua" "$url" >"$work/cal.out" 2>&1
cal=$(rps "$work/cal.out")
if [ "${cal:-0}" -gt 0 ] && [ "$cal" -lt "$target" ]; then
    scaled=$((conns * target / cal))
    [ "$scaled" -gt $((conns * 4)) ] && scaled=$((conns * 4))
    conns=$scaled
fi
echo "soak: max $max req/s (wrk -t1 -c32 3 s); soak: wrk -t1 -c$conns, ${PACE_MS} ms between a connection's requests (half the max: $target req/s; a 2 s try gave ${cal:-0}), ${SOAK_SECONDS} s; redis :$redis_port, porteirod :$http_port"

wrk -t1 -c"$conns" -d"${SOAK_SECONDS}s" --timeout 5s -s "$work/paced.lua" "$url" >"$work/soak.out" 2>&1 &
wrk_pid=$!
bench_track "$wrk_pid"

samples=${SAMPLES:-$work/samples.tsv}
printf 't\trss_kb\tfds\tdecisions\tallowed\tdenied\tfallbacks\tdeny_cache_hits\tmemory_evictions\tbreaker_state\tdeny_cache_entries\tmemory_keys\tredis_restarts\thups\n' >"$samples"
metrics_row() { # the counters and gauges the table wants, from $work/metrics, tab-separated
    awk '{ n = $1; sub(/\{.*/, "", n); v[n] += $NF }
         n == "porteiro_decisions_total" && index($1, "outcome=\"allowed\"") { al += $NF }
         n == "porteiro_decisions_total" && index($1, "outcome=\"denied\"") { de += $NF }
         END { printf "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d", v["porteiro_decisions_total"], al, de,
               v["porteiro_fallback_decisions_total"], v["porteiro_deny_cache_hits_total"],
               v["porteiro_memory_evictions_total"], v["porteiro_breaker_state"],
               v["porteiro_deny_cache_entries"], v["porteiro_memory_keys"] }' "$work/metrics"
}
died=""
restarts=0
hups=0
start=$(date +%s)
next_redis=$REDIS_EVERY
next_hup=$HUP_EVERY
last_t=-1
while :; do
    t=$(($(date +%s) - start))
    [ "$t" -ge "$SOAK_SECONDS" ] && break
    if ! kill -0 "$daemon_pid" 2>/dev/null; then died="porteirod died at ${t}s"; break; fi
    if [ "$t" -ne "$last_t" ]; then
        last_t=$t
        rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$daemon_pid/status" 2>/dev/null)
        fds=$(ls "/proc/$daemon_pid/fd" 2>/dev/null | wc -l)
        curl -s -m 2 -o "$work/metrics" "http://127.0.0.1:$http_port/metrics" || : >"$work/metrics"
        printf '%d\t%s\t%d\t%s\t%d\t%d\n' "$t" "${rss:-0}" "$fds" "$(metrics_row)" \
            "$restarts" "$hups" >>"$samples"
        if [ "$t" -ge "$next_redis" ]; then
            stop_redis; start_redis
            restarts=$((restarts + 1)); next_redis=$((next_redis + REDIS_EVERY))
        fi
        if [ "$t" -ge "$next_hup" ]; then
            kill -HUP "$daemon_pid" 2>/dev/null || true
            hups=$((hups + 1)); next_hup=$((next_hup + HUP_EVERY))
        fi
    fi
    sleep 0.2
done
wait "$wrk_pid" 2>/dev/null
bench_stop "$wrk_pid"
[ -z "$died" ] && ! kill -0 "$daemon_pid" 2>/dev/null && died="porteirod died at the end"

# The table: one row every 10 s (every 60 s from 10 minutes on), req/s from
# the decisions counter over the row's interval.
step=10
[ "$SOAK_SECONDS" -ge 600 ] && step=60
echo "soak: $(nproc) cores, load average$(uptime | sed 's/.*load average//'), $(date -u +%Y-%m-%dT%H:%MZ)"
# Columns: deny-cache hits (counter), deny-cache entries and memory keys
# (gauges), memory evictions (counter).
awk -F'\t' -v step="$step" 'function row(f, rate) {
      printf "%6d %9d %5d %9d %9d %9d %9d %9d %7d %8d %9d %7d %8d %5d\n", f[1], f[2], f[3], rate,
             f[5], f[6], f[7], f[8], f[11], f[12], f[9], f[10], f[13], f[14] }
    NR == 1 { next }
    NR == 2 { printf "%6s %9s %5s %9s %9s %9s %9s %9s %7s %8s %9s %7s %8s %5s\n", "t(s)", "rss(KiB)",
                     "fds", "req/s", "allowed", "denied", "fallback", "denyhits", "denykeys",
                     "memkeys", "evictions", "breaker", "restarts", "hups" }
    NR == 2 || $1 >= next_row {
      split($0, f, "\t")
      row(f, (NR > 2 && $1 > lt) ? ($4 - ld) / ($1 - lt) : 0)
      lt = $1; ld = $4; next_row = $1 - $1 % step + step; done_row = 1; next }
    { last = $0; done_row = 0 }
    END { if (!done_row && last != "") { split(last, f, "\t")
            row(f, f[1] > lt ? (f[4] - ld) / (f[1] - lt) : 0) } }' "$samples"

reasons=$(awk -F'[{}]' '/^porteiro_fallbacks_total\{/ { split($3, v, " "); if (v[1] > 0) {
    r = $2; sub(/reason=/, "", r); gsub(/"/, "", r); printf "%s%s %d", sep, r, v[1]; sep = ", " } }' "$work/metrics")
echo "soak: fallbacks by reason: ${reasons:-none}"
echo "soak: porteirod log: $(wc -l <"$work/porteirod.log") lines (warn and above), the distinct ones:"
sed -E 's/[0-9]+/N/g' "$work/porteirod.log" | sort | uniq -c | sort -rn | head -8

# Statuses and socket errors from wrk's done().
echo "soak: wrk: $(awk '/requests in/ { print $1, "requests in", $4 }' "$work/soak.out" | tr -d ,) ($(rps "$work/soak.out") req/s, max $max)"
statuses=$(awk '$1 == "status" { printf "%s%s: %s", sep, $2, $3; sep = ", " }' "$work/soak.out")
echo "soak: statuses: ${statuses:-none}"
bad_status=$(awk '$1 == "status" && !($2 >= 200 && $2 < 300) && $2 != 429 && $2 != 503 { n += $3 }
    END { print n + 0 }' "$work/soak.out")
errline=$(grep '^socket_errors' "$work/soak.out" || echo "socket_errors none")
sock_errors=$(echo "$errline" | awk '{ for (i = 2; i <= NF; i++) { split($i, a, "="); n += a[2] } }
    END { print n + 0 }')
echo "soak: $errline (allowed: $MAX_SOCKET_ERRORS)"

# Flatness: medians of two windows.
if [ "$SOAK_SECONDS" -ge 180 ]; then
    a0=60 a1=119 b0=$((SOAK_SECONDS - 60)) b1=$SOAK_SECONDS
else
    a0=10 a1=25 b0=$((SOAK_SECONDS - 15)) b1=$SOAK_SECONDS
fi
median() { # column from to
    awk -F'\t' -v c="$1" -v a="$2" -v b="$3" 'NR > 1 && $1 >= a && $1 <= b { print $c }' "$samples" |
        sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print v[int((NR + 1) / 2)] }'
}
rss_a=$(median 2 "$a0" "$a1"); rss_b=$(median 2 "$b0" "$b1")
fd_a=$(median 3 "$a0" "$a1"); fd_b=$(median 3 "$b0" "$b1")
colmax() { awk -F'\t' -v c="$1" 'NR > 1 && $c > m { m = $c } END { print m + 0 }' "$samples"; }
deny_max=$(colmax 11); mem_max=$(colmax 12); evictions=$(colmax 9)
echo "soak: the deny cache held at most $deny_max entries (max_keys $DENY_CACHE_KEYS), the memory" \
    "store at most $mem_max keys (max_keys $MEMORY_KEYS; $evictions evicted)"
echo "soak: median RSS ${rss_a} KiB (${a0}-${a1} s) -> ${rss_b} KiB (${b0}-${b1} s), bound +${RSS_GROWTH_PCT} %;" \
    "median fds ${fd_a} -> ${fd_b}, bound +${FD_GROWTH}; Redis restarted $restarts times, SIGHUP $hups times"

why=""
[ -n "$died" ] && why="$why; $died"
[ -z "$statuses" ] && why="$why; no answers tallied"
[ "$bad_status" -gt 0 ] && why="$why; $bad_status answers not 2xx/429/503"
[ "$sock_errors" -gt "$MAX_SOCKET_ERRORS" ] && why="$why; $sock_errors socket errors"
[ "$rss_a" -gt 0 ] || why="$why; no RSS samples"
[ "$rss_b" -gt $((rss_a + rss_a * RSS_GROWTH_PCT / 100)) ] && why="$why; RSS grew"
[ "$fd_b" -gt $((fd_a + FD_GROWTH)) ] && why="$why; fds grew"
[ "$deny_max" -gt "$DENY_CACHE_KEYS" ] && why="$why; the deny cache outgrew its max_keys"
[ "$mem_max" -gt "$MEMORY_KEYS" ] && why="$why; the memory store outgrew its max_keys"
if [ -n "$why" ]; then
    echo "soak: FAILED${why}"
    tail -20 "$work/porteirod.log" >&2
    echo "soak: 0 passed, 1 failed"
    exit 1
fi
echo "soak: 1 passed, 0 failed"
