#!/bin/sh
# exports_test.sh BUILD_DIR — libporteiro.so exports the public API and
# nothing else (docs/api.md, "What is stable"):
#   - the functions and objects the public headers declare (include/*.h:
#     their prototypes and extern declarations, listed by universal-ctags;
#     static inline functions of a header are not symbols) and
#   - the symbols the built library defines (nm -D --defined-only, less the
#     version node)
# are the same set, both ways; every export carries the version node
# PORTEIRO_1.0 (cmake/libporteiro.map); the SONAME is libporteiro.so.1.
# Prints the two counts, and each name on one side only.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
lib="$build/libporteiro.so"
[ -f "$lib" ] || { echo "FAIL: $lib not built" >&2; exit 1; }
command -v ctags >/dev/null || { echo "FAIL: ctags (universal-ctags) missing" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ctags -x --c-kinds=px --language-force=C -I PORTEIRO_API "$root"/include/*.h |
    awk '{ print $1 }' | sort -u > "$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u > "$tmp/exported"
echo "declared in include/*.h: $(wc -l < "$tmp/declared"); exported by libporteiro.so: $(wc -l < "$tmp/exported")"
bad=0
for name in $(comm -23 "$tmp/exported" "$tmp/declared"); do
    echo "FAIL: $name is exported but declared in no public header" >&2
    bad=1
done
for name in $(comm -13 "$tmp/exported" "$tmp/declared"); do
    echo "FAIL: $name is declared in a public header but not exported (PORTEIRO_API? defined?)" >&2
    bad=1
done
[ -s "$tmp/declared" ] || { echo "FAIL: no declarations found in include/*.h" >&2; bad=1; }

# Every export under the version node: objdump -T's version column.
objdump -T "$lib" | awk '$4 != "*UND*"' | grep -v 'PORTEIRO_1\.0' | grep -E ' porteiro_' > "$tmp/unversioned" || true
if [ -s "$tmp/unversioned" ]; then
    echo "FAIL: exports without the version node PORTEIRO_1.0:" >&2
    cat "$tmp/unversioned" >&2
    bad=1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libporteiro.so.1 ] || { echo "FAIL: SONAME is '$soname', not libporteiro.so.1" >&2; bad=1; }
[ "$bad" -eq 0 ] || exit 1
echo "exports: ok"
