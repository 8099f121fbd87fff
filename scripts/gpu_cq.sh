#!/usr/bin/env bash
# One call on the GPU machine for qvg's code=cq on CUDA: build, the code=cq
# GPU tests (the fused decode and the GPU encode against the CPU reference,
# the codecs' encode), memcheck of them, the device codec / cache / CUDA tests
# that share its paths, the Python drop-ins where the module builds, then
# bench_cuda --cq (GPU encode time beside the CPU reference's, decode time
# and fraction of copy at [12, 37440, 128]).
# Logs under $OUT. Needs the carried .deps (scripts/gpu_build.sh).
# Environment: QVG_CQ_REPS (bench_cuda repetitions, default 20).
source "$(dirname "$0")/gpu_start.sh"
step "build"
scripts/gpu_build.sh "$OUT/build.log" test_cq_cuda test_cq test_cuda test_device_codec test_device_cache bench_cuda || exit 1
rc=0
python=1
cmake --build build-gpu -j16 --target qvg_python >>"$OUT/build.log" 2>&1 || { python=; echo "no Python module (build.log)"; }
step "tests"
gtests test_cq_cuda test_cq test_device_codec test_device_cache test_cuda
grep -E "PASSED|FAILED|Failure|Expected|Which is|differ|exception" "$OUT/tests.log" | head -40
step "memcheck"
sanitize memcheck test_cq_cuda \
  'CqCuda.DecodeEqualsTheCpuReferenceAcrossShapes:CqCuda.DecodeRows*:CqCuda.Codecs*:CqCuda.Encode*'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
step "python"
[ -n "$python" ] && for p in test_qvg.py test_torch.py; do
  PYTHONPATH=build-gpu/python python3 -m unittest discover -s python/tests -p "$p" -v >>"$OUT/python.log" 2>&1 ||
    { rc=1; echo "python $p FAILED"; }
done
grep -E "^(Ran|OK|FAILED)|Error|FAIL:" "$OUT/python.log" | head -20
step "bench_cuda --cq"
build-gpu/bench/bench_cuda --cq --reps "${QVG_CQ_REPS:-20}" 2>&1 | tee "$OUT/bench.log"
exit $rc
