#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA backend, run its tests (and the
# CPU tests they stand on), compute-sanitizer memcheck + racecheck, and the
# benchmark. Logs and JSON go to $OUT. Needs the carried folder .deps
# (nlohmann-json's headers and CMake files; see docs/BENCHMARKS.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
step "configure + build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQVG_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_TOOLS=OFF -Dnlohmann_json_DIR="$PWD/.deps/share/cmake/nlohmann_json" \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 --target test_cuda test_codecs test_formats test_group_quant bench_cuda \
  >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
rc=0
step "tests"
for t in test_formats test_group_quant test_codecs test_cuda; do
  build-gpu/tests/$t --gtest_brief=1 >"$OUT/$t.log" 2>&1 || rc=1
  tail -3 "$OUT/$t.log"
done
step "compute-sanitizer memcheck"
compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda --gtest_brief=1 \
  --gtest_filter='Cuda.QuantizeGiven*:Cuda.DecodeIsBitIdentical:Cuda.KMeansMatchesCpu*:Cuda.WarmStart*' \
  >"$OUT/memcheck.log" 2>&1 || rc=1
tail -4 "$OUT/memcheck.log"
step "compute-sanitizer racecheck"
compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_cuda --gtest_brief=1 \
  --gtest_filter='Cuda.DecodeIsBitIdentical:Cuda.KMeansMatchesCpu*' >"$OUT/racecheck.log" 2>&1 || rc=1
tail -4 "$OUT/racecheck.log"
step "benchmark"
build-gpu/bench/bench_cuda --json "$OUT/bench_cuda.json" --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/bench_cuda.log" || rc=1
step "done rc=$rc"
exit $rc
