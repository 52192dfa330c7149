#!/bin/sh
# bench/run.sh SCENARIO [ARGS...] — bench/'s one entry point: runs
# bench/scenarios/SCENARIO.sh (each sources bench/lib.sh); without a
# scenario, lists them with what each measures (bench/README.md has their
# latest figures and options).
here=$(cd "$(dirname "$0")" && pwd)
list() {
    echo "usage: bench/run.sh SCENARIO [ARGS...]; the scenarios (bench/README.md):"
    for f in "$here"/scenarios/*.sh; do
        printf '  %-15s %s\n' "$(basename "$f" .sh)" "$(sed -n '2s/^# [^—]*— //p' "$f")"
    done
}
case "${1:-}" in
"" | -h | --help)
    list
    exit 0
    ;;
esac
scenario=$here/scenarios/$1.sh
[ -f "$scenario" ] || { echo "bench/run.sh: no scenario '$1'" >&2; list >&2; exit 2; }
shift
exec "$scenario" "$@"
