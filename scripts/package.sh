#!/bin/sh
# package.sh [OUT_DIR] — builds the Debian packages (porteiro, libporteiro1,
# libporteiro-dev, libnginx-mod-http-porteiro with nginx-dev, python3-porteiro
# with python3-dev) with CPack into OUT_DIR (default build-deb/), then runs
# lintian on them. Release build with Debian's hardening flags
# (dpkg-buildflags), installed under /usr; only the packaged targets are
# built. docs/packaging.md.
set -eu
cd "$(dirname "$0")/.."
out=${1:-build-deb}
dir=build-package
jobs=${JOBS:-2}

# Debian's compiler and linker flags: -O2, fortify, stack protector,
# RELRO, BIND_NOW (lintian's hardening tags).
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
eval "$(dpkg-buildflags --export=sh)"

cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
    -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
targets="porteiro_cli porteirod porteiro_shared porteiro_static man_pages"
# libnginx-mod-http-porteiro, when nginx-dev let nginx/ define the module.
if cmake --build "$dir" --target help | grep -q ngx_http_porteiro_module; then
    targets="$targets ngx_http_porteiro_module"
fi
# python3-porteiro, when python3-dev let python/ define the binding.
if cmake --build "$dir" --target help | grep -q porteiro_python; then
    targets="$targets porteiro_python"
fi
cmake --build "$dir" -j "$jobs" --target $targets
(cd "$dir" && cpack -G DEB -B "$PWD/cpack" >/dev/null)
mkdir -p "$out"
rm -f "$out"/*.deb
cp "$dir"/cpack/*.deb "$out"/
ls -1 "$out"/*.deb

# lintian: the tags that remain are explained in docs/packaging.md and
# listed in packaging/lintian.expected; any other is a failure.
if command -v lintian >/dev/null; then
    lintian --allow-root --tag-display-limit 0 "$out"/*.deb >"$out/lintian.txt" 2>&1 || true
    sed -E 's/^([EWIPX]): ([^ :]+)( [^:]+)?: ([^ ]+).*/\2 \4/' "$out/lintian.txt" | sort -u >"$out/lintian.tags"
    unexpected=$(grep -vxF -f packaging/lintian.expected "$out/lintian.tags" || true)
    if [ -n "$unexpected" ]; then
        echo "package.sh: lintian tags not in packaging/lintian.expected:" >&2
        grep -F -f /dev/stdin "$out/lintian.txt" <<EOF2 >&2 || true
$unexpected
EOF2
        exit 1
    fi
    echo "lintian: $(wc -l <"$out/lintian.tags") known tag(s) (packaging/lintian.expected)"
fi
