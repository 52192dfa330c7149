#!/bin/sh
# admin_page_test.sh — runs admin_page.js (the admin page in chromium).
# Skipped (77) only when Debian's nodejs or chromium package is not
# installed; installed (scripts/deps.sh installs both) but not found is a
# failure. playwright-core comes from browser/package-lock.json (npm ci) the
# first time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if ! command -v node >/dev/null 2>&1; then
    if installed nodejs; then
        echo "FAIL: the nodejs package is installed but node is not on PATH ($PATH)"
        exit 1
    fi
    echo "SKIP: node not found (Debian: nodejs)"
    exit 77
fi
if [ ! -x "$chromium" ]; then
    if installed chromium; then
        echo "FAIL: the chromium package is installed but $chromium is not an executable"
        exit 1
    fi
    echo "SKIP: $chromium not found (Debian: chromium)"
    exit 77
fi
if [ ! -d "$here/browser/node_modules/playwright-core" ]; then
    (cd "$here/browser" && npm ci --no-audit --no-fund --loglevel=error)
fi
exec node "$here/admin_page.js"
