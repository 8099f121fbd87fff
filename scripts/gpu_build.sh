#!/usr/bin/env bash
# Configure build-gpu (CUDA for sm_90a, no FFmpeg, the CLI where CLI11 is carried; nlohmann-json
# from the carried .deps, which scripts/make_deps.sh fills; the Python module against python3 where
# that interpreter has pybind11 and its headers, as PyTorch's venv there has, and .deps has DLPack) and
# build the given targets, logging to LOG. On
# failure prints the configure log's tail or the build's errors and exits 1.
# Shared by scripts/gpu_check.sh and scripts/probes/ (QVG_BUILD_PROBES=ON builds the probes).
# QVG_GPU_BUILD_DIR (default build-gpu) and QVG_CUDA_ARCHS (default 90a) pick the folder and targets.
#   scripts/gpu_build.sh LOG TARGET...
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:?usage: gpu_build.sh LOG TARGET...}
shift
[ $# -ge 1 ] || { echo "usage: gpu_build.sh LOG TARGET..." >&2; exit 2; }
py=()
# Python.h: where sysconfig says, else any python3.X/Python.h of that version under /usr, /usr/local or /opt.
pyinc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if [ ! -f "$pyinc/Python.h" ]; then
  ver=$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)
  pyinc=$(find /usr/include /usr/local/include /opt -path "*/$ver/Python.h" 2>/dev/null | head -1 | xargs -r dirname)
fi
if pydir=$(python3 -m pybind11 --cmakedir 2>/dev/null) && [ -n "$pyinc" ] && [ -f "$pyinc/Python.h" ]; then
  py=(-DPython_EXECUTABLE="$(command -v python3)" -DPython_INCLUDE_DIR="$pyinc" -Dpybind11_DIR="$pydir")
else
  echo "gpu_build.sh: no Python module (python3 $(command -v python3); pybind11 cmakedir '${pydir:-none}';" \
    "Python.h in '${pyinc:-none}')" | tee -a "$log.python" >&2
fi
# The qvg CLI where CLI11 is carried in .deps (its headers and CMake files).
tools=(-DQVG_BUILD_TOOLS=OFF)
[ -f .deps/include/dlpack/dlpack.h ] || echo "gpu_build.sh: no .deps/include/dlpack (scripts/make_deps.sh): no Python module" >&2
[ -f .deps/share/cmake/CLI11/CLI11Config.cmake ] && tools=(-DQVG_BUILD_TOOLS=ON -DCLI11_DIR="$PWD/.deps/share/cmake/CLI11")
bdir=${QVG_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$bdir" -G Ninja "${py[@]}" "${tools[@]}" -DCMAKE_BUILD_TYPE=Release -DQVG_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${QVG_CUDA_ARCHS:-90a}" \
  -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_PROBES=${QVG_BUILD_PROBES:-OFF} -Dnlohmann_json_DIR="$PWD/.deps/share/cmake/nlohmann_json" \
  >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
cmake --build "$bdir" -j16 --target "$@" >>"$log" 2>&1 || { grep -E "error" "$log" | head -30; exit 1; }
