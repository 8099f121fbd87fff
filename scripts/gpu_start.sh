# Sourced by the GPU scripts (gpu_verify.sh, gpu_check.sh, gpu_e2e.sh, ...): strict
# mode, the repository root, $OUT (the logs that come back), step() for
# timestamped headings, gtests() and sanitize() for test and compute-sanitizer runs, and the device's line in
# $OUT/device.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.log"
# sanitize TOOL TEST [FILTER]: compute-sanitizer's TOOL (memcheck, racecheck) on build-gpu/tests/TEST with
# gtest filter FILTER (default all), appended to $OUT/sanitizer.log; on failure a line and rc=1.
sanitize() {
  compute-sanitizer --tool "$1" --error-exitcode 9 "build-gpu/tests/$2" --gtest_brief=1 --gtest_filter="${3:-*}" \
    >>"$OUT/sanitizer.log" 2>&1 || { rc=1; echo "$1 $2 ${3:-*} FAILED"; }
}
# gtests TEST...: each build-gpu/tests/TEST (gtest, brief), appended to $OUT/tests.log; on failure a line and rc=1.
gtests() {
  local t
  for t in "$@"; do
    build-gpu/tests/$t --gtest_brief=1 >>"$OUT/tests.log" 2>&1 || { rc=1; echo "$t FAILED"; }
  done
}
