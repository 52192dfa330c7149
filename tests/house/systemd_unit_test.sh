#!/bin/sh
# systemd_unit_test.sh BUILD_DIR — packaging/porteirod.service, offline (no
# running systemd needed): `systemd-analyze verify` has nothing to say, and
# `systemd-analyze security` rates its exposure 2.0 or lower. The unit names
# /usr/sbin/porteirod; here it is pointed at the build's porteirod, since
# verify checks that the command exists. Skipped when systemd-analyze is
# missing (scripts/deps.sh installs systemd).
set -u
build=${1:?usage: systemd_unit_test.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
max=${MAX_EXPOSURE:-2.0}
if ! command -v systemd-analyze >/dev/null; then
    echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-unit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bin=$(cd "$build" && pwd)/porteirod
sed "s#/usr/sbin/porteirod#$bin#g" "$src/packaging/porteirod.service" >"$tmp/porteirod.service"
fail=0

out=$(cd "$tmp" && systemd-analyze verify --man=no porteirod.service 2>&1)
if [ $? -ne 0 ] || [ -n "$out" ]; then
    echo "FAIL: systemd-analyze verify:"
    echo "$out"
    fail=1
fi

exposure=$(systemd-analyze security --offline=true "$tmp/porteirod.service" 2>&1 |
    sed -n 's/.*Overall exposure level for porteirod.service: \([0-9.]*\).*/\1/p')
if [ -z "$exposure" ]; then
    echo "FAIL: systemd-analyze security printed no exposure level"
    fail=1
elif ! awk -v e="$exposure" -v m="$max" 'BEGIN { exit !(e <= m) }'; then
    echo "FAIL: exposure $exposure is above $max"
    systemd-analyze security --offline=true "$tmp/porteirod.service" | grep '✗'
    fail=1
fi

# The same check fails on a unit without the sandbox (it can fail).
grep -vE '^(Protect|Private|Restrict|SystemCall|Capability|DynamicUser|NoNewPriv|MemoryDeny|Lock|UMask|DevicePolicy|KeyringMode|ProcSubset|RemoveIPC|AmbientCap)' \
    "$tmp/porteirod.service" >"$tmp/bare.service"
bare=$(systemd-analyze security --offline=true "$tmp/bare.service" 2>&1 |
    sed -n 's/.*Overall exposure level for bare.service: \([0-9.]*\).*/\1/p')
if [ -z "$bare" ] || awk -v e="$bare" -v m="$max" 'BEGIN { exit !(e <= m) }'; then
    echo "FAIL: the unit without its sandbox rated '$bare', not above $max"
    fail=1
fi

[ "$fail" -eq 0 ] && echo "porteirod.service: verify clean, exposure $exposure (at most $max; $bare without the sandbox)"
exit "$fail"
