#!/usr/bin/env bash
# One device call: build and run bench_assign_probe alone (the tensor-core
# k-means assignment: its modes, block shapes, and phases left out; gpu_check.sh
# runs it too). Carry: .deps.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
QVG_BUILD_PROBES=ON scripts/gpu_build.sh "$OUT/build.log" bench_assign_probe
build-gpu/bench/probes/bench_assign_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/assign_probe.log"
