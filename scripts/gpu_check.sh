#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA backend, run its tests (and the
# CPU tests they stand on), compute-sanitizer memcheck + racecheck, the
# benchmark and the model's cache overhead. Logs and JSON go to $OUT. Needs
# the carried folder .deps (nlohmann-json's headers and CMake files).
# Probes and profiler runs: scripts/probes/gpu_probes.sh (after this script).
# Environment: QVG_BENCH_REPS (default 20), QVG_BENCH_QUICK (skip the CPU error
# comparison on random data), QVG_SKIP_BENCH, QVG_SKIP_RUNTIME (the model's
# QVG-over-BF16 overhead runs), QVG_SKIP_PYTHON (the Python module's tests,
# device="cuda" included), QVG_RACECHECK_PP_S (time limit of the k-means++
# racecheck, 0 skips it).
source "$(dirname "$0")/gpu_start.sh"
step "configure + build"
scripts/gpu_build.sh "$OUT/build.log" test_cuda test_cuda_baselines test_model_cuda test_assign_kernel test_kmeans \
  test_codecs test_formats test_group_quant test_device_codec test_reseed_kernel test_device_cache test_hostile_numbers \
  bench_cuda bench_model_cuda || exit 1
rc=0
step "tests"
gtests test_formats test_group_quant test_kmeans test_codecs test_cuda test_cuda_baselines test_device_codec test_model_cuda \
  test_assign_kernel test_reseed_kernel test_device_cache test_hostile_numbers
grep -E "PASSED|FAILED|Failure|Expected|Which is|actual" "$OUT/tests.log" | head -40
if [ -z "${QVG_SKIP_PYTHON:-}" ]; then  # python/tests, test_gpu_module.py's GPU tests included
  step "python module"
  if cmake --build build-gpu -j16 --target qvg_python >>"$OUT/build.log" 2>&1; then
    PYTHONPATH=build-gpu/python python3 -m unittest discover -s python/tests -v >"$OUT/python.log" 2>&1 ||
      { rc=1; echo "python FAILED"; }
    grep -E "^(Ran|OK|FAILED)|skipped|Error|FAIL:" "$OUT/python.log" | head -20
    cat "$OUT/python.log" >>"$OUT/tests.log"
  else
    rc=1
    echo "python module not built (no pybind11 or Python.h for python3?)"
    grep -iE "pybind11|python|error" "$OUT/build.log" | tail -8
  fi
fi
step "compute-sanitizer memcheck"
sanitize memcheck test_cuda 'Cuda.QuantizeGiven*:Cuda.QuantizeAt*:Cuda.BlockScales*:Cuda.DecodeIsBitIdentical:Cuda.DecodeKernelsAgree:Cuda.DecodeOfEvery*:Cuda.DecodeOfARange*:Cuda.CentroidSums*:Cuda.CacheReadDevice*:Cuda.KMeansMatchesCpu*:Cuda.SampledStarts*:Cuda.WarmStart*:Cuda.EncodeEquals*:Cuda.MultiStage*:Cuda.FixedIteration*:Cuda.Assignment*'
sanitize memcheck test_cuda_baselines
sanitize memcheck test_assign_kernel
sanitize memcheck test_device_codec
grep -E "tests from .* ran|PASSED|SKIPPED|FAILED|ERROR SUMMARY" "$OUT/sanitizer.log"
step "compute-sanitizer racecheck"
sanitize racecheck test_cuda 'Cuda.DecodeIsBitIdentical:Cuda.DecodeKernelsAgree:Cuda.DecodeOfARange*:Cuda.CentroidSums*'
grep -E "RACECHECK SUMMARY" "$OUT/sanitizer.log"
# The k-means++ kernel (clusters, distributed shared memory) runs slowly under
# racecheck: more than 4.5 minutes for its tests on the H200, so it gets its
# own step with a time limit (QVG_RACECHECK_PP_S, default 300 s; 0 skips it).
if [ "${QVG_RACECHECK_PP_S:-300}" != 0 ]; then
  step "compute-sanitizer racecheck: k-means++ (at most ${QVG_RACECHECK_PP_S:-300} s)"
  timeout "${QVG_RACECHECK_PP_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_cuda \
    --gtest_brief=1 --gtest_filter='Cuda.SampledStarts*' >/tmp/qvg_racecheck_pp.log 2>&1
  case $? in
    0) grep -E "RACECHECK SUMMARY" /tmp/qvg_racecheck_pp.log ;;
    124) echo "k-means++ racecheck: not finished within the limit (no verdict)"; grep -cE "Race|Potential" /tmp/qvg_racecheck_pp.log ;;
    *) rc=1; grep -E "RACECHECK SUMMARY|Potential|Race" /tmp/qvg_racecheck_pp.log | head -5 ;;
  esac
  cat /tmp/qvg_racecheck_pp.log >>"$OUT/sanitizer.log"
fi
step "benchmark"
[ -n "${QVG_SKIP_BENCH:-}" ] || build-gpu/bench/bench_cuda --json "$OUT/bench_cuda.json" --reps "${QVG_BENCH_REPS:-20}" ${QVG_BENCH_QUICK:+--quick} 2>&1 | tee "$OUT/bench_cuda.log" || rc=1
if [ -z "${QVG_SKIP_RUNTIME:-}" ]; then  # the model on the GPU: QVG cache overhead over BF16 per chunk
  step "runtime overhead"
  for opts in "--cache-backend cuda" "--cache-backend cuda --host-read" "--cache-backend cpu"; do
    build-gpu/bench/bench_model_cuda --no-cpu --passes 5 --chunks 14 --cache qvg --baseline bf16 $opts
  done 2>&1 | tee "$OUT/runtime.log" | grep -E "overhead|mean per|cache codecs|steady" || rc=1
fi
# At most 8 files come back from a device call (device/README.md): keep up
# to 7 of the figures' files in this order and bundle the rest (build, device,
# test and sanitizer logs, dumps) into logs.tgz.
keep=(bench_cuda.log bench_cuda.json runtime.log tests.log sanitizer.log python.log)
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 8 ]; then
  kept=0; bundle=()
  for f in "$OUT"/*; do
    [ -f "$f" ] || continue
    b=$(basename "$f")
    if [ $kept -lt 7 ] && printf '%s\n' "${keep[@]}" | grep -qx "$b"; then kept=$((kept + 1)); else bundle+=("$b"); fi
  done
  (cd "$OUT" && tar czf logs.tgz "${bundle[@]}" && rm -f "${bundle[@]}") || rc=1
  echo "bundled into logs.tgz: ${bundle[*]}"
fi
step "done rc=$rc"
exit $rc
