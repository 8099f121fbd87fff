// StreamingKVCache::read_device (include/qvg/cache.h): the read of one layer
// into device memory, for a model whose attention runs on the GPU. Built
// only with CUDA (no_device_cache.cpp beside it has the stub).
//
// Spans and full-precision chunks are copied to the device the first time
// they are read (a span's encoded parts, not its decode; a chunk's BF16 or
// F32 bytes, dropped when it joins a span) and read from there into the
// destination rows: spans of the group-quantized format (qvg, rtn) by the
// fused decode, uncompressed (BF16) spans and chunks widened, F32 chunks
// copied; spans of other codecs (kivi, quarot) are decoded by the host codec
// and copied. RoPE-on-read runs on the device with the host's angle table.
// Every step reproduces read()'s arithmetic, so the bytes are the same.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cache/cache_impl.h"
#include "cuda/qvg_cuda.h"
#include "cuda/rope_cuda.h"
#include "qvg/cuda.h"
#include "qvg/methods.h"

namespace qvg {

namespace {

using cuda::DeviceBuffer;

/// How one role (K or V) of a span is read on the device.
enum class DeviceKind {
  fused,  ///< the group-quantized format: encoded parts on the device, the fused decode
  bf16,   ///< uncompressed: its BF16 bytes on the device, widened
  host,   ///< other codecs: decoded on the host, copied
};

DeviceKind kind_of(const CodecConfig& c) {
  const MethodTraits& t = method_traits(c.method);
  if (t.group_quantized) return DeviceKind::fused;
  if (t.uncompressed) return DeviceKind::bf16;
  return DeviceKind::host;
}

/// One role of a span on the device.
struct DeviceRole {
  DeviceKind kind = DeviceKind::host;
  cuda::QvgShape shape;
  cuda::DeviceParts parts;   ///< fused
  DeviceBuffer<uint8_t> raw;  ///< bf16: the span's BF16 bytes

