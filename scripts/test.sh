#!/usr/bin/env bash
# The tests: install, build, and run every CPU test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
ctest --test-dir "${QVG_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" -L cpu
