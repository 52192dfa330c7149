#!/bin/sh
# check_layers.sh — src/ and daemon/ are layered: a file may use its own
# folder and the layers below it, never one beside or above it
# (docs/architecture.md). Two layers of one height may not use each other.
#
#   src/ (the library)                      daemon/ (porteirod; main.c wires it)
#                                           http        the HTTP/1.1 server
#   limiter   the handle, the decision      admin app grpc spoe  the admin listener,
#   config    the YAML file                      the HTTP API, gRPC, HAProxy's SPOP
#   topology  Redis Cluster, Sentinel       envoy net   the envoy face; sockets
#   memory redis  in-process; one node      ops         settings, logs, counters,
#   core      the arithmetic, no I/O                    the worker's context
#                                           rules       envoy ratelimit's config
#
# daemon/, cli/ and nginx/ sit above the whole library and use it through
# its public headers only (include/*.h): an #include of anything else but
# their own tree's headers is a violation (the library's private headers,
# a path with ".."). So do the Redis module's tests (tests/module/), with
# the test support and the module's own headers beside the public ones.
# Checked twice: the #include lines (always), and, given a build folder, the
# symbols each object takes from the others (nm), which also catches a call
# made through a declaration written by hand.
# Usage: scripts/check_layers.sh [BUILD_DIR]. Prints each violation as
# FILE:LINE (or OBJECT: SYMBOL) and exits 1 if there is one; a BUILD_DIR
# with no objects of the library or of porteirod to check is one too.
set -eu
cd "${PORTEIRO_LAYERS_ROOT:-$(dirname "$0")/..}"

# A layer's height in $RANK ("" when the folder is in no layer): set, not
# printed, so that no check forks a subshell.
rank_src() {
    case "$1" in
    core) RANK=0 ;;
    memory | redis) RANK=1 ;;
    topology) RANK=2 ;;
    limiter | config) RANK=3 ;;
    *) RANK="" ;;
    esac
}

rank_daemon() { # a daemon room's height
    case "$1" in
    rules) RANK=0 ;;
    ops) RANK=1 ;;
    net | envoy) RANK=2 ;;
    admin | app | grpc | spoe) RANK=3 ;;
    http) RANK=4 ;;
    *) RANK="" ;;
    esac
}

# May a file of layer $2 use layer $3, ranked by $1?
allowed() {
    [ "$2" = "$3" ] && return 0
    $1 "$2"
    from=$RANK
    $1 "$3"
    [ -n "$from" ] && [ -n "$RANK" ] && [ "$RANK" -lt "$from" ]
}

bad=0
complain() {
    echo "layers: $1" >&2
    bad=$((bad + 1))
}

