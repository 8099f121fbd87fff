#!/usr/bin/env bash
# One device call when the CUDA build is longer than a call allows: run a test
# binary built on the CPU machine (for sm_90a, carried xz-compressed as
# .cache/gb/test_cuda.xz) at once, compute-sanitizer memcheck on a filter of it,
# while the device builds QVG_BG_TARGETS (default: test_device_codec
# test_model_cuda) in the background; their test binaries (with qvg_python
# among them, the Python tests in QVG_PY_TESTS, default test_torch; with
# bench_cuda, or a carried .cache/gb/bench_cuda.xz, that benchmark last) run
# if the build ends before DEADLINE seconds.
#   OUT=... scripts/probes/gpu_prebuilt_check.sh [DEADLINE] [MEMCHECK_FILTER]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-prebuilt-out}
deadline=$((SECONDS + ${1:-540}))
filter=${2:-Cuda.DecodeIsBitIdentical:Cuda.MultiStage*:Cuda.FixedIteration*}
read -r -a targets <<<"${QVG_BG_TARGETS:-test_device_codec test_model_cuda}"
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "background build: ${targets[*]}"
(scripts/gpu_build.sh "$OUT/build.log" "${targets[@]}" >"$OUT/build_status.log" 2>&1
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
for t in "${targets[@]}"; do
  [ -x build-gpu/tests/$t ] || continue
  step "$t"
  timeout $((deadline - SECONDS > 10 ? deadline - SECONDS : 10)) build-gpu/tests/$t --gtest_brief=1 >>"$OUT/tests.log" 2>&1
  echo "$t rc=$?"
done
grep -E "PASSED|FAILED|Failure|Expected|Which is" "$OUT/tests.log" | tail -20
if [[ " ${targets[*]} " == *" qvg_python "* ]]; then
  for t in ${QVG_PY_TESTS:-test_torch}; do
    step "python $t"
    PYTHONPATH=build-gpu/python timeout $((deadline - SECONDS > 10 ? deadline - SECONDS : 10)) \
      python3 -m unittest discover -v -s python/tests -p "$t.py" >>"$OUT/python.log" 2>&1
    echo "python $t rc=$?"
  done
  grep -E "^(Ran|OK|FAILED)|Error|FAIL:|skipped" "$OUT/python.log" | head -30
fi
bench=
if [ -f .cache/gb/bench_cuda.xz ]; then
  xz -dc .cache/gb/bench_cuda.xz >/tmp/bench_cuda && chmod +x /tmp/bench_cuda && bench=/tmp/bench_cuda
elif [ -x build-gpu/bench/bench_cuda ] && [[ " ${targets[*]} " == *" bench_cuda "* ]]; then
  bench=build-gpu/bench/bench_cuda
fi
if [ -n "$bench" ]; then
  step "bench_cuda"
  timeout $((deadline - SECONDS - 20 > 30 ? deadline - SECONDS - 20 : 30)) $bench --json "$OUT/bench_cuda.json" \
    ${QVG_BENCH_ARGS:---reps 20} >"$OUT/bench_cuda.log" 2>&1
  echo "bench_cuda rc=$?"
fi
step done
