#!/bin/sh
# bench/run.sh envoy_cost — Redis time per call of envoy requests of 1, 2, 3 descriptors
# What envoy ratelimit's requests cost Redis, by how many
# limited descriptors they carry (docs/envoy.md, "Measured"). porteirod
# (one worker, the envoy service on POST /json) on a private redis-server;
# per round and per row (1, 2, 3 descriptors), REQUESTS sequential requests
# on one keep-alive connection, each descriptor's value random (a fresh or
# live counter every time). Per row: Redis's own time per decision call
# (INFO commandstats: EVALSHA, EVAL and the module's porteiro.* commands,
# usec / calls) and calls per request, then the medians over ROUNDS.
#
#   bench/run.sh envoy_cost                 # 3 rounds of 3000 requests a row
#   ROUNDS=5 REQUESTS=5000 bench/run.sh envoy_cost
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
BUILD=$SRC/${BUILD:-build}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-3000}
bench_need redis-server redis-cli python3
bench_build "$BUILD" porteirod
bench_workdir
bench_redis
http_port=$(bench_free_port)

mkdir -p "$work/rules"
{
    echo "domain: cost"
    echo "descriptors:"
    for d in d1 d2 d3; do
        echo "  - key: $d"
        echo "    rate_limit:"
        echo "      unit: second"
        echo "      requests_per_unit: 1000000000"
    done
} >"$work/rules/cost.yaml"
cat >"$work/porteirod.yaml" <<YAML
listen: 127.0.0.1:$http_port
redis:
  url: redis://127.0.0.1:$redis_port
  timeout_ms: 2000
  on_error: error
envoy:
  config: $work/rules
YAML
"$BUILD/porteirod" --config "$work/porteirod.yaml" --workers 1 --log-level warn &
bench_track $!

# One row: REQUESTS requests of n descriptors; prints "n usec_per_call calls_per_request".
cat >"$work/row.py" <<'PY'
import http.client, json, random, subprocess, sys, time
port, redis_port, n, count = (int(a) for a in sys.argv[1:5])

def stats():
    out = subprocess.run(["redis-cli", "-p", str(redis_port), "info", "commandstats"],
                         capture_output=True, text=True, check=True).stdout
    calls = usec = 0
    for line in out.splitlines():
        name, _, rest = line.partition(":")
        if name in ("cmdstat_evalsha", "cmdstat_eval") or name.startswith("cmdstat_porteiro."):
            fields = dict(f.split("=") for f in rest.split(","))
            calls += int(fields["calls"])
            usec += int(fields["usec"])
    return calls, usec

for _ in range(100):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/healthcheck")
        conn.getresponse().read()
        break
    except OSError:
        conn.close()
        time.sleep(0.1)
else:
    sys.exit("envoy_cost: porteirod does not answer on port %d" % port)
subprocess.run(["redis-cli", "-p", str(redis_port), "config", "resetstat"],
               capture_output=True, check=True)
for _ in range(count):
    descs = [{"entries": [{"key": "d%d" % (i + 1), "value": "v%d" % random.randrange(10**9)}]}
             for i in range(n)]
    conn.request("POST", "/json", json.dumps({"domain": "cost", "descriptors": descs}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200 or b'"OK"' not in body:
        sys.exit("envoy_cost: unexpected answer %d %r" % (r.status, body[:200]))
calls, usec = stats()
print("%d %.2f %.3f" % (n, usec / max(calls, 1), calls / count))
PY

echo "envoy_cost: $ROUNDS round(s) of $REQUESTS requests a row, $(date -u +%FT%RZ);" \
    "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-12s %-16s %s\n' round descriptors "redis us/call" "calls/request"
: >"$work/rows"
for round in $(seq "$ROUNDS"); do
    for n in 1 2 3; do
        python3 "$work/row.py" "$http_port" "$redis_port" "$n" "$REQUESTS" >"$work/row"
        read -r d us calls <"$work/row"
        printf '%-6s %-12s %-16s %s\n' "$round" "$d" "$us" "$calls"
        echo "$d $us $calls" >>"$work/rows"
    done
done
echo "medians:"
for n in 1 2 3; do
    printf '  %d descriptor(s): %.2f us of Redis time per call\n' "$n" \
        "$(bench_col "$work/rows" 2 "\$1 == $n")"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
