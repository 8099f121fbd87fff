// Device-resident encoded tensors and the stream-ordered DeviceCodec
// (qvg/device_codec.h). The group-quantized format's parts (qvg, rtn):
// cuda::DeviceParts, written by the Encoder (or, for qvg's code=cq, by the
// CPU reference and uploaded) and read by the decode kernels in place; the
// other methods' (kivi, quarot, bf16, fp8): cuda::BaselineDeviceParts.
// Part memory comes from the device's stream-ordered pool
// (DeviceBuffer::use_pool).
#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <utility>

#include "core/codecs.h"
#include "cuda/baseline_cuda.h"
#include "cuda/qvg_cuda.h"
#include "qvg/device_codec.h"
#include "qvg/half.h"
#include "qvg/methods.h"

namespace qvg {

namespace {

using cuda::check_device;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// The parts of a qvg / rtn tensor in the order of PartBytes' fields (no
/// zero points or full-precision values): device address, bytes.
std::array<std::pair<void*, size_t>, 5> part_list(const cuda::DeviceParts& p) {
  return {{{p.codes.get(), p.codes.bytes()},
           {p.scales.get(), p.scales.bytes()},
           {p.span_scales.get(), p.span_scales.bytes()},
           {p.centroids.get(), p.centroids.bytes()},
           {p.ids.get(), p.ids.bytes()}}};
}

}  // namespace

struct DeviceEncodedTensor::Impl {
  CodecConfig config;
  TensorRole role = TensorRole::key;
  int64_t heads = 0, tokens = 0, dim = 0;
  int device = 0;
  cuda::QvgShape shape;             // qvg, rtn
  cuda::DeviceParts parts;          // qvg, rtn
  cuda::BaselineDeviceParts base;   // the other methods decoded on the device

