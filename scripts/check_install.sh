#!/usr/bin/env bash
# The installed package: cmake --install the build into a temporary prefix,
# move the prefix elsewhere (relocatable), build tests/consumer against it
# with find_package(qvg 0.1) and with pkg-config, run both, then run the installed CLI
# (--version; an eval of a shipped clip, found under the moved prefix).
#   scripts/check_install.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mv "$tmp/prefix" "$tmp/moved"
cmake -S tests/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/moved" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/qvg_consumer"
pc_dir=$(dirname "$(find "$tmp/moved" -name qvg.pc | head -1)")
pkg=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --modversion qvg)
# The same consumer built with pkg-config alone.
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs qvg)
c++ -O1 tests/consumer/main.cpp -o "$tmp/pc_consumer" $flags -pthread
"$tmp/pc_consumer"
echo "pkg-config: qvg $pkg, a consumer built and run against the moved prefix"
if [ -x "$tmp/moved/bin/qvg" ]; then
  env -u QVG_DATA_DIR "$tmp/moved/bin/qvg" --version | tee "$tmp/version"
  grep -q "^clips: $tmp/moved/share/qvg/data/clips" "$tmp/version" &&
    grep -q "^model: $tmp/moved/share/qvg/models/" "$tmp/version" || {
    echo "check_install: the installed CLI does not use the installed clips and model" >&2
    exit 1
  }
  (cd "$tmp" && env -u QVG_DATA_DIR "$tmp/moved/bin/qvg" eval --data clip --clip vtest --heads 1 --frames 1 \
    --queries 0 --methods rtn --json --quiet | grep -q '"method": "rtn"') || {
    echo "check_install: the installed CLI could not evaluate a shipped clip" >&2
    exit 1
  }
  echo "installed CLI: a shipped clip found under the moved prefix"
fi
echo "check_install: ok"
