#!/bin/sh
# promtool_test.sh — examples/prometheus/porteiro-alerts.yml: valid rules,
# and each alert fires (and stays quiet) as porteiro-alerts.test.yml says.
# Exit 77 (skipped) without promtool (Debian: prometheus).
set -eu
dir="${PORTEIRO_SOURCE_DIR:?}/examples/prometheus"
if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIP: promtool not found (Debian: apt-get install prometheus)"
    exit 77
fi
promtool check rules "$dir/porteiro-alerts.yml"
cd "$dir" && promtool test rules porteiro-alerts.test.yml
