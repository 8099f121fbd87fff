// The skeleton both caches share around span_plan.h's policy: an append's
// plan, the new spans' headers and reports, the commit, the per-layer queries
// and the memory statistics. StreamingKVCache (host bytes) and DeviceKVCache
// (device buffers) keep only what differs: where a chunk's bytes live and how
// a span is encoded and decoded.
//
// Over each cache's own types:
//   Chunk: index, first_token, tokens, live, span (-1: full precision), span_offset
//   Span:  id, first_chunk, chunks, first_token, tokens
//   Layer: chunks (held, index order), spans (held, id order), next_chunk,
//          next_token, next_span (counts ever appended / encoded)
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/span_plan.h"
#include "qvg/cache.h"

namespace qvg {

/// Throws unless 0 <= layer < c.layers (`what` names the calling function).
void check_layer_index(const CacheConfig& c, int layer, const char* what);

/// An append's chunk lengths: key and value alike, and CacheConfig::chunk_tokens when set.
void check_chunk_tokens(const CacheConfig& c, int layer, int64_t k_tokens, int64_t v_tokens);

/// Whether a span encoded with `cc` starts from `warm`, the config of the
/// centroids kept from the layer's previous span (null: none kept): the cache
/// keeps them, cc runs k-means and their C is the span's.
bool starts_warm(const CacheConfig& c, const CodecConfig& cc, const CodecConfig* warm);

/// One append to a layer, between its validation and its commit: the plan of
/// adding the new chunk `nc` to the held chunks, the new spans' headers, and the
/// commit. Slots index L.chunks; slot new_slot() is nc. Nothing changes the
/// layer before commit().
template <class Layer, class Chunk, class Span>
class LayerAppend {
 public:
  /// Places nc after the layer's chunks (index, first token, `tokens`) and
  /// plans the append (the plan reads only these and the held chunks' state).
  LayerAppend(const SpanPolicy& p, Layer& L, Chunk& nc, int64_t tokens)
      : L_(L), nc_(nc), new_slot_(L.chunks.size()), next_span_(L.next_span) {
    nc.index = L.next_chunk;
    nc.first_token = L.next_token;
    nc.tokens = tokens;
    std::vector<ChunkSlot> slots;
    slots.reserve(new_slot_ + 1);
    for (size_t s = 0; s <= new_slot_; ++s) slots.push_back({at(s).index, at(s).tokens, at(s).live, at(s).span >= 0});
    plan_ = plan_append(p, slots);
  }

  const AppendPlan& plan() const { return plan_; }
  size_t new_slot() const { return new_slot_; }
  const Chunk& at(size_t slot) const { return slot == new_slot_ ? nc_ : L_.chunks[slot]; }

  /// The header of the next span: the chunks of group g (plan().groups[g]),
  /// with the next span id. Call once per group, in order.
  Span form_span(size_t g) {
    const std::vector<size_t>& group = plan_.groups[g];
    Span sp;
    sp.id = next_span_++;
    sp.first_chunk = at(group.front()).index;
    sp.chunks = static_cast<int64_t>(group.size());
    sp.first_token = at(group.front()).first_token;
    for (size_t s : group) sp.tokens += at(s).tokens;
    return sp;
  }

  /// A span's report, its header filled in (the encode fills the rest).
  static SpanReport report(int layer, const Span& sp) {
    SpanReport sr;
    sr.layer = layer;
    sr.span = sp.id;
    sr.first_chunk = sp.first_chunk;
    sr.chunks = sp.chunks;
    sr.first_token = sp.first_token;
    sr.tokens = sp.tokens;
    return sr;
  }

  /// The indices of the chunks the append evicts, oldest first.
  std::vector<int64_t> evicted() const {
    std::vector<int64_t> out;
    out.reserve(plan_.evict.size());
    for (size_t slot : plan_.evict) out.push_back(at(slot).index);
    return out;
  }

  /// Reserves the layer's room for the new spans: after this, commit() does not allocate.
  void reserve(size_t new_spans) { L_.spans.reserve(L_.spans.size() + new_spans); }

  /// Commits: nc joins the layer, the evicted chunks are marked, each group's
  /// chunks join their span (on_chunk(chunk, span) after), each span joins the
  /// layer (on_span(span) before), and the counters move on. new_spans holds
  /// one span per group, from form_span. The caller then updates its own
  /// state and calls drop_unreachable. Allocates nothing after reserve().
  template <class OnChunk, class OnSpan>
  void commit(std::vector<Span>& new_spans, OnChunk on_chunk, OnSpan on_span) {
    const int64_t tokens = nc_.tokens;
    L_.chunks.push_back(std::move(nc_));
    for (size_t slot : plan_.evict) L_.chunks[slot].live = false;
    for (size_t gi = 0; gi < plan_.groups.size(); ++gi) {
      int64_t off = 0;
      for (size_t s : plan_.groups[gi]) {
        Chunk& ch = L_.chunks[s];
        ch.span = new_spans[gi].id;
        ch.span_offset = off;
        off += ch.tokens;
        on_chunk(ch, new_spans[gi]);
      }
      on_span(new_spans[gi]);
      L_.spans.push_back(std::move(new_spans[gi]));
    }
    L_.next_chunk += 1;
    L_.next_token += tokens;
    L_.next_span = next_span_;
  }

 private:
  Layer& L_;
  Chunk& nc_;
  size_t new_slot_;
  int64_t next_span_;
  AppendPlan plan_;
};

/// Tokens of the layer's live chunks.
template <class Layer>
int64_t live_token_count(const Layer& L) {
  int64_t n = 0;
  for (const auto& ch : L.chunks)
    if (ch.live) n += ch.tokens;
  return n;
}

/// (index, tokens) of the layer's live chunks, oldest first.
template <class Layer>
std::vector<std::pair<int64_t, int64_t>> live_chunk_list(const Layer& L) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& ch : L.chunks)
    if (ch.live) out.emplace_back(ch.index, ch.tokens);
  return out;
}

/// A layer's memory statistics as both caches count them: tokens live, held
/// and encoded, spans, and the BF16 size of the live tokens. The cache adds
/// the bytes: chunk_bytes(chunk, m) a chunk's, span_bytes(span, m) a span's
/// encoded parts, returning false for a span not encoded yet (its tokens are
/// held, not encoded). Positions and warm-start state are the caller's.
template <class Layer, class ChunkBytes, class SpanBytes>
LayerMemory count_layer(const Layer& L, const CacheConfig& c, ChunkBytes chunk_bytes, SpanBytes span_bytes) {
  LayerMemory m;
  for (const auto& ch : L.chunks) {
    chunk_bytes(ch, m);
    if (ch.live) m.tokens_live += ch.tokens;
    if (ch.span < 0) m.tokens_held += ch.tokens;
  }
  for (const auto& sp : L.spans) {
    m.tokens_held += sp.tokens;
    if (span_bytes(sp, m)) m.tokens_encoded += sp.tokens;
  }
  m.spans = static_cast<int64_t>(L.spans.size());
  m.bf16_bytes = static_cast<size_t>(2 * int64_t{c.heads} * m.tokens_live * c.dim * 2);
  return m;
}

/// The statistics of every layer (layer_memory(l) for l < layers) and their sum.
template <class LayerMemoryOf>
MemoryStats sum_layers(int layers, LayerMemoryOf layer_memory) {
  MemoryStats s;
  for (int l = 0; l < layers; ++l) {
    s.layers.push_back(layer_memory(l));
    add_memory(s.total, s.layers.back());
  }
  return s;
}

}  // namespace qvg
