#!/bin/sh
# tls_ca.sh DIR — a CA and a server certificate for 127.0.0.1 (and
# localhost), made for one bench run: DIR/ca.crt, DIR/server.crt and
# DIR/server.key (Redis's --tls-cert-file / --tls-key-file, porteirod's
# redis.tls.ca). Valid one day.
set -eu
dir=$1
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=bench-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 1 -extfile "$dir/san.ext" -out "$dir/server.crt" 2>/dev/null
