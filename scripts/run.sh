#!/bin/sh
# run.sh — builds porteiro and shows it deciding: a short live demo of the
# library, then porteirod (the HTTP sidecar) with examples/porteirod.yaml and
# the curl that gets a 429. The memory backend by default; Redis when
# PORTEIRO_REDIS is set (e.g. redis://127.0.0.1:6379).
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
porteiro_deps run
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
# What running needs, not the tests (./scripts/test.sh builds those): the
# demo, porteirod, the porteiro command and the nginx module (build/nginx/,
# which the README's nginx example loads).
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" \
    --target porteiro_demo porteirod porteiro_cli ngx_http_porteiro_module >/dev/null
./build/porteiro_demo

config=examples/porteirod.yaml
if [ -n "${PORTEIRO_REDIS:-}" ]; then
    config=$(mktemp /tmp/porteirod-XXXXXX.yaml)
    { cat examples/porteirod.yaml; printf 'redis:\n  url: %s\n' "$PORTEIRO_REDIS"; } >"$config"
fi
echo
echo "== porteirod --config $config"
./build/porteirod --config "$config" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; [ "$config" = examples/porteirod.yaml ] || rm -f "$config"' EXIT
i=0
until curl -s -o /dev/null http://127.0.0.1:8080/healthz; do
    i=$((i + 1)); [ $i -gt 300 ] && { echo "porteirod did not start" >&2; exit 1; }
    sleep 0.01
done
echo "policy api: token_bucket 5/1m per X-Api-Key; six requests in a row:"
for _ in 1 2 3 4 5 6; do
    printf '  GET /v1/auth?policy=api -> %s\n' \
        "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Api-Key: demo' 'http://127.0.0.1:8080/v1/auth?policy=api')"
done
echo "and the JSON API, after five more:"
for _ in 1 2 3 4 5; do
    curl -s -o /dev/null -X POST -d '{"policy":"api","key":"readme"}' http://127.0.0.1:8080/v1/check
done
echo "\$ curl -i -X POST -d '{\"policy\":\"api\",\"key\":\"readme\"}' http://127.0.0.1:8080/v1/check"
curl -s -i -X POST -d '{"policy":"api","key":"readme"}' http://127.0.0.1:8080/v1/check
