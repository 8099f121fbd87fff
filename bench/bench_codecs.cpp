// CPU throughput of the reference codecs (values per second) on one
// Self-Forcing span head-set: video-like K, [heads, 37440, 128].
// Run: build/bench/bench_codecs --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>

#include "qvg/codec.h"
#include "qvg/data.h"
#include "qvg/kmeans.h"

namespace {

// Two heads: one per core (the codecs run heads in parallel).
const qvg::HeadTensor& keys() {
  static const qvg::HeadTensor k = [] {
    qvg::VideoLikeParams p;
    p.heads = 2;
    return qvg::make_video_like(p, qvg::TensorRole::key);
  }();
  return k;
}

void set_counters(benchmark::State& state, int64_t values, double bytes_moved) {
  state.counters["values/s"] = benchmark::Counter(static_cast<double>(values) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(bytes_moved * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Encode(benchmark::State& state, const char* spec) {
  const auto& x = keys();
  auto codec = qvg::make_codec(spec);
  size_t out_bytes = 0;
  for (auto _ : state) {
    auto e = codec->encode(x);
    out_bytes = e.bytes().total();
    benchmark::DoNotOptimize(e.codes.data());
  }
  set_counters(state, x.numel(), static_cast<double>(x.numel()) * 4 + static_cast<double>(out_bytes));
}

void BM_Decode(benchmark::State& state, const char* spec) {
  const auto& x = keys();
  auto codec = qvg::make_codec(spec);
  const auto e = codec->encode(x);
  qvg::HeadTensor out;
  for (auto _ : state) {
    codec->decode(e, out);
    benchmark::DoNotOptimize(out.data.data());
  }
  set_counters(state, x.numel(), static_cast<double>(e.bytes().total()) + static_cast<double>(x.numel()) * 4);
}

// One k-means assignment step (N x C x D products + argmin), one head.
void BM_KMeansAssign(benchmark::State& state) {
  const auto& x = keys();
  const int c = static_cast<int>(state.range(0));
  const auto cent = qvg::kmeans_init_ref(x.head(0), x.tokens, x.dim, c, qvg::KMeansInit::random, 1);
  std::vector<uint8_t> ids(static_cast<size_t>(x.tokens));
  for (auto _ : state) benchmark::DoNotOptimize(qvg::kmeans_assign_ref(x.head(0), x.tokens, x.dim, cent.data(), c, ids.data()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * x.tokens * x.dim * c * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_KMeansInit(benchmark::State& state) {
  const auto& x = keys();
  for (auto _ : state)
    benchmark::DoNotOptimize(qvg::kmeans_init_ref(x.head(0), x.tokens, x.dim, 256, qvg::KMeansInit::kmeanspp, 1));
}

void BM_Memcpy(benchmark::State& state) {
  const auto& x = keys();
  std::vector<float> dst(x.data.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), x.data.data(), x.data.size() * 4);
    benchmark::ClobberMemory();
  }
  set_counters(state, x.numel(), static_cast<double>(x.numel()) * 8);
}

}  // namespace

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KMeansAssign)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KMeansInit)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, rtn, "rtn")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, rtn, "rtn")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, qvg_2iter, "qvg:iters=2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, qvg, "qvg")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK_CAPTURE(BM_Decode, qvg, "qvg")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, qvg_pro_5iter, "qvg-pro:iters=5")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK_CAPTURE(BM_Decode, qvg_pro, "qvg-pro")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
