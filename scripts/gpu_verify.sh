#!/usr/bin/env bash
# One call on the GPU machine that checks what the GPU scripts' work needs
# checked, with one build: every GPU test binary (device codec and cache, the
# CUDA codecs, k-means, the assignment kernel, code=cq's decode, the embedded
# consumer), memcheck of the newest paths, and the Python module's GPU tests.
# Figures come from the other scripts (gpu_e2e.sh, gpu_cq.sh,
# gpu_encode_api.sh, gpu_fat.sh) on the same warm machine. Logs under $OUT.
# Needs the carried .deps (scripts/gpu_build.sh).
source "$(dirname "$0")/gpu_start.sh"
tests=(test_cuda test_kmeans test_device_codec test_device_cache test_assign_kernel test_embed test_cq_cuda test_cq
  test_cuda_baselines test_contiguous_views)
step "build"
scripts/gpu_build.sh "$OUT/build.log" "${tests[@]}" bench_cuda || exit 1
rc=0
python=1
cmake --build build-gpu -j16 --target qvg_python >>"$OUT/build.log" 2>&1 || { python=; echo "no Python module (build.log)"; }
step "tests"
gtests "${tests[@]}"
grep -E "PASSED|FAILED|Failure|Expected|Which is|differ|exception" "$OUT/tests.log" | head -40
step "memcheck"
sanitize memcheck test_cuda 'Cuda.DeviceStoppingRule*:Cuda.SampledStarts*'
sanitize memcheck test_device_codec '*StoppingRule*:*Batch*'
sanitize memcheck test_device_cache '*Batched*:*ReleasePool*'
sanitize memcheck test_contiguous_views 'ContiguousViews.SplitRanges*:ContiguousViews.MisuseIsAnError:ContiguousViews.ACacheMadeAgain*'
sanitize memcheck test_cq_cuda 'CqCuda.DecodeEqualsTheCpuReferenceAcrossShapes:CqCuda.DecodeRows*:CqCuda.Codecs*:CqCuda.Encode*'
grep -E "ERROR SUMMARY" "$OUT/sanitizer.log"
step "python"
[ -n "$python" ] && for p in test_qvg.py test_torch.py test_integrations.py test_offload_streams.py; do
  PYTHONPATH=build-gpu/python timeout 300 python3 -m unittest discover -s python/tests -p "$p" -v \
    >>"$OUT/python.log" 2>&1 || { rc=1; echo "python $p FAILED"; }
done
grep -E "^(Ran|OK|FAILED)|Error|FAIL:" "$OUT/python.log" | head -30
exit $rc
