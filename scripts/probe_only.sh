#!/usr/bin/env bash
# One short GPU call: build bench_decode_probe alone and run it (decode kernel
# variants, bit-checked against decode_kernel), for A/B work between full
# checks (scripts/gpu_check.sh). Needs the carried folder .deps. Output under
# $OUT (decode_probe.log); QVG_BENCH_REPS (default 20).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQVG_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_TOOLS=OFF -Dnlohmann_json_DIR="$PWD/.deps/share/cmake/nlohmann_json" \
  >/tmp/qvg_probe_build.log 2>&1 || { tail -30 /tmp/qvg_probe_build.log; exit 1; }
cmake --build build-gpu -j16 --target bench_decode_probe >>/tmp/qvg_probe_build.log 2>&1 ||
  { grep -E "error" /tmp/qvg_probe_build.log | head -30; exit 1; }
build-gpu/bench/bench_decode_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/decode_probe.log"
