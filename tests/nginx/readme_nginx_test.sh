#!/bin/sh
# readme_nginx_test.sh BUILD_DIR — the README's nginx example as a newcomer
# runs it after ./scripts/run.sh: the ```sh block under "### nginx" in
# README.md, read from the README itself and run through /bin/sh in a folder
# that looks like the repository (examples/, and build/ -> BUILD_DIR).
# Only the ports (Redis 6379, nginx 8000 and its backend 8001) and nginx's
# prefix (/tmp/porteiro-nginx) are moved to this test's own, in the block and
# in the copy of examples/nginx/porteiro.conf it runs. The six requests must
# answer 200 five times, then 429. Exit 77 (skipped) only where nothing could
# build the module (no nginx-dev).
set -eu
build=$(cd "${1:?usage: readme_nginx_test.sh BUILD_DIR}" && pwd)
src=${PORTEIRO_SOURCE_DIR:?}
module="$build/nginx/ngx_http_porteiro_module.so"
if [ ! -r "$module" ]; then
    if [ -r /usr/share/nginx/src/conf_flags ]; then
        echo "FAIL: nginx-dev is installed but $module was not built"
        exit 1
    fi
    echo "SKIP: nginx-dev is not installed (nothing builds the module)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-readme-nginx.XXXXXX")
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
redis=$(free_port)
front=$(free_port)
back=$(free_port)
cleanup() {
    [ -f "$tmp/prefix/nginx.pid" ] && kill "$(cat "$tmp/prefix/nginx.pid")" 2>/dev/null
    redis-cli -p "$redis" shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# The block: the first ```sh fence after the "### nginx" heading.
awk '/^### nginx$/ { in_section = 1; next }
     in_section && /^```sh$/ { in_block = 1; next }
     in_block && /^```$/ { exit }
     in_block { print }' "$src/README.md" >"$tmp/block.sh"
[ -s "$tmp/block.sh" ] || { echo "FAIL: no \`\`\`sh block under '### nginx' in README.md"; exit 1; }

# Moves each of FROM to TO in FILE; FROM must be there (so the README and
# this test cannot drift apart silently).
move() { # file from to
    grep -qF "$2" "$1" || { echo "FAIL: '$2' is not in $1 any more"; exit 1; }
    sed "s#$2#$3#g" "$1" >"$1.new" && mv "$1.new" "$1"
}
move "$tmp/block.sh" 6379 "$redis"
move "$tmp/block.sh" 127.0.0.1:8000 "127.0.0.1:$front"
move "$tmp/block.sh" /tmp/porteiro-nginx "$tmp/prefix"

mkdir -p "$tmp/repo/examples/nginx" "$tmp/bin"
conf="$tmp/repo/examples/nginx/porteiro.conf"
cp "$src/examples/nginx/porteiro.conf" "$conf"
move "$conf" 127.0.0.1:6379 "127.0.0.1:$redis"
move "$conf" 127.0.0.1:8000 "127.0.0.1:$front"
move "$conf" 127.0.0.1:8001 "127.0.0.1:$back"
ln -s "$build" "$tmp/repo/build"
# A sanitized module needs the sanitizer's runtime in nginx (CMakeLists.txt):
# an nginx first on PATH that preloads it, so the block's line stays as written.
if [ -n "${PORTEIRO_NGINX_PRELOAD:-}" ]; then
    real=$(PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v nginx)
    printf '#!/bin/sh\nLD_PRELOAD=%s exec %s "$@"\n' "$PORTEIRO_NGINX_PRELOAD" "$real" >"$tmp/bin/nginx"
    chmod +x "$tmp/bin/nginx"
fi

echo "== README.md, nginx (ports and prefix moved):"
cat "$tmp/block.sh"
echo "=="
(cd "$tmp/repo" && PATH="$tmp/bin:$PATH:/usr/sbin:/usr/local/sbin" timeout 60 sh "$tmp/block.sh") \
    >>"$tmp/out" 2>&1 || true # >>: nginx appends its access log to the same file
cat "$tmp/out"
codes=$(grep -E '^[0-9]{3}$' "$tmp/out" | tr '\n' ' ')
if [ "$codes" != "200 200 200 200 200 429 " ]; then
    echo "FAIL: the six requests answered '$codes', not '200 200 200 200 200 429'"
    exit 1
fi
# And the limit was decided in Redis, not by the local fallback.
if ! grep -q 'porteiro=REJECTED ' "$tmp/out" || grep -q 'porteiro=FALLBACK' "$tmp/out"; then
    echo "FAIL: no porteiro=REJECTED in nginx's access log, or a porteiro=FALLBACK"
    exit 1
fi
echo "PASS: README.md's nginx example: $codes"
