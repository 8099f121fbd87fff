#!/usr/bin/env bash
# One GPU call for the PyTorch path (issue 24): build DeviceKVCache's tests and
# the Python package, run them (test_device_cache also under compute-sanitizer
# memcheck), the Python tests (qvg.torch and the pipeline adapters included), then
# python/bench/bench_wan.py. Logs and JSON under $OUT.
# Environment: QVG_WAN_ARGS (bench_wan.py's arguments; default a 21-frame run
# with spans of 2 chunks), QVG_SKIP_WAN.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "build"
scripts/gpu_build.sh "$OUT/build.log" test_device_cache test_device_codec test_cuda test_reseed_kernel qvg_python || exit 1
rc=0
step "tests"
gtests test_device_cache test_device_codec test_reseed_kernel
# The GPU k-means against the CPU reference (convergence, reseeds, warm starts, k-means++).
build-gpu/tests/test_cuda --gtest_brief=1 --gtest_filter='*KMeans*:*FixedIteration*:*WarmStart*:*MultiStage*:*EncodeEquals*' \
  >>"$OUT/tests.log" 2>&1 || { rc=1; echo "test_cuda (k-means) FAILED"; }
grep -E "PASSED|FAILED|Failure|Expected|Which is|actual|error" "$OUT/tests.log" | head -40
sanitize memcheck test_device_cache
grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/sanitizer.log"
step "python"
PYTHONPATH=build-gpu/python python3 -m unittest discover -s python/tests -v >"$OUT/python.log" 2>&1 || rc=1
grep -E "^(Ran|OK|FAILED)|Error|FAIL:|skipped" "$OUT/python.log" | head -30
# The pipeline adapters (qvg.longcat, qvg.hyworldplay, qvg.lingbot; issue 40), on their own for a short log.
(cd python/tests && PYTHONPATH=../../build-gpu/python python3 -m unittest test_integrations -v) \
  >"$OUT/integrations.log" 2>&1 || rc=1
grep -E "^(Ran|OK|FAILED)|Error|FAIL:|skipped|\.\.\. " "$OUT/integrations.log" | head -30
if [ -z "${QVG_SKIP_WAN:-}" ]; then
  step "bench_wan ${QVG_WAN_ARGS:-}"
  # shellcheck disable=SC2086
  PYTHONPATH=build-gpu/python python3 python/bench/bench_wan.py ${QVG_WAN_ARGS:---quant-factor 2 --repeats 2 --profile} \
    --json "$OUT/wan.json" 2>&1 | tee "$OUT/wan.log" || rc=1
fi
step "done rc=$rc"
exit $rc
