#!/bin/sh
# deps.sh — installs the Debian packages porteiro builds, tests and runs with,
# when run as root and something is missing. Sourced by test.sh and run.sh.
PORTEIRO_PACKAGES="build-essential cmake pkg-config clang libclang-rt-14-dev libhiredis-dev \
libevent-dev libhttp-parser-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev libjansson-dev \
libcmocka-dev redis-server redis-tools nginx-light curl wrk libssl-dev openssl ca-certificates \
nghttp2-client python3-grpcio python3-protobuf universal-ctags abigail-tools \
man-db groff-base dpkg-dev file fakeroot lintian systemd gnuplot-nox iproute2 nftables \
prometheus chromium nodejs nginx-dev libnginx-mod-http-lua lua-nginx-redis haproxy"

porteiro_deps() {
    missing=""
    for pkg in $PORTEIRO_PACKAGES; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $pkg"
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "porteiro: missing Debian packages:$missing (run as root, or install them)" >&2
        return 1
    fi
    echo "porteiro: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
