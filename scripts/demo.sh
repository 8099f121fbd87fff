#!/usr/bin/env bash
# The main job: install, build, and run `qvg demo`: the reference video model continues a held-out
# clip with its KV cache in BF16 and in each method (RTN, KIVI, QuaRot, QVG, QVG-Pro and the codebook
# residual code qvg:code=cq) at equal memory: every method at its own family's configuration with the
# lowest expected error within 2.5 bits per value, and a rate-distortion sweep (1.5, 2, 3 and 5 bits;
# --rd-bits for others). Prints the tables and writes the plots, CSV files and a labelled side-by-side
# video into qvg-demo/ (4-6 minutes on 2 cores, with the time left in its progress; --quick: 6 s).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec "${QVG_BUILD_DIR:-build}/qvg" demo "$@"
