// Internal to src/cache/device: the state of a DeviceKVCache (its Impl and
// the chunk, span and layer records, the contiguous views' pages) shared by
// device_cache.cpp (appends, flushes, reads, queries) and device_views.cpp
// (contiguous views). The design: device_cache.cpp's opening comment.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_impl.h"
#include "cache/cache_skeleton.h"
#include "cuda/cache_kernels.h"
#include "cuda/check.h"
#include "cuda/qvg_cuda.h"
#include "cuda/rope_cuda.h"
#include "cuda/view_memory.h"
#include "qvg/device_cache.h"
#include "qvg/methods.h"

namespace qvg {
namespace device_cache_detail {

using cuda::DeviceBuffer;

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// Grows buf to at least n elements (memory from the pool on s; contents not kept).
template <typename T>
T* ensure(DeviceBuffer<T>& buf, size_t n, cudaStream_t s) {
  if (buf.size() < n) {
    buf.use_pool(s);
    buf.resize(n);
  }
  return buf.get();
}

template <typename T>
DeviceBuffer<T> pooled(size_t n, cudaStream_t s) {
  DeviceBuffer<T> b;
  b.use_pool(s);
  b.resize(n);
  return b;
}

/// Rows of `heads` heads: src rows [0, t) ([heads][src_tokens][dim], BF16,
/// starting at row src_row) -> rows out_offset.. of out ([heads][out_tokens]
/// [dim] of `type`).
inline void copy_bf16_rows(const uint16_t* src, int64_t src_tokens, int64_t src_row, int64_t t, int heads, int dim,
                    void* out, DeviceElement type, int64_t out_tokens, int64_t out_offset, cudaStream_t s) {
  if (type == DeviceElement::bf16) {
    const size_t row = static_cast<size_t>(dim) * 2;
    QVG_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out) + static_cast<size_t>(out_offset) * row,
                                     static_cast<size_t>(out_tokens) * row, src + src_row * dim,
                                     static_cast<size_t>(src_tokens) * row, static_cast<size_t>(t) * row,
                                     static_cast<size_t>(heads), cudaMemcpyDeviceToDevice, s));
  } else {
    cuda::widen_bf16_range(src, heads, src_tokens, dim, cuda::DecodeRange{src_row, t, out_tokens, out_offset},
                           static_cast<float*>(out), s);
  }
}

struct DChunk {
  int64_t index = 0, first_token = 0, tokens = 0;
  bool live = true;
  int64_t span = -1, span_offset = 0;
  // BF16 [heads][tokens][dim] (contiguous_views: [tokens][heads][dim], and
  // only for a chunk held outside the own pages); empty inside a span,
  // except a span whose overlapped encode the caller's stream has not
  // waited for yet: read() reads a chunk from these while they exist.
  DeviceBuffer<uint16_t> k, v;
  // contiguous_views: the chunk's first row in the layer's own pages
  // (full precision there), or -1.
  int64_t slot = -1;
};

/// A CUDA event without timing, created on first record.
class Event {
 public:
  Event() = default;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  void record(cudaStream_t s) {
    if (!e_) QVG_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
    QVG_CUDA_CHECK(cudaEventRecord(e_, s));
  }
  /// s waits (on the device) for the work before the last record.
  void wait(cudaStream_t s) const {
    if (e_) QVG_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0));
  }

 private:
  cudaEvent_t e_ = nullptr;
};

/// The cache's own stream (overlapped encodes), created on first use. Its
/// destructor waits for the device: the pool frees queued on it (and reads
/// on callers' streams of the memory they free) have run before it is gone.
class OwnStream {
 public:
  OwnStream() = default;
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  ~OwnStream() {
    if (s_) {
      cudaDeviceSynchronize();
      cudaStreamDestroy(s_);
    }
  }
  cudaStream_t get() {
    if (!s_) QVG_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    return s_;
  }

 private:
  cudaStream_t s_ = nullptr;
};

struct DSpan {
  int64_t id = 0, first_chunk = 0, chunks = 0, first_token = 0, tokens = 0;
  DeviceEncodedTensor k, v;
  bool pending = false;  // batch_encodes: formed, not encoded yet (k, v empty; its chunks keep their BF16)
};

struct DLayer {
  std::vector<DChunk> chunks;
  std::vector<DSpan> spans;
  int64_t next_chunk = 0, next_token = 0, next_span = 0;
  DeviceEncodedTensor warm_k, warm_v;  // warm_state() of the last span's, or empty
  DeviceBuffer<int32_t> live_positions;  // positions of the live tokens, in order
  Event encoded;  // overlapped encodes: after the last append's encodes
  bool awaiting = false;  // spans whose chunks still hold BF16 buffers
  // contiguous_views: rows of the own pages in use ([0, region_end)), and
  // the slot of the last view() ([extra_at, extra_at + extra_rows); -1: no
  // view since the last append).
  int64_t region_end = 0;
  int64_t extra_at = -1, extra_rows = 0;
};

