#!/bin/sh
# admin_page_test.sh — runs admin_page.js (the admin page in chromium).
# Skipped (77) only when node or chromium is absent; playwright-core comes
# from browser/package-lock.json (npm ci) the first time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node not found (Debian: nodejs)"
    exit 77
fi
if [ ! -x "$chromium" ]; then
    echo "SKIP: $chromium not found (Debian: chromium)"
    exit 77
fi
if [ ! -d "$here/browser/node_modules/playwright-core" ]; then
    (cd "$here/browser" && npm ci --no-audit --no-fund --loglevel=error)
fi
exec node "$here/admin_page.js"
