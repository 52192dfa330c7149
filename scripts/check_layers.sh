#!/bin/sh
# check_layers.sh — src/ is layered; a file may use its own folder and the
# layers below it, never one beside or above it (docs/architecture.md):
#
#   envoy                envoy ratelimit's config and its matching
#   limiter config       the handle and the one decision path; the config file
#   topology             which node: Redis Cluster slots, Sentinel
#   memory redis         the in-process store; connections to one Redis node
#   core                 the arithmetic: no I/O, time as a parameter
#
# Checked twice: the #include lines of src/ (always), and, given a build
# folder, the symbols each library object takes from the others (nm), which
# also catches a call made through a declaration written by hand.
# Usage: scripts/check_layers.sh [BUILD_DIR]. Prints each violation as
# FILE:LINE (or OBJECT: SYMBOL) and exits 1 if there is one.
set -eu
cd "${PORTEIRO_LAYERS_ROOT:-$(dirname "$0")/..}"

rank() { # the layer's height; two layers of one height may not use each other
    case "$1" in
    core) echo 0 ;;
    memory | redis) echo 1 ;;
    topology) echo 2 ;;
    limiter | config) echo 3 ;;
    envoy) echo 4 ;;
    *) echo "" ;;
    esac
}

# May a file of layer $1 use layer $2?
allowed() {
    [ "$1" = "$2" ] && return 0
    from=$(rank "$1") to=$(rank "$2")
    [ -n "$from" ] && [ -n "$to" ] && [ "$to" -lt "$from" ]
}

bad=0
complain() {
    echo "layers: $1" >&2
    bad=$((bad + 1))
}

# 1. #include "layer/file.h" in src/<layer>/*.[ch]
for f in src/*/*.c src/*/*.h; do
    layer=$(basename "$(dirname "$f")")
    [ "$layer" = lua ] && continue
    [ -n "$(rank "$layer")" ] || complain "$f: folder '$layer' is in no layer (add it to scripts/check_layers.sh)"
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r line; do
        num=${line%%:*}
        path=$(echo "$line" | sed -E 's/.*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/')
        case "$path" in
        */*) used=${path%%/*} ;;
        porteiro.h) continue ;; # the public header: every layer may use it
        *) # a bare name must be a header of the same folder
            [ -f "$(dirname "$f")/$path" ] && continue
            echo "$f:$num: includes \"$path\", which is not in $(dirname "$f") (name its layer: \"layer/$path\")"
            continue ;;
        esac
        allowed "$layer" "$used" ||
            echo "$f:$num: $layer may not include \"$path\" ($used is not below $layer)"
    done
done > /tmp/check_layers.$$ 2>&1 || true
while IFS= read -r msg; do complain "$msg"; done < /tmp/check_layers.$$
rm -f /tmp/check_layers.$$

# 2. nm: every undefined pt_ or porteiro_ symbol of a library object must be
# defined in its own layer or one below.
if [ $# -ge 1 ]; then
    objdir="$1/CMakeFiles/porteiro_objects.dir/src"
    if [ ! -d "$objdir" ]; then
        complain "$objdir: no objects (build first)"
    else
        defs=$(mktemp)
        for o in "$objdir"/*/*.o; do
            layer=$(basename "$(dirname "$o")")
            nm -g --defined-only "$o" | awk -v l="$layer" '$3 ~ /^(pt_|porteiro_)/ { print $3, l }'
        done | sort -u > "$defs"
        for o in "$objdir"/*/*.o; do
            layer=$(basename "$(dirname "$o")")
            for sym in $(nm -u "$o" | awk '$2 ~ /^(pt_|porteiro_)/ { print $2 }'); do
                owner=$(awk -v s="$sym" '$1 == s { print $2; exit }' "$defs")
                [ -z "$owner" ] && continue # generated (lua_scripts.c) or outside the library
                allowed "$layer" "$owner" ||
                    complain "${o#"$1"/}: uses $sym of $owner ($owner is not below $layer)"
            done
        done
        rm -f "$defs"
    fi
fi

if [ "$bad" -gt 0 ]; then
    echo "layers: $bad violation(s)" >&2
    exit 1
fi
echo "layers: ok"
