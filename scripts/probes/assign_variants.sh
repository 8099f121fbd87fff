#!/usr/bin/env bash
# A/B of variants of the k-means assignment kernel in one GPU call, without
# building the library: each variant is a folder holding a changed copy of
# cuda/assign_tc.cuh (e.g. ab/v1/cuda/assign_tc.cuh), put first on the
# include path of bench/probes/assign_variants.cu; '-' is the tree as it is. All
# compile at once (about 10 s each), then run twice in turn (the second round
# shows the noise).
#   scripts/probes/assign_variants.sh [-] [DIR[,NVCC_FLAGS]] ...    e.g. - ab/v1 ab/v2,-DFOO=1
# On the GPU machine: run from the repository root; the folders must be
# carried (keep them in a folder .git/info/exclude ignores, such as ab/).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: assign_variants.sh [-] [DIR[,NVCC_FLAGS]] ..." >&2; exit 2; }
command -v nvcc >/dev/null || PATH=$PATH:/usr/local/cuda/bin
bin=$(mktemp -d)
i=0
names=()
for v in "$@"; do
  dir=${v%%,*}; flags=""; [ "$v" != "$dir" ] && flags=${v#*,}
  inc=()
  if [ "$dir" != "-" ]; then
    [ -f "$dir/cuda/assign_tc.cuh" ] || { echo "assign_variants.sh: no $dir/cuda/assign_tc.cuh" >&2; exit 2; }
    inc=(-I "$dir")
  fi
  i=$((i + 1)); names+=("$v")
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++20 -arch=sm_90a ${flags//;/ } "${inc[@]}" -I src -I include -I bench -I bench/probes -o "$bin/v$i" \
    bench/probes/assign_variants.cu >"$bin/v$i.log" 2>&1 &
done
wait
rc=0
for j in $(seq 1 $i); do
  [ -x "$bin/v$j" ] || { echo "assign_variants.sh: ${names[$((j - 1))]} did not compile:"; head -20 "$bin/v$j.log"; rc=1; }
done
for round in 1 2; do
  for j in $(seq 1 $i); do
    [ -x "$bin/v$j" ] || continue
    echo "== ${names[$((j - 1))]} (round $round)"
    "$bin/v$j" --reps "${QVG_BENCH_REPS:-30}" || rc=1
  done
done
rm -rf "$bin"
exit $rc
