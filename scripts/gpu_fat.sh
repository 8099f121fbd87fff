#!/usr/bin/env bash
# One call on the GPU machine for the non-Hopper path (issue 39, item 6): the
# GPU tests from a build for sm_80 only (PTX, compiled by the driver at load on
# the Hopper GPU: mma.sync instead of wgmma, the k-means starts on the host
# instead of the cluster kernels), then bench_cuda from that build beside the
# sm_90a build's, in the same call. Logs under $OUT. Needs the carried .deps.
# Environment: QVG_FAT_REPS (bench_cuda repetitions, default 5), QVG_FAT_SKIP_HOPPER (no sm_90a
# build or bench), QVG_FAT_TESTS (the test binaries), QVG_FAT_TEST_S (a binary's time limit).
source "$(dirname "$0")/gpu_start.sh"
tests=${QVG_FAT_TESTS:-"test_kmeans test_cuda test_assign_kernel test_reseed_kernel test_device_codec test_device_cache
  test_cuda_baselines test_model_cuda test_hostile_numbers"}
step "build for sm_80 (PTX)"
# shellcheck disable=SC2086
QVG_GPU_BUILD_DIR=build-sm80 QVG_CUDA_ARCHS=80-virtual scripts/gpu_build.sh "$OUT/build_sm80.log" $tests bench_cuda || exit 1
if [ -z "${QVG_FAT_SKIP_HOPPER:-}" ]; then
  step "build for sm_90a"
  scripts/gpu_build.sh "$OUT/build.log" bench_cuda test_assign_kernel || exit 1
fi
rc=0
step "tests from the sm_80 build"
# The driver compiles the PTX at load, once per module; its cache (kept while the machine is
# warm) serves the later binaries: large enough for all of it. On an H100 on 2026-12-07 the
# first decode test did not finish within 230 s (the decode kernels' PTX, probably).
export CUDA_CACHE_MAXSIZE=4294967296
for t in $tests; do
  timeout "${QVG_FAT_TEST_S:-540}" build-sm80/tests/$t --gtest_brief=1 >>"$OUT/tests_sm80.log" 2>&1 ||
    { rc=1; echo "$t FAILED or not finished within ${QVG_FAT_TEST_S:-540} s"; }
done
grep -E "PASSED|FAILED|Failure|Expected|Which is|differ" "$OUT/tests_sm80.log" | head -40
if [ -z "${QVG_FAT_SKIP_HOPPER:-}" ]; then
  step "the assignment forms on sm_90a (float rows in shared memory / through L1), memcheck"
  sanitize memcheck test_assign_kernel
  grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/sanitizer.log"
fi
step "bench_cuda: sm_80 build"
build-sm80/bench/bench_cuda --reps "${QVG_FAT_REPS:-5}" --json "$OUT/bench_sm80.json" 2>&1 | tee "$OUT/bench_sm80.log" | tail -40
build-sm80/bench/bench_cuda --starts --reps 3 2>&1 | tee -a "$OUT/bench_sm80.log" | tail -12
if [ -z "${QVG_FAT_SKIP_HOPPER:-}" ]; then
  step "bench_cuda: sm_90a build"
  build-gpu/bench/bench_cuda --reps "${QVG_FAT_REPS:-5}" --json "$OUT/bench_sm90a.json" 2>&1 | tee "$OUT/bench_sm90a.log" | tail -40
fi
exit $rc
