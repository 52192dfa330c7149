#!/bin/sh
# package_test.sh — the Debian packages as an operator meets them (root only:
# it installs and purges them on this machine):
#   scripts/package.sh builds them (lintian included); dpkg -i (missing
#   dependencies from apt); porteirod --test-config on the shipped config;
#   the installed porteirod answers 204; examples/haproxy/ shipped under
#   /usr/share/doc/porteiro/examples/haproxy as in the source, its
#   porteirod.yaml passing --test-config and its haproxy.cfg haproxy -c;
#   pkg-config --libs porteiro and a
#   program built against the installed header and library (shared and
#   static) decides; nginx loads the module from modules-enabled/ and
#   limits; man --warnings -l on each installed page; systemd-analyze
#   verify and security on the installed unit; python3-porteiro imported by
#   Debian's python3 and deciding; dpkg --purge leaves no file.
# Prints "package test: passed" or "package test: FAILED (...)"; exit 0 / 1.
# Not root: prints why it is skipped and exits 77 (scripts/test.sh counts
# it as skipped, not passed).
set -u
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
    echo "package test: skipped (it installs packages: run as root, as CI does)"
    exit 77
fi
PACKAGES="porteiro libporteiro1 libporteiro-dev"
# The nginx module's package, built when nginx-dev is installed.
NGINX_MODULE=
if [ -f /usr/share/nginx/src/conf_flags ] && command -v nginx >/dev/null; then
    NGINX_MODULE=libnginx-mod-http-porteiro
    PACKAGES="$PACKAGES $NGINX_MODULE"
fi
# The Python binding's package, built when python3-dev is installed.
PYTHON_PACKAGE=
if [ -f /usr/include/python3.11/Python.h ] || /usr/bin/python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
    PYTHON_PACKAGE=python3-porteiro
    PACKAGES="$PACKAGES $PYTHON_PACKAGE"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/porteiro-package.XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    dpkg --purge $PACKAGES >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "package test: FAILED ($*)"
    exit 1
}
step() { echo "== package test: $*"; }

step "build (scripts/package.sh)"
./scripts/package.sh "$tmp/debs" || fail "scripts/package.sh"

step "install"
dpkg --purge $PACKAGES >/dev/null 2>&1 # a previous run's leftovers
if ! dpkg -i "$tmp"/debs/*.deb >"$tmp/dpkg.log" 2>&1; then
    # Dependencies missing: apt brings them and finishes the configuration.
    DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq --no-install-recommends >>"$tmp/dpkg.log" 2>&1 ||
        { cat "$tmp/dpkg.log"; fail "dpkg -i / apt-get -f install"; }
fi
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" | grep -q "install ok installed" || fail "$p is not installed"
done
dpkg -L $PACKAGES | sort -u >"$tmp/files"

step "config and version"
/usr/sbin/porteirod --test-config /etc/porteiro/porteirod.yaml || fail "--test-config on the shipped config"
/usr/sbin/porteirod --version | grep -q "^porteirod $(dpkg-query -W -f='${Version}' porteiro) " ||
    fail "porteirod --version does not name the package's version"
/usr/bin/porteiro --version >/dev/null || fail "porteiro --version"

step "examples/haproxy (docs/haproxy.md)"
# The three files of examples/haproxy/, in the porteiro package, byte for
# byte the source's, and valid for porteirod and (where installed) haproxy.
ex=/usr/share/doc/porteiro/examples/haproxy
for f in haproxy.cfg spoe.conf porteirod.yaml; do
    dpkg -L porteiro | grep -qx "$ex/$f" || fail "the porteiro package does not ship $ex/$f"
    cmp -s "$ex/$f" "examples/haproxy/$f" || fail "$ex/$f differs from examples/haproxy/$f"
done
/usr/sbin/porteirod --test-config "$ex/porteirod.yaml" || fail "--test-config on $ex/porteirod.yaml"
if command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ]; then
    (cd "$ex" && PATH="$PATH:/usr/sbin" haproxy -c -q -f haproxy.cfg) || fail "haproxy -c on $ex/haproxy.cfg"
fi

step "the installed porteirod answers"
# The shipped config, on a free port (8080 may be taken on this machine).
code=
for port in 18080 18081 18082 18083 18084 18085 18086 18087; do
    sed "s/^listen: .*/listen: 127.0.0.1:$port/" /etc/porteiro/porteirod.yaml >"$tmp/porteirod.yaml"
    /usr/sbin/porteirod --config "$tmp/porteirod.yaml" 2>"$tmp/porteirod.log" &
    pid=$!
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/auth?policy=default")
        [ "$code" = 204 ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ "$code" = 204 ] && break
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
done
[ "$code" = 204 ] || { cat "$tmp/porteirod.log"; fail "GET /v1/auth answered '$code', not 204"; }
kill -TERM "$pid"
wait "$pid" || fail "porteirod did not exit 0 after SIGTERM"
pid=

