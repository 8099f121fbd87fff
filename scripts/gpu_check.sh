#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA backend, run its tests (and the
# CPU tests they stand on), compute-sanitizer memcheck + racecheck, and the
# benchmark. Logs and JSON go to $OUT. Needs the carried folder .deps
# (nlohmann-json's headers and CMake files; see docs/BENCHMARKS.md).
# Environment: QVG_BENCH_REPS (default 20), QVG_BENCH_QUICK (skip the CPU error
# comparison on random data), QVG_SKIP_BENCH, QVG_SKIP_PROBE (bench_decode_probe), QVG_SKIP_RUNTIME (the model's
# QVG-over-BF16 overhead runs), QVG_SKIP_NCU, QVG_NCU_DECODE (ncu detail of
# the decode kernels), QVG_SKIP_ASSIGN (bench_assign_probe), QVG_NCU_ASSIGN (ncu
# detail of the k-means assignment), QVG_NCU_KERNELS (a regex: ncu detail of those encode kernels),
# QVG_NCU_SASS (a regex on mangled kernel names: instruction-level stalls and mix, scripts/sass_hotspots.py),
# QVG_SKIP_PYTHON (the Python module's tests, device="cuda" included),
# QVG_RACECHECK_PP_S (time limit of the k-means++ racecheck, 0 skips it),
# QVG_SASS_DUMP (a regex on mangled kernel names: cuobjdump -sass of those
# kernels of bench_decode_probe and their opcode counts, scripts/sass_mix.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.log"
step "configure + build"
scripts/gpu_build.sh "$OUT/build.log" test_cuda test_cuda_baselines test_model_cuda test_assign_kernel test_kmeans \
  test_codecs test_formats test_group_quant bench_cuda bench_decode_probe bench_model_cuda bench_assign_probe || exit 1
rc=0
step "tests"
for t in test_formats test_group_quant test_kmeans test_codecs test_cuda test_cuda_baselines test_model_cuda test_assign_kernel; do  # one log file (at most 8 files come back)
  build-gpu/tests/$t --gtest_brief=1 >>"$OUT/tests.log" 2>&1 || { rc=1; echo "$t FAILED"; }
done
grep -E "PASSED|FAILED|Failure|Expected|Which is|actual" "$OUT/tests.log" | head -40
if [ -z "${QVG_SKIP_PYTHON:-}" ]; then  # python/tests/test_qvg.py, its OnTheGpu tests included
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
compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda --gtest_brief=1 \
  --gtest_filter='Cuda.QuantizeGiven*:Cuda.QuantizeAt*:Cuda.BlockScales*:Cuda.DecodeIsBitIdentical:Cuda.DecodeKernelsAgree:Cuda.DecodeOfEvery*:Cuda.DecodeOfARange*:Cuda.CentroidSums*:Cuda.CacheReadDevice*:Cuda.KMeansMatchesCpu*:Cuda.KMeansPlusPlus*:Cuda.WarmStart*:Cuda.EncodeEquals*:Cuda.MultiStage*:Cuda.FixedIteration*:Cuda.Assignment*' \
  >"$OUT/sanitizer.log" 2>&1 || rc=1
compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda_baselines --gtest_brief=1 \
  >>"$OUT/sanitizer.log" 2>&1 || rc=1
compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_assign_kernel --gtest_brief=1 \
  >>"$OUT/sanitizer.log" 2>&1 || rc=1
grep -E "tests from .* ran|PASSED|SKIPPED|FAILED|ERROR SUMMARY" "$OUT/sanitizer.log"
step "compute-sanitizer racecheck"
compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_cuda --gtest_brief=1 \
  --gtest_filter='Cuda.DecodeIsBitIdentical:Cuda.DecodeKernelsAgree:Cuda.DecodeOfARange*:Cuda.CentroidSums*' >>"$OUT/sanitizer.log" 2>&1 || rc=1
