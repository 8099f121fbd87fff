// The span policy of include/qvg/cache.h as a pure function over the chunks
// of one layer: which chunks an append evicts and which pending chunks it
// encodes into spans. Shared by StreamingKVCache (host state) and
// DeviceKVCache (device state), so both follow one policy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "qvg/cache.h"

namespace qvg {

/// What the policy needs to know of one held chunk.
struct ChunkSlot {
  int64_t index = 0;      ///< order of arrival in the layer
  int64_t tokens = 0;
  bool live = true;
  bool encoded = false;   ///< inside a span
};

/// Slots index the `chunks` argument of plan_append.
struct AppendPlan {
  std::vector<size_t> evict;                ///< slots evicted, oldest first
  std::vector<std::vector<size_t>> groups;  ///< slots of each new span, oldest first
};

/// The plan of an append: `chunks` are the layer's held chunks in index
/// order followed by the new chunk (live, not encoded).
AppendPlan plan_append(const SpanPolicy& p, std::span<const ChunkSlot> chunks);

/// After an append's commit: frees the spans none of whose chunks is live,
/// then the chunks no read needs (evicted in full precision, or inside a
/// freed span). Chunks have `live` and `span` (-1: full precision), spans `id`.
template <class Chunk, class Span>
void drop_unreachable(std::vector<Chunk>& chunks, std::vector<Span>& spans) {
  std::erase_if(spans, [&](const Span& sp) {
    return std::none_of(chunks.begin(), chunks.end(), [&](const Chunk& ch) { return ch.live && ch.span == sp.id; });
  });
  std::erase_if(chunks, [&](const Chunk& ch) {
    if (ch.live) return false;
    if (ch.span < 0) return true;
    return std::none_of(spans.begin(), spans.end(), [&](const Span& sp) { return sp.id == ch.span; });
  });
}

/// Sums of parts and of layer statistics (both caches' memory()).
void add_parts(PartBytes& a, const PartBytes& b);
void add_memory(LayerMemory& a, const LayerMemory& b);

}  // namespace qvg
