#!/usr/bin/env bash
# libFuzzer runs of every parser and decoder of untrusted bytes (fuzz/, issue 27).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   (default: 30 s for each of the seven targets)
# Builds build-fuzz with clang (ASan + UBSan + libFuzzer coverage; no CUDA, FFmpeg,
# Python, tests or benchmarks), writes the seed corpora (make_seeds, and the cache
# files of tests/data), then runs each target for SECONDS of one core, as many at
# once as there are cores. The corpus each run grows is kept in
# build-fuzz/corpus/<target> for the next run. Any finding (a crash, a sanitizer
# report, a failed property, an uncaught exception other than qvg::Error, a
# leak, an input slower than 10 s, an allocation over 512 MiB) is saved under
# build-fuzz/findings/<target>/ and fails the run; each run's log is
# build-fuzz/logs/<target>.log (its last lines: executions, coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_npy fuzz_safetensors fuzz_model_weights fuzz_cache_file fuzz_codec_spec fuzz_encoded_tensor
  fuzz_encoded_record)
command -v clang++ >/dev/null || {
  echo "fuzz: clang++ not found (Debian: apt-get install clang)" >&2
  exit 1
}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
b=build-fuzz
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DQVG_SANITIZE=address,undefined -DQVG_BUILD_FUZZ=ON -DQVG_BUILD_TESTS=OFF -DQVG_BUILD_TOOLS=OFF \
  -DQVG_WITH_CUDA=OFF -DQVG_WITH_FFMPEG=OFF -DQVG_BUILD_PYTHON=OFF -DQVG_BUILD_BENCH=OFF >/dev/null
cmake --build $b -j"$(nproc)" --target make_seeds "${targets[@]}"

rm -rf $b/seeds && $b/fuzz/make_seeds $b/seeds
cp tests/data/*.qvgc $b/seeds/cache_file/
cp tests/data/*.qvgt $b/seeds/encoded_record/
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
mkdir -p $b/logs

run_one() {  # run_one <target>: 0 when the run ends without a finding
  local t=$1 name=${1#fuzz_}
  mkdir -p "$b/corpus/$t" "$b/findings/$t"
  local log=$b/logs/$t.log TIMEFORMAT='cpu seconds: user %U, system %S'
  if { time "$b/fuzz/$t" "$b/corpus/$t" "$b/seeds/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -artifact_prefix="$b/findings/$t/" -print_final_stats=1 >"$log" 2>&1; } 2>>"$log"; then
    echo "fuzz: $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs in ${seconds} s" \
      "($(grep -o 'cpu seconds.*' "$log")), no finding; corpus $(ls "$b/corpus/$t" | wc -l) files"
  else
    echo "fuzz: $t: FINDING (log $b/logs/$t.log, input in $b/findings/$t/):" >&2
    grep -m1 -A12 'ERROR\|property failed\|uncaught\|deadly' "$b/logs/$t.log" >&2 || tail -20 "$b/logs/$t.log" >&2
    return 1
  fi
}
export -f run_one
export b seconds
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one {}'
