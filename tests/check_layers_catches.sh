#!/bin/sh
# The layering check must fail, naming the file and the line, when a lower
# layer uses a higher one: a copy of src/ and daemon/ gets one such include
# in each tree.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$root/daemon" "$tmp/"
printf '#include "limiter/handle.h"\n' >> "$tmp/src/core/algorithms.c"
line=$(wc -l < "$tmp/src/core/algorithms.c")
printf '#include "http/server.h"\n' >> "$tmp/daemon/ops/log.c"
dline=$(wc -l < "$tmp/daemon/ops/log.c")
if out=$(PORTEIRO_LAYERS_ROOT="$tmp" sh "$root/scripts/check_layers.sh" 2>&1); then
    echo "FAIL: check_layers.sh passed a core file that includes limiter/handle.h" >&2
    exit 1
fi
echo "$out"
echo "$out" | grep -q "src/core/algorithms.c:$line: core may not include \"limiter/handle.h\"" || {
    echo "FAIL: the message does not name src/core/algorithms.c:$line" >&2
    exit 1
}
echo "$out" | grep -q "daemon/ops/log.c:$dline: ops may not include \"http/server.h\"" || {
    echo "FAIL: the message does not name daemon/ops/log.c:$dline" >&2
    exit 1
}
echo "$out" | grep -q "layers: 2 violation(s)" || {
    echo "FAIL: more than the two planted violations" >&2
    exit 1
}
# And the untouched tree passes.
PORTEIRO_LAYERS_ROOT="$root" sh "$root/scripts/check_layers.sh"
echo "check_layers_catches: ok"