# 1. #include "layer/file.h" in TREE/<layer>/*.[ch]; $1 the tree, $2 its ranks.
check_includes() {
    for d in "$1"/*/; do
        layer=$(basename "$d")
        [ "$layer" = lua ] && continue
        $2 "$layer"
        [ -n "$RANK" ] || complain "$d: folder '$layer' is in no layer (add it to scripts/check_layers.sh)"
    done
    # file:line:#include "path", one grep for the whole tree
    grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$1"/*/*.[ch] > "$tmp" || true
    while IFS= read -r hit; do
        f=${hit%%:*} rest=${hit#*:}
        num=${rest%%:*} path=${rest#*\"} path=${path%%\"*}
        dir=${f%/*} layer=${dir##*/}
        case "$path" in
        */*) used=${path%%/*} ;;
        porteiro.h | porteiro_config.h | porteiro_libevent.h) continue ;; # the public headers: every layer may use them
        *) # a bare name must be a header of the same folder (or generated)
            [ -f "$dir/$path" ] && continue
            case "$path" in *.pb-c.h | build_info.h) continue ;; esac
            complain "$f:$num: includes \"$path\", which is not in $dir (name its layer: \"layer/$path\")"
            continue ;;
        esac
        # From daemon/, a path that is not one of its rooms' files is the library's.
        [ "$1" = daemon ] && [ ! -f "daemon/$path" ] && [ -f "src/$path" ] && continue
        allowed "$2" "$layer" "$used" ||
            complain "$f:$num: $layer may not include \"$path\" ($used is not below $layer)"
    done < "$tmp"
}
# 2. The library's users compile against its public headers: in daemon/,
# cli/ and nginx/ an #include "..." names a header of include/ or one of
# the program's own tree (beside the file, or from the tree's top:
# "ops/log.h"), or a generated one; never a path with "..", never src/.
check_public() { # $1: the tree
    grep -rHn --include='*.[ch]' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$1" > "$tmp" || true
    while IFS= read -r hit; do
        f=${hit%%:*} rest=${hit#*:}
        num=${rest%%:*} path=${rest#*\"} path=${path%%\"*}
        dir=${f%/*}
        case "$path" in
        *..*) ;;
        *.pb-c.h | build_info.h) continue ;;
        *) { [ -f "$dir/$path" ] || [ -f "$1/$path" ] || [ -f "include/$path" ]; } && continue ;;
        esac
        complain "$f:$num: includes \"$path\": $1/ may include the public headers (include/) and its own, not the library's private ones"
    done < "$tmp"
}

# 2b. The Redis module's tests (tests/module/) meet the library as its
# users do: an #include "..." names a header of include/, of the test
# support (tests/support/) or of the module's own tree (module/:
# test_module_api.c runs its handlers in-process); never the library's
# private headers (src/), never a path with "..". The library's internal
# translation into the module's commands is tested in tests/core/.
check_module_tests() {
    grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' tests/module/*.[ch] > "$tmp" || true
    while IFS= read -r hit; do
        f=${hit%%:*} rest=${hit#*:}
        num=${rest%%:*} path=${rest#*\"} path=${path%%\"*}
        case "$path" in
        *..*) ;;
        *) { [ -f "include/$path" ] || [ -f "tests/support/$path" ] || [ -f "module/$path" ]; } && continue ;;
        esac
        complain "$f:$num: includes \"$path\": tests/module/ may include the public headers (include/), the test support (tests/support/) and the module's own (module/), not the library's private ones"
    done < "$tmp"
}

tmp=$(mktemp)
check_includes src rank_src
[ -d daemon ] && check_includes daemon rank_daemon
for tree in daemon cli nginx; do
    [ -d "$tree" ] && check_public "$tree"
done
[ -d tests/module ] && check_module_tests
rm -f "$tmp"

# 3. nm: every undefined symbol with the tree's prefix in one of its objects
# must be defined in its own layer or one below. $1 the objects' folder, $2
# the ranks, $3 the symbols' prefix (an awk regex), $4 the build folder, $5
# what the objects are (for the message when there is none).
check_symbols() {
    # No objects is no check: a failure, never a pass.
    nobj=0
    for o in "$1"/*/*.o; do
        [ -f "$o" ] && nobj=$((nobj + 1))
    done
    if [ "$nobj" -eq 0 ]; then
        complain "$5: no objects to check (build first)"
        return
    fi
    defs=$(mktemp) uses=$(mktemp)
    # One nm for all the objects (-A: each line starts with "OBJECT:"); an
    # object's layer is its folder.
    # shellcheck disable=SC2016
    place='{ o = $1; sub(/:[^:]*$/, "", o); n = split(o, part, "/"); l = part[n - 1] }'
    nm -A -g --defined-only "$1"/*/*.o |
        awk -v re="$3" "$place"' $NF ~ re { print $NF, l }' | sort -u > "$defs"
    nm -A -u "$1"/*/*.o | awk -v re="$3" "$place"' $NF ~ re { print $NF, l, o }' > "$uses"
    # One pass: each use joined with the layer that defines its symbol.
    awk 'NR == FNR { owner[$1] = $2; next } ($1 in owner) { print $3, $1, $2, owner[$1] }' \
        "$defs" "$uses" > "$uses.j"
    while read -r o sym layer owner; do
        allowed "$2" "$layer" "$owner" ||
            complain "${o#"$4"/}: uses $sym of $owner ($owner is not below $layer)"
    done < "$uses.j"
    rm -f "$defs" "$uses" "$uses.j"
}
if [ $# -ge 1 ]; then
    check_symbols "$1/CMakeFiles/porteiro_objects.dir/src" rank_src '^(pt_|porteiro_)' "$1" \
        "$1/CMakeFiles/porteiro_objects.dir/src"
    # porteirod's rooms: its library and the gRPC objects (one set of rooms).
    dd=$(mktemp -d)
    for lib in porteirod_core pd_grpc_objects; do
        for room in "$1/CMakeFiles/$lib.dir/daemon"/*/; do
            [ -d "$room" ] || continue
            mkdir -p "$dd/$(basename "$room")"
            cp "$room"*.o "$dd/$(basename "$room")/" 2>/dev/null || true
        done
    done
    check_symbols "$dd" rank_daemon '^(pd_|pe_)' "$dd" "$1/CMakeFiles/{porteirod_core,pd_grpc_objects}.dir/daemon"
    rm -rf "$dd"
    # The library's users take from it only what its headers declare: no
    # private function (pt_*, declared by hand) in porteirod's, the CLI's,
    # the nginx module's or test_module's (the Redis module's test) objects.
    users=$(find "$1/CMakeFiles/porteirod_core.dir/daemon" "$1/CMakeFiles/pd_grpc_objects.dir/daemon" \
        "$1/CMakeFiles/porteirod.dir/daemon" "$1/CMakeFiles/porteiro_cli.dir/cli" \
        "$1/nginx/CMakeFiles/ngx_http_porteiro_module.dir" "$1/CMakeFiles/test_module.dir/tests/module" \
        -name '*.o' 2>/dev/null || true)
    if [ -n "$users" ]; then
        # shellcheck disable=SC2086
        nm -A -u $users | awk '$NF ~ /^pt_/ { o = $1; sub(/:[^:]*$/, "", o); print o, $NF }' > "$tmp.u" || true
        while read -r o sym; do
            complain "${o#"$1"/}: uses $sym, a private function of the library (use include/*.h)"
        done < "$tmp.u"
        rm -f "$tmp.u"
    fi
fi

if [ "$bad" -gt 0 ]; then
    echo "layers: $bad violation(s)" >&2
    exit 1
fi
echo "layers: ok"
