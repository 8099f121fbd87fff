#!/usr/bin/env bash
# Installs the Debian 12 packages qvg builds with (as root; skips what is there).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
      libeigen3-dev pybind11-dev python3-dev python3-numpy python3-venv python3-pip python3-setuptools python3-wheel libdlpack-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev gnuplot-nox
      clang libclang-rt-dev)  # (clang + its sanitizer and libFuzzer runtimes: scripts/fuzz.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
