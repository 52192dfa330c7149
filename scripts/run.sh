#!/bin/sh
# run.sh — builds porteiro and shows it deciding: a short live demo on the
# embedded memory backend, or against Redis when PORTEIRO_REDIS is set.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
porteiro_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec ./build/porteiro_demo
