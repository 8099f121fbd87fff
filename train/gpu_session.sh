#!/usr/bin/env bash
# The reference model's training as device calls of at most 10 minutes each (the
# device tool's limit): the run lives in .cache/run (ignored by git, kept on a warm
# machine between calls); each call copies what it made to $OUT.
#   train/gpu_session.sh train SECONDS   train (or continue from the checkpoint) for SECONDS
#   train/gpu_session.sh eval            evaluate the EMA weights (4- and 2-step samplers),
#                                        the shipped model on the same windows, golden files
#                                        (CPU, fp32), K/V statistics, figures
#   train/gpu_session.sh figures         the shipped model's figures (docs/figures): its continuations
#                                        on the held-out windows (4 steps) and models/metrics' training log
#   train/gpu_session.sh kvstats         the shipped model's K/V statistics (kv_stats.json, kv_absmax.png,
#                                        kv_kmeans.png) and its K/V span of cockatoo@192, layer 3
# Needs the decoded frames in .cache/qvg_frames (train/prepare_data.py), or as .cache/carry/qvg_frames.tar.xz
# (smaller to carry: tar -C .cache -cf - qvg_frames | xz -9 > .cache/carry/qvg_frames.tar.xz).
# Env: QVG_TRAIN_ARGS (train.py arguments, the same in every call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/qvg-train-out}
run=.cache/run
mkdir -p "$OUT" "$run"
export PYTHONUNBUFFERED=1
if [[ ! -f .cache/qvg_frames/manifest.json && -f .cache/carry/qvg_frames.tar.xz ]]; then
  python3 -c "import tarfile; tarfile.open('.cache/carry/qvg_frames.tar.xz').extractall('.cache')"
fi
stamp() { echo "== $(date +%T) $*"; }
args=(${QVG_TRAIN_ARGS:---steps 6400 --batch 32 --val-every 800 --val-reps 2})
case "${1:?usage: gpu_session.sh train SECONDS | eval | figures | kvstats}" in
  train)
    stamp "train for ${2:?seconds} s: ${args[*]}"
    python3 train/train.py --out "$run/train" "${args[@]}" --time-limit "$2" --resume 2>&1 | grep -v "^step .*[1-9]00 \|^step .*[1-9]50 " | tail -40
    cp "$run/train/train_log.txt" "$run/train/train_metrics.json" "$OUT/" 2>/dev/null
    ;;
  eval)
    m="$run/train/model.safetensors"
    stamp "sample: new model, 4 steps (and golden files)"
    python3 train/sample.py --model "$m" --out "$run/eval" --device cuda 2>&1 | tail -25
    stamp "sample: new model, 2 steps"
    python3 train/sample.py --model "$m" --out "$run/eval_2steps" --steps 2 --device cuda 2>&1 | tail -12
    stamp "sample: shipped model, same windows"
    python3 train/sample.py --model models/qvg_ref_video_dit.safetensors --out "$run/eval_old" --device cuda 2>&1 | tail -12
    stamp "golden (CPU, fp32)"
    python3 train/sample.py --model "$m" --out "$run/golden_eval" --golden "$run/golden" --golden-only --device cpu 2>&1 | tail -3
    stamp "K/V statistics"
    python3 train/kv_stats.py --model "$m" --out "$run/eval" --dump "$run/golden/kv_span_cockatoo192_layer3.safetensors" 2>&1 | tail -30
    stamp "figures"
    python3 train/figures.py --train "$run/train" --eval "$run/eval" --out "$run/figures" 2>&1 | tail -5
    # $OUT brings back at most 8 files of 16 MiB: the weights, the golden files, the metrics, one tarball
    cp "$m" "$run/golden/golden.safetensors" "$run/train/train_metrics.json" "$OUT/"
    cp "$run/eval/eval_metrics.json" "$OUT/eval_metrics.json"
    cp "$run/eval_2steps/eval_metrics.json" "$OUT/eval_metrics_2steps.json"
    cp "$run/eval_old/eval_metrics.json" "$OUT/eval_metrics_shipped.json"
    tar -cf "$OUT/rest.tar" -C "$run" figures train/train_log.txt eval/kv_stats.json golden/kv_span_cockatoo192_layer3.safetensors
    ls -la "$OUT"
    stamp done
    ;;
  kvstats)
    stamp "K/V statistics: shipped model"
    python3 train/kv_stats.py --model models/qvg_ref_video_dit.safetensors --out "$OUT" \
      --dump "$OUT/kv_span_cockatoo192_layer3.safetensors" 2>&1 | tail -30
    stamp done
    ;;
  figures)
    stamp "sample: shipped model, 4 steps"
    python3 train/sample.py --model models/qvg_ref_video_dit.safetensors --out "$run/eval_shipped" --device cuda 2>&1 | tail -12
    stamp "figures"
    python3 train/figures.py --train models/metrics --eval "$run/eval_shipped" --out "$OUT/figures" 2>&1 | tail -5
    cp "$run/eval_shipped/eval_metrics.json" "$OUT/eval_metrics.json"
    stamp done
    ;;
  *) echo "gpu_session.sh: unknown phase '$1'" >&2; exit 2 ;;
esac