  /// An empty tensor of this header with its part memory from the pool on s.
  Impl(const CodecConfig& c, TensorRole r, int64_t h, int64_t n, int64_t d, cudaStream_t s)
      : config(c), role(r), heads(h), tokens(n), dim(d), device(cuda_current_device()) {
    cuda::keep_pool_memory();
    parts.use_pool(s);
    base.use_pool(s);
  }
  /// Whether the parts are the group-quantized format's (`parts`; else `base`).
  bool qvg_parts() const { return method_traits(config.method).group_quantized; }
  /// A host tensor of this header (config, role, shape) with no parts yet.
  EncodedTensor host_header() const {
    EncodedTensor e;
    e.config = config;
    e.role = role;
    e.heads = heads;
    e.tokens = tokens;
    e.dim = dim;
    return e;
  }
  bool centroids_only = false;  // a warm_state()
};

DeviceEncodedTensor::DeviceEncodedTensor() = default;
DeviceEncodedTensor::DeviceEncodedTensor(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const DeviceEncodedTensor::Impl& DeviceEncodedTensor::impl() const {
  QVG_CHECK(impl_ != nullptr, "empty DeviceEncodedTensor");
  return *impl_;
}
const CodecConfig& DeviceEncodedTensor::config() const { return impl().config; }
TensorRole DeviceEncodedTensor::role() const { return impl().role; }
int64_t DeviceEncodedTensor::heads() const { return impl().heads; }
int64_t DeviceEncodedTensor::tokens() const { return impl().tokens; }
int64_t DeviceEncodedTensor::dim() const { return impl().dim; }
int DeviceEncodedTensor::device() const { return impl().device; }

bool DeviceEncodedTensor::centroids_only() const { return impl().centroids_only; }

PartBytes DeviceEncodedTensor::bytes() const {
  const Impl& I = impl();
  PartBytes b = expected_part_bytes(I.config, I.role, I.heads, I.tokens, I.dim);
  if (I.centroids_only) {
    PartBytes only;
    only.centroids = b.centroids;
    b = only;
  }
  return b;
}

DeviceEncodedTensor DeviceEncodedTensor::warm_state(void* stream) const {
  const Impl& I = impl();
  QVG_CHECK(I.qvg_parts() && I.parts.centroids.size() > 0, "warm_state: a ", method_name(I.config.method),
            " tensor without centroids has no warm-start state");
  const cudaStream_t s = as_stream(stream);
  auto w = std::make_shared<Impl>(I.config, I.role, I.heads, I.tokens, I.dim, s);
  w->shape = I.shape;
  w->centroids_only = true;
  w->parts.centroids.resize(I.parts.centroids.size());
  w->parts.fp8_codes = I.parts.fp8_codes;
  w->parts.book_offset = I.parts.book_offset;
  w->parts.book_scales_offset = I.parts.book_scales_offset;
  QVG_CUDA_CHECK(cudaMemcpyAsync(w->parts.centroids.get(), I.parts.centroids.get(), I.parts.centroids.bytes(),
                                 cudaMemcpyDeviceToDevice, s));
  return DeviceEncodedTensor(std::move(w));
}

double DeviceEncodedTensor::bits_per_value() const {
  const Impl& I = impl();
  return 8.0 * static_cast<double>(bytes().total()) / static_cast<double>(I.heads * I.tokens * I.dim);
}

EncodedTensor DeviceEncodedTensor::to_host(void* stream) const {
  const Impl& I = impl();
  QVG_CHECK(!I.centroids_only, "to_host: a warm_state() holds centroids only");
  EncodedTensor e = I.host_header();
  const cudaStream_t s = as_stream(stream);
  if (I.qvg_parts()) {
    cuda::download_parts(I.parts, e, s);  // synchronizes s
    return e;
  }
  I.base.download(e, s);  // synchronizes s
  return e;
}

DeviceEncodedTensor DeviceEncodedTensor::from_host(const EncodedTensor& e, void* stream) {
  check_device();
  const cudaStream_t s = as_stream(stream);
  auto I = std::make_shared<Impl>(e.config, e.role, e.heads, e.tokens, e.dim, s);
  if (I->qvg_parts()) {
    check_decode_header(e.config, e);
    check_decode_parts(e, expected_part_bytes(e.config, e.role, e.heads, e.tokens, e.dim));
    I->shape = cuda::make_shape(e.config, e.heads, e.tokens, e.dim);
    cuda::upload_parts(e, I->shape, I->parts, s);  // checks span scales and ids as the CPU decode does
  } else {
    I->base.upload(e, s);
  }
  // Pageable host memory: the copies have read e's bytes when cudaMemcpyAsync returns.
  return DeviceEncodedTensor(std::move(I));
}

void DeviceEncodedTensor::pack(void* out, void* stream) const {
  const Impl& I = impl();
  QVG_CHECK(!I.centroids_only, "pack: a warm_state() holds centroids only");
  QVG_CHECK(I.qvg_parts(), "pack: ", method_name(I.config.method),
            " tensors are encoded on the host; send the parts of to_host() instead");
  QVG_CHECK(out != nullptr, "pack: null output buffer");
  QVG_CHECK(I.parts.bytes() == bytes().total(), "pack: the parts hold ", I.parts.bytes(), " bytes, the format ",
            bytes().total());
  const cudaStream_t s = as_stream(stream);
  auto* o = static_cast<uint8_t*>(out);
  for (const auto& [p, n] : part_list(I.parts)) {
    if (n) QVG_CUDA_CHECK(cudaMemcpyAsync(o, p, n, cudaMemcpyDeviceToDevice, s));
    o += n;
  }
}

DeviceEncodedTensor DeviceEncodedTensor::unpack(const CodecConfig& config, TensorRole role, int64_t heads,
                                                int64_t tokens, int64_t dim, const void* packed, void* stream) {
  check_device();
  QVG_CHECK(method_traits(config.method).group_quantized, "unpack: ", method_name(config.method),
            " tensors are encoded on the host; rebuild them with from_host()");
  QVG_CHECK(packed != nullptr, "unpack: null input buffer");
  const CodecConfig c = config.auto_centroids ? span_config(config, tokens) : config;
  const cudaStream_t s = as_stream(stream);
  auto I = std::make_shared<Impl>(c, role, heads, tokens, dim, s);
  I->shape = cuda::make_shape(c, heads, tokens, dim);  // validates the header
  I->parts.allocate(I->shape);
  auto* p = static_cast<const uint8_t*>(packed);
  for (const auto& [dst, n] : part_list(I->parts)) {
    if (n) QVG_CUDA_CHECK(cudaMemcpyAsync(dst, p, n, cudaMemcpyDeviceToDevice, s));
    p += n;
  }
  return DeviceEncodedTensor(std::move(I));
}

struct DeviceCodec::Impl {
  CodecConfig config;
  std::unique_ptr<Codec> reference;  // the CPU reference's encode (kivi, quarot, bf16)
  std::mutex mutex;                  // one encode at a time: the Encoder's scratch
  cuda::Encoder encoder;
  cuda::DeviceParts batch;            // encode_batch: a group's parts
  cuda::DeviceBuffer<uint16_t> warm;  // encode_batch: a group's warm-start centroids part
};

namespace {

/// Checks that warm start w fits an encode of shape sh (heads, dim) with config c.
void check_warm(const DeviceEncodedTensor::Impl& w, const CodecConfig& c, const cuda::QvgShape& sh, int64_t heads,
                int64_t dim) {
  QVG_CHECK(method_traits(w.config.method).clustered && smoothing_stages(w.config) == sh.stages &&
                w.shape.centroids == sh.centroids && w.heads == heads && w.dim == dim &&
                w.config.centroid_format == c.centroid_format && w.device == cuda_current_device(),
            c.name,
            ": the warm-start tensor does not match (method, stages, centroids, centroid format, heads, dim or "
            "device)");
}

/// A host tensor of w's header holding only w's centroids part (a qvg
/// tensor or warm_state()): the warm start of a CPU reference's encode,
/// which reads nothing else of it. Synchronizes s.
EncodedTensor host_centroids(const DeviceEncodedTensor::Impl& w, cudaStream_t s) {
  QVG_CHECK(w.qvg_parts(), "warm start: a ", method_name(w.config.method), " tensor has no centroids");
  EncodedTensor e = w.host_header();
  cuda::download_bytes(w.parts.centroids, e.centroids, s);
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
  return e;
}

/// Heads [src_head, src_head + heads) of every stage of src (stage pitch
/// src_heads heads of per_head bytes) -> heads from dst_head of dst (stage
/// pitch dst_heads heads). Stream-ordered.
void copy_stage_heads(void* dst, int64_t dst_heads, int64_t dst_head, const void* src, int64_t src_heads,
                      int64_t src_head, int64_t heads, int64_t per_head, int64_t stages, cudaStream_t s) {
  if (stages == 0 || per_head == 0) return;
  QVG_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(dst) + dst_head * per_head,
                                   static_cast<size_t>(dst_heads * per_head),
                                   static_cast<const uint8_t*>(src) + src_head * per_head,
                                   static_cast<size_t>(src_heads * per_head), static_cast<size_t>(heads * per_head),
                                   static_cast<size_t>(stages), cudaMemcpyDeviceToDevice, s));
}

/// The centroids part of one tensor (shape one) <-> heads [first, first +
/// one.heads) of a group's (shape group): BF16 values [S][H][C][D], or FP8
/// codes [S][H][C][D] then FP32 scales [S][H]. to_group: which way.
void copy_centroid_heads(void* group_part, const cuda::QvgShape& group, void* one_part, const cuda::QvgShape& one,
                         int64_t first, bool to_group, cudaStream_t s) {
  const int64_t per_head = static_cast<int64_t>(one.centroids) * one.dim * (one.fp8_centroids ? 1 : 2);
  auto copy = [&](int64_t group_off, int64_t one_off, int64_t bytes) {
    uint8_t* g = static_cast<uint8_t*>(group_part) + group_off;
    uint8_t* o = static_cast<uint8_t*>(one_part) + one_off;
    if (to_group)
      copy_stage_heads(g, group.heads, first, o, one.heads, 0, one.heads, bytes, one.stages, s);
    else
      copy_stage_heads(o, one.heads, 0, g, group.heads, first, one.heads, bytes, one.stages, s);
  };
  copy(0, 0, per_head);
  if (one.fp8_centroids) copy(cuda::centroid_values(group), cuda::centroid_values(one), 4);
}

}  // namespace

