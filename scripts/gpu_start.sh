# Sourced by the GPU scripts (gpu_check.sh, gpu_e2e.sh, gpu_fat.sh): strict
# mode, the repository root, $OUT (the logs that come back), step() for
# timestamped headings, and the device's line in $OUT/device.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/qvg-gpu-out}
mkdir -p "$OUT"
step() { echo "== $(date +%T) $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.log"
