#!/usr/bin/env bash
# Full pipeline of the qvg reference model: train -> sample/evaluate + golden -> K/V
# statistics -> figures. Runs on one GPU (the H200 run took ~9-10 min in all) or, with
# tiny settings, on a CPU.
#
# Usage: train/run_all.sh RUN_DIR [extra train.py arguments...]
#   e.g. train/run_all.sh /tmp/qvg_run --steps 2400 --batch 32
# Needs the decoded frames in .cache/qvg_frames (python3 train/prepare_data.py).
# Env: SKIP_TRAIN=1 reuses RUN_DIR/train/model.safetensors; SKIP_KV=1 skips K/V stats.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run="${1:?usage: run_all.sh RUN_DIR [train args]}"
shift
export PYTHONUNBUFFERED=1
mkdir -p "$run"
stamp() { echo "[run_all $(date +%T)] $*"; }
stamp start
if [[ "${SKIP_TRAIN:-0}" != 1 ]]; then
  python3 "$here/train.py" --out "$run/train" "$@"
fi
stamp sample
python3 "$here/sample.py" --model "$run/train/model.safetensors" --out "$run/eval" \
  --golden "$run/golden"
if [[ "${SKIP_KV:-0}" != 1 ]]; then
  stamp kv_stats
  python3 "$here/kv_stats.py" --model "$run/train/model.safetensors" --out "$run/eval" \
    --dump "$run/golden/kv_span_layer3.safetensors"
fi
stamp figures
python3 "$here/figures.py" --train "$run/train" --eval "$run/eval" --out "$run/figures"
stamp "done: $run"
