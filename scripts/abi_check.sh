#!/bin/sh
# abi_check.sh BUILD_DIR [--update] — the ABI of BUILD_DIR/libporteiro.so
# against the committed baseline abi/libporteiro.abi (libabigail: abidw wrote
# it, abidiff compares; Debian's abigail-tools). The insides of the opaque
# handles (porteiro_t, porteiro_config, porteiro_overrides) are no ABI:
# abi/libporteiro.suppr leaves them out.
#
#   - a break: a function or variable removed or changed (its parameters,
#     its return type, or a type they reach: a struct's field inserted,
#     moved or resized, an enum's value changed...), with the baseline's
#     SONAME kept: FAIL. Raise PORTEIRO_SOVERSION (CMakeLists.txt) and
#     refresh the baseline, or keep the ABI;
#   - the same under a new SONAME: allowed, the baseline is stale: refresh it;
#   - functions or variables added, nothing else: passes, with a note to
#     refresh the baseline so that the next break is measured from this ABI.
# --update writes the baseline from BUILD_DIR's library. docs/api.md, "The
# SONAME rule".
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: $0 BUILD_DIR [--update]}
lib="$build/libporteiro.so"
base="$root/abi/libporteiro.abi"
[ -f "$lib" ] || { echo "abi: $lib not built" >&2; exit 1; }
command -v abidiff >/dev/null || { echo "abi: abidiff missing (Debian: abigail-tools)" >&2; exit 1; }
# The library's own soname-versioned file, as a program loads it.
lib=$(readlink -f "$lib")

if [ "${2:-}" = --update ]; then
    mkdir -p "$root/abi"
    abidw --no-show-locs --no-corpus-path --out-file "$base" "$lib"
    echo "abi: baseline written: abi/libporteiro.abi ($(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }'))"
    exit 0
fi
[ -f "$base" ] || { echo "abi: no baseline ($base): run $0 $build --update" >&2; exit 1; }

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
base_soname=$(sed -n "s/.*soname='\([^']*\)'.*/\1/p" "$base" | head -n 1)
rc=0
out=$(abidiff --suppressions "$root/abi/libporteiro.suppr" "$base" "$lib" 2>&1) || rc=$?
if [ $((rc & 3)) -ne 0 ]; then
    echo "$out" >&2
    echo "abi: abidiff failed to compare (exit $rc)" >&2
    exit 1
fi
# abidiff sets bit 8 for removals only, bit 4 for any change: a change of a
# function or variable (a type it reaches) is a break too, whatever bit 4
# alone would let pass. Its summary lines: "N Removed, M Changed ...".
changed=$(printf '%s\n' "$out" | awk '/changes summary:/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^(Removed|Changed)/) n += $(i - 1) }
    END { print n + 0 }')
if [ $((rc & 8)) -ne 0 ] || [ "$changed" -gt 0 ]; then
    echo "$out"
    if [ "$soname" = "$base_soname" ]; then
        echo "abi: FAIL: an incompatible ABI change under the same SONAME ($soname):" \
            "raise PORTEIRO_SOVERSION and refresh the baseline ($0 BUILD_DIR --update)," \
            "or keep the ABI" >&2
        exit 1
    fi
    echo "abi: incompatible changes under a new SONAME ($base_soname -> $soname):" \
        "allowed; refresh the baseline ($0 BUILD_DIR --update)"
    exit 0
fi
if [ $((rc & 4)) -ne 0 ]; then
    echo "$out"
    echo "abi: compatible changes only (e.g. functions added): ok; refresh the baseline" \
        "($0 BUILD_DIR --update) to measure the next change from here"
    exit 0
fi
echo "abi: $soname: no change from the baseline"
