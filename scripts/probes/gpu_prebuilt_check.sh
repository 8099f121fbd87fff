#!/usr/bin/env bash
# One device call when the CUDA build is longer than a call allows: run a test
# binary built on the CPU machine (for sm_90a, carried xz-compressed as
# .cache/gb/test_cuda.xz) at once, compute-sanitizer memcheck on a filter of it,
# while the device builds test_device_codec and test_model_cuda in the
# background; those run if their build ends before DEADLINE seconds.
#   OUT=... scripts/probes/gpu_prebuilt_check.sh [DEADLINE] [MEMCHECK_FILTER]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-prebuilt-out}
deadline=$((SECONDS + ${1:-540}))
filter=${2:-Cuda.DecodeIsBitIdentical:Cuda.MultiStage*:Cuda.FixedIteration*}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "background build"
(scripts/gpu_build.sh "$OUT/build.log" test_device_codec test_model_cuda >"$OUT/build_status.log" 2>&1
 echo "build rc=$?" >>"$OUT/build_status.log") &
build=$!
xz -dc .cache/gb/test_cuda.xz >/tmp/test_cuda && chmod +x /tmp/test_cuda
step "prebuilt test_cuda"
/tmp/test_cuda --gtest_brief=1 >"$OUT/tests.log" 2>&1
echo "test_cuda rc=$?"
grep -E "PASSED|FAILED|Failure|Expected|Which is|actual|tests ran" "$OUT/tests.log" | head -40
step "memcheck: $filter"
timeout $((deadline - SECONDS - 200 > 30 ? 150 : 30)) compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/test_cuda \
  --gtest_brief=1 --gtest_filter="$filter" >"$OUT/sanitizer.log" 2>&1
echo "memcheck rc=$?"
grep -E "tests from .* ran|PASSED|FAILED|ERROR SUMMARY|Invalid" "$OUT/sanitizer.log" | head
while kill -0 "$build" 2>/dev/null && ((SECONDS < deadline - 40)); do sleep 5; done
if kill -0 "$build" 2>/dev/null; then
  step "build not done by the deadline"; tail -3 "$OUT/build.log"; exit 1
fi
cat "$OUT/build_status.log"
for t in test_device_codec test_model_cuda; do
  [ -x build-gpu/tests/$t ] || continue
  step "$t"
  timeout $((deadline - SECONDS > 10 ? deadline - SECONDS : 10)) build-gpu/tests/$t --gtest_brief=1 >>"$OUT/tests.log" 2>&1
  echo "$t rc=$?"
done
grep -E "PASSED|FAILED|Failure|Expected|Which is" "$OUT/tests.log" | tail -20
step done
