# shellcheck shell=sh
# bench/lib.sh — what every scenario of bench/run.sh shares (POSIX sh, so
# the bash scenarios source it too): the tools check, a work folder that a
# trap removes with every process the scenario started (stopped by pid,
# never by name: other people's servers run here too), free loopback ports,
# Redis plain, over TLS, with a module or as a cluster, interleaved rounds,
# medians and ratios, and CPU time per request.
#
# A scenario starts with:  . "$(dirname "$0")/../lib.sh"
# and then has $BENCH (bench/), $SRC (the repository), $bench_name (its own).
# shellcheck disable=SC2034 # variables set here for the scenarios
BENCH=$(cd "$(dirname "$0")/.." && pwd)
SRC=$(dirname "$BENCH")
bench_name=$(basename "$0" .sh)
work=""
bench_pids=""

bench_die() { echo "$bench_name: $*" >&2; exit 1; }

# bench_need TOOL...: exits 2 naming the first TOOL not installed.
bench_need() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || { echo "$bench_name: $tool is not installed" >&2; exit 2; }
    done
}

# bench_workdir: a fresh $work (/tmp/porteiro-NAME.XXXXXX); at exit every
# tracked pid is stopped and the folder removed.
bench_workdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-$bench_name.XXXXXX")
    : >"$work/.ports"
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}
bench_track() { bench_pids="$1 $bench_pids"; }
bench_stop() { # PID: stopped now, and no longer tracked
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    bench_pids=$(echo "$bench_pids" | tr ' ' '\n' | grep -vx "$1" | tr '\n' ' ')
}
bench_cleanup() {
    for p in $bench_pids; do kill "$p" 2>/dev/null || true; done
    for p in $bench_pids; do wait "$p" 2>/dev/null || true; done
    [ -z "$work" ] || rm -rf "$work"
}

# bench_free_port [bus]: a loopback TCP port no socket holds (ss), below the
# kernel's ephemeral range so that no client connection takes it later, and
# not handed out before in this run. "bus": port + 10000 free too (a Redis
# Cluster node's bus).
bench_free_port() {
    top=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$top" -gt 21000 ] 2>/dev/null || top=32768
    for _ in $(seq 500); do
        p=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % (top - 20000)))
        grep -qx "$p" "$work/.ports" && continue
        [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] || continue
        [ "${1:-}" != bus ] || [ -z "$(ss -Htan "sport = :$((p + 10000))" 2>/dev/null)" ] || continue
        echo "$p" >>"$work/.ports"
        echo "$p"
        return 0
    done
    bench_die "no free port"
}

# bench_wait_http PORT [PATH [SECONDS]]: until something answers HTTP there
# (10 s by default).
bench_wait_http() {
    for _ in $(seq "$((${3:-10} * 100))"); do
        curl -s -o /dev/null "http://127.0.0.1:$1${2:-/}" && return 0
        sleep 0.01
    done
    bench_die "nothing answers on port $1"
}

# bench_build BUILD TARGET...: the targets built in BUILD (a Release build
# configured when BUILD has none; the default BUILD, build, is run.sh's).
bench_build() {
    b=$1
    shift
    [ -f "$b/CMakeCache.txt" ] || cmake -S "$SRC" -B "$b" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$b" -j2 --target "$@" >/dev/null || bench_die "could not build $* in $b"
}

# bench_tls_certs: a CA and a server certificate for 127.0.0.1 made for this
# run, $work/ca.crt, server.crt, server.key (Redis's --tls-*, porteiro's
# --cacert, porteirod's redis.tls.ca).
bench_tls_certs() {
    [ -f "$work/server.crt" ] && return 0
    (
        cd "$work" &&
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
                -subj /CN=bench-ca -keyout ca.key -out ca.crt &&
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                -subj /CN=127.0.0.1 -keyout server.key -out server.csr &&
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext &&
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
                -extfile san.ext -out server.crt
    ) >"$work/openssl.log" 2>&1 || bench_die "openssl could not make the certificates"
}