/// contiguous_views: per layer and role (0 = K, 1 = V) a split range with
/// the role's shared pages below the boundary and the layer's own above.
/// Pages grow by what is missing, rounded up to whole pages.
struct Views {
  int device = 0;
  size_t page = 0, row = 0;  // bytes of a page and of a token row (heads x dim BF16)
  cuda::PageList shared[2];
  size_t shared_bytes = 0;  // a role's
  std::vector<cuda::PageList> own[2];
  std::vector<size_t> own_bytes;  // a layer's, a role's
  std::vector<std::unique_ptr<cuda::SplitRange>> ranges[2];  // after the pages: unmapped first

  Views(int dev, int layers, size_t row_bytes) : device(dev), page(cuda::view_page_bytes(dev)), row(row_bytes) {
    for (int r = 0; r < 2; ++r) {
      own[r].resize(static_cast<size_t>(layers));
      for (int l = 0; l < layers; ++l) ranges[r].push_back(std::make_unique<cuda::SplitRange>(dev));
    }
    own_bytes.assign(static_cast<size_t>(layers), 0);
  }
  Views(const Views&) = delete;
  Views& operator=(const Views&) = delete;
  /// No work may read or write the addresses once they are unmapped: the
  /// views' device is synchronized (whichever device is current).
  ~Views() {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    if (current != device) (void)cudaSetDevice(device);
    (void)cudaDeviceSynchronize();
    if (current != device) (void)cudaSetDevice(current);
  }

  /// Pages for at least `shared_rows` shared rows and `own_rows` rows of
  /// the layer's own, mapped into the layer's ranges.
  void ensure(int layer, int64_t shared_rows, int64_t own_rows) {
    const auto l = static_cast<size_t>(layer);
    // One allocation more per role (K, V) for what `have` bytes lack of `need`.
    auto grow = [&](size_t need, size_t& have, cuda::PageList& k, cuda::PageList& v) {
      if (need <= have) return;
      const size_t add = cuda::round_up_to_page(need - have, page);
      auto pk = std::make_shared<cuda::PhysicalPages>(device, add);  // both made before either list grows
      auto pv = std::make_shared<cuda::PhysicalPages>(device, add);
      k.push_back(std::move(pk));
      v.push_back(std::move(pv));
      have += add;
    };
    grow(static_cast<size_t>(shared_rows) * row, shared_bytes, shared[0], shared[1]);
    grow(static_cast<size_t>(own_rows) * row, own_bytes[l], own[0][l], own[1][l]);
    for (int r = 0; r < 2; ++r) {
      cuda::SplitRange& range = *ranges[r][l];
      if (range.boundary() == nullptr || range.below_bytes() != shared_bytes || range.above_bytes() != own_bytes[l])
        range.map(shared[r], own[r][l]);
    }
  }
  /// Row 0 of the layer's own rows of role r (the boundary).
  uint8_t* own_rows(int layer, int r) const { return ranges[r][static_cast<size_t>(layer)]->boundary(); }
};

/// The RoPE angle table on the device (rope_range_plan over [lo, hi]).
struct DeviceRopeTable {
  bool valid = false;
  int32_t lo[3] = {0, 0, 0}, hi[3] = {-1, -1, -1};
  int pairs = 0, position_dims = 0;
  DeviceBuffer<int32_t> a, b, coord;
  DeviceBuffer<int64_t> base;
  DeviceBuffer<double> cos, sin;
  int64_t bytes() const {
    return static_cast<int64_t>(a.bytes() + b.bytes() + coord.bytes() + base.bytes() + cos.bytes() + sin.bytes());
  }
};

}  // namespace device_cache_detail

using namespace device_cache_detail;

struct DeviceKVCache::Impl {
  // First member, destroyed last: the buffers below free into the pool on it.
  OwnStream own;
  CacheConfig config;
  DeviceCacheOptions options;
  Event input;  // overlapped encodes: on the caller's stream after an append's input
  int device = 0;
  std::vector<DLayer> layers;
  std::unique_ptr<DeviceCodec> key_codec, value_codec;
  DeviceBuffer<uint16_t> gather;        // a span's chunks, contiguous (encode input)
  mutable DeviceBuffer<float> rotate;   // keys before rotation (bf16 reads with RoPE)
  mutable DeviceBuffer<uint8_t> whole;  // whole-span decodes (codecs without a ranged decode)
  DeviceRopeTable rope;
  int64_t pending = 0;             // batch_encodes: spans not encoded yet, over all layers
  int64_t pending_last_chunk = -1; // the newest chunk index inside them
  std::unique_ptr<Views> views;    // contiguous_views
  bool append_in_place = false;    // append_extra -> append: the chunk is in the layer's slot already

  size_t row_bytes() const { return static_cast<size_t>(config.heads) * static_cast<size_t>(config.dim) * 2; }

