// The streaming KV cache a chunk-by-chunk video generator holds: it takes each
// new chunk's K and V per layer, keeps the history compressed in spans, and
// hands back the full K and V in token order (keys rotated on read when they
// are cached before RoPE). Exact memory statistics and save/load for resume.
//
// Span policy, per layer, chunks numbered 0, 1, ... in
// the order append receives them:
//  - A chunk arrives in full precision (BF16 by default).
//  - Sink: chunks 0 .. sink-1 are never encoded and never evicted.
//  - Eviction (local attention) runs first in every append, over the non-sink
//    chunks including the new one: with window_chunks = W > 0 only the newest
//    W non-sink chunks stay live; with window_tokens = T > 0 only the newest
//    non-sink chunks whose tokens add up to at most T stay live (the newest
//    chunk always does). Both may be set; a chunk must pass both. An evicted
//    full-precision chunk is freed at once; an evicted chunk inside a span
//    stops being returned by read(), and the span's bytes are freed when its
//    last chunk is evicted (spans are encoded and freed as a whole).
//  - Encoding then runs: the pending chunks are the live, non-sink chunks still
//    in full precision, oldest first. While there are at least
//    quant_factor + keep_recent of them, the oldest quant_factor are encoded
//    as one span (K and V separately, each with its codec). With the defaults
//    (quant_factor 8, keep_recent 0, sink 0) the append of chunk 8i+7 encodes
//    chunks 8i .. 8i+7 (Self-Forcing: 8 x 4,680 = 37,440 tokens per span), so
//    that chunk 8i+8 attends to them compressed. keep_recent = n delays each
//    span by n chunks (the newest n chunks always stay in full precision).
//    Chunks evicted before they fill a span are never encoded.
//  - A span with fewer tokens than the codec's C centroids (QVG with stages)
//    is encoded with C = its token count (EncodedTensor::config records it).
//  - Centroid caching (warm_start): k-means of a new span starts from the
//    centroids of the previous span of the same layer and role (K / V) for
//    every stage and head, when that span used the same C; otherwise (the
//    first span, or a clamped C) it starts from the codec's k-means init
//    (d2-rounds by default). The warm-start state survives the eviction of
//    that span and is saved with the cache. It saves the start; on our data
//    it does not replace Lloyd iterations (docs/BENCHMARKS.md, "Lloyd
//    iterations after a warm start").
//
// Every method validates its arguments before it changes anything: on a
// qvg::Error the cache is as it was (strong exception guarantee).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/metrics.h"
#include "qvg/rope.h"
#include "qvg/tensor.h"

namespace qvg {

/// When spans are encoded and which chunks are evicted (see the file comment).
struct SpanPolicy {
  int quant_factor = 8;       ///< chunks per span, >= 1 (Self-Forcing: 8)
  int keep_recent = 0;        ///< newest chunks always kept in full precision, >= 0
  int sink = 0;               ///< first chunks never encoded nor evicted, >= 0
  int64_t window_chunks = 0;  ///< keep the newest n non-sink chunks live; 0 = no limit
  int64_t window_tokens = 0;  ///< keep non-sink chunks within the newest n tokens; 0 = no limit
};

/// How chunks that are not (yet) in a span are stored.
enum class TailFormat {
  bf16,  ///< 2 bytes per value: what a real cache stores (default)
  f32,   ///< 4 bytes per value: lossless, for exactness checks
};
/// "bf16" or "f32" (the saved config's spelling).
const char* tail_format_name(TailFormat f);

/// Everything that defines a cache (saved with it; load compares it).
/// Defaults: Self-Forcing / Wan-1.3B at 480p with QVG for K and V.
struct CacheConfig {
  int layers = 30;
  int heads = 12;
  int dim = 128;
  CodecConfig key;    ///< codec of key spans (default: the "qvg" preset)
  CodecConfig value;  ///< codec of value spans
  /// Tokens every chunk must have; 0 = any size (Self-Forcing: 3 latent
  /// frames x 1,560 = 4,680).
  int64_t chunk_tokens = 0;
  SpanPolicy policy;
  /// Pre-RoPE keys: when mode != none, append takes keys before RoPE and the
  /// token positions, and read() rotates the keys. Values are never rotated.
  RopeConfig rope{RopeMode::none};
  TailFormat tail = TailFormat::bf16;
  bool warm_start = true;  ///< centroid caching across spans

