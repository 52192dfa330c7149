#!/bin/sh
# The layering check must fail, naming the file and the line (or the object
# and the symbol), when a layer uses a higher one or one of its own height:
#   - #include lines: a copy of src/ and daemon/ gets an upward include and a
#     same-height one in each tree; daemon/, cli/ and nginx/ each get an
#     include of a private header of the library (only include/*.h are
#     theirs to use), and so does the Redis module's test (tests/module/);
#   - symbols (nm): a copy of BUILD_DIR's objects gets four objects compiled
#     here, each calling, through a declaration written by hand (no
#     #include to see), a function of a higher layer or of one of the same
#     height, in each tree; the CLI and test_module each get one calling a
#     private function of the library;
#   - a build folder with no objects fails, rather than checking nothing.
# Usage: tests/house/check_layers_catches.sh BUILD_DIR
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# 1. #include lines.
cp -r "$root/src" "$root/daemon" "$root/cli" "$root/nginx" "$root/include" "$root/module" "$tmp/"
mkdir -p "$tmp/tests"
cp -r "$root/tests/module" "$root/tests/support" "$tmp/tests/"
plant_include() { # file, header: appends the include, prints its line
    printf '#include "%s"\n' "$2" >> "$tmp/$1"
    wc -l < "$tmp/$1"
}
up=$(plant_include src/core/algorithms.c limiter/handle.h)
same=$(plant_include src/memory/store.c redis/conn.h)
dup=$(plant_include daemon/ops/log.c http/server.h)
dsame=$(plant_include daemon/admin/admin.c app/app.h)
dpriv=$(plant_include daemon/app/handlers.c config/config.h)
cpriv=$(plant_include cli/main.c limiter/handle.h)
npriv=$(plant_include nginx/ngx_porteiro_loop.c ../src/redis/loop.h)
mpriv=$(plant_include tests/module/test_module.c redis/scripts.h)
for h in src/limiter/handle.h src/redis/conn.h daemon/http/server.h daemon/app/app.h \
    src/config/config.h src/redis/loop.h src/redis/scripts.h; do
    [ -f "$root/$h" ] || fail "$h is gone: plant another header"
done
if out=$(PORTEIRO_LAYERS_ROOT="$tmp" sh "$root/scripts/check_layers.sh" 2>&1); then
    fail "check_layers.sh passed eight planted #include violations"
fi
echo "$out"
expect() { # the output, a line it must hold
    printf '%s\n' "$1" | grep -qF "$2" || fail "the output does not say: $2"
}
expect "$out" "src/core/algorithms.c:$up: core may not include \"limiter/handle.h\" (limiter is not below core)"
expect "$out" "src/memory/store.c:$same: memory may not include \"redis/conn.h\" (redis is not below memory)"
expect "$out" "daemon/ops/log.c:$dup: ops may not include \"http/server.h\" (http is not below ops)"
expect "$out" "daemon/admin/admin.c:$dsame: admin may not include \"app/app.h\" (app is not below admin)"
expect "$out" "daemon/app/handlers.c:$dpriv: includes \"config/config.h\": daemon/ may include the public headers (include/) and its own, not the library's private ones"
expect "$out" "cli/main.c:$cpriv: includes \"limiter/handle.h\": cli/ may include the public headers (include/) and its own, not the library's private ones"
expect "$out" "nginx/ngx_porteiro_loop.c:$npriv: includes \"../src/redis/loop.h\": nginx/ may include the public headers (include/) and its own, not the library's private ones"
expect "$out" "tests/module/test_module.c:$mpriv: includes \"redis/scripts.h\": tests/module/ may include the public headers (include/), the test support (tests/support/) and the module's own (module/), not the library's private ones"
expect "$out" "layers: 8 violation(s)"

# 2. Symbols: the objects of this build, and four planted ones.
lib=CMakeFiles/porteiro_objects.dir/src
mkdir -p "$tmp/build/CMakeFiles"
for d in porteiro_objects.dir porteirod_core.dir pd_grpc_objects.dir; do
    [ -d "$build/CMakeFiles/$d" ] || fail "$build/CMakeFiles/$d: no objects (build first)"
    cp -r "$build/CMakeFiles/$d" "$tmp/build/CMakeFiles/"