grep -E "RACECHECK SUMMARY" "$OUT/sanitizer.log"
# The k-means++ kernel (clusters, distributed shared memory) runs slowly under
# racecheck: more than 4.5 minutes for its tests on the H200, so it gets its
# own step with a time limit (QVG_RACECHECK_PP_S, default 300 s; 0 skips it).
if [ "${QVG_RACECHECK_PP_S:-300}" != 0 ]; then
  step "compute-sanitizer racecheck: k-means++ (at most ${QVG_RACECHECK_PP_S:-300} s)"
  timeout "${QVG_RACECHECK_PP_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_cuda \
    --gtest_brief=1 --gtest_filter='Cuda.KMeansPlusPlus*' >/tmp/qvg_racecheck_pp.log 2>&1
  case $? in
    0) grep -E "RACECHECK SUMMARY" /tmp/qvg_racecheck_pp.log ;;
    124) echo "k-means++ racecheck: not finished within the limit (no verdict)"; grep -cE "Race|Potential" /tmp/qvg_racecheck_pp.log ;;
    *) rc=1; grep -E "RACECHECK SUMMARY|Potential|Race" /tmp/qvg_racecheck_pp.log | head -5 ;;
  esac
  cat /tmp/qvg_racecheck_pp.log >>"$OUT/sanitizer.log"
fi
step "decode probe"
[ -n "${QVG_SKIP_PROBE:-}" ] || build-gpu/bench/bench_decode_probe --reps "${QVG_BENCH_REPS:-20}" --json "$OUT/decode_probe.json" 2>&1 | tee "$OUT/decode_probe.log" || rc=1
step "assignment probe"
[ -n "${QVG_SKIP_ASSIGN:-}" ] || build-gpu/bench/bench_assign_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/assign_probe.log" || rc=1
step "benchmark"
[ -n "${QVG_SKIP_BENCH:-}" ] || build-gpu/bench/bench_cuda --json "$OUT/bench_cuda.json" --reps "${QVG_BENCH_REPS:-20}" ${QVG_BENCH_QUICK:+--quick} 2>&1 | tee "$OUT/bench_cuda.log" || rc=1
if [ -z "${QVG_SKIP_RUNTIME:-}" ]; then  # the model on the GPU: QVG cache overhead over BF16 per chunk
  step "runtime overhead"
  for opts in "--cache-backend cuda" "--cache-backend cuda --host-read" "--cache-backend cpu"; do
    build-gpu/bench/bench_model_cuda --no-cpu --passes 5 --chunks 14 --cache qvg --baseline bf16 $opts
  done 2>&1 | tee "$OUT/runtime.log" | grep -E "overhead|mean per|cache codecs|steady" || rc=1
fi
if [ -z "${QVG_SKIP_NCU:-}" ]; then  # one QVG and one QVG-Pro encode: time per kernel (one metric: one replay each)
  step "per-kernel times (ncu)"
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    build-gpu/bench/bench_cuda --profile >"$OUT/ncu.log" 2>&1 || rc=1
  python3 scripts/ncu_summary.py "$OUT/ncu.log" || rc=1
fi
if [ -n "${QVG_NCU_DECODE:-}" ]; then  # why the decode is where it is: throughput, occupancy, stalls
  step "ncu decode detail"
  ncu --clock-control none -k regex:decode --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis build-gpu/bench/bench_cuda --profile \
    >"$OUT/ncu_decode.log" 2>&1 || rc=1
  grep -E "decode|Throughput|Duration|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|Warp Cycles Per Issued|Mem Busy|Max Bandwidth|L2 Hit|Issued Ipc|Executed Ipc|One or More|No Eligible" "$OUT/ncu_decode.log" | head -90
