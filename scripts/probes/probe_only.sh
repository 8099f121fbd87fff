#!/usr/bin/env bash
# One short GPU call: build bench_decode_probe alone and run it (decode kernel
# variants, bit-checked against decode_kernel), for A/B work between full
# checks (scripts/gpu_check.sh). Needs the carried folder .deps. Output under
# $OUT (decode_probe.log); QVG_BENCH_REPS (default 20).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
QVG_BUILD_PROBES=ON scripts/gpu_build.sh /tmp/qvg_probe_build.log bench_decode_probe || exit 1
build-gpu/bench/probes/bench_decode_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/decode_probe.log"
