#!/usr/bin/env bash
# The installed package: cmake --install the build into a temporary prefix,
# move the prefix elsewhere (relocatable), build tests/consumer against it
# with find_package(qvg 0.1) alone (every other package's find_package
# disabled) and with pkg-config alone, run both, check what they link, then
# run the installed CLI (--version; an eval of a shipped clip, found under the
# moved prefix).
#   scripts/check_install.sh [BUILD_DIR]          an existing build (default build),
#                                                 static or shared (BUILD_SHARED_LIBS)
#   scripts/check_install.sh --shared [BUILD_DIR] first configure and build a shared,
#                                                 CPU-only libqvg and the CLI there
#                                                 (default build-shared; no tests,
#                                                 benchmarks or Python module)
# Checks of what links what (readelf -d): a consumer of a CUDA-less qvg needs
# no libcudart; a consumer of a shared libqvg needs libqvg and none of its
# dependencies; a shared libqvg has the SONAME libqvg.so.MAJOR.MINOR and
# exports no symbol outside namespace qvg (cmake/qvg.map).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--shared" ]; then
  build=${2:-build-shared}
  start=$SECONDS
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DQVG_WITH_CUDA=OFF \
    -DQVG_BUILD_TESTS=OFF -DQVG_BUILD_BENCH=OFF -DQVG_BUILD_PYTHON=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
  echo "check_install: shared CPU-only build in $build ($((SECONDS - start)) s)"
else
  build=${1:-build}
fi
fail() {
  echo "check_install: $*" >&2
  exit 1
}
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
shared=$(sed -n 's/^BUILD_SHARED_LIBS:BOOL=//p' "$build/CMakeCache.txt")
[ "$shared" = ON ] || shared=OFF
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mv "$tmp/prefix" "$tmp/moved"
config_dir=$(dirname "$(find "$tmp/moved" -name qvgConfig.cmake | head -1)")
pc_dir=$(dirname "$(find "$tmp/moved" -name qvg.pc | head -1)")
# Nothing installed asks for a dependency's development package.
if grep -nE 'Eigen3|nlohmann|CUDA::|CUDAToolkit|PkgConfig|pkg_check_modules' "$config_dir"/*.cmake; then
  fail "the installed CMake package names a dependency's package (above)"
fi
if grep -nE '^Requires' "$pc_dir/qvg.pc"; then fail "qvg.pc requires other .pc files (above)"; fi
cuda=OFF
grep -q 'QVG_WITH_CUDA=1' "$pc_dir/qvg.pc" && cuda=ON

cmake -S tests/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/moved" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON --no-warn-unused-cli >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/qvg_consumer"
pkg=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --modversion qvg)
# The same consumer built with pkg-config alone.
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs qvg)
libdir=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --variable=libdir qvg)
c++ -O1 tests/consumer/main.cpp -o "$tmp/pc_consumer" $flags -Wl,-rpath,"$libdir"
"$tmp/pc_consumer"
echo "pkg-config: qvg $pkg, a consumer built and run against the moved prefix"

for exe in "$tmp/consumer/qvg_consumer" "$tmp/pc_consumer"; do
  needed "$exe" >"$tmp/needed"
  if [ "$cuda" = OFF ] && grep -q libcudart "$tmp/needed"; then
    fail "$(basename "$exe") of a qvg without CUDA links libcudart"
  fi
  if [ "$shared" = ON ]; then
    grep -qx 'libqvg\.so\.[0-9]*\.[0-9]*' "$tmp/needed" || fail "$(basename "$exe") does not link libqvg.so"
    if grep -E 'libav|libsw|libcudart|libcublas' "$tmp/needed"; then
      fail "$(basename "$exe") links libqvg's own dependencies (above); the shared libqvg records them"
    fi
  fi
done
echo "linked: $(needed "$tmp/consumer/qvg_consumer" | tr '\n' ' ')"
if [ "$shared" = ON ]; then
  lib=$(find "$tmp/moved" -name 'libqvg.so' | head -1)
  [ -n "$lib" ] || fail "no libqvg.so installed"
  soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ "$soname" =~ ^libqvg\.so\.[0-9]+\.[0-9]+$ ]] || fail "libqvg.so has the SONAME '$soname'"
  # Defined dynamic symbols outside namespace qvg (C++ runtime markers excluded).
  nm -D --defined-only -C "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
    grep -vE '^((typeinfo|typeinfo name|vtable|VTT|guard variable|(non-)?virtual thunk) for |.* )?qvg::|^qvg::' |
    grep -vE '^(_init|_fini)$' >"$tmp/foreign" || true
  if [ -s "$tmp/foreign" ]; then
    head "$tmp/foreign" >&2
    fail "libqvg.so exports $(wc -l <"$tmp/foreign") symbols outside namespace qvg (above)"
  fi
  echo "shared: $soname, $(nm -D --defined-only "$lib" | wc -l) symbols exported, all in namespace qvg"
fi
if [ -x "$tmp/moved/bin/qvg" ]; then
  env -u QVG_DATA_DIR "$tmp/moved/bin/qvg" --version | tee "$tmp/version"
  grep -q "^clips: $tmp/moved/share/qvg/data/clips" "$tmp/version" &&
    grep -q "^model: $tmp/moved/share/qvg/models/" "$tmp/version" ||
    fail "the installed CLI does not use the installed clips and model"
  (cd "$tmp" && env -u QVG_DATA_DIR "$tmp/moved/bin/qvg" eval --data clip --clip vtest --heads 1 --frames 1 \
    --queries 0 --methods rtn --json --quiet | grep -q '"method": "rtn"') ||
    fail "the installed CLI could not evaluate a shipped clip"
  echo "installed CLI: a shipped clip found under the moved prefix"
fi
echo "check_install: ok"