done
# A function of $1's objects (the first with the prefix $2, an ERE).
defined_in() {
    sym=$(for o in "$1"/*.o; do nm -g --defined-only "$o"; done |
        awk -v re="$2" '$2 == "T" && $3 ~ re { print $3; exit }')
    [ -n "$sym" ] || fail "no function with $2 in $1"
    echo "$sym"
}
plant_call() { # object folder, symbol: an object there that calls it
    printf 'void %s(void);\nvoid planted_caller(void) { %s(); }\n' "$2" "$2" |
        ${CC:-cc} -c -x c - -o "$1/planted.c.o"
}
s_up=$(defined_in "$tmp/build/$lib/limiter" '^(pt_|porteiro_)')
s_same=$(defined_in "$tmp/build/$lib/redis" '^(pt_|porteiro_)')
s_dup=$(defined_in "$tmp/build/CMakeFiles/porteirod_core.dir/daemon/http" '^pd_')
s_dsame=$(defined_in "$tmp/build/CMakeFiles/porteirod_core.dir/daemon/app" '^pd_')
plant_call "$tmp/build/$lib/core" "$s_up"
plant_call "$tmp/build/$lib/memory" "$s_same"
plant_call "$tmp/build/CMakeFiles/porteirod_core.dir/daemon/ops" "$s_dup"
plant_call "$tmp/build/CMakeFiles/porteirod_core.dir/daemon/admin" "$s_dsame"
# And the CLI calling a private function of the library.
mkdir -p "$tmp/build/CMakeFiles/porteiro_cli.dir/cli"
s_priv=$(defined_in "$tmp/build/$lib/limiter" '^pt_')
plant_call "$tmp/build/CMakeFiles/porteiro_cli.dir/cli" "$s_priv"
# And the Redis module's test doing the same.
mkdir -p "$tmp/build/CMakeFiles/test_module.dir/tests/module"
plant_call "$tmp/build/CMakeFiles/test_module.dir/tests/module" "$s_priv"
# The untouched sources: only the symbol check can see these.
if out=$(PORTEIRO_LAYERS_ROOT="$root" sh "$root/scripts/check_layers.sh" "$tmp/build" 2>&1); then
    fail "check_layers.sh passed six planted symbol violations"
fi
echo "$out"
expect "$out" "$lib/core/planted.c.o: uses $s_up of limiter (limiter is not below core)"
expect "$out" "$lib/memory/planted.c.o: uses $s_same of redis (redis is not below memory)"
expect "$out" "ops/planted.c.o: uses $s_dup of http (http is not below ops)"
expect "$out" "admin/planted.c.o: uses $s_dsame of app (app is not below admin)"
expect "$out" "CMakeFiles/porteiro_cli.dir/cli/planted.c.o: uses $s_priv, a private function of the library (use include/*.h)"
expect "$out" "CMakeFiles/test_module.dir/tests/module/planted.c.o: uses $s_priv, a private function of the library (use include/*.h)"
expect "$out" "layers: 6 violation(s)"

# 3. No objects to check is a failure, not a pass: a build folder without
# them, and one whose object folders are empty.
mkdir -p "$tmp/empty" "$tmp/hollow/$lib/core" "$tmp/hollow/CMakeFiles/porteirod_core.dir/daemon/ops"
for b in "$tmp/empty" "$tmp/hollow"; do
    if out=$(PORTEIRO_LAYERS_ROOT="$root" sh "$root/scripts/check_layers.sh" "$b" 2>&1); then
        fail "check_layers.sh passed $b, which has no objects"
    fi
    echo "$out"
    expect "$out" "$b/$lib: no objects to check (build first)"
    expect "$out" "$b/CMakeFiles/{porteirod_core,pd_grpc_objects}.dir/daemon: no objects to check (build first)"
    expect "$out" "layers: 2 violation(s)"
done

# And the untouched tree and build pass.
PORTEIRO_LAYERS_ROOT="$root" sh "$root/scripts/check_layers.sh" "$build"
echo "check_layers_catches: ok"
