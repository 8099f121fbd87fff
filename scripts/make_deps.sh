#!/usr/bin/env bash
# Fills .deps (ignored by git: .git/info/exclude) with what the GPU machine
# lacks, from this machine's Debian packages: nlohmann-json and CLI11
# (headers and CMake files), DLPack's header (the Python module). Carry it
# to the GPU machine: run(carry=[".deps"]). scripts/gpu_build.sh reads it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/include .deps/share/cmake
for pkg in nlohmann_json:nlohmann CLI11:CLI dlpack:dlpack; do
  cmake_dir=${pkg%%:*} inc=${pkg##*:}
  [ -d "/usr/include/$inc" ] || { echo "make_deps.sh: /usr/include/$inc missing (apt-get install nlohmann-json3-dev libcli11-dev libdlpack-dev)" >&2; exit 1; }
  cp -r "/usr/include/$inc" .deps/include/
  [ -d "/usr/share/cmake/$cmake_dir" ] && cp -r "/usr/share/cmake/$cmake_dir" .deps/share/cmake/
done
exclude=$(git rev-parse --git-common-dir)/info/exclude  # a worktree's .git is a file
grep -qx '.deps/' "$exclude" 2>/dev/null || echo '.deps/' >>"$exclude"
echo "make_deps.sh: .deps holds $(ls .deps/include | tr '\n' ' ')"