# bench_redis [-p PORT] [ARGS...]: a private redis-server (on PORT, or a
# free port), its folder $work/redis-PORT, extra redis-server ARGS. Sets
# redis_port and redis_pid; with TLS=1 a TLS port too, redis_tls_port
# (certificates from bench_tls_certs). bench_redis_bus=1: a cluster node.
bench_redis() {
    want=""
    if [ "${1:-}" = -p ]; then want=$2; shift 2; fi
    tls=""
    if [ "${TLS:-0}" = 1 ]; then
        bench_tls_certs
        redis_tls_port=$(bench_free_port)
        tls="--tls-port $redis_tls_port --tls-cert-file $work/server.crt"
        tls="$tls --tls-key-file $work/server.key --tls-ca-cert-file $work/ca.crt --tls-auth-clients no"
    fi
    for _ in 1 2 3 4 5; do
        redis_port=${want:-$(bench_free_port ${bench_redis_bus:+bus})}
        d=$work/redis-$redis_port
        mkdir -p "$d"
        # shellcheck disable=SC2086 # $tls: words
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$d" --logfile "$d/redis.log" $tls "$@" &
        redis_pid=$!
        for _ in $(seq 100); do
            if redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG; then
                bench_track "$redis_pid"
                return 0
            fi
            kill -0 "$redis_pid" 2>/dev/null || break # the port was taken: it exited
            sleep 0.05
        done
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
        [ -z "$want" ] || break
    done
    bench_die "redis-server did not start ($d/redis.log)"
}

# bench_cluster MASTERS: a Redis Cluster of MASTERS masters, no replicas.
# Sets cluster_ports ("p1 p2 ...") and cluster_url (redis+cluster://).
bench_cluster() {
    cluster_ports="" nodes=""
    for _ in $(seq "$1"); do
        bench_redis_bus=1
        bench_redis --cluster-enabled yes --cluster-config-file nodes.conf
        bench_redis_bus=""
        cluster_ports="$cluster_ports $redis_port"
        nodes="$nodes 127.0.0.1:$redis_port"
    done
    # shellcheck disable=SC2086 # the ports: words
    set -- $cluster_ports
    # shellcheck disable=SC2086 # $nodes: words
    redis-cli --cluster create $nodes --cluster-replicas 0 --cluster-yes >/dev/null ||
        bench_die "redis-cli --cluster create failed"
    until redis-cli -p "$1" cluster info | tr -d '\r' | grep -qx cluster_state:ok; do sleep 0.1; done
    sleep 1 # every node agrees on the map
    # shellcheck disable=SC2034 # for the scenario
    cluster_url="redis+cluster://127.0.0.1:$1"
}

# bench_fresh PORT...: an empty database and zeroed statistics on each.
bench_fresh() {
    for p in "$@"; do
        redis-cli -p "$p" flushall >/dev/null
        redis-cli -p "$p" config resetstat >/dev/null
    done
}

# bench_calls REGEX PORT...: "calls usec" of the commands whose INFO
# commandstats name (after cmdstat_) matches REGEX, summed over the ports.
bench_calls() {
    re=$1
    shift
    for p in "$@"; do redis-cli -p "$p" info commandstats; done | tr -d '\r' |
        awk -F'[:=,]' -v re="^cmdstat_($re)\$" '$1 ~ re { c += $3; u += $5 } END { print c + 0, u + 0 }'
}
# bench_usec_per_call REGEX PORT...: Redis's own time per call of those commands.
bench_usec_per_call() {
    bench_calls "$@" | awk '$1 > 0 { printf "%.2f\n", $2 / $1 }'
}

# bench_rotate ROUND ITEM...: the items, rotated by ROUND - 1: in
# interleaved rounds none of them always runs first (round 1: as listed).
bench_rotate() {
    r=$1
    shift
    echo "$@" | awk -v s="$(((r - 1) % $#))" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + s) % NF + 1) }'
}

# bench_median: the median of the numbers on stdin (an even count: the mean
# of the two middle ones).
bench_median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit
        if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# bench_col FILE COLUMN [AWK-CONDITION]: the median of a column of FILE's rows.
