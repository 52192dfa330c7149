# common.sh — sourced by the bench scripts that run porteirod (from the
# repository's top folder): the tools they need, and a Release porteirod.

# bench_need NAME TOOL...: exits 1 naming the first TOOL not installed.
bench_need() {
    name=$1
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$name: $tool is not installed" >&2; exit 1; }
    done
}

# bench_porteirod BUILD: BUILD/porteirod, a Release build made when missing.
bench_porteirod() {
    if [ ! -x "$1/porteirod" ]; then
        cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build "$1" -j2 --target porteirod >/dev/null
    fi
}

# bench_redis WORK PORT TLS_PORT: a private redis-server in WORK on PORT and,
# with TLS=1, on TLS_PORT too (a CA and a server certificate for 127.0.0.1
# made for this run, bench/tls_ca.sh). Its pid is added to $pids.
bench_redis() {
    tls_args=""
    if [ "${TLS:-0}" = 1 ]; then
        bench/tls_ca.sh "$1"
        tls_args="--tls-port $3 --tls-cert-file $1/server.crt --tls-key-file $1/server.key"
        tls_args="$tls_args --tls-ca-cert-file $1/ca.crt --tls-auth-clients no"
    fi
    # shellcheck disable=SC2086
    redis-server --port "$2" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$1" --logfile redis.log $tls_args &
    pids="$pids $!"
}

# bench_workdir NAME: a fresh folder /tmp/NAME-XXXXXX in $work, and a trap
# that stops every pid in $pids (started after) and removes the folder.
bench_workdir() {
    work=$(mktemp -d "/tmp/$1-XXXXXX")
    pids=""
    trap bench_cleanup EXIT INT TERM
}
bench_cleanup() {
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $pids; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
