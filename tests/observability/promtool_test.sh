#!/bin/sh
# promtool_test.sh — examples/prometheus/porteiro-alerts.yml: valid rules,
# and each alert fires (and stays quiet) as porteiro-alerts.test.yml says.
# Exit 77 (skipped) only when Debian's prometheus package is not installed;
# installed (scripts/deps.sh installs it) but without promtool is a failure.
set -eu
dir="${PORTEIRO_SOURCE_DIR:?}/examples/prometheus"
if ! command -v promtool >/dev/null 2>&1; then
    if dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "install ok installed"; then
        echo "FAIL: the prometheus package is installed but promtool is not on PATH ($PATH)"
        exit 1
    fi
    echo "SKIP: promtool not found (Debian: apt-get install prometheus)"
    exit 77
fi
promtool check rules "$dir/porteiro-alerts.yml"
cd "$dir" && promtool test rules porteiro-alerts.test.yml
