#!/usr/bin/env bash
# The CPU tests under sanitizers (issue 27), each in its own build directory:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer
#                              (build-asan): every CPU test but cli_model (it
#                              reads a clip; this build has no FFmpeg) and the
#                              shipped model's forward passes (asan_skip below),
#                              and the Python tests against an ASan-built module
#                              (damaged pickled states and cache files included)
#   scripts/sanitize.sh tsan   ThreadSanitizer (build-tsan): the tests that
#                              run threads (codecs, k-means, baselines, cache,
#                              the model's threaded forward), listed below, and
#                              the Python tests against a TSan-built module
#                              (the caches' threads with the GIL released)
#   scripts/sanitize.sh all    both
# CPU only: no CUDA, no FFmpeg, no benchmarks. Debian's python3 is not
# instrumented, so it runs the modules with the sanitizer's shared runtime
# preloaded: the compiler's own for ASan (leak detection off: the interpreter
# keeps its objects at exit), GCC's libtsan for TSan (clang 14's shared TSan
# runtime crashes python3 at start). QVG_SANITIZE_CXX picks the
# compiler (default clang++ where installed, else g++; clang builds this
# configuration in less than half of g++'s time). Every report is also written to a log under the
# build directory, and the run fails if any log exists: a report in a process
# whose failure a test expects (the CLI's bad-input checks) still fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-asan}
cxx=${QVG_SANITIZE_CXX:-$(command -v clang++ || echo g++)}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# The tests of the ThreadSanitizer run: every test of the suites whose code runs
# threads (parallel_for over heads with threads = 0 or > 1, concurrent saves),
# and the model's thread-count test (the rest of test_model repeats it single-
# threaded at a cost of minutes under TSan).
tsan_tests='^(test_codecs|test_kmeans|test_baselines|test_group_quant|test_cache|test_data|test_kill_save)$'
tsan_model_filter='Model.TinyModelThreadsGiveIdenticalBytes'
# Not under ASan + UBSan: the four forward passes of the shipped model (8 s in
# all in a Release build; 418 s for one of them here). Model.TinyModelThreads-
# GiveIdenticalBytes runs the same forward code on a tiny model instead.
# CTest's python test runs without the preloaded runtime, so here the module's
# tests run through python_tests below instead.
asan_skip='^(cli_model|python|Model\.(MatchesGoldenExactCache|Bf16CacheCloseToGolden|CompressedCacheOrdering|ThreadsGiveIdenticalBytes))$'

build() {  # build <dir> <sanitizers> [python module: ON | OFF (default)]
  # A cache made with another compiler would be wiped by CMake together with the
  # options given here (it re-runs without them): start that directory afresh.
  local compiler
  compiler=$(command -v "$cxx")
  if [ -f "$1/CMakeCache.txt" ] && ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=$compiler\$" "$1/CMakeCache.txt"; then
    rm -rf "$1/CMakeCache.txt" "$1/CMakeFiles"
  fi
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$compiler" "${launcher[@]}" \
    -DQVG_SANITIZE="$2" -DQVG_WITH_CUDA=OFF -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_PYTHON="${3:-OFF}" -DQVG_BUILD_BENCH=OFF \
    >/dev/null
  grep -q "^QVG_SANITIZE:STRING=$2\$" "$1/CMakeCache.txt" || {
    echo "sanitize: $1 is not configured with QVG_SANITIZE=$2" >&2
    return 1
  }
  cmake --build "$1" -j"$(nproc)"
}

# check_logs <dir>: fails when a sanitizer wrote a report.
check_logs() {
  if compgen -G "$1/*" >/dev/null; then
    echo "sanitize: sanitizer reports:" >&2
    head -n 60 "$1"/* >&2
    return 1
  fi
}

# python_tests <build dir> <sanitizer runtime to preload>: the Python tests
# against that build's module.
python_tests() {
  if ! compgen -G "$1/python/qvg/_qvg*.so" >/dev/null; then
    echo "sanitize: $1 has no Python module (pybind11 or NumPy missing): its tests did not run" >&2
    return 1
  fi
  LD_PRELOAD=$2 PYTHONPATH=$1/python /usr/bin/python3 -m unittest discover -s python/tests
}

run_asan() {
  build build-asan address,undefined ON
  local logs=build-asan/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1:log_path=$PWD/$logs/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$PWD/$logs/ubsan"
  local start=$SECONDS
  # The kill test's saves run ~15x slower here: 20 kills (scripts/test.sh runs 200).
  export QVG_KILL_SAVES=20
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L cpu -E "$asan_skip" --timeout 900
  local rt
  if [[ $($cxx --version) == *clang* ]]; then
    rt=$("$cxx" -print-file-name=libclang_rt.asan-x86_64.so)
  else
    rt=$(realpath "$("$cxx" -print-file-name=libasan.so)")
  fi
  ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" python_tests build-asan "$rt"
  check_logs "$logs"
  echo "sanitize: ASan+UBSan: $(ctest --test-dir build-asan -N -L cpu -E "$asan_skip" | tail -1 | grep -o '[0-9]*') tests" \
    "and the Python tests, no report ($((SECONDS - start)) s)"
  unset ASAN_OPTIONS UBSAN_OPTIONS QVG_KILL_SAVES
}

run_tsan() {
  build build-tsan thread ON
  local logs=build-tsan/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$PWD/$logs/tsan"
  export QVG_KILL_SAVES=20  # (as under ASan: saves run ~13x slower here)
  local start=$SECONDS
  # Each suite's executable runs whole (faster than one process per test under TSan).
  local n=0
  for exe in build-tsan/tests/*; do
    local name
    name=$(basename "$exe")
    [[ -x $exe && -f $exe && $name =~ $tsan_tests ]] || continue
    "$exe" --gtest_brief=1
    n=$((n + $("$exe" --gtest_list_tests | grep -c '^  ')))
  done
  build-tsan/tests/test_model --gtest_brief=1 --gtest_filter="$tsan_model_filter"
  n=$((n + 1))
  # The Python tests (qvg.StreamingKVCache from threads, the GIL released around
  # every call) against the module of this build, the runtime preloaded.
  python_tests build-tsan "$(realpath "$(gcc -print-file-name=libtsan.so)")"
  n=$((n + 1))
  check_logs "$logs"
  echo "sanitize: TSan: $n tests, no report ($((SECONDS - start)) s)"
  unset TSAN_OPTIONS QVG_KILL_SAVES
}

case $what in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan && run_tsan ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan|all]" >&2; exit 2 ;;
esac