fi
if [ -n "${QVG_NCU_ASSIGN:-}" ]; then  # where the k-means assignment's time goes: pipes, stalls, instruction mix
  step "ncu assignment detail"
  ncu --clock-control none -k regex:assign_tc_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section InstructionStats \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats --section SourceCounters \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    build-gpu/bench/bench_assign_probe --reps 1 >"$OUT/ncu_assign.log" 2>&1 || rc=1
  echo "stall reasons (warps per issued instruction):"
  grep -E "issue_stalled" "$OUT/ncu_assign.log" | awk '{print $NF, $1}' | sort -gr | head -12
  cuobjdump -sass build-gpu/bench/bench_assign_probe 2>/dev/null | awk '/Function :/ { keep = index($0, \
    "assign_tc_kernelILi128E13__nv_bfloat16Li16ELi0ELb1E") > 0 } keep' >"$OUT/assign_sass.txt"  # the default kernel
  grep -vE "^ *-+ *$|^==PROF==|^ *$|Section:|Metric Name" "$OUT/ncu_assign.log" | grep -E "^    [A-Z]" | cut -c1-110 | head -75
fi
if [ -n "${QVG_NCU_SASS:-}" ]; then  # instruction-level stalls and mix of one kernel (a regex on mangled names)
  # e.g. QVG_NCU_SASS=decode_tile_kernelILi2ELi128ELi4ELi4E (QVG-Pro's tile decode, from bench_decode_probe)
  #      QVG_NCU_SASS=assign_tc_kernelILi128E13__nv_bfloat16Li16ELi0ELb1E (from bench_assign_variants)
  step "ncu source-level profile: ${QVG_NCU_SASS}"
  case "$QVG_NCU_SASS" in
    *assign*) prog=(build-gpu/bench/bench_assign_variants --reps 1) ;;
    *) prog=(build-gpu/bench/bench_decode_probe --reps 1) ;;
  esac
  cmake --build build-gpu -j16 --target bench_assign_variants >>"$OUT/build.log" 2>&1 || rc=1
  ncu --clock-control none --kernel-name-base mangled -k "regex:${QVG_NCU_SASS}" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
    -o /tmp/qvg_sass_rep -f "${prog[@]}" >/tmp/qvg_sass_run.log 2>&1 || rc=1
  ncu -i /tmp/qvg_sass_rep.ncu-rep --page source --csv --print-source sass >/tmp/qvg_sass.csv 2>&1 || rc=1
  gzip -c /tmp/qvg_sass.csv >"$OUT/sass.csv.gz"
  python3 scripts/sass_hotspots.py /tmp/qvg_sass.csv --top 30 | tee "$OUT/sass_hotspots.log" || rc=1
fi
if [ -n "${QVG_SASS_DUMP:-}" ]; then  # the code of some kernels, e.g. QVG_SASS_DUMP='decode_tile_kernelILi2ELi128ELi4E'
  step "SASS of ${QVG_SASS_DUMP}"
  cuobjdump -sass build-gpu/bench/bench_decode_probe 2>/dev/null |
    awk -v re="$QVG_SASS_DUMP" '/Function :/ { keep = ($0 ~ re) } keep' >/tmp/qvg_sass_dump.txt || rc=1
  grep -c "Function :" /tmp/qvg_sass_dump.txt
  gzip -c /tmp/qvg_sass_dump.txt >"$OUT/sass_dump.txt.gz"
fi
if [ -n "${QVG_NCU_KERNELS:-}" ]; then  # detail of the encode kernels matching this regex (one launch each)
  step "ncu kernel detail: ${QVG_NCU_KERNELS}"
  ncu --clock-control none -k "regex:${QVG_NCU_KERNELS}" --launch-count 3 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    build-gpu/bench/bench_cuda --profile >"$OUT/ncu_kernels.log" 2>&1 || rc=1
  grep -E "^  [a-zA-Z_:]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Warp|Eligible Warps|issue_stalled_(long|wait|math|barrier|short|mio|lg|not_sel|selected|dispatch)" \
    "$OUT/ncu_kernels.log" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-110 | head -80
fi
# At most 8 files come back from a device call (device/README.md): keep up
# to 7 of the figures' files in this order and bundle the rest (build, device,
# test and sanitizer logs, dumps) into logs.tgz.
keep=(decode_probe.log bench_cuda.log bench_cuda.json runtime.log sass_hotspots.log assign_probe.log ncu.log)
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
