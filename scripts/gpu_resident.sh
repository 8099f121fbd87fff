#!/usr/bin/env bash
# One short GPU call for the device-resident API (qvg/device_codec.h): build
# its tests and the Python module, run test_device_codec (and under
# compute-sanitizer), the CUDA codec's warm-start / k-means++ / cache tests,
# the Python tests, and python/bench/bench_resident.py. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "build"
scripts/gpu_build.sh "$OUT/build.log" test_device_codec test_cuda qvg_python || exit 1
rc=0
step "tests"
build-gpu/tests/test_device_codec --gtest_brief=1 2>&1 | tail -30 || rc=1
build-gpu/tests/test_cuda --gtest_brief=1 --gtest_filter='*Warm*:*Cache*:*SampledStarts*:*FixedIteration*' 2>&1 | tail -5 || rc=1
sanitize memcheck test_device_codec
grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/sanitizer.log"
step "python"
PYTHONPATH=build-gpu/python python3 -m unittest discover -s python/tests 2>&1 | tail -15 || rc=1
step "bench_resident"
PYTHONPATH=build-gpu/python python3 python/bench/bench_resident.py --reps "${QVG_BENCH_REPS:-20}" \
  --json "$OUT/resident.json" 2>&1 | tee "$OUT/resident.log" || rc=1
step "done rc=$rc"
exit $rc
