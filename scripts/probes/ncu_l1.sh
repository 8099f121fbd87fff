#!/usr/bin/env bash
# What in the L1/TEX unit binds a decode kernel: ncu's breakdown of
# l1tex__throughput (the data-pipe wavefronts among it), the global load
# requests and sectors, the issue rate, the ALU/FMA/LSU pipes and the stall
# reasons (warps per issued instruction), for each mangled-name regex given (one launch each, from
# bench_decode_probe at LongCat). Run after scripts/probes/probe_only.sh or
# gpu_check.sh has built build-gpu. Output under $OUT (ncu_l1.log).
#   scripts/probes/ncu_l1.sh REGEX...
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qvg-gpu-out}
metrics="breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
metrics+=",l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
metrics+=",l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
metrics+=",l1tex__t_sector_hit_rate.pct,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed"
metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",sm__warps_active.avg.pct_of_peak_sustained_active"
# the pipes the decode's arithmetic runs on, and why warps wait (warps per issued instruction)
metrics+=",sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
metrics+=",sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"
for w in long_scoreboard short_scoreboard wait mio_throttle lg_throttle math_pipe_throttle not_selected selected \
  no_instruction drain barrier dispatch_stall branch_resolving; do
  metrics+=",smsp__average_warps_issue_stalled_${w}_per_issue_active.ratio"
done
for re in "$@"; do
  echo "== $re"
  ncu --clock-control none --kernel-name-base mangled -k "regex:$re" --launch-count 1 --metrics "$metrics" \
    build-gpu/bench/probes/bench_decode_probe --reps 1 2>&1 | grep -E "^ +[a-z0-9_]+__|decode_|_kernel|ERR|rror" | sed 's/  */ /g'
done 2>&1 | tee "$OUT/ncu_l1.log"
