#!/usr/bin/env bash
# The tests: install, build, and run every CPU test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# One CUDA target in the test build where nvcc is found (the default is a fat binary of six):
# QVG_TEST_CUDA_ARCHS overrides it.
bash scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES="${QVG_TEST_CUDA_ARCHS:-90a}"
ctest --test-dir "${QVG_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" -L cpu
