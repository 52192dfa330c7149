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
