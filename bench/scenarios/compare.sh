#!/bin/sh
# bench/run.sh compare [CLI] — porteiro against the least script for the job (bench/ceiling/)
# porteiro against the least work a Redis script can do for one decision:
# the minimal scripts in bench/ceiling/ (see bench/ceiling/README.md).
# Two parts, each interleaved over several rounds (the order alternating) on
# one private redis-server:
#
#   cost  For each algorithm, redis-benchmark sends EVALSHA of the minimal
#         script for that job and of porteiro's own script (`porteiro script
#         --algorithm A`, what a check of one limit runs), same L, P, B, same
#         key count. Before each run the database is emptied and the
#         statistics zeroed; INFO commandstats then gives Redis's own time
#         per call (usec_per_call), far steadier than calls per second on a
#         shared machine. Minimal script per algorithm: gcra and token_bucket
#         ceiling/gcra.lua (the same contract), fixed_window
#         ceiling/fixed_window.lua, sliding_window ceiling/sliding_window.lua.
#   policy  A policy of two limits (token_bucket and fixed_window, decided
#         in one call by the script such a check runs, `porteiro script
#         --limits ...`, src/lua/check/policy.lua) against the
#         sum of the two single-limit scripts: a policy of k limits must
#         cost no more than the k single scripts together.
#   path  `porteiro bench` (the library's whole client path, one check per
#         script call) against redis-benchmark sending EVALSHA of
#         ceiling/gcra.lua, at pipeline 1 and 16, with porteiro's own CPU
#         time per check (user + system, /usr/bin/time) beside; OTHER=path
#         to a second porteiro binary measures it in the same rounds (a
#         build of main: before/after).
#
# TLS=1: the same over TLS (a CA and a server certificate made with openssl
# in the temporary folder; Redis on a TLS port, porteiro with rediss:// and
# --cacert, redis-benchmark with --tls --cacert).
#
# Medians of each column and of the per-round ratios are printed.
#
# usage: bench/run.sh compare [path/to/porteiro]   (default: $BUILD/porteiro)
# env:   ROUNDS (5), CONNECTIONS (50), KEYS (100000), PARTS ("cost policy path"),
#        ALGORITHMS ("gcra token_bucket fixed_window sliding_window"),
#        LIMIT (100000), PERIOD_MS (1000), REQUESTS (100000: a cost run),
#        REQUESTS_P1 (100000), REQUESTS_P16 (300000), OTHER (none), TLS (0), BUILD (build)
set -eu
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/../lib.sh"
PORTEIRO=${1:-${PORTEIRO_CLI:-$SRC/${BUILD:-build}/porteiro}}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-50}
KEYS=${KEYS:-100000}
PARTS=${PARTS:-cost policy path}
ALGORITHMS=${ALGORITHMS:-gcra token_bucket fixed_window sliding_window}
LIMIT=${LIMIT:-100000}
PERIOD_MS=${PERIOD_MS:-1000}
REQUESTS=${REQUESTS:-100000}
REQUESTS_P1=${REQUESTS_P1:-100000}
REQUESTS_P16=${REQUESTS_P16:-300000}
CEILING=$BENCH/ceiling
OTHER=${OTHER:-}
TLS=${TLS:-0}

[ -x "$PORTEIRO" ] || bench_die "no porteiro binary at $PORTEIRO (build first)"
bench_need redis-server redis-cli redis-benchmark
bench_workdir
bench_redis # with TLS=1, a TLS port too
port=$redis_port
url="redis://127.0.0.1:$port"
tls_cli="" # porteiro's and redis-benchmark's TLS flags
if [ "$TLS" = 1 ]; then
    url="rediss://127.0.0.1:$redis_tls_port"
    tls_cli="--cacert $work/ca.crt"
fi
rcli() { redis-cli -p "$port" "$@"; }

