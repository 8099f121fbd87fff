// The streaming KV cache with its state in the memory of a CUDA device: what
// a PyTorch attention layer appends each chunk's K and V to and reads the
// live history from, at every step, without host round trips.
//
// Same policy as StreamingKVCache (include/qvg/cache.h: sink, eviction by
// window, spans of quant_factor chunks, keep_recent, C clamped for short
// spans, warm-started k-means) and the same read: read() of this cache with
// f32 output is bit-identical to StreamingKVCache::read() of a cache given
// the same chunks where DeviceCodec's encodes equal the CPU reference's (no
// near-ties in any assignment, no k-means stop decided within rounding of
// tol: include/qvg/device_codec.h); with bf16 output it is that read
// rounded to nearest even.
//
// Differences from StreamingKVCache:
//  - Full-precision chunks are held in BF16 (CacheConfig::tail must be bf16).
//  - Values are not checked (a check would read them back to the host): a
//    non-finite input gives non-finite spans, as DeviceCodec::encode does.
//  - AppendReport's SpanReports carry the span's layout, C, warm-start flags
//    and bytes, not k-means statistics, errors or timings (those would wait
//    for the device).
//  - No save/load (StreamingKVCache holds the host form).
//
// Streams: every call queues its work on the caller's `stream` (a
// cudaStream_t as void*; null = the legacy default stream) and returns
// without waiting for the device, except where a codec encodes on the host
// (kivi, quarot, bf16: DeviceCodec::encode) and the first d2-rounds or
// k-means++ start of a span shape. The cache's memory comes from the device's stream-ordered
// pool on the stream of the call that allocates it and is released on that
// stream: every stream given to the cache must outlive it (use one stream per
// cache, or order the streams yourself). Not thread-safe (one caller at a time).
//
// Overlapped encodes (DeviceCacheOptions::overlap_encode): the spans an
// append forms are encoded on a stream of the cache's own, after the work
// queued on the caller's stream so far, while the caller goes on. Until the
// layer's next append, read() reads those spans' chunks from their BF16
// copies (the cache holds both meanwhile, and memory() counts both); the
// next append makes the caller's stream wait for the encode (an event, no
// host wait) and drops the copies. So read() after append k equals the
// read of a cache without the option after append k, except that the
// chunks of the spans formed by append k read as they were appended (BF16).
//
// Contiguous views (DeviceCacheOptions::contiguous_views): view() hands out
// a layer's K and V as contiguous token-major BF16 tensors [rows, heads,
// dim] (flash-attention's and Self-Forcing's layout) that attention reads in
// place, followed by a slot for the chunk being generated. Each layer and
// role (K, V) has a range of device addresses (CUDA virtual memory
// management) split at a page boundary: below it, pages shared by all layers
// (one set per role, as read()'s caller shares one buffer between layers)
// that view() fills with the rows it must produce (sink chunks and the
// decodes of spans), ending at the boundary; from the boundary up, the
// layer's own pages, which hold the layer's full-precision chunks after the
// last encoded one (the chunks waiting for their span, keep_recent's,
// overlap_encode's and batch_encodes' until encoded) in order, then the
// slot. append() stores a chunk straight into its place there; when a span
// is encoded the chunks after it move down to the start once (a copy per
// span, not per read). So view() writes the decoded history and copies
// nothing of the waiting chunks. Memory: the own pages hold at most the
// BF16 chunks the cache holds anyway plus the slot, rounded up to whole
// pages (kept at their peak until the cache is destroyed); the shared pages
// one layer's produced rows per role. RoPE on read is not offered in this
// mode (the constructor refuses it): keys are cached as attention reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "qvg/cache.h"
#include "qvg/device_codec.h"

