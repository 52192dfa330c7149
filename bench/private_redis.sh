# private_redis.sh — sourced by the bench scripts: a redis-server of their
# own on a free loopback port, in a temporary folder, stopped by pid
# whatever happens (never by name: other people's servers run here too).
#
# The caller sets `dir` (a fresh folder, removed at exit) and `me` (its name,
# for messages), and may define redis_args(), which prints extra
# redis-server arguments once `port` is chosen. start_redis sets port and pid.
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v redis_args >/dev/null 2>&1 || redis_args() { :; }

start_redis() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 ))
        # shellcheck disable=SC2046
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$dir" --logfile "$dir/redis.log" $(redis_args) &
        pid=$!
        for _ in $(seq 1 20); do
            redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && return 0
            kill -0 "$pid" 2>/dev/null || break # port taken: it exited
            sleep 0.1
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        pid=""
    done
    echo "$me: cannot start redis-server" >&2
    exit 3
}
