#!/usr/bin/env bash
# Configures and builds qvg (Release) into ${QVG_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${QVG_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