namespace qvg {

/// A chunk's K or V in device memory: element (head h, token t, channel c)
/// at data + h * head_stride + t * token_stride + c, in elements. A
/// [heads, tokens, dim] tensor has head_stride tokens * dim and token_stride
/// dim; Self-Forcing's [tokens, heads, dim] (batch 1) has head_stride dim and
/// token_stride heads * dim.
struct DeviceChunkView {
  const void* data = nullptr;
  DeviceElement type = DeviceElement::bf16;
  int64_t heads = 0, tokens = 0, dim = 0;
  int64_t head_stride = 0, token_stride = 0;
  /// A contiguous [heads, tokens, dim] tensor.
  static DeviceChunkView head_major(const void* data, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim) {
    return DeviceChunkView{data, type, heads, tokens, dim, tokens * dim, dim};
  }
};

/// The RoPE positions of an appended chunk (RoPE-on-read only): either host
/// values as StreamingKVCache::append takes them (copied to the device), or
/// a grid generated on the device (no host copy):
///  - wan_3d: the chunk is frames x height x width latent tokens in the order
///    frame, row, column, starting at frame `first` (positions (first + f, y,
///    x), as qvg::wan_grid_positions gives them);
///  - rope_1d: positions first, first + 1, ...
struct ChunkPositions {
  std::span<const int32_t> host;
  int64_t first = -1;  ///< the grid's first frame (wan_3d) or position (rope_1d); -1 = use `host`
  int64_t height = 0, width = 0;  ///< wan_3d grid
  static ChunkPositions wan_grid(int64_t first_frame, int64_t height, int64_t width) {
    ChunkPositions p;
    p.first = first_frame;
    p.height = height;
    p.width = width;
    return p;
  }
  static ChunkPositions sequence(int64_t first) {
    ChunkPositions p;
    p.first = first;
    return p;
  }
};

/// How a DeviceKVCache runs (not part of the cache's definition).
struct DeviceCacheOptions {
  /// Encode spans on the cache's own stream, read their chunks in BF16 until
  /// the layer's next append (see the file comment).
  bool overlap_encode = false;
  /// Batched span encodes: a span an append forms is encoded later, together
  /// with the spans other layers formed (DeviceCodec::encode_batch, the K of
  /// every layer in one batch, the V in another), by flush() or
  /// automatically by the first append of a later chunk than the pending
  /// spans' newest. Until then read() reads the span's chunks from their BF16
  /// buffers, and memory counts them as BF16. The spans' bytes equal those of
  /// encoding them at once. Not with overlap_encode.
  bool batch_encodes = false;
  /// Contiguous token-major views (view(), append_extra(); see the file
  /// comment). Needs rope == none and a device with virtual memory
  /// management. read() then reads through view() (bf16 output only).
  bool contiguous_views = false;
};

/// A layer's K and V as view() hands them out: token-major BF16 tensors
/// [rows + extra, heads, dim] (row r of head h at k + (r * heads + h) * dim
/// elements), 16-byte aligned. Rows [0, rows) are the live history, rows
/// [rows, rows + extra) the slot for the caller's chunk (contents undefined
/// until written). Valid until the next call on the cache (a later view()
/// of another layer rewrites the rows the layers share); the addresses stay
/// mapped until the cache is destroyed.
struct DeviceKVView {
  void* k = nullptr;
  void* v = nullptr;
  int64_t rows = 0;
  int64_t extra = 0;
};

/// The memory behind contiguous views (DeviceKVCache::view_memory).
struct ViewMemory {
  int64_t own_bytes = 0;       ///< the layers' own pages, all roles (full-precision chunks + slots)
  int64_t shared_bytes = 0;    ///< the shared pages, both roles
  int64_t reserved_bytes = 0;  ///< address space reserved (no memory), retired ranges included
  int64_t reservations = 0;    ///< ranges reserved over all layers and roles (> 2 x layers: some grew)
};

class DeviceKVCache {
 public:
  /// On the current device. Validates the config as StreamingKVCache does,
  /// and tail == bf16. Throws qvg::Error without CUDA or a device.
  explicit DeviceKVCache(CacheConfig config, DeviceCacheOptions options = {});
  ~DeviceKVCache();
  DeviceKVCache(DeviceKVCache&&) noexcept;
  DeviceKVCache& operator=(DeviceKVCache&&) noexcept;

