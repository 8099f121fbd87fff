// libFuzzer target: StreamingKVCache::load (the streaming cache file:
// docs/FORMAT.md, "Streaming cache file"), then everything a loaded cache
// offers without appending (read, live_chunks, memory statistics).
//
// Every section carries a CRC-32, so almost every mutation would stop at a
// checksum. The target therefore rewrites the header's and each section's
// CRC over the mutated bytes before loading (walking the sections as far as
// their lengths stay inside the input): the parsers behind the checksums see
// the mutations. (The checksum checks themselves are covered by
// CacheFile.LoadRejectsDamagedFiles.)
//
// Properties: every rejection is a qvg::Error; reading a loaded layer gives
// as many tokens as live_tokens says, every value finite without RoPE on read
// (load checks stored values: check_encoded_tensor).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "cache/checksum.h"
#include "fuzz_util.h"
#include "qvg/cache.h"

namespace {

void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Rewrites the CRCs of header (20 bytes: magic, version, section count, CRC)
/// and sections (tag, flags, u64 length, payload, CRC) to match their bytes.
void fix_checksums(std::vector<uint8_t>& b) {
  if (b.size() < 20) return;
  put_le32(b.data() + 16, qvg::crc32(b.data(), 16));
  size_t pos = 20;
  while (b.size() - pos >= 20) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[pos + 8 + i]) << (8 * i);
    if (n > b.size() - pos - 20) return;
    const size_t crc_at = pos + 16 + static_cast<size_t>(n);
    put_le32(b.data() + crc_at, qvg::crc32(b.data() + pos, 16 + static_cast<size_t>(n)));
    pos = crc_at + 4;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qvg::fuzz::InputFile file("input.qvgc");
  std::vector<uint8_t> bytes(data, data + size);
  fix_checksums(bytes);
  file.set(bytes.data(), bytes.size());
  std::optional<qvg::StreamingKVCache> cache;
  try {
    cache.emplace(qvg::StreamingKVCache::load(file.path(), qvg::CacheOptions{1}));
  } catch (const qvg::Error&) {
    return 0;
  }
  const qvg::CacheConfig& c = cache->config();
  try {  // load validated the whole state: reading it cannot fail
    QVG_FUZZ_REQUIRE(static_cast<int>(cache->memory().layers.size()) == c.layers);
    for (int l = 0; l < c.layers; ++l) {
      if (cache->live_tokens(l) == 0) continue;
      const qvg::CacheRead r = cache->read(l);
      QVG_FUZZ_REQUIRE(r.k.tokens == cache->live_tokens(l) && r.v.tokens == r.k.tokens);
      QVG_FUZZ_REQUIRE(r.k.heads == c.heads && r.k.dim == c.dim);
      if (c.rope.mode == qvg::RopeMode::none) {  // (a rotation may carry values near FLT_MAX beyond it)
        for (const float x : r.k.data) QVG_FUZZ_REQUIRE(std::isfinite(x));
        for (const float x : r.v.data) QVG_FUZZ_REQUIRE(std::isfinite(x));
      }
    }
  } catch (const qvg::Error& e) {
    std::fprintf(stderr, "a loaded cache failed: %s\n", e.what());
    QVG_FUZZ_REQUIRE(false);
  }
  return 0;
}