DeviceCodec::DeviceCodec(const CodecConfig& config) : impl_(std::make_unique<Impl>()) {
  check_device();
  impl_->config = config;
  if (device_encodes(config))
    cuda::check_device_config(config);
  else
    impl_->reference = make_codec(config);
}
DeviceCodec::~DeviceCodec() = default;
DeviceCodec::DeviceCodec(DeviceCodec&&) noexcept = default;
DeviceCodec& DeviceCodec::operator=(DeviceCodec&&) noexcept = default;
const CodecConfig& DeviceCodec::config() const { return impl_->config; }

DeviceEncodedTensor DeviceCodec::encode(const void* x, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                                        TensorRole role, void* stream, const DeviceEncodedTensor* warm_start) const {
  // centroids=auto: the span's C, chosen from its length; the encoding holds it.
  const CodecConfig c = impl_->config.auto_centroids ? span_config(impl_->config, tokens) : impl_->config;
  QVG_CHECK(x != nullptr, c.name, ": null input");
  QVG_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, c.name,
            ": the input must be 16-byte aligned (the encode reads 16 bytes at a time)");
  const cudaStream_t s = as_stream(stream);
  if (impl_->reference) {  // kivi, quarot, bf16: the CPU reference's encode
    QVG_CHECK(heads > 0 && tokens > 0 && dim > 0, c.name, ": empty tensor [", heads, ", ", tokens, ", ", dim, "]");
    EncodeOptions opt;
    opt.role = role;
    EncodedTensor warm;  // a warm start's centroids part (all the CPU encode reads of it)
    if (warm_start && !warm_start->empty() && smoothing_stages(c) > 0) {
      warm = host_centroids(warm_start->impl(), s);
      opt.warm_start = &warm;
    }
    return DeviceEncodedTensor::from_host(
        impl_->reference->encode(cuda::download_as_float(x, type, heads, tokens, dim, s), opt), stream);
  }
  const cuda::QvgShape sh = cuda::make_encode_shape(c, heads, tokens, dim);
  cuda::GpuKMeansOptions km;  // the CPU's stopping rule, applied on the device
  km.params = c.kmeans;
  km.device_convergence = true;
  if (warm_start && !warm_start->empty() && sh.stages > 0) {
    const DeviceEncodedTensor::Impl& w = warm_start->impl();
    check_warm(w, c, sh, heads, dim);
    km.warm_from_part(sh, w.parts.centroids.get());
  }
  auto I = std::make_shared<DeviceEncodedTensor::Impl>(c, role, heads, tokens, dim, s);
  I->shape = sh;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->encoder.encode(x, type, sh, km, I->parts, s);
  }
  return DeviceEncodedTensor(std::move(I));
}

