#!/usr/bin/env bash
# The Python package: pip install . (offline: --no-build-isolation, from
# Debian's setuptools, wheel, pybind11-dev and NumPy) into a fresh virtual
# environment that sees the system's NumPy, then the module's tests run
# against the installed package from outside the source tree, its module
# stripped; an interpreter without NumPy and wheel is refused with one line;
# then a wheel (pip wheel) installed into a clean environment imports.
set -euo pipefail
cd "$(dirname "$0")/.."
# One CUDA target where nvcc is found, as in scripts/test.sh (the default is a fat binary of six,
# which takes most of an hour on two cores): QVG_CMAKE_ARGS set by the caller wins.
export QVG_CMAKE_ARGS="${QVG_CMAKE_ARGS:--DCMAKE_CUDA_ARCHITECTURES=${QVG_TEST_CUDA_ARCHS:-90a}}"
src=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install --no-build-isolation --no-deps --quiet .
(cd "$tmp" && "$tmp/venv/bin/python" -c "import qvg; assert qvg.__file__.startswith('$tmp/venv'), qvg.__file__; print('installed qvg', qvg.__version__, 'at', qvg.__file__)")
(cd "$tmp" && env -u PYTHONPATH "$tmp/venv/bin/python" -m unittest discover -s "$src/python/tests" 2>&1 | tail -4)
# The installed module is stripped (no symbol table).
so=$(ls "$tmp"/venv/lib/python3*/site-packages/qvg/_qvg*.so)
if readelf -S "$so" | grep -q '\.symtab'; then echo "check_pip: $so is not stripped" >&2; exit 1; fi
# An interpreter without NumPy / wheel: pip stops early with one line naming them.
/usr/bin/python3 -m venv "$tmp/bare"
if "$tmp/bare/bin/pip" install --no-build-isolation --no-deps . >"$tmp/bare.log" 2>&1; then
  echo "check_pip: the install without NumPy succeeded" >&2; exit 1
fi
grep -q "lacks .*numpy" "$tmp/bare.log" || { echo "check_pip: no clear line without NumPy:" >&2; cat "$tmp/bare.log" >&2; exit 1; }
# A wheel into a clean virtual environment (no system packages): it imports.
"$tmp/venv/bin/pip" wheel --no-build-isolation --no-deps --quiet -w "$tmp/wheels" .
/usr/bin/python3 -m venv "$tmp/clean"
"$tmp/clean/bin/pip" install --no-deps --quiet "$tmp"/wheels/qvg-*.whl
(cd "$tmp" && "$tmp/clean/bin/python" -c "import qvg; print('wheel:', qvg.__version__, len(qvg.presets()), 'presets')")
echo "check_pip: ok"
