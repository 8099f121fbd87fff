// Internal state of StreamingKVCache, shared by cache.cpp (policy, read,
// statistics) and serialize.cpp (save/load).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "qvg/cache.h"

namespace qvg {

/// One chunk as appended. Full-precision data lives here until the chunk is
/// encoded into a span (then k/v are empty and span >= 0).
struct CacheChunk {
  int64_t index = 0;        ///< order of arrival in the layer
  int64_t first_token = 0;  ///< index of its first token among all tokens of the layer
  int64_t tokens = 0;
  bool live = true;         ///< false once evicted (held only while its span is)
  int64_t span = -1;        ///< id (ordinal) of the span holding it; -1 = full precision
  int64_t span_offset = 0;  ///< first token inside that span
  /// Full precision, little-endian, [heads][tokens][dim]: BF16 (2 bytes) or
  /// FP32 (4 bytes) per value (CacheConfig::tail). Empty inside a span.
  std::vector<uint8_t> k, v;
  std::vector<int32_t> positions;  ///< tokens * rope_position_dims (empty without RoPE)
  /// Device copy of k and v (read_device, CUDA builds): made on first use,
  /// dropped when the chunk joins a span. Opaque here.
  mutable std::shared_ptr<void> device;
};

/// One encoded span: consecutive chunks first_chunk .. first_chunk + chunks - 1.
struct CacheSpan {
  int64_t id = 0;
  int64_t first_chunk = 0;
  int64_t chunks = 0;
  int64_t first_token = 0;
  int64_t tokens = 0;
  EncodedTensor k, v;
  /// Device copy of k and v (StreamingKVCache::read_device, CUDA builds):
  /// created on first use, freed with the span. Opaque here.
  mutable std::shared_ptr<void> device;
};

struct CacheLayer {
  std::vector<CacheChunk> chunks;  ///< held chunks, in index order
  std::vector<CacheSpan> spans;    ///< held spans, in id order
  int64_t next_chunk = 0;          ///< chunks ever appended
  int64_t next_token = 0;          ///< tokens ever appended
  int64_t next_span = 0;           ///< spans ever encoded
  /// Warm-start state per role: an EncodedTensor holding only config, heads,
  /// dim and centroids (what EncodeOptions::warm_start reads).
  std::optional<EncodedTensor> warm_k, warm_v;
};

struct StreamingKVCache::Impl {
  CacheConfig config;
  CacheOptions options;
  std::unique_ptr<Codec> key_codec, value_codec;
  std::vector<CacheLayer> layers;
  mutable std::mutex device_mutex;  ///< guards the creation of span mirrors

  Impl(CacheConfig c, CacheOptions o);
  size_t tail_value_bytes() const { return config.tail == TailFormat::bf16 ? 2 : 4; }
  /// (Re)makes key_codec and value_codec for the configs and the backend.
  void make_codecs();
  /// The codec of a span of `tokens` tokens for a role: the held codec, or
  /// one for span_config (C clamped to the tokens), which is then held.
  const Codec& span_codec(TensorRole role, int64_t tokens);
};

/// Whether a codec config runs k-means (smoothing stages > 0).
inline bool runs_kmeans(const CodecConfig& c) { return smoothing_stages(c) > 0; }

/// Full-precision bytes <-> float32 (tail format of the cache); encode
/// writes x's values in [heads][tokens][dim] order.
void tail_encode(const HeadTensorView& x, TailFormat f, std::vector<uint8_t>& out);
void tail_decode(const uint8_t* bytes, size_t n, TailFormat f, float* out);

/// Checks the invariants of a layer's state against the config (used by load;
/// throws qvg::Error naming the layer and the problem).
void check_layer_state(const StreamingKVCache::Impl& impl, int layer);
void check_layer(const StreamingKVCache::Impl& impl, int layer, const char* what);

}  // namespace qvg
