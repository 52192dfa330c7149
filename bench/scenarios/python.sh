#!/bin/sh
# python — the Python binding (python/, docs/python.md) against how a
# Python service limits today (issue 36), in one run: interleaved rounds,
# medians, checks/s and the Python process's CPU per check
# (time.process_time: the interpreter, the extension and libporteiro alike).
#
#   lua        the textbook fixed window as a Lua script through redis-py (EVALSHA)
#   limits_fw  `limits` (Debian's python3-limits), Redis storage, fixed window
#   limits_mw  `limits`, moving window
#   sync       porteiro.Limiter(redis).check, one thread
#   async256   Limiter.acheck, 256 checks in flight on one asyncio loop
#   uvloop256  the same on uvloop
#   hot_lease  one hot key with a quota lease (200 ms, 1000 units) under a
#              limit it never reaches (10^9 a minute); Redis script calls per
#              1 000 checks beside it
#   threads4   4 threads sharing one Limiter (4 handles), Redis
#   mem        porteiro's memory backend
#   limits_mem `limits`, in-memory storage
# Every Redis row: one private redis-server, fixed windows of 10^6 per minute
# (always allowed), keys drawn at random over 10 000 clients (hot_lease: one).
#
#   bench/run.sh python                 # 5 rounds of 2 s a row: about 2 min
#   ROUNDS=3 SECONDS_PER_ROW=1 bench/run.sh python
#   RESULTS=bench/results/python.tsv bench/run.sh python
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-rel}
ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-2}
PY=/usr/bin/python3 # Debian's: python3 on PATH may be another build
me=python_bench
for tool in redis-server redis-cli "$PY"; do
    command -v "$tool" >/dev/null || { echo "$me: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import redis, limits, uvloop' 2>/dev/null ||
    { echo "$me: needs python3-redis, python3-limits, python3-uvloop" >&2; exit 1; }

# A Release build of the library and the extension.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target porteiro_python porteiro_python_files >/dev/null

work=$(mktemp -d /tmp/$me-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --logfile redis.log &
pid=$!
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "== $me: $ROUNDS rounds x ${SECONDS_PER_ROW} s a row; load: $(uptime | sed 's/.*load average: //')"
PYTHONPATH="$BUILD/python" REDIS_PORT=$port ROUNDS=$ROUNDS SECS=$SECONDS_PER_ROW \
    RESULTS=${RESULTS:-} "$PY" - <<'EOF'
import asyncio
import os
import random
import statistics
import threading
import time

import redis
import uvloop
from limits import parse, storage, strategies

import porteiro

port = int(os.environ["REDIS_PORT"])
url = "redis://127.0.0.1:%d" % port
rounds = int(os.environ["ROUNDS"])
secs = float(os.environ["SECS"])
rng = random.Random(36)
KEYS = ["client:%d" % rng.randrange(10000) for _ in range(1 << 16)]
MASK = (1 << 16) - 1
FW = "fixed_window 1000000/1m"
item = parse("1000000/minute")
r = redis.Redis(host="127.0.0.1", port=port)
LUA = """local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if c > tonumber(ARGV[1]) then return 0 end
return 1"""
sha = r.script_load(LUA)
# (a strategy keeps only a weak reference to its storage)
redis_storage = storage.RedisStorage(url)
memory_storage = storage.MemoryStorage()
limits_fw = strategies.FixedWindowRateLimiter(redis_storage)
limits_mw = strategies.MovingWindowRateLimiter(redis_storage)
limits_mem = strategies.FixedWindowRateLimiter(memory_storage)
sync = porteiro.Limiter(url, connections=1)
mem = porteiro.Limiter()
shared = porteiro.Limiter(url, connections=4)
hot = porteiro.Limiter(url, quota_lease_ms=200, quota_lease_units=1000, connections=1)
fw = porteiro.Limits(FW)
# The hot key's limit is never reached (10^9 a minute): at 500 000 checks/s
# a limit of 10^6 is spent in 2 s, and its denials go to Redis one by one.
hot_fw = porteiro.Limits("fixed_window 1000000000/1m")


def script_calls():
    s = r.info("commandstats")
    return sum(v["calls"] for k, v in s.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def timed(step):
    """step(i) does a block of checks, returns how many; run for secs."""
    n = i = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    end = t0 + secs
    while True:
        n += step(i)
        i += 1
        if (i & 15) == 0 and time.perf_counter() >= end:
            break
    wall = time.perf_counter() - t0
    return n / wall, (time.process_time() - c0) / n * 1e6


def loop_of(fn, block=64):
    def step(i):
        base = (i * block) & MASK
        for k in KEYS[base:base + block]:
            fn(k)
        return block
    return step


def row_lua():
    evalsha = r.evalsha
    return timed(loop_of(lambda k: evalsha(sha, 1, "lua:" + k, 1000000, 60)))


def row_limits_fw():
    hit = limits_fw.hit
    return timed(loop_of(lambda k: hit(item, k)))


def row_limits_mw():
    hit = limits_mw.hit  # its keys apart from the fixed window's (a list, not a counter)
    return timed(loop_of(lambda k: hit(item, "mw", k)))


def row_limits_mem():
    hit = limits_mem.hit
    return timed(loop_of(lambda k: hit(item, k), 1024))


def row_sync():
    check = sync.check
    return timed(loop_of(lambda k: check(k, fw)))


def row_mem():
    check = mem.check
    return timed(loop_of(lambda k: check(k, fw), 1024))


def async_row(new_loop):
    loop = new_loop()
    acheck = None

    async def block(i):
        base = (i * 256) & MASK
        await asyncio.gather(*[acheck(k, fw) for k in KEYS[base:base + 256]])
        return 256

    async def main():
        nonlocal acheck
        acheck = porteiro.Limiter(url).acheck
        await block(0)
        n = i = 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < secs:
            n += await block(i)
            i += 1
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def row_async256():
    return async_row(asyncio.new_event_loop)


def row_uvloop256():
    return async_row(uvloop.new_event_loop)


hot_calls = []


def row_hot_lease():
    check = hot.check
    before = script_calls()
    rate, cpu = timed(lambda i: [check("hot", hot_fw) for _ in range(64)] and 64)
    hot_calls.append((script_calls() - before) / (rate * secs) * 1000)
    return rate, cpu


def row_threads4():
    check = shared.check
    counts = [0] * 4
    stop = time.perf_counter() + secs

    def run(t):
        n = 0
        base = t * 4096
        while time.perf_counter() < stop:
            for k in KEYS[base:base + 64]:
                check(k, fw)
            n += 64
            base = (base + 64) & MASK
        counts[t] = n

    c0 = time.process_time()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    n = sum(counts)
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


ROWS = [("lua", row_lua), ("limits_fw", row_limits_fw), ("limits_mw", row_limits_mw),
        ("sync", row_sync), ("async256", row_async256), ("uvloop256", row_uvloop256),
        ("hot_lease", row_hot_lease), ("threads4", row_threads4), ("mem", row_mem),
        ("limits_mem", row_limits_mem)]
res = {name: [] for name, _ in ROWS}
for rnd in range(rounds):
    order = ROWS if rnd % 2 == 0 else list(reversed(ROWS))  # interleaved both ways
    for name, fn in order:
        res[name].append(fn())
    print("round %d: %s" % (rnd + 1, "  ".join("%s %.0f" % (n, res[n][-1][0]) for n, _ in ROWS)),
          flush=True)

med = {n: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
       for n, v in res.items()}
print()
print("%-11s %12s %14s" % ("row", "checks/s", "CPU us/check"))
for n, _ in ROWS:
    print("%-11s %12.0f %14.2f" % (n, med[n][0], med[n][1]))
calls = statistics.median(hot_calls)
print("hot_lease: %.1f Redis script calls per 1 000 checks" % calls)


def ratio(a, b, col=0):
    """The median of the per-round ratios (rows of one round ran close in
    time, so a round's load weighs on both), and the ratio of the medians."""
    per_round = statistics.median(x[col] / y[col] for x, y in zip(res[a], res[b]))
    return per_round, med[a][col] / med[b][col]


lines = [
    ("sync / limits_fw checks/s", ratio("sync", "limits_fw"), ">= 1.5"),
    ("sync / limits_fw CPU per check", ratio("sync", "limits_fw", 1), "<= 0.25"),
    ("async256 / limits_fw checks/s", ratio("async256", "limits_fw"), ">= 5"),
    ("uvloop256 / limits_fw checks/s", ratio("uvloop256", "limits_fw"), ">= 5"),
    ("hot_lease / limits_fw checks/s", ratio("hot_lease", "limits_fw"), ">= 20"),
    ("hot_lease Redis calls per 1 000", (calls, calls), "<= 10"),
    ("mem / limits_mem checks/s", ratio("mem", "limits_mem"), ">= 3"),
    ("threads4 / sync checks/s", ratio("threads4", "sync"), ">= 2.5"),
]
print()
print("%-34s %9s %9s  %s" % ("ratio", "per-round", "medians", "target (issue 36)"))
for name, (v, w), target in lines:
    print("%-34s %9.2f %9.2f  %s" % (name, v, w, target))
out = os.environ.get("RESULTS")
if out:
    with open(out, "w") as f:
        f.write("row\tchecks_per_s\tcpu_us_per_check\n")
        for n, _ in ROWS:
            f.write("%s\t%.0f\t%.2f\n" % (n, med[n][0], med[n][1]))
EOF
