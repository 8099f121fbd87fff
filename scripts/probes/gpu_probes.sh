#!/usr/bin/env bash
# The lab on the GPU machine: builds the probes (-DQVG_BUILD_PROBES=ON) into
# build-gpu and runs them, plus the profiler runs. Not a check: the product's
# tests and benchmark are scripts/gpu_check.sh. Logs go to $OUT.
# Environment: QVG_BENCH_REPS (default 20), QVG_SKIP_PROBE (bench_decode_probe),
# QVG_SKIP_ASSIGN (bench_assign_probe), QVG_SKIP_NCU (per-kernel encode times),
# QVG_NCU_DECODE (ncu detail of the decode kernels), QVG_NCU_ASSIGN (ncu detail
# of the k-means assignment), QVG_NCU_KERNELS (a regex: ncu detail of those
# encode kernels), QVG_NCU_SASS (a regex on mangled kernel names:
# instruction-level stalls and mix, sass_hotspots.py), QVG_SASS_DUMP (a regex
# on mangled kernel names: cuobjdump -sass of those kernels of
# bench_decode_probe and their opcode counts, sass_mix.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "configure + build (probes on)"
QVG_BUILD_PROBES=ON scripts/gpu_build.sh "$OUT/probes_build.log" bench_cuda bench_decode_probe bench_assign_probe \
  bench_assign_variants || exit 1
rc=0
step "decode probe"
[ -n "${QVG_SKIP_PROBE:-}" ] || build-gpu/bench/probes/bench_decode_probe --reps "${QVG_BENCH_REPS:-20}" --json "$OUT/decode_probe.json" 2>&1 | tee "$OUT/decode_probe.log" || rc=1
step "assignment probe"
[ -n "${QVG_SKIP_ASSIGN:-}" ] || build-gpu/bench/probes/bench_assign_probe --reps "${QVG_BENCH_REPS:-20}" 2>&1 | tee "$OUT/assign_probe.log" || rc=1
if [ -z "${QVG_SKIP_NCU:-}" ]; then  # one QVG and one QVG-Pro encode: time per kernel (one metric: one replay each)
  step "per-kernel times (ncu)"
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    build-gpu/bench/bench_cuda --profile >"$OUT/ncu.log" 2>&1 || rc=1
  python3 scripts/probes/ncu_summary.py "$OUT/ncu.log" || rc=1
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
    build-gpu/bench/probes/bench_assign_probe --reps 1 >"$OUT/ncu_assign.log" 2>&1 || rc=1
  echo "stall reasons (warps per issued instruction):"
  grep -E "issue_stalled" "$OUT/ncu_assign.log" | awk '{print $NF, $1}' | sort -gr | head -12
  cuobjdump -sass build-gpu/bench/probes/bench_assign_probe 2>/dev/null | awk '/Function :/ { keep = index($0, \
    "assign_tc_kernelILi128E13__nv_bfloat16Li16ELb1ELb1E") > 0 } keep' >"$OUT/assign_sass.txt"  # the default kernel
  grep -vE "^ *-+ *$|^==PROF==|^ *$|Section:|Metric Name" "$OUT/ncu_assign.log" | grep -E "^    [A-Z]" | cut -c1-110 | head -75
fi
if [ -n "${QVG_NCU_SASS:-}" ]; then  # instruction-level stalls and mix of one kernel (a regex on mangled names)
  # e.g. QVG_NCU_SASS=decode_tile_kernelILi2ELi128ELi4ELi4E (QVG-Pro's tile decode, from bench_decode_probe)
  #      QVG_NCU_SASS=assign_tc_kernelILi128E13__nv_bfloat16Li16ELb1ELb1E (from bench_assign_variants)
  step "ncu source-level profile: ${QVG_NCU_SASS}"
  case "$QVG_NCU_SASS" in
    *assign*) prog=(build-gpu/bench/probes/bench_assign_variants --reps 1) ;;
    *) prog=(build-gpu/bench/probes/bench_decode_probe --reps 1) ;;
  esac
  cmake --build build-gpu -j16 --target bench_assign_variants >>"$OUT/build.log" 2>&1 || rc=1
  ncu --clock-control none --kernel-name-base mangled -k "regex:${QVG_NCU_SASS}" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
    -o /tmp/qvg_sass_rep -f "${prog[@]}" >/tmp/qvg_sass_run.log 2>&1 || rc=1
  ncu -i /tmp/qvg_sass_rep.ncu-rep --page source --csv --print-source sass >/tmp/qvg_sass.csv 2>&1 || rc=1
  gzip -c /tmp/qvg_sass.csv >"$OUT/sass.csv.gz"
  python3 scripts/probes/sass_hotspots.py /tmp/qvg_sass.csv --top 30 | tee "$OUT/sass_hotspots.log" || rc=1
fi
if [ -n "${QVG_SASS_DUMP:-}" ]; then  # the code of some kernels, e.g. QVG_SASS_DUMP='decode_tile_kernelILi2ELi128ELi4E'
  step "SASS of ${QVG_SASS_DUMP}"
  cuobjdump -sass build-gpu/bench/probes/bench_decode_probe 2>/dev/null |
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
step "done rc=$rc"
exit $rc