  /// contiguous_views: a full-precision chunk's token-major rows (own pages or buffers).
  const uint16_t* chunk_rows(int layer, const DChunk& ch, bool key) const {
    if (ch.slot >= 0)
      return reinterpret_cast<const uint16_t*>(views->own_rows(layer, key ? 0 : 1) +
                                               static_cast<size_t>(ch.slot) * row_bytes());
    QVG_CHECK((key ? ch.k : ch.v).get() != nullptr, "layer ", layer, ": chunk ", ch.index,
              " holds no full-precision rows (corrupt state)");
    return (key ? ch.k : ch.v).get();
  }

  /// A full-precision chunk's K or V into rows off.. of a span's encode
  /// input x ([heads][span_tokens][dim] BF16).
  void gather_chunk(int layer, const DChunk& ch, bool key, uint16_t* x, int64_t span_tokens, int64_t off,
                    cudaStream_t s) const {
    const CacheConfig& c = config;
    if (!views) {
      copy_bf16_rows((key ? ch.k : ch.v).get(), ch.tokens, 0, ch.tokens, c.heads, c.dim, x, DeviceElement::bf16,
                     span_tokens, off, s);
      return;
    }
    cuda::gather_bf16_to(chunk_rows(layer, ch, key), DeviceElement::bf16, c.heads, ch.tokens, c.dim, c.dim,
                         int64_t{c.heads} * c.dim, x + off * c.dim, span_tokens * c.dim, c.dim, s);
  }

  /// contiguous_views: writes the layer's live rows before the own pages
  /// (spans decoded, buffers copied) below the boundary and maps pages for
  /// `extra` rows after the own ones; the view, and the own pages' rows in
  /// *own_rows. The layer's slot (extra_at, extra_rows) is view()'s to set.
  DeviceKVView write_view(int layer, int64_t extra, void* stream, int64_t* own_rows) const;

  /// A chunk's full-precision rows go (it is encoded or evicted).
  static void release(DChunk& ch) {
    ch.k = DeviceBuffer<uint16_t>();
    ch.v = DeviceBuffer<uint16_t>();
    ch.slot = -1;
  }

  /// contiguous_views: restores the layer's invariant after an append or a
  /// flush: chunks in the own pages before the last live chunk outside them
  /// move to buffers of their own, the rest move down to rows 0, 1, ... in
  /// order (every move goes down: the rows above region_end, the slot of
  /// the last view() among them, keep their contents). `before_moves`: an
  /// event the stream waits for before the first row moves (an overlapped
  /// encode still reading them).
  void compact(int layer, cudaStream_t s, const Event* before_moves);

  int pd() const { return rope_position_dims(config.rope.mode); }

  /// The codec of a span of `tokens` tokens (C clamped to them), held per role.
  const DeviceCodec& span_codec(TensorRole role, int64_t tokens) {
    std::unique_ptr<DeviceCodec>& held = role == TensorRole::key ? key_codec : value_codec;
    const CodecConfig cc = span_config(role == TensorRole::key ? config.key : config.value, tokens);
    if (!held || !same_codec(held->config(), cc)) held = std::make_unique<DeviceCodec>(cc);
    return *held;
  }
  const DeviceCodec& read_codec(TensorRole role) const { return *(role == TensorRole::key ? key_codec : value_codec); }

  /// Makes the table cover [lo, hi] (grown to twice the range needed, so a
  /// run's frames rebuild it a logarithmic number of times).
  void cover(const int32_t lo[3], const int32_t hi[3], cudaStream_t s) {
    const int dims = pd();
    bool inside = rope.valid;
    for (int d = 0; d < dims && inside; ++d) inside = lo[d] >= rope.lo[d] && hi[d] <= rope.hi[d];
    if (inside) return;
    int32_t nlo[3] = {0, 0, 0}, nhi[3] = {-1, -1, -1};
    for (int d = 0; d < dims; ++d) {
      nlo[d] = rope.valid ? std::min(lo[d], rope.lo[d]) : lo[d];
      nhi[d] = rope.valid ? std::max(hi[d], rope.hi[d]) : hi[d];
      const int64_t span = static_cast<int64_t>(nhi[d]) - nlo[d] + 1;
      if (rope.valid && hi[d] > rope.hi[d]) nhi[d] = static_cast<int32_t>(std::min<int64_t>(INT32_MAX, nhi[d] + span));
      if (rope.valid && lo[d] < rope.lo[d]) nlo[d] = static_cast<int32_t>(std::max<int64_t>(INT32_MIN, nlo[d] - span));
    }
    const RopePlan plan = rope_range_plan(nlo, nhi, config.dim, config.rope);
    DeviceRopeTable t;
    t.valid = true;
    std::copy(nlo, nlo + 3, t.lo);
    std::copy(nhi, nhi + 3, t.hi);
    t.pairs = static_cast<int>(plan.a.size());
    t.position_dims = plan.position_dims;
    auto up = [&](auto& dst, const auto& src) {
      dst.use_pool(s);
      dst.upload(src.data(), src.size(), s);  // pageable: copied out when the call returns
    };
    up(t.a, plan.a), up(t.b, plan.b), up(t.coord, plan.coord), up(t.base, plan.base);
    up(t.cos, plan.cos), up(t.sin, plan.sin);
    rope = std::move(t);
  }
};

}  // namespace qvg