load() { # script text on stdin -> sha
    s=$(rcli -x SCRIPT LOAD)
    [ ${#s} -eq 40 ] || bench_die "SCRIPT LOAD failed: $s"
    echo "$s"
}


# One redis-benchmark run of EVALSHA args... on an empty, zeroed Redis:
# prints "calls_per_sec usec_per_call".
evalsha_run() { # pipeline requests args...
    p=$1 n=$2
    shift 2
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    bport=$port bflags=""
    if [ "$TLS" = 1 ]; then bport=$redis_tls_port bflags="--tls $tls_cli"; fi
    # shellcheck disable=SC2086
    ops=$(redis-benchmark -h 127.0.0.1 -p "$bport" $bflags -c "$CONNECTIONS" -P "$p" -n "$n" \
        -r "$KEYS" --csv EVALSHA "$@" | awk -F'"' 'NR == 2 { printf "%d\n", $4 }')
    usec=$(rcli info commandstats |
        sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
    [ -n "$ops" ] && [ -n "$usec" ] ||
        bench_die "a redis-benchmark run failed"
    echo "$ops $usec"
}

redis_version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
echo "redis $redis_version, $CONNECTIONS connections, $KEYS keys, $ROUNDS rounds," \
    "L=$LIMIT P=${PERIOD_MS}ms B=L"

# ---- cost: Redis time per decision, minimal script vs porteiro's --------
# porteiro's arguments for one limit (src/redis/command.c, src/lua/check/):
# KEYS[1] = prefix:{key}:tag:P, ARGV = cost, L, P, and B for gcra and
# token_bucket; no now: the script reads Redis TIME.
cost_part() {
    echo
    echo "Redis time per decision (INFO commandstats usec_per_call), pipeline 1:"
    printf '%-15s %-6s %10s %10s %10s %10s %7s\n' algorithm round min_us ours_us \
        min_ops ours_ops ratio
    for alg in $ALGORITHMS; do
        case "$alg" in
        gcra) tag=gc ref=gcra.lua burst=$LIMIT ;;
        token_bucket) tag=tb ref=gcra.lua burst=$LIMIT ;;
        fixed_window) tag=fw ref=fixed_window.lua burst= ;;
        sliding_window) tag=sw ref=sliding_window.lua burst= ;;
        *) bench_die "unknown algorithm $alg" ;;
        esac
        # The minimal scripts' third argument: burst (gcra) or cost.
        case "$ref" in gcra.lua) third=$LIMIT ;; *) third=1 ;; esac
        ref_sha=$(load <"$CEILING/$ref")
        our_sha=$("$PORTEIRO" script --algorithm "$alg" | load)
        for round in $(seq 1 "$ROUNDS"); do
            minimal() { evalsha_run 1 "$REQUESTS" "$ref_sha" 1 "key:__rand_int__" \
                "$LIMIT" "$PERIOD_MS" "$third"; }
            ours() { evalsha_run 1 "$REQUESTS" "$our_sha" 1 \
                "porteiro:{bench:__rand_int__}:$tag:$PERIOD_MS" 1 "$LIMIT" "$PERIOD_MS" $burst; }
            if [ $((round % 2)) = 1 ]; then
                m=$(minimal); o=$(ours)
            else
                o=$(ours); m=$(minimal)
            fi
            set -- $m $o
            r=$(bench_ratio "$4" "$2")
            printf '%-15s %-6s %10s %10s %10s %10s %7s\n' "$alg" "$round" "$2" "$4" "$1" "$3" "$r"
            echo "$alg $2 $4 $1 $3 $r" >>"$work/cost"
        done
    done
    echo "medians (ratio: porteiro us / minimal us, the median of the round ratios):"
    for alg in $ALGORITHMS; do
        col() { awk -v a="$alg" -v c="$1" '$1 == a { print $c }' "$work/cost" | bench_median; }
        printf '  %-15s minimal %7s us %8s /s   porteiro %7s us %8s /s   ratio %s\n' \
            "$alg" "$(col 2)" "$(col 4)" "$(col 3)" "$(col 5)" "$(col 6)"
    done
}

# ---- policy: two limits in one call vs the two single-limit scripts ------
# The general script's arguments (src/lua/policy.lua): now ('' = Redis
# TIME), cost, then algorithm code, L, P, B per limit.
policy_part() {
    all_sha=$("$PORTEIRO" script --limits \
        "token_bucket $LIMIT/${PERIOD_MS}ms, fixed_window $LIMIT/${PERIOD_MS}ms" | load)
    tb_sha=$("$PORTEIRO" script --algorithm token_bucket | load)
    fw_sha=$("$PORTEIRO" script --algorithm fixed_window | load)
    echo
    echo "a policy (token_bucket + fixed_window) in one call vs the two single scripts, us per call:"
    printf '%-6s %10s %10s %10s %7s\n' round tb_us fw_us policy_us ratio
    for round in $(seq 1 "$ROUNDS"); do
        tb=$(evalsha_run 1 "$REQUESTS" "$tb_sha" 1 "porteiro:{bench:__rand_int__}:tb:$PERIOD_MS" \
            1 "$LIMIT" "$PERIOD_MS" "$LIMIT")
        fw=$(evalsha_run 1 "$REQUESTS" "$fw_sha" 1 "porteiro:{bench:__rand_int__}:fw:$PERIOD_MS" \
            1 "$LIMIT" "$PERIOD_MS")
        po=$(evalsha_run 1 "$REQUESTS" "$all_sha" 2 "porteiro:{bench:__rand_int__}:tb:$PERIOD_MS" \
            "porteiro:{bench:__rand_int__}:fw:$PERIOD_MS" '' 1 2 "$LIMIT" "$PERIOD_MS" "$LIMIT" \
            1 "$LIMIT" "$PERIOD_MS" "$LIMIT")
        set -- $tb $fw $po
        r=$(awk -v p="$6" -v a="$2" -v b="$4" 'BEGIN { printf "%.3f", p / (a + b) }')
        printf '%-6s %10s %10s %10s %7s\n' "$round" "$2" "$4" "$6" "$r"
        echo "$2 $4 $6 $r" >>"$work/policy"
    done
    col() { awk -v c="$1" '{ print $c }' "$work/policy" | bench_median; }
    echo "medians: token_bucket $(col 1) us + fixed_window $(col 2) us; the policy $(col 3) us;" \
        "ratio policy / sum $(col 4)"
}