std::vector<DeviceEncodedTensor> DeviceCodec::encode_batch(const void* x, DeviceElement type, int64_t count,
                                                          int64_t heads, int64_t tokens, int64_t dim, TensorRole role,
                                                          void* stream,
                                                          const DeviceEncodedTensor* const* warm_starts,
                                                          int64_t group_rows) const {
  const CodecConfig c = impl_->config.auto_centroids ? span_config(impl_->config, tokens) : impl_->config;
  QVG_CHECK(count >= 1, c.name, ": encode_batch of ", count, " tensors");
  QVG_CHECK(heads > 0 && tokens > 0 && dim > 0, c.name, ": empty tensor [", heads, ", ", tokens, ", ", dim, "]");
  const int64_t stride = heads * tokens * dim * static_cast<int64_t>(element_bytes(type));  // bytes a tensor
  auto input = [&](int64_t i) { return static_cast<const uint8_t*>(x) + i * stride; };
  auto warm_of = [&](int64_t i) -> const DeviceEncodedTensor* {
    return warm_starts && warm_starts[i] && !warm_starts[i]->empty() ? warm_starts[i] : nullptr;
  };
  std::vector<DeviceEncodedTensor> out;
  out.reserve(static_cast<size_t>(count));
  if (impl_->reference) {  // encoded on the host: one by one
    for (int64_t i = 0; i < count; ++i)
      out.push_back(encode(input(i), type, heads, tokens, dim, role, stream, warm_of(i)));
    return out;
  }
  QVG_CHECK(x != nullptr && reinterpret_cast<uintptr_t>(x) % 16 == 0 && stride % 16 == 0, c.name,
            ": encode_batch needs a non-null, 16-byte aligned input with tensors of a multiple of 16 bytes");
  const cudaStream_t s = as_stream(stream);
  const cuda::QvgShape one = cuda::make_encode_shape(c, heads, tokens, dim);
  int64_t warm_count = 0;
  for (int64_t i = 0; i < count; ++i)
    if (warm_of(i)) {
      check_warm(warm_of(i)->impl(), c, one, heads, dim);
      ++warm_count;
    }
  const bool warm = one.stages > 0 && warm_count > 0;
  QVG_CHECK(one.stages == 0 || warm_count == 0 || warm_count == count, c.name,
            ": encode_batch needs a warm start for every tensor or for none (", warm_count, " of ", count, " have one)");
  const int64_t per_group = std::max<int64_t>(1, std::min<int64_t>(group_rows / (heads * tokens), 65535 / heads));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (int64_t g0 = 0; g0 < count; g0 += per_group) {
    const int64_t n = std::min(per_group, count - g0);
    const cuda::QvgShape sh = cuda::make_encode_shape(c, heads * n, tokens, dim);
    cuda::GpuKMeansOptions km;  // the CPU's stopping rule, applied on the device; each tensor's seeds
    km.params = c.kmeans;
    km.device_convergence = true;
    km.seed_period = static_cast<int>(heads);
    if (warm) {
      impl_->warm.resize(static_cast<size_t>(cuda::centroid_part_bytes(sh) / 2));
      for (int64_t i = 0; i < n; ++i)
        copy_centroid_heads(impl_->warm.get(), sh, warm_of(g0 + i)->impl().parts.centroids.get(), one, i * heads,
                            true, s);
      km.warm_from_part(sh, impl_->warm.get());
    }
    impl_->batch.use_pool(s);  // stream-ordered: groups of another size cost no device synchronization
    impl_->encoder.encode(input(g0), type, sh, km, impl_->batch, s);
    const cuda::DeviceParts& b = impl_->batch;
    for (int64_t i = 0; i < n; ++i) {
      auto I = std::make_shared<DeviceEncodedTensor::Impl>(c, role, heads, tokens, dim, s);
      I->shape = one;
      I->parts.allocate(one);
      cuda::DeviceParts& p = I->parts;
      // codes, scales, span scales: [H]-major, one block of heads; ids [S][H][N].
      for (const auto& [dst, src, bytes] :
           {std::tuple<void*, const void*, size_t>{p.codes.get(), b.codes.get(), p.codes.bytes()},
            {p.scales.get(), b.scales.get(), p.scales.bytes()},
            {p.span_scales.get(), b.span_scales.get(), p.span_scales.bytes()}})
        if (bytes > 0)
          QVG_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(src) + i * bytes, bytes,
                                         cudaMemcpyDeviceToDevice, s));
      copy_stage_heads(p.ids.get(), heads, 0, b.ids.get(), sh.heads, i * heads, heads, tokens, one.stages, s);
      if (one.stages > 0) copy_centroid_heads(b.centroids.get(), sh, p.centroids.get(), one,
                                              i * heads, false, s);
      if (one.cq_dim > 0) {  // code=cq: the codebooks [H][D K] values, then (FP8) a scale a head
        const auto* bc = reinterpret_cast<const uint8_t*>(b.centroids.get());
        auto* pc = reinterpret_cast<uint8_t*>(p.centroids.get());
        const int64_t book_bytes = cuda::codebook_values(one) * (one.fp8_books ? 1 : 2);  // this tensor's heads
        QVG_CUDA_CHECK(cudaMemcpyAsync(pc + p.book_offset, bc + b.book_offset + i * book_bytes,
                                       static_cast<size_t>(book_bytes), cudaMemcpyDeviceToDevice, s));
        if (one.fp8_books)
          QVG_CUDA_CHECK(cudaMemcpyAsync(pc + p.book_scales_offset, bc + b.book_scales_offset + i * heads * 4,
                                         static_cast<size_t>(heads * 4), cudaMemcpyDeviceToDevice, s));
      }
      out.push_back(DeviceEncodedTensor(std::move(I)));
    }
  }
  return out;
}

