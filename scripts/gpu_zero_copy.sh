#!/usr/bin/env bash
# One call on the GPU machine for zero-copy reads (DeviceCacheOptions::contiguous_views,
# qvg.torch's zero_copy_reads): the device tests (views vs read(), the split ranges, the
# token-major decodes and the existing cache and codec tests), memcheck of the new tests, the
# Python tests, then bench_wan with and without +zc (BF16 in the same call). Logs under $OUT.
# Needs the carried .deps (scripts/gpu_build.sh). QVG_SKIP_WAN=1 skips the bench;
# QVG_ZC_WAN_ARGS replaces its arguments.
source "$(dirname "$0")/gpu_start.sh"
tests=(test_contiguous_views test_device_cache test_device_codec test_cuda test_cq_cuda)
step "build"
scripts/gpu_build.sh "$OUT/build.log" "${tests[@]}" || exit 1
rc=0
python=1
cmake --build build-gpu -j16 --target qvg_python >>"$OUT/build.log" 2>&1 || { python=; echo "no Python module (build.log)"; }
step "tests"
gtests "${tests[@]}"
grep -E "PASSED|FAILED|Failure|Expected|Which is|differ|error" "$OUT/tests.log" | head -60
step "memcheck"
sanitize memcheck test_contiguous_views 'ContiguousViews.SplitRanges*:ContiguousViews.MisuseIsAnError:ContiguousViews.ACacheMadeAgain*'
sanitize memcheck test_device_codec '*TokenMajor*'
grep -E "ERROR SUMMARY" "$OUT/sanitizer.log"
step "python"
if [ -n "$python" ]; then
  PYTHONPATH=build-gpu/python timeout 400 python3 -m unittest discover -s python/tests -p test_torch.py -v \
    >>"$OUT/python.log" 2>&1 || { rc=1; echo "python test_torch.py FAILED"; }
  grep -E "^(Ran|OK|FAILED)|Error|FAIL:" "$OUT/python.log" | head -30
fi
if [ -z "${QVG_SKIP_WAN:-}" ] && [ -n "$python" ]; then
  step "bench_wan"
  # shellcheck disable=SC2086
  PYTHONPATH=build-gpu/python timeout 420 python3 python/bench/bench_wan.py ${QVG_ZC_WAN_ARGS:---frames 48 \
    --quant-factor 8 --repeats 2 --modes bf16 qvg:iters=3,centroid_format=fp8+batch \
    qvg:iters=3,centroid_format=fp8+batch+zc} --json "$OUT/wan.json" 2>&1 | tail -30 | tee "$OUT/wan.log"
fi
exit $rc