# ---- path: porteiro bench vs redis-benchmark on ceiling/gcra.lua ---------
path_part() {
    sha=$(load <"$CEILING/gcra.lua")
    echo
    echo "checks/s: porteiro bench (gcra) vs redis-benchmark EVALSHA ceiling/gcra.lua" \
        "($url); cpu: porteiro's own CPU per check, us:"
    printf '%-6s %-9s %12s %7s %12s %7s %12s %7s\n' round pipeline porteiro cpu ceiling ratio \
        other cpu
    ours() { # binary pipeline requests -> "ops/s cpu-us-per-check"
        rcli flushall >/dev/null
        # shellcheck disable=SC2086
        /usr/bin/time -f "time %U %S" -o "$work/time" "$1" bench --redis "$url" $tls_cli \
            --algorithm gcra --limit "$LIMIT" --period "${PERIOD_MS}ms" \
            --connections "$CONNECTIONS" --pipeline "$2" --requests "$3" --keys "$KEYS" \
            >"$work/bench.out" || true
        ops=$(sed -n 's/.*"ops_per_sec":\([0-9]*\).*/\1/p' "$work/bench.out")
        [ -n "$ops" ] || return 0
        awk -v ops="$ops" -v n="$3" '$1 == "time" { printf "%s %.2f\n", ops, ($2 + $3) * 1e6 / n }' \
            "$work/time"
    }
    ceiling() { # pipeline requests -> ops/s
        set -- $(evalsha_run "$1" "$2" "$sha" 1 "key:__rand_int__" "$LIMIT" "$PERIOD_MS" "$LIMIT")
        echo "$1"
    }
    for round in $(seq 1 "$ROUNDS"); do
        for pipeline in 1 16; do
            n=$REQUESTS_P1
            [ "$pipeline" = 1 ] || n=$REQUESTS_P16
            o="- -"
            # Alternate who goes first, so neither always gets the warmer machine.
            if [ $((round % 2)) = 1 ]; then
                a=$(ours "$PORTEIRO" "$pipeline" "$n"); b=$(ceiling "$pipeline" "$n")
                [ -n "$OTHER" ] && o=$(ours "$OTHER" "$pipeline" "$n")
            else
                [ -n "$OTHER" ] && o=$(ours "$OTHER" "$pipeline" "$n")
                b=$(ceiling "$pipeline" "$n"); a=$(ours "$PORTEIRO" "$pipeline" "$n")
            fi
            [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt 0 ] && [ -n "$o" ] ||
                bench_die "a run failed (ours '$a', ceiling '$b', other '$o')"
            set -- $a
            ops=$1 cpu=$2
            set -- $o
            r=$(bench_ratio "$ops" "$b")
            printf '%-6s %-9s %12s %7s %12s %7s %12s %7s\n' "$round" "$pipeline" "$ops" "$cpu" \
                "$b" "$r" "$1" "$2"
            echo "$pipeline $ops $b $r $cpu ${1#-} ${2#-}" >>"$work/path"
        done
    done
    echo "medians over $ROUNDS rounds:"
    for pipeline in 1 16; do
        col() { awk -v p="$pipeline" -v c="$1" '$1 == p && $c != "" { print $c }' "$work/path" | bench_median; }
        a=$(col 2); b=$(col 3)
        printf '  pipeline %-3s porteiro %10s /s   ceiling %10s /s   ratio of medians %s   median ratio %s   cpu %s us/check' \
            "$pipeline" "$a" "$b" "$(bench_ratio "$a" "$b")" "$(col 4)" "$(col 5)"
        [ -n "$OTHER" ] && printf '   other %s /s, cpu %s us/check' "$(col 6)" "$(col 7)"
        echo
    done
}

for part in $PARTS; do
    case "$part" in
    cost) cost_part ;;
    policy) policy_part ;;
    path) path_part ;;
    *) bench_die "unknown part $part" ;;
    esac
done
