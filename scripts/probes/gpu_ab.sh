#!/usr/bin/env bash
# A/B of a change on the GPU machine, in the same call as scripts/gpu_check.sh
# (which builds build-gpu first): copy the files under OVERLAY (a tree that
# mirrors the repository, e.g. ab/src/cuda/assign_tc.cuh) over the working
# tree, rebuild incrementally, run the k-means and encode GPU tests, and time
# the encode per kernel (ncu) and end to end (bench_cuda), then the assignment
# probe. The baseline's figures are the ones gpu_check.sh wrote.
#   scripts/probes/gpu_ab.sh OVERLAY [LABEL]     logs: $OUT/ab_LABEL.log
# scripts/probes/make_overlay.sh REV OVERLAY writes a branch's changed files there.
set -uo pipefail
cd "$(dirname "$0")/../.."
overlay=${1:?usage: gpu_ab.sh OVERLAY [LABEL]}
label=${2:-$(basename "$overlay")}
OUT=${OUT:-/tmp/qvg-gpu-out}
log="$OUT/ab_$label.log"
[ -d "$overlay" ] || { echo "gpu_ab.sh: no overlay folder '$overlay'" >&2; exit 2; }
[ -d build-gpu ] || { echo "gpu_ab.sh: build-gpu missing: run scripts/gpu_check.sh first" >&2; exit 2; }
step() { echo "== $(date +%T) [$label] $*"; }
rc=0
{
  step "overlay"
  (cd "$overlay" && find . -type f | sort) | while read -r f; do
    cmp -s "$overlay/$f" "$f" && echo "same: $f" || echo "changed: $f"
    cp "$overlay/$f" "$f"
  done
  step "build"
  cmake -S . -B build-gpu -DQVG_BUILD_PROBES=ON >/dev/null && cmake --build build-gpu -j16 --target test_cuda test_kmeans bench_cuda bench_assign_probe >/tmp/qvg_ab_build.log 2>&1 ||
    { grep -E "error" /tmp/qvg_ab_build.log | head -30; exit 1; }
  step "tests"
  build-gpu/tests/test_kmeans --gtest_brief=1 || rc=1
  build-gpu/tests/test_cuda --gtest_brief=1 || rc=1
  step "per-kernel times (ncu)"
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    build-gpu/bench/bench_cuda --profile >/tmp/qvg_ab_ncu.log 2>&1 || rc=1
  python3 scripts/probes/ncu_summary.py /tmp/qvg_ab_ncu.log || rc=1
  step "assignment probe"
  build-gpu/bench/probes/bench_assign_probe --reps "${QVG_BENCH_REPS:-20}" || rc=1
  step "benchmark"
  build-gpu/bench/bench_cuda --reps "${QVG_BENCH_REPS:-20}" --quick || rc=1
  step "done rc=$rc"
} >"$log" 2>&1
grep -vE "^\[ *(RUN|OK) *\]|^same: " "$log" | head -150
exit $rc