  /// 30 layers x 12 heads x 128, chunks of 4,680 tokens, quant_factor 8,
  /// key and value codecs from specs (parse_codec_spec).
  static CacheConfig self_forcing(const std::string& key_spec = "qvg",
                                  const std::string& value_spec = "qvg");
};

/// Throws qvg::Error naming the first invalid field.
void validate(const CacheConfig& c);

/// Run-time options (not part of the saved state).
struct CacheOptions {
  int threads = 0;                  ///< encode/decode threads over heads; 0 = all cores
  bool measure_span_error = false;  ///< SpanReport::k_error / v_error (one extra decode per span)
  /// Where the codecs encode and decode spans (qvg/cuda.h): Backend::cuda runs
  /// them on the GPU (host tensors in and out, see make_cuda_codec); the
  /// cache's state stays in host memory either way.
  Backend backend = Backend::cpu;
};

/// What encoding one span did.
struct SpanReport {
  int layer = 0;
  int64_t span = 0;         ///< ordinal of the span in its layer (0, 1, ...)
  int64_t first_chunk = 0;  ///< chunks first_chunk .. first_chunk + chunks - 1
  int64_t chunks = 0;
  int64_t first_token = 0;  ///< index of its first token among all tokens appended to the layer
  int64_t tokens = 0;
  int centroids = 0;        ///< C used (0 when the codec runs no k-means)
  bool k_warm_started = false, v_warm_started = false;
  EncodeReport k, v;        ///< k-means statistics per stage and head
  double encode_seconds = 0;  ///< K and V together
  PartBytes k_bytes, v_bytes;
  /// Reconstruction error against the span's full-precision input (as stored:
  /// BF16-rounded); filled when CacheOptions::measure_span_error.
  std::optional<ErrorStats> k_error, v_error;
};

/// What one append did.
struct AppendReport {
  int64_t chunk = 0;                 ///< index of the appended chunk in its layer
  std::vector<SpanReport> spans;     ///< spans encoded by this append (0 or more)
  std::vector<int64_t> evicted;      ///< chunks evicted by this append
};

/// The live contents of one layer, in token order.
struct CacheRead {
  HeadTensor k, v;  ///< [heads, tokens, dim]; keys rotated when RoPE-on-read is on
  std::vector<int64_t> chunks;         ///< index of each live chunk, in order
  std::vector<int64_t> chunk_tokens;   ///< tokens of each live chunk
  std::vector<int32_t> positions;      ///< tokens * rope_position_dims values (empty without RoPE)
};

/// Bytes of K or V in one layer.
struct RoleBytes {
  PartBytes spans;  ///< all held spans' parts (full_precision = a codec's own BF16 window, e.g. KIVI's)
  size_t tail = 0;  ///< chunks held in full precision (sink, recent, not yet encoded)
  size_t total() const { return spans.total() + tail; }
};

/// Memory of one layer (or of all layers: sums), exact from the buffers.
struct LayerMemory {
  RoleBytes k, v;
  size_t positions = 0;   ///< stored token positions (int32; only with RoPE-on-read)
  size_t warm_start = 0;  ///< centroids kept for the next span's k-means (a copy of
                          ///< the last span's; a GPU cache would alias them)
  int64_t tokens_live = 0;     ///< tokens read() returns
  int64_t tokens_held = 0;     ///< tokens stored (live + evicted ones inside held spans)
  int64_t tokens_encoded = 0;  ///< held tokens inside spans
  int64_t spans = 0;           ///< spans held
  size_t bf16_bytes = 0;       ///< a BF16 cache of the live tokens: 2 (K, V) x heads x tokens_live x dim x 2
  size_t kv_bytes() const { return k.total() + v.total(); }
  size_t total() const { return kv_bytes() + positions + warm_start; }
  /// bf16_bytes / kv_bytes (0 when empty).
  double ratio() const;
  /// 8 * kv_bytes / (2 * heads * tokens_held * dim): stored bits per K/V value.
  double bits_per_value(int heads, int dim) const;
  /// 8 * (k.spans + v.spans bytes) / (2 * heads * tokens_encoded * dim): stored
  /// bits per K/V value of the encoded spans alone (the full-precision chunks,
  /// e.g. a sink or chunks waiting for their span, left out); bits_per_value
  /// where no span is held.
  double span_bits_per_value(int heads, int dim) const;
};

struct MemoryStats {
  std::vector<LayerMemory> layers;
  LayerMemory total;  ///< the sum over layers (token counts too: tokens x layers)
};

/// The streaming KV cache. Move-only; not thread-safe (one writer), but
/// encode/decode use CacheOptions::threads internally.
class StreamingKVCache {
 public:
  /// Validates the config (codecs against dim, RoPE, policy).
  explicit StreamingKVCache(CacheConfig config, CacheOptions options = {});
  ~StreamingKVCache();
  StreamingKVCache(StreamingKVCache&&) noexcept;
  StreamingKVCache& operator=(StreamingKVCache&&) noexcept;

