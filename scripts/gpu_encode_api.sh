#!/usr/bin/env bash
# One call on the GPU machine for DeviceCodec.encode against the kernels
# (issue 38, item 3): build, the tests that compare the device encode (its
# stopping rule decided on the device) with the CPU reference, with the host
# rule and with fixed-iteration encodes of each head (test_device_codec,
# test_kmeans, test_cuda; memcheck of the new ones), then bench_cuda's main
# table, whose lines end with "DeviceCodec encode X ms = R x" (the API over
# the kernels' fixed-iteration figure in the same run). Logs under $OUT.
# Needs the carried .deps (scripts/gpu_build.sh).
# Environment: QVG_API_REPS (bench_cuda repetitions, default 5).
source "$(dirname "$0")/gpu_start.sh"
step "build"
scripts/gpu_build.sh "$OUT/build.log" test_device_codec test_kmeans test_cuda bench_cuda || exit 1
rc=0
step "tests"
gtests test_device_codec test_kmeans test_cuda
grep -E "PASSED|FAILED|Failure|Expected|Which is|differ|head [0-9]" "$OUT/tests.log" | head -40
step "memcheck"
sanitize memcheck test_cuda 'Cuda.DeviceStoppingRule*:Cuda.KMeansMatchesCpu*:Cuda.FixedIteration*'
sanitize memcheck test_device_codec '*StoppingRule*'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
step "bench_cuda (API vs kernels)"
# --quick: 3 encode repetitions and no CPU error comparison on random data.
build-gpu/bench/bench_cuda --quick --reps "${QVG_API_REPS:-5}" --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1 || rc=1
# shape, data, method, the kernels' encode ms, then the API's "ms = ratio x".
grep -E "^(self-forcing|longcat)" "$OUT/bench.log" |
  sed -E 's/^(.{36}) (.{11}) (.{44}) +([0-9.]+) .*DeviceCodec encode ([0-9.]+) ms = ([0-9.]+)x.*/\1 \2 \3 kernel \4 ms  api \5 ms  \6x/'
exit $rc
