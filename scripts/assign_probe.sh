#!/usr/bin/env bash
# One device call: build and run bench_assign_probe alone (the tensor-core
# k-means assignment: its modes, block shapes, and phases left out; gpu_check.sh
# runs it too). Carry: .deps.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQVG_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_TOOLS=OFF -Dnlohmann_json_DIR="$PWD/.deps/share/cmake/nlohmann_json" >"$OUT/build.log" 2>&1
cmake --build build-gpu -j16 --target bench_assign_probe >>"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head; exit 1; }
build-gpu/bench/bench_assign_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/assign_probe.log"
