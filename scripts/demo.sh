#!/usr/bin/env bash
# The main job: install, build, and run `qvg demo`: the reference video model continues a held-out
# clip with its KV cache in BF16 and in each INT2 method (RTN, KIVI, QuaRot, QVG, QVG-Pro); prints
# bits, ratio, PSNR/SSIM against BF16 and time per chunk (about 2 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec "${QVG_BUILD_DIR:-build}/qvg" demo "$@"
