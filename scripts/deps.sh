#!/bin/sh
# deps.sh — installs the Debian packages porteiro needs, when run as root and
# something is missing. Sourced by run.sh (porteiro_deps run) and test.sh
# (porteiro_deps test).
#
# run: what ./scripts/run.sh builds and runs, and what the README's examples
#      run after it: the compiler and the libraries porteiro links, cmocka
#      (CMakeLists.txt configures the tests too, even when run.sh does not
#      build them), nginx-dev and nginx (the nginx module and its example),
#      redis-server and redis-cli, curl.
PORTEIRO_RUN_PACKAGES="build-essential cmake pkg-config libhiredis-dev libevent-dev \
libhttp-parser-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev libjansson-dev \
libssl-dev libcmocka-dev ca-certificates redis-server redis-tools curl nginx-light nginx-dev"
# test: the run set and what the tests (and bench/) use besides: clang and
# its sanitizer runtime (--full), load generators and clients (wrk, nghttp2,
# gRPC in Python, HAProxy, OpenResty's Lua), the Debian package tools, man,
# gnuplot, the netfault tools, promtool, the browser of the admin page test.
PORTEIRO_TEST_PACKAGES="$PORTEIRO_RUN_PACKAGES clang libclang-rt-14-dev openssl wrk \
nghttp2-client python3-grpcio python3-protobuf universal-ctags \
python3-dev python3-pytest python3-flask python3-fastapi python3-django python3-limits python3-redis python3-uvloop python3-httpx python3-wheel \
man-db groff-base dpkg-dev file fakeroot lintian systemd gnuplot-nox iproute2 nftables \
prometheus chromium nodejs libnginx-mod-http-lua lua-nginx-redis haproxy"

porteiro_deps() { # run | test
    case "${1:-}" in
    run) want=$PORTEIRO_RUN_PACKAGES ;;
    test) want=$PORTEIRO_TEST_PACKAGES ;;
    *)
        echo "porteiro_deps: run or test" >&2
        return 2
        ;;
    esac
    missing=""
    for pkg in $want; do
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
    # shellcheck disable=SC2086 # $missing: one word a package
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
