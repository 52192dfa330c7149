#!/bin/sh
# api_doc_test.sh BUILD_DIR — every ```c block of docs/api.md is a whole
# program: compiled against the headers and pkg-config files of the
# installed tree (cmake --install of the lib and dev components into a
# temporary prefix, as libporteiro1 and libporteiro-dev lay them out), with
# -std=c11 -Wall -Wextra -Werror, linked with the installed libporteiro.so
# (porteiro.pc; porteiro-libevent.pc for a block that includes
# porteiro_libevent.h) and run: each must exit 0. Also checks that each
# public header compiles alone, as C11 and as C++, and that
# porteiro.pc does not bring libevent in, and that the installed tree holds
# the three public headers and nothing of src/.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
prefix="$tmp/prefix"
for c in lib dev; do
    cmake --install "$build" --prefix "$prefix" --component "$c" >/dev/null ||
        fail "cmake --install --component $c"
done
inc="$prefix/include"
for h in porteiro.h porteiro_config.h porteiro_libevent.h; do
    [ -f "$inc/$h" ] || fail "$h is not installed"
done
extra=$(find "$inc" -type f ! -name 'porteiro.h' ! -name 'porteiro_config.h' ! -name 'porteiro_libevent.h')
[ -z "$extra" ] || fail "installed headers that are not public: $extra"
libdir=$(dirname "$(find "$prefix" -name porteiro.pc | head -n 1)")
[ -d "$libdir" ] || fail "porteiro.pc is not installed"
export PKG_CONFIG_PATH="$libdir"
pc() { pkg-config --define-variable=prefix="$prefix" "$@"; }
pc --print-requires-private porteiro | grep -q libevent && fail "porteiro.pc requires libevent"
pc --libs porteiro | grep -q -- -levent && fail "pkg-config --libs porteiro links libevent"
pc --libs porteiro-libevent | grep -q -- -levent || fail "porteiro-libevent.pc does not link libevent"

# Each header stands alone (includes what it uses), in C and in C++.
for h in porteiro.h porteiro_config.h porteiro_libevent.h; do
    printf '#include <%s>\nint main(void) { return 0; }\n' "$h" > "$tmp/alone.c"
    pkg=porteiro
    [ "$h" = porteiro_libevent.h ] && pkg=porteiro-libevent
    # shellcheck disable=SC2046
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -fsyntax-only $(pc --cflags "$pkg") "$tmp/alone.c" ||
        fail "$h does not compile alone"
    if command -v c++ >/dev/null; then
        cp "$tmp/alone.c" "$tmp/alone.cc"
        # shellcheck disable=SC2046
        c++ -Wall -Wextra -Werror -fsyntax-only $(pc --cflags "$pkg") "$tmp/alone.cc" ||
            fail "$h does not compile as C++"
    fi
done

# The blocks, one file each.
awk -v dir="$tmp" '
    /^```c[[:space:]]*$/ { n++; f = sprintf("%s/block%02d.c", dir, n); inside = 1; next }
    /^```/ && inside { inside = 0; close(f); next }
    inside { print > f }
' "$root/docs/api.md"
count=0
for src in "$tmp"/block*.c; do
    [ -f "$src" ] || fail "docs/api.md has no c block"
    name=$(basename "$src" .c)
    pkg=porteiro
    grep -q 'porteiro_libevent.h' "$src" && pkg=porteiro-libevent
    # shellcheck disable=SC2046
    # PT_SAN_FLAGS: a sanitizer build's library needs its runtime linked in.
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror ${PT_SAN_FLAGS:-} -o "$tmp/$name" "$src" \
        $(pc --cflags --libs "$pkg") ||
        fail "docs/api.md's block $name (below) does not compile against the installed tree:
$(cat -n "$src")"
    LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libporteiro.so.1' | head -n 1)")" \
        "$tmp/$name" >/dev/null || fail "docs/api.md's block $name exits $?"
    count=$((count + 1))
done
echo "api_doc: $count blocks of docs/api.md compiled, linked and run against the installed tree"
