#!/usr/bin/env bash
# Configure build-gpu (CUDA for sm_90a, no FFmpeg, the CLI where CLI11 is carried; nlohmann-json
# from the carried .deps; the Python module against python3 where that
# interpreter has pybind11 and its headers, as PyTorch's venv there has) and
# build the given targets, logging to LOG. On
# failure prints the configure log's tail or the build's errors and exits 1.
# Shared by scripts/gpu_check.sh and scripts/probes/ (QVG_BUILD_PROBES=ON builds the probes).
#   scripts/gpu_build.sh LOG TARGET...
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:?usage: gpu_build.sh LOG TARGET...}
shift
[ $# -ge 1 ] || { echo "usage: gpu_build.sh LOG TARGET..." >&2; exit 2; }
py=()
if pydir=$(python3 -m pybind11 --cmakedir 2>/dev/null) &&
  [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then
  py=(-DPython_EXECUTABLE="$(command -v python3)" -Dpybind11_DIR="$pydir")
fi
# The qvg CLI where CLI11 is carried in .deps (its headers and CMake files).
tools=(-DQVG_BUILD_TOOLS=OFF)
[ -f .deps/share/cmake/CLI11/CLI11Config.cmake ] && tools=(-DQVG_BUILD_TOOLS=ON -DCLI11_DIR="$PWD/.deps/share/cmake/CLI11")
cmake -S . -B build-gpu -G Ninja "${py[@]}" "${tools[@]}" -DCMAKE_BUILD_TYPE=Release -DQVG_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_PROBES=${QVG_BUILD_PROBES:-OFF} -Dnlohmann_json_DIR="$PWD/.deps/share/cmake/nlohmann_json" \
  >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
cmake --build build-gpu -j16 --target "$@" >>"$log" 2>&1 || { grep -E "error" "$log" | head -30; exit 1; }