step "pkg-config and a program against the installed library"
libs=$(pkg-config --libs porteiro) || fail "pkg-config --libs porteiro"
libs=$(echo $libs)
[ "$libs" = "-lporteiro" ] || fail "pkg-config --libs porteiro says '$libs'"
cat >"$tmp/prog.c" <<'EOF'
#include <porteiro.h>
#include <stdio.h>

int main(void) {
    porteiro_options o;
    porteiro_options_init(&o); /* no Redis URL: the memory backend */
    porteiro_status st;
    char err[256];
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    porteiro_limit l;
    if (p == NULL || porteiro_parse_limit("fixed_window 2/1h", &l, err, sizeof(err)) != PORTEIRO_OK)
        return 2;
    porteiro_decision d;
    int allowed = 0;
    for (int i = 0; i < 3; i++)
        if (porteiro_check(p, &l, "k", 1, &d) == PORTEIRO_OK && d.allowed)
            allowed++;
    porteiro_free(p);
    printf("%d\n", allowed);
    return allowed == 2 ? 0 : 1;
}
EOF
cc -o "$tmp/prog" "$tmp/prog.c" $(pkg-config --cflags --libs porteiro) || fail "compiling against the installed header"
[ "$("$tmp/prog")" = 2 ] || fail "the program against libporteiro.so did not decide 2 of 3"
ldd "$tmp/prog" | grep -qE 'libporteiro.so.1 => (/usr)?/lib/' || fail "the program does not use the installed libporteiro.so.1"
cc -o "$tmp/prog_static" "$tmp/prog.c" /usr/lib/*/libporteiro.a $(pkg-config --static --libs porteiro | sed 's/-lporteiro//') ||
    fail "linking libporteiro.a"
[ "$("$tmp/prog_static")" = 2 ] || fail "the program against libporteiro.a did not decide 2 of 3"

step "man pages"
for page in man1/porteiro.1.gz man8/porteirod.8.gz man5/porteiro.yaml.5.gz; do
    f=/usr/share/man/$page
    [ -f "$f" ] || fail "$f is missing"
    warn=$(LANG=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
    [ -z "$warn" ] || { echo "$warn"; fail "man --warnings -l $f"; }
done

step "the unit"
unit=/lib/systemd/system/porteirod.service
out=$(systemd-analyze verify "$unit" 2>&1)
[ $? -eq 0 ] && [ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify $unit"; }
exposure=$(systemd-analyze security --offline=true "$unit" 2>&1 |
    sed -n 's/.*Overall exposure level for porteirod.service: \([0-9.]*\).*/\1/p')
awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 2.0) }' || fail "exposure '$exposure' above 2.0"
echo "exposure $exposure"