  const CacheConfig& config() const;
  const DeviceCacheOptions& options() const;
  int device() const;

  /// Adds one chunk to a layer and applies the span policy. k and v: [heads,
  /// T, dim] as the config says, T > 0 (= chunk_tokens when set), f32, bf16
  /// or f16 (held as BF16, rounded to nearest even), keys before RoPE when
  /// RoPE-on-read is on; positions required then (ignored otherwise). Throws
  /// qvg::Error (cache unchanged) on an invalid argument.
  AppendReport append(int layer, const DeviceChunkView& k, const DeviceChunkView& v, const ChunkPositions& positions,
                      void* stream);

  /// The live K and V of a layer into k_out and v_out: [heads][row_stride]
  /// [dim] of `type` (f32 or bf16), rows 0 .. n-1 of each head, n returned
  /// (row_stride >= n lets a caller read into a larger buffer). Both
  /// destinations 16-byte aligned with row_stride * dim * element size a
  /// multiple of 16. Keys rotated when RoPE-on-read is on. Stream-ordered;
  /// nothing is allocated once the scratch has grown to the layer's size.
  /// Throws qvg::Error for an empty layer or a bad destination.
  int64_t read(int layer, void* k_out, void* v_out, DeviceElement type, int64_t row_stride, void* stream) const;

  /// contiguous_views: the layer's live K and V as contiguous token-major
  /// BF16 rows, followed by a slot of `extra` rows (>= 0) for the chunk the
  /// caller attends with (see DeviceKVView); an empty layer gives rows 0.
  /// Decodes the spans (and copies the sink chunks) into the shared rows
  /// before the layer's own; stream-ordered. Grows the pages (and, past the
  /// reserved addresses, reserves a larger range) when the history needs
  /// more. qvg::Error without contiguous_views.
  DeviceKVView view(int layer, int64_t extra, void* stream);

  /// contiguous_views: appends the first `tokens` rows of the slot of the
  /// layer's last view() (K and V as the caller wrote them there) as the
  /// layer's next chunk, as append() would append a chunk with those BF16
  /// values, without copying them (they move down, as the other waiting
  /// chunks do, only where this append's or a flush's encoded span frees the
  /// rows below them).
  /// qvg::Error (cache unchanged) unless the last call on this layer was a
  /// view() with extra >= tokens, or for tokens the config refuses.
  AppendReport append_extra(int layer, int64_t tokens, void* stream);

  /// contiguous_views: the pages and addresses held (zeros otherwise).
  ViewMemory view_memory() const;

  /// batch_encodes: encodes every pending span now (in waves: the first
  /// pending span of every layer, then the second, ...; each wave's K of
  /// all layers in one encode_batch and its V in another). Stream-ordered;
  /// a no-op without pending spans.
  void flush(void* stream);
  /// Spans formed but not yet encoded (batch_encodes), over all layers.
  int64_t pending_spans() const;

  int64_t chunks_appended(int layer) const;
  int64_t tokens_appended(int layer) const;
  int64_t live_tokens(int layer) const;
  /// (index, tokens) of each live chunk, in order (as StreamingKVCache's).
  std::vector<std::pair<int64_t, int64_t>> live_chunks(int layer) const;
  int64_t spans_encoded(int layer) const;

  /// Bytes held, as StreamingKVCache counts them (tail: BF16 chunks;
  /// warm_start: the centroids kept for the next span), except positions:
  /// int32 per coordinate of every live token (StreamingKVCache also keeps
  /// those of evicted chunks inside held spans).
  LayerMemory layer_memory(int layer) const;
  MemoryStats memory() const;
  /// Device bytes of scratch kept for appends and reads (span gather, key
  /// rotation, decodes of codecs without a ranged decode, the RoPE table).
  int64_t scratch_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace qvg
