#!/bin/sh
# bench/run.sh reserve_cost [ALGORITHMS] — a reservation's Redis time against a plain check, and against BASE's script
# Redis's own time per call (INFO commandstats) of a
# reservation against a plain check of the same script, and of a plain
# check now against main's script (plain checks must not get slower).
#
#   bench/run.sh reserve_cost [ALGORITHMS]   (default: gcra token_bucket fixed_window)
#
# Per algorithm, interleaved over ROUNDS (5) rounds on a private
# redis-server, redis-benchmark sends EVALSHA of the flat check script
# (src/lua/check/A.lua with its parts, as cmake/embed_lua.cmake embeds it:
# the tree's, and BASE's from git) on KEYS (100) hot
# keys, 50 connections, pipeline 1, REQUESTS (100 000) calls:
#   old plain    main's script, a limit that always allows
#   new plain    this tree's script, the same
#   old denied   main's script, a limit that always denies (1 per day)
#   new denied   this tree's, the same
#   reserve      this tree's, a limit that makes every call a reservation
#                (10/s, B 1, max_wait one day)
# Prints medians of us per call and of the per-round ratios.
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
ALGS=${1:-gcra token_bucket fixed_window}
ROUNDS=${ROUNDS:-5}
KEYS=${KEYS:-100}
REQUESTS=${REQUESTS:-100000}
BASE=${BASE:-main}
bench_need redis-server redis-cli redis-benchmark git cmake
bench_workdir
bench_redis
port=$redis_port dir=$work src=$SRC
rcli() { redis-cli -p "$port" "$@"; }
load() { rcli -x SCRIPT LOAD; }
# us per call of one run: sha args...
run() {
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 1 -n "$REQUESTS" -r "$KEYS" --csv \
        EVALSHA "$@" >/dev/null
    rcli info commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}

# A flat script as it is embedded, its --@part lines expanded and comments
# and indentation left out (cmake/embed_lua.cmake): embedded TREE ALG OUT
embedded() {
    cmake "-DEXPAND=$1/src/lua/check/$2.lua" "-DPARTS=$1/src/lua/parts" "-DOUT=$3" \
        -P "$src/cmake/embed_lua.cmake"
}
mkdir "$dir/base"
git -C "$src" archive "$BASE" src/lua | tar -x -C "$dir/base"

uptime
for alg in $ALGS; do
    embedded "$src" "$alg" "$dir/new.lua"
    embedded "$dir/base" "$alg" "$dir/old.lua"
    new=$(load <"$dir/new.lua")
    old=$(load <"$dir/old.lua")
    case $alg in # the arguments after the key: L P [B]
        fixed_window|sliding_window) allow="100000 1000" deny="1 86400000" slow="1 100" ;;
        *) allow="100000 1000 100000" deny="1 86400000 1" slow="10 1000 1" ;;
    esac
    : >"$dir/r"
    for r in $(seq "$ROUNDS"); do
        # The order alternates between rounds.
        if [ $((r % 2)) -eq 1 ]; then
            op=$(run "$old" 1 k:__rand_int__ 1 $allow); np=$(run "$new" 1 k:__rand_int__ 1 $allow)
        else
            np=$(run "$new" 1 k:__rand_int__ 1 $allow); op=$(run "$old" 1 k:__rand_int__ 1 $allow)
        fi
        od=$(run "$old" 1 k:__rand_int__ 1 $deny)
        nd=$(run "$new" 1 k:__rand_int__ 1 $deny)
        # now '' (Redis TIME), then max_wait: every call reserves.
        rs=$(run "$new" 1 k:__rand_int__ 1 $slow '' 86400000)
        np2=$(run "$new" 1 k:__rand_int__ 1 $allow)
        echo "$op $np $od $nd $rs $np2" >>"$dir/r"
        echo "$alg round $r: old plain $op, new plain $np, old denied $od, new denied $nd," \
            "reserve $rs, new plain $np2 us/call"
    done
    col() { awk -v c="$1" '{ print $c }' "$dir/r" | bench_median; }
    rat() { awk -v a="$1" -v b="$2" '{ printf "%.4f\n", $a / $b }' "$dir/r" | bench_median; }
    echo "$alg medians: old plain $(col 1), new plain $(col 2), old denied $(col 3)," \
        "new denied $(col 4), reserve $(col 5) us/call"
    echo "$alg ratios (medians of rounds): new/old plain $(rat 2 1), new/old denied $(rat 4 3)," \
        "reserve/new plain $(rat 5 6)"
done
uptime