if [ -n "$NGINX_MODULE" ]; then
    step "the nginx module, enabled as Debian's modules are"
    link=/etc/nginx/modules-enabled/50-mod-http-porteiro.conf
    [ "$(readlink "$link")" = /usr/share/nginx/modules-available/mod-http-porteiro.conf ] ||
        fail "$link does not link the module's load_module line"
    grep -qx "load_module modules/ngx_http_porteiro_module.so;" \
        /usr/share/nginx/modules-available/mod-http-porteiro.conf || fail "mod-http-porteiro.conf"
    # nginx with the enabled line: a limit of 2 in memory; the probe takes
    # one, then 200 and 429.
    mkdir -p "$tmp/ngx"
    for port in 18090 18091 18092 18093; do
        cat >"$tmp/ngx/nginx.conf" <<EOF
include $link;
daemon off;
master_process off;
pid $tmp/ngx/nginx.pid;
error_log $tmp/ngx/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $tmp/ngx; proxy_temp_path $tmp/ngx; fastcgi_temp_path $tmp/ngx;
  uwsgi_temp_path $tmp/ngx; scgi_temp_path $tmp/ngx;
  server {
    listen 127.0.0.1:$port;
    location / { porteiro_limit \$remote_addr "fixed_window 2/1h"; empty_gif; }
  }
}
EOF
        # Debian's prefix: "modules/" is /usr/share/nginx/modules, a link to
        # /usr/lib/nginx/modules.
        nginx -p /usr/share/nginx/ -c "$tmp/ngx/nginx.conf" 2>"$tmp/ngx/stderr" &
        pid=$!
        codes=
        for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
            curl -s -o /dev/null "http://127.0.0.1:$port/_" && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        for _ in 1 2; do
            codes="$codes $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")"
        done
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        pid=
        [ -n "$(echo $codes | tr -d ' 0')" ] && break
    done
    [ "$(echo $codes)" = "200 429" ] ||
        { cat "$tmp/ngx/stderr" "$tmp/ngx/error.log"; fail "nginx with the module answered '$codes'"; }
fi

if [ -n "$PYTHON_PACKAGE" ]; then
    step "the Python binding: import porteiro from the package"
    # Debian's python3, from a folder with no porteiro of its own.
    out=$(cd "$tmp" && env -u PYTHONPATH /usr/bin/python3 -c '
import porteiro, porteiro.asgi
l = porteiro.Limiter()
print(porteiro.__file__, [bool(l.check("k", "fixed_window 2/366d")) for _ in range(3)],
      l.check("k", "fixed_window 2/366d").headers["Retry-After"] != "")
') || fail "import porteiro (python3-porteiro)"
    echo "$out"
    echo "$out" | grep -q "^/usr/lib/python3/dist-packages/porteiro/__init__.py \[True, True, False\] True$" ||
        fail "python3-porteiro: '$out'"
    ldd /usr/lib/python3/dist-packages/porteiro/_porteiro.*.so | grep -qE 'libporteiro.so.1 => (/usr)?/lib/' ||
        fail "the extension does not use the installed libporteiro.so.1"
fi

step "purge"
dpkg --purge $PACKAGES >/dev/null || fail "dpkg --purge"
left=
while read -r f; do
    # Directories other packages share (/usr/bin, /etc...) stay; ours go.
    if [ -d "$f" ]; then
        case "$f" in /etc/porteiro | /usr/share/doc/porteiro | /usr/share/doc/libporteiro* | \
            /usr/share/doc/python3-porteiro | /usr/lib/python3/dist-packages/porteiro) ;;
        *) continue ;;
        esac
    fi
    [ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done <"$tmp/files"
for f in /etc/nginx/modules-enabled/50-mod-http-porteiro.conf \
    /etc/nginx/modules-enabled/50-mod-http-porteiro.conf.removed /etc/porteiro /etc/systemd/system/multi-user.target.wants/porteirod.service \
    /var/lib/systemd/deb-systemd-helper-enabled/porteirod.service.dsh-also; do
    [ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done
[ -z "$left" ] || fail "left after purge:$left"
echo "package test: passed"
