#!/bin/sh
# The layering check must fail, naming the file and the line, when a lower
# layer uses a higher one: a copy of src/ gets one such include.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$tmp/src"
printf '#include "limiter/handle.h"\n' >> "$tmp/src/core/algorithms.c"
line=$(wc -l < "$tmp/src/core/algorithms.c")
if out=$(PORTEIRO_LAYERS_ROOT="$tmp" sh "$root/scripts/check_layers.sh" 2>&1); then
    echo "FAIL: check_layers.sh passed a core file that includes limiter/handle.h" >&2
    exit 1
fi
echo "$out"
echo "$out" | grep -q "src/core/algorithms.c:$line: core may not include \"limiter/handle.h\"" || {
    echo "FAIL: the message does not name src/core/algorithms.c:$line" >&2
    exit 1
}
# And the untouched tree passes.
PORTEIRO_LAYERS_ROOT="$root" sh "$root/scripts/check_layers.sh"
echo "check_layers_catches: ok"