  const CacheConfig& config() const;
  const CacheOptions& options() const;
  void set_options(const CacheOptions& options);

  /// Adds one chunk to a layer and applies the span policy.
  /// @param layer      0 .. layers-1
  /// @param k, v       [heads, T, dim], T > 0 (= chunk_tokens when set), finite;
  ///                   keys before RoPE when config().rope.mode != none; a
  ///                   HeadTensor or a view of the caller's buffer (e.g.
  ///                   HeadTensorView::thd of a model's [T][heads][dim] K),
  ///                   read in place
  /// @param positions  T * rope_position_dims(rope.mode) int32 (t, y, x) or (p)
  ///                   per token; required with RoPE-on-read, ignored without
  /// Throws qvg::Error (cache unchanged) on any invalid argument.
  AppendReport append(int layer, const HeadTensorView& k, const HeadTensorView& v,
                      std::span<const int32_t> positions = {});
  /// The same for HeadTensors; a tensor whose data does not hold its
  /// shape's values is refused naming the layer and the chunk.
  AppendReport append(int layer, const HeadTensor& k, const HeadTensor& v, std::span<const int32_t> positions = {});

  /// The live tokens of a layer: decoded spans and full-precision chunks, in
  /// the order they were appended; keys rotated with the stored positions when
  /// RoPE-on-read is on. Throws qvg::Error for a layer out of range or a layer
  /// that has no chunk.
  CacheRead read(int layer) const;

  /// read(layer) into device memory (builds with CUDA): the live K and V of
  /// the layer as float [heads][row_stride][dim] rows 0 .. n-1 of each head
  /// (row_stride >= n lets a caller decode straight into a larger buffer,
  /// e.g. a model's [context + chunk] K/V), the same bits read() returns.
  /// qvg and rtn spans are mirrored in device memory on first use and decoded
  /// there; other codecs' spans are decoded on the host and copied; the
  /// full-precision chunks and positions are copied; RoPE-on-read runs on the
  /// device with the host's angle table (qvg::rope_plan). `stream` is a
  /// cudaStream_t (null = default stream); returns n once the stream has
  /// finished the work. Throws qvg::Error as read() does, when row_stride < n,
  /// and without CUDA or a device.
  int64_t read_device(int layer, float* k_out, float* v_out, int64_t row_stride, void* stream = nullptr) const;

  /// Device bytes held by the span mirrors of read_device (0 before it).
  int64_t device_bytes() const;

  int64_t chunks_appended(int layer) const;  ///< chunks ever appended to the layer
  int64_t tokens_appended(int layer) const;  ///< tokens ever appended to the layer
  int64_t live_tokens(int layer) const;      ///< tokens read(layer) returns
  /// The live chunks of a layer in order, (index, tokens) each: read(layer)'s
  /// CacheRead::chunks and chunk_tokens without decoding anything. Throws
  /// qvg::Error as read() does (a layer out of range or without chunks).
  std::vector<std::pair<int64_t, int64_t>> live_chunks(int layer) const;
  int64_t spans_encoded(int layer) const;    ///< spans ever encoded in the layer

  LayerMemory layer_memory(int layer) const;
  MemoryStats memory() const;

  /// Writes the whole cache (config, spans, full-precision chunks, positions,
  /// warm-start state) to a file; layout in docs/FORMAT.md, "Streaming cache
  /// file". Written to a unique temporary file (path + ".tmp.XXXXXX"), fsynced
  /// and renamed over path (then the directory fsynced), so a failed or killed
  /// save leaves the older file at path intact, and concurrent saves of one path
  /// leave one whole file. A save also removes the temporary files of path that
  /// killed saves left (those no living writer holds an flock on).
  void save(const std::string& path) const;

  /// Reads a cache written by save(). Validates everything (magic, version,
  /// checksums, sizes, the config, every span by decoding it, the state
  /// against the policy) and throws qvg::Error naming the problem.
  static StreamingKVCache load(const std::string& path, CacheOptions options = {});
  /// As load(path), and throws qvg::Error naming the first field in which the
  /// file's config differs from `expected`.
  static StreamingKVCache load(const std::string& path, const CacheConfig& expected,
                               CacheOptions options = {});

  struct Impl;

 private:
  explicit StreamingKVCache(std::unique_ptr<Impl> impl);
  static StreamingKVCache load_file(const std::string& path, const CacheOptions& options,
                                    const CacheConfig* expected);
  std::unique_ptr<Impl> impl_;
};

/// Throws qvg::Error naming the first field where a and b differ ("" prefix
/// for messages: `what`).
void check_same_config(const CacheConfig& a, const CacheConfig& b, const std::string& what);

}  // namespace qvg