namespace {

/// e's parts, once e is of codec c's method and out can take the decode's
/// 16-byte stores (qvg::Error naming `what` otherwise).
const DeviceEncodedTensor::Impl& decodable(const CodecConfig& c, const DeviceEncodedTensor& e, const void* out,
                                          const char* what) {
  const DeviceEncodedTensor::Impl& I = e.impl();
  QVG_CHECK(!I.centroids_only, what, ": a warm_state() holds centroids only and cannot be decoded");
  QVG_CHECK(I.config.method == c.method, "decoding a ", method_name(I.config.method), " tensor with a ",
            method_name(c.method), " codec");
  QVG_CHECK(out != nullptr && reinterpret_cast<uintptr_t>(out) % 16 == 0, what,
            ": out must be non-null and 16-byte aligned (the decode stores 16 bytes at a time)");
  return I;
}

}  // namespace

void DeviceCodec::decode(const DeviceEncodedTensor& e, void* out, DeviceElement type, void* stream) const {
  const DeviceEncodedTensor::Impl& I = decodable(impl_->config, e, out, "DeviceCodec::decode");
  if (I.qvg_parts())
    cuda::decode(I.shape, I.parts.view(), out, type, as_stream(stream));
  else
    I.base.decode(out, type, as_stream(stream));
}

