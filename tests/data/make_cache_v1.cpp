// Writes tests/data/cache_v1.qvgc: a streaming cache file of format version 1
// (codecs stored field by field), made once with qvg at fd6329c. Kept so the
// file can be re-made and checked; test_cache's ReadsVersion1Files rebuilds
// the same cache with the same inputs (cache_v1_input) and compares.
// Build against that version's library:
//   g++ -std=c++20 -O2 -I include -I src tests/data/make_cache_v1.cpp build/libqvg.a -lpthread -o make_cache_v1
#include <cmath>
#include <cstdio>

#include "qvg/cache.h"

namespace {
#include "cache_v1_input.inc"
}  // namespace

int main(int argc, char** argv) {
  qvg::StreamingKVCache cache(cache_v1_config());
  for (int chunk = 0; chunk < kCacheV1Chunks; ++chunk) {
    qvg::HeadTensor k, v;
    std::vector<int32_t> pos;
    cache_v1_chunk(chunk, k, v, pos);
    for (int layer = 0; layer < 2; ++layer) cache.append(layer, k, v, pos);
  }
  cache.save(argc > 1 ? argv[1] : "cache_v1.qvgc");
  std::printf("saved\n");
  return 0;
}
