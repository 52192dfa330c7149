#!/bin/sh
# man_test.sh BUILD_DIR — the man pages against their sources of truth:
#   porteiro(1):      every flag of cli/options.c's table, every command of
#                     cli/main.c;
#   porteirod(8):     every "--flag" string of daemon/*.c, every endpoint path;
#   porteiro.yaml(5): every field name of src/config/config_walk.c's tables,
#                     and of porteirod's own sections in
#                     daemon/ops/daemon_config.c (listen, envoy, admin,
#                     top, spoe: its listen and max_frame_size...);
# and `man --warnings -l` says nothing about any page (C and UTF-8 locales).
# The check first proves it can fail: a page with a flag cut out is caught.
set -u
build=${1:?usage: man_test.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
man=$build/man
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The page's text without font changes, "\-" as "-".
plain() { sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' "$1"; }

# missing PAGE WORD...: prints each WORD not in PAGE as a whole word.
missing() {
    page=$1
    shift
    plain "$page" >"$tmp/plain"
    for w in "$@"; do
        grep -qwF -e "$w" "$tmp/plain" || echo "$w"
    done
}

check() { # PAGE WHAT WORD...
    page=$1 what=$2
    shift 2
    if [ ! -s "$page" ]; then
        echo "FAIL: $page is missing"
        fail=1
        return
    fi
    out=$(missing "$page" "$@")
    if [ -n "$out" ]; then
        echo "FAIL: $(basename "$page") lacks these $what:" $out
        fail=1
    fi
}

cli_flags=$(sed -n '/^static const cli_flag flags/,/^};/p' "$src/cli/options.c" | grep -oE '"--[a-z][a-z-]*"' | tr -d '"' | sort -u)
commands=$(grep -oE '^    \{"[a-z]+", CMD_' "$src/cli/main.c" | sed -E 's/.*"([a-z]+)".*/\1/')
daemon_flags=$(grep -ohE '"--[a-z][a-z-]*"' "$src"/daemon/*.c | tr -d '"' | sort -u)
endpoints=$(grep -ohE '"/(v1/[a-z]+|metrics|healthz)"' "$src/daemon/app/handlers.c" | tr -d '"' | sort -u)
fields=$(grep -oE '\{"[a-z_]+", [a-z_]+, (true|false)[,}]' "$src/src/config/config_walk.c" | sed -E 's/\{"([a-z_]+)".*/\1/' | sort -u)
daemon_fields=$(grep -oE '\{"[a-z_]+", [a-z_]+, (true|false)[,}]' "$src/daemon/ops/daemon_config.c" | sed -E 's/\{"([a-z_]+)".*/\1/' | sort -u)

# porteirod's sections are read: spoe and its max_frame_size among them.
case " $(echo $daemon_fields) " in
    *" spoe "*" max_frame_size "* | *" max_frame_size "*" spoe "*) ;;
    *) daemon_fields= ;;
esac
[ -n "$cli_flags" ] && [ -n "$commands" ] && [ -n "$daemon_flags" ] && [ -n "$endpoints" ] && [ -n "$fields" ] && [ -n "$daemon_fields" ] || {
    echo "FAIL: could not read the tables (did a source file move?)"
    exit 1
}

# The check can fail: porteiro.1 without its first flag's lines.
first=$(echo "$cli_flags" | head -1)
grep -vF -e "$(echo "$first" | sed 's/-/\\-/g')" "$man/porteiro.1" >"$tmp/cut.1"
if [ -z "$(missing "$tmp/cut.1" "$first")" ]; then
    echo "FAIL: a page without $first was not caught"
    fail=1
fi
# And porteiro.yaml.5 without max_frame_size (spoe:) is caught.
grep -v 'max_frame_size' "$man/porteiro.yaml.5" >"$tmp/cut.5"
if [ -z "$(missing "$tmp/cut.5" max_frame_size)" ]; then
    echo "FAIL: a page without spoe's max_frame_size was not caught"
    fail=1
fi

check "$man/porteiro.1" "flags of cli/options.c" $cli_flags
check "$man/porteiro.1" "commands" $commands
check "$man/porteirod.8" "flags of daemon/" $daemon_flags
check "$man/porteirod.8" "endpoints" $endpoints
check "$man/porteiro.yaml.5" "config fields" $fields
check "$man/porteiro.yaml.5" "porteirod's config fields (daemon/ops/daemon_config.c)" $daemon_fields

for page in "$man"/porteiro.1 "$man"/porteirod.8 "$man"/porteiro.yaml.5; do
    for loc in C C.UTF-8; do
        warn=$(LANG=$loc LC_ALL=$loc MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
        if [ -n "$warn" ]; then
            echo "FAIL: man --warnings -l $(basename "$page") ($loc):"
            echo "$warn"
            fail=1
        fi
    done
done

[ "$fail" -eq 0 ] && echo "man pages: every flag, command, endpoint and field documented; no warnings"
exit "$fail"