void DeviceCodec::decode_rows(const DeviceEncodedTensor& e, void* out, DeviceElement type, int64_t out_tokens,
                              int64_t out_offset, void* stream, int64_t begin, int64_t count) const {
  const DeviceEncodedTensor::Impl& I = decodable(impl_->config, e, out, "DeviceCodec::decode_rows");
  QVG_CHECK(I.qvg_parts(), "DeviceCodec::decode_rows: ", method_name(I.config.method),
            " decodes whole tensors only (decode)");
  if (count < 0) count = I.tokens - begin;
  QVG_CHECK(begin >= 0 && count >= 0 && begin + count <= I.tokens, "DeviceCodec::decode_rows: rows [", begin, ", ",
            begin + count, ") are outside the tensor's ", I.tokens, " tokens");
  cuda::decode_range(I.shape, I.parts.view(), cuda::DecodeRange{begin, count, out_tokens, out_offset}, out, type,
                     as_stream(stream));
}

void DeviceCodec::decode_rows_token_major(const DeviceEncodedTensor& e, void* out, DeviceElement type,
                                          int64_t out_tokens, int64_t out_offset, void* stream, int64_t begin,
                                          int64_t count) const {
  const DeviceEncodedTensor::Impl& I = decodable(impl_->config, e, out, "DeviceCodec::decode_rows_token_major");
  QVG_CHECK(I.qvg_parts(), "DeviceCodec::decode_rows_token_major: ", method_name(I.config.method),
            " decodes whole tensors only (decode)");
  if (count < 0) count = I.tokens - begin;
  QVG_CHECK(begin >= 0 && count >= 0 && begin + count <= I.tokens, "DeviceCodec::decode_rows_token_major: rows [",
            begin, ", ", begin + count, ") are outside the tensor's ", I.tokens, " tokens");
  cuda::decode_range(I.shape, I.parts.view(),
                     cuda::DecodeRange::token_major(begin, count, out_tokens, out_offset, I.heads, I.dim), out, type,
                     as_stream(stream));
}

}  // namespace qvg
