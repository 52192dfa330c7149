#!/bin/sh
# grpc_bodies.sh DIR KEYS — KEYS framed gRPC RateLimitRequests of domain
# "bench", one descriptor user = k1 .. kKEYS, as DIR/body1 .. DIR/bodyKEYS
# (h2load -d): a 5-byte header (not compressed, length), then the message
# protoc-c encodes from its text form. Run from the source tree's top.
set -eu
dir=$1 keys=$2
i=1
while [ "$i" -le "$keys" ]; do
    printf 'domain: "bench" descriptors { entries { key: "user" value: "k%d" } }' "$i" |
        protoc-c -Idaemon/grpc --encode=pdrls.Request daemon/grpc/rls.proto >"$dir/msg$i"
    len=$(wc -c <"$dir/msg$i")
    printf "\\000\\000\\000\\$(printf %03o $((len / 256)))\\$(printf %03o $((len % 256)))" >"$dir/body$i"
    cat "$dir/msg$i" >>"$dir/body$i"
    i=$((i + 1))
done
