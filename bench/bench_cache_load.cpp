// Load time of a large streaming cache file (docs/BENCHMARKS.md, "Loading a
// cache file"): StreamingKVCache::load reads it, checks every CRC and the
// state, decodes every span and checks its stored values.
//   bench_cache_load FILE [--make MIB] [--key SPEC] [--value SPEC] [--repeat R] [--threads T]
// --make writes FILE first: a Self-Forcing-shaped cache (4 layers, 12 heads,
// dim 128, chunks of 1,560 tokens, spans of 8 chunks) of seeded random-normal
// K/V, appended until the cache holds MIB MiB. Then FILE is loaded R times
// (default 5); each time and the median are printed (wall seconds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_data.h"
#include "qvg/cache.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void make_cache(const std::string& path, double mib, const std::string& key, const std::string& value,
                int threads) {
  qvg::CacheConfig c;
  c.layers = 4;
  c.heads = 12;
  c.dim = 128;
  c.chunk_tokens = 1560;
  c.policy.quant_factor = 8;
  c.key = qvg::parse_codec_spec(key);
  c.value = qvg::parse_codec_spec(value);
  qvg::StreamingKVCache cache(c, qvg::CacheOptions{threads});
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t seed = 1;
  for (int64_t chunk = 0; static_cast<double>(cache.memory().total.total()) < mib * 1048576.0; ++chunk)
    for (int l = 0; l < c.layers; ++l) {
      const qvg::HeadTensor k = qvg::bench::random_normal(c.heads, c.chunk_tokens, c.dim, seed++);
      const qvg::HeadTensor v = qvg::bench::random_normal(c.heads, c.chunk_tokens, c.dim, seed++);
      cache.append(l, k, v);
    }
  cache.save(path);
  std::printf("wrote %s: %.1f MiB in %.1f s (keys %s, values %s)\n", path.c_str(),
              static_cast<double>(std::filesystem::file_size(path)) / 1048576.0, seconds_since(t0), key.c_str(),
              value.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [--make MIB] [--key SPEC] [--value SPEC] [--repeat R] [--threads T]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  double make_mib = 0;
  std::string key = "qvg", value = "qvg";
  int repeat = 5, threads = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--make") make_mib = std::atof(v.c_str());
    else if (a == "--key") key = v;
    else if (a == "--value") value = v;
    else if (a == "--repeat") repeat = std::atoi(v.c_str());
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    if (make_mib > 0) make_cache(path, make_mib, key, value, threads);
    std::vector<double> times;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const qvg::StreamingKVCache cache = qvg::StreamingKVCache::load(path, qvg::CacheOptions{threads});
      times.push_back(seconds_since(t0));
      std::printf("load %d: %.3f s\n", r + 1, times.back());
    }
    std::sort(times.begin(), times.end());
    if (!times.empty()) std::printf("median load: %.3f s over %d loads\n", times[times.size() / 2], repeat);
  } catch (const qvg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