  void upload(const EncodedTensor& e, cudaStream_t s) {
    kind = kind_of(e.config);
    if (kind == DeviceKind::fused) {
      shape = cuda::make_shape(e.config, e.heads, e.tokens, e.dim);
      cuda::upload_parts(e, shape, parts, s);
    } else if (kind == DeviceKind::bf16) {
      QVG_CHECK(e.full_precision.size() == static_cast<size_t>(e.values()) * 2, "read_device: a BF16 span holds ",
                e.full_precision.size(), " bytes, its shape needs ", e.values() * 2);
      raw.resize(e.full_precision.size());
      cuda::upload_bytes(raw, e.full_precision, s);
    }
  }
  int64_t bytes() const {
    return static_cast<int64_t>(parts.bytes() + raw.bytes());
  }
};

struct DeviceSpan {
  DeviceRole k, v;
};

/// A full-precision chunk's bytes (BF16 or F32 per CacheConfig::tail) on the device.
struct DeviceChunk {
  DeviceBuffer<uint8_t> k, v;
};

/// The span's device copy, made on first use (under the cache's mutex).
const DeviceSpan& mirror(const StreamingKVCache::Impl& I, const CacheSpan& sp, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(I.device_mutex);
  if (!sp.device) {
    auto d = std::make_shared<DeviceSpan>();
    d->k.upload(sp.k, s);
    d->v.upload(sp.v, s);
    sp.device = std::move(d);
  }
  return *static_cast<const DeviceSpan*>(sp.device.get());
}

const DeviceChunk& mirror(const StreamingKVCache::Impl& I, const CacheChunk& ch, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(I.device_mutex);
  if (!ch.device) {
    auto d = std::make_shared<DeviceChunk>();
    d->k.resize(ch.k.size());
    d->v.resize(ch.v.size());
    cuda::upload_bytes(d->k, ch.k, s);
    cuda::upload_bytes(d->v, ch.v, s);
    ch.device = std::move(d);
  }
  return *static_cast<const DeviceChunk*>(ch.device.get());
}

/// Host rows [t][dim] of every head -> rows off.. of a [heads][stride][dim] device buffer.
void copy_rows(const HeadTensor& src, int64_t src_offset, int64_t t, float* dst, int64_t stride, int64_t off,
               cudaStream_t s) {
  QVG_CUDA_CHECK(cudaMemcpy2DAsync(dst + off * src.dim, static_cast<size_t>(stride * src.dim) * sizeof(float),
                                   src.head(0) + src_offset * src.dim,
                                   static_cast<size_t>(src.tokens * src.dim) * sizeof(float),
                                   static_cast<size_t>(t * src.dim) * sizeof(float), static_cast<size_t>(src.heads),
                                   cudaMemcpyHostToDevice, s));
}

/// Rows [begin, begin + count) of a device tensor [heads][tokens][dim] held as
/// BF16 or F32 bytes -> float rows per `r` of the destination.
void widen_rows(const uint8_t* bytes, bool bf16, int heads, int64_t tokens, int dim, const cuda::DecodeRange& r,
                float* out, cudaStream_t s) {
  if (bf16) {
    cuda::widen_bf16_range(reinterpret_cast<const uint16_t*>(bytes), heads, tokens, dim, r, out, s);
    return;
  }
  const auto* f = reinterpret_cast<const float*>(bytes);
  QVG_CUDA_CHECK(cudaMemcpy2DAsync(out + r.out_offset * dim, static_cast<size_t>(r.out_tokens * dim) * sizeof(float),
                                   f + r.begin * dim, static_cast<size_t>(tokens * dim) * sizeof(float),
                                   static_cast<size_t>(r.count * dim) * sizeof(float), static_cast<size_t>(heads),
                                   cudaMemcpyDeviceToDevice, s));
}

/// One role of a span, tokens [begin, begin + t), into the destination rows.
void read_role(const DeviceRole& d, const EncodedTensor& e, const Codec& host_codec, int threads, HeadTensor& host,
               bool& host_valid, const cuda::DecodeRange& r, float* out, cudaStream_t s) {
  switch (d.kind) {
    case DeviceKind::fused:
      cuda::decode_range(d.shape, d.parts.view(), r, out, DeviceElement::f32, s);
      return;
    case DeviceKind::bf16:
      widen_rows(d.raw.get(), true, static_cast<int>(e.heads), e.tokens, static_cast<int>(e.dim), r, out, s);
      return;
    case DeviceKind::host:
      if (!host_valid) {
        host_codec.decode(e, host, threads);
        host_valid = true;
      }
      copy_rows(host, r.begin, r.count, out, r.out_tokens, r.out_offset, s);
      return;
  }
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v, cudaStream_t s) {
  DeviceBuffer<T> d(v.size());
  if (!v.empty()) QVG_CUDA_CHECK(cudaMemcpyAsync(d.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  return d;
}

}  // namespace

int64_t StreamingKVCache::read_device(int layer, float* k_out, float* v_out, int64_t row_stride,
                                      void* stream) const {
  const Impl& I = *impl_;
  const CacheConfig& c = I.config;
  check_layer(I, layer, "read_device");
  std::string why;
  QVG_CHECK(cuda_available(&why), "read_device: ", why);
  const CacheLayer& L = I.layers[static_cast<size_t>(layer)];
  QVG_CHECK(L.next_chunk > 0, "read_device: layer ", layer, " is empty (no chunk has been appended to it)");
  int64_t n = 0;
  for (const CacheChunk& ch : L.chunks)
    if (ch.live) n += ch.tokens;
  QVG_CHECK(row_stride >= n, "read_device: layer ", layer, " holds ", n, " live tokens, the destination has rows for ",
            row_stride);
  QVG_CHECK(k_out != nullptr && v_out != nullptr, "read_device: null destination");
  const auto s = static_cast<cudaStream_t>(stream);
  const int pd = rope_position_dims(c.rope.mode);
  std::vector<int32_t> positions;
  positions.reserve(static_cast<size_t>(n * pd));
  // Host decodes of spans whose codec has no device decode (kept across the
  // chunks of one span). Copies from pageable host memory return once the
  // data has left it, so host buffers may change after each copy.
  HeadTensor hk, hv;
  bool hk_valid = false, hv_valid = false;
  int64_t host_span = -1;
  const bool bf16_tail = c.tail == TailFormat::bf16;
  int64_t off = 0;
  for (const CacheChunk& ch : L.chunks) {
    if (!ch.live) continue;
    const int64_t t = ch.tokens;
    if (ch.span < 0) {
      const DeviceChunk& d = mirror(I, ch, s);
      const cuda::DecodeRange r{0, t, row_stride, off};
      widen_rows(d.k.get(), bf16_tail, c.heads, t, c.dim, r, k_out, s);
      widen_rows(d.v.get(), bf16_tail, c.heads, t, c.dim, r, v_out, s);
    } else {
      const auto it = std::find_if(L.spans.begin(), L.spans.end(), [&](const CacheSpan& sp) { return sp.id == ch.span; });
      QVG_CHECK(it != L.spans.end(), "read_device: layer ", layer, ": span ", ch.span, " is missing (corrupt state)");
      if (host_span != ch.span) hk_valid = hv_valid = false, host_span = ch.span;
      const DeviceSpan& d = mirror(I, *it, s);
      const cuda::DecodeRange r{ch.span_offset, t, row_stride, off};
      read_role(d.k, it->k, *I.key_codec, I.options.threads, hk, hk_valid, r, k_out, s);
      read_role(d.v, it->v, *I.value_codec, I.options.threads, hv, hv_valid, r, v_out, s);
    }
    positions.insert(positions.end(), ch.positions.begin(), ch.positions.end());
    off += t;
  }
  if (pd > 0 && n > 0) {
    const RopePlan plan = rope_plan(positions, n, c.dim, c.rope);
    const DeviceBuffer<int32_t> a = to_device(plan.a, s), b = to_device(plan.b, s), coord = to_device(plan.coord, s),
                                pos = to_device(positions, s);
    const DeviceBuffer<int64_t> base = to_device(plan.base, s);
    const DeviceBuffer<double> cs = to_device(plan.cos, s), sn = to_device(plan.sin, s);
    cuda::RopePlanView view;
    view.a = a.get(), view.b = b.get(), view.coord = coord.get(), view.base = base.get();
    view.cos = cs.get(), view.sin = sn.get(), view.positions = pos.get();
    view.pairs = static_cast<int>(plan.a.size());
    view.position_dims = plan.position_dims;
    std::copy(std::begin(plan.lo), std::end(plan.lo), view.lo);
    view.per_token = plan.per_token;
    cuda::rope_rotate(k_out, c.heads, n, row_stride, c.dim, view, s);
    QVG_CUDA_CHECK(cudaStreamSynchronize(s));  // the plan's buffers are freed on return
  }
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
  return n;
}

int64_t StreamingKVCache::device_bytes() const {
  const Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.device_mutex);
  int64_t b = 0;
  for (const CacheLayer& L : I.layers) {
    for (const CacheSpan& sp : L.spans)
      if (sp.device) {
        const auto* d = static_cast<const DeviceSpan*>(sp.device.get());
        b += d->k.bytes() + d->v.bytes();
      }
    for (const CacheChunk& ch : L.chunks)
      if (ch.device) {
        const auto* d = static_cast<const DeviceChunk*>(ch.device.get());
        b += static_cast<int64_t>(d->k.bytes() + d->v.bytes());
      }
  }
  return b;
}

}  // namespace qvg