bench_col() {
    awk "${3:-1} { print \$$2 }" "$1" | bench_median
}
# bench_ratio A B: A / B to 3 decimals ("-" when B is 0 or empty).
bench_ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.3f\n", a / b }'
}

# bench_cpu PID[,PID...] -- LOAD...: runs the load (wrk, h2load, porteiro
# bench ...) and prints "requests N in S s (R/s)" and, per pid, "pid P
# (NAME): X us CPU per request" (user + system over the requests the load
# reports). ../shared/tools/cpu_per_request.sh when present (CPU_TOOL), the
# same here otherwise.
bench_cpu() {
    tool=${CPU_TOOL:-$SRC/../shared/tools/cpu_per_request.sh}
    if [ -x "$tool" ]; then "$tool" "$@"; return; fi
    pids=$(echo "$1" | tr , ' ')
    shift
    [ "$1" != -- ] || shift
    t0=$(date +%s.%N)
    for p in $pids; do echo "$p $(awk '{ print $14 + $15 }' "/proc/$p/stat")"; done >"$work/.cpu0"
    out=$("$@" 2>&1)
    t1=$(date +%s.%N)
    n=$(echo "$out" | awk '/requests in/ { print $1; exit } /^requests: / { print $2; exit }')
    [ -n "$n" ] || n=$(echo "$out" | grep -oE '"(requests|total)": *[0-9]+' | grep -oE '[0-9]+$' | tail -1)
    [ "${n:-0}" -gt 0 ] || { echo "$out" >&2; bench_die "no request count in the load's output"; }
    awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "requests %d in %.2f s (%.0f/s)\n", n, b - a, n / (b - a) }'
    while read -r p c0; do
        awk -v p="$p" -v c="$(cat "/proc/$p/comm")" -v c0="$c0" -v t="$(getconf CLK_TCK)" -v n="$n" \
            '{ printf "pid %s (%s): %.2f us CPU per request\n", p, c, ($14 + $15 - c0) / t * 1e6 / n }' \
            "/proc/$p/stat"
    done <"$work/.cpu0"
}

# bench_load: one line for a result's header, the machine and its load.
bench_load() {
    echo "$(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), load average$(uptime | sed 's/.*load average//')"
}

# bench_wrk_keys FILE PATH HEADER PREFIX N: a wrk script asking GET PATH with
# HEADER: PREFIX1 .. PREFIXN drawn at random per request.
bench_wrk_keys() {
    printf '%s\n' 'math.randomseed(os.time())' 'request = function()' \
        "  return wrk.format(\"GET\", \"$2\", {[\"$3\"] = \"$4\" .. math.random(1, $5)})" 'end' >"$1"
}

# bench_envoy_rules: $work/rules/bench.yaml, envoy ratelimit's rules of the
# grpc and transport_cost scenarios: one rule, "user", at a limit no run
# reaches (porteirod's envoy.config: $work/rules).
bench_envoy_rules() {
    mkdir -p "$work/rules"
    printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000000\n' \
        >"$work/rules/bench.yaml"
}

# bench_grpc_bodies KEYS: KEYS framed gRPC RateLimitRequests of domain
# "bench", one descriptor user = k1 .. kKEYS, as $work/body1 .. bodyKEYS
# (h2load -d): a 5-byte header (not compressed, length), then the message
# protoc-c encodes from its text form.
bench_grpc_bodies() {
    i=1
    while [ "$i" -le "$1" ]; do
        printf 'domain: "bench" descriptors { entries { key: "user" value: "k%d" } }' "$i" |
            protoc-c -I"$SRC/daemon/grpc" --encode=pdrls.Request "$SRC/daemon/grpc/rls.proto" \
                >"$work/msg$i"
        len=$(wc -c <"$work/msg$i")
        # shellcheck disable=SC2059 # the length bytes are the format
        printf "\\000\\000\\000\\$(printf %03o $((len / 256)))\\$(printf %03o $((len % 256)))" >"$work/body$i"
        cat "$work/msg$i" >>"$work/body$i"
        i=$((i + 1))
    done
}
