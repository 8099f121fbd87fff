// The one front of the CUDA backend: the Codec of every method on the GPU
// and the public functions of qvg/cuda.h. One set of checks (a usable
// device, the tensor's method, its parts); the method's row says where the
// work runs (device_encodes, MethodTraits::group_quantized): qvg_cuda.cu /
// kmeans_cuda.cu encode and decode the group-quantized format (qvg, rtn),
// baseline_cuda.cu decodes the others (kivi, quarot, bf16); a method not
// encoded on the device is encoded by the CPU reference, the same bytes by
// definition.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/codecs.h"
#include "cuda/baseline_cuda.h"
#include "cuda/qvg_cuda.h"
#include "qvg/cuda.h"
#include "qvg/half.h"
#include "qvg/methods.h"

namespace qvg {

namespace {

using cuda::check_device;
using cuda::DeviceBuffer;
using cuda::DeviceParts;

/// Whether the GPU encoder encodes c (else the CPU reference does).
bool encodes_on_device(const CodecConfig& c) { return device_encodes(c); }

/// Whether e's parts are the group-quantized format (the fused decode reads
/// them; else the baseline decoder).
bool group_quantized(const EncodedTensor& e) { return method_traits(e.config.method).group_quantized; }

/// Near FLT_MAX the residual can overflow (the CPU reference checks each
/// stage's points): its max, hence a head's span scale, is then inf or NaN
/// (the assignment's max carries NaN). An error, as on the CPU, rather than a
/// tensor only the decoder would reject.
void check_span_scales(const EncodedTensor& e) {
  for (int64_t h = 0; h < e.heads; ++h) {
    float span = 0;
    std::memcpy(&span, e.span_scales.data() + 4 * h, 4);
    QVG_CHECK(std::isfinite(span), e.config.name, ": head ", h, ": the residual overflows float (span scale ", span,
              "): ", residual_overflow_hint(e.config.stages));
  }
}

/// e decoded into out (device memory, `type`), every method; the parts are
/// checked on the host first, as the CPU decode checks them. Returns once the
/// decode is done (the uploaded parts live until then).
void decode_into(const EncodedTensor& e, void* out, DeviceElement type) {
  if (!group_quantized(e)) return cuda::baseline_decode(e, out, type, nullptr);
  const cuda::QvgShape sh = cuda::make_shape(e.config, e.heads, e.tokens, e.dim);
  DeviceParts parts;
  upload_parts(e, sh, parts, nullptr);
  cuda::decode(sh, parts.view(), out, type, nullptr);
  QVG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

/// The codec of every method on the current device.
class CudaCodec final : public Codec {
 public:
  explicit CudaCodec(CodecConfig c) : config_(std::move(c)) {
    check_device();
    if (encodes_on_device(config_))
      cuda::check_device_config(config_);
    else
      reference_ = make_codec(config_);
  }
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport* report) const override {
    if (reference_) return reference_->encode(x, opt, report);
    check_magnitude(config_, check_finite(x, "input tensor"));
    return encode_on_device(nullptr, DeviceElement::f32, x, opt, report);
  }

  /// The encode of x (on the device, of dtype; or null: upload `host`'s
  /// values), whose shape `host` carries. The input is finite (checked).
  EncodedTensor encode_on_device(const void* x, DeviceElement dtype, const HeadTensorView& host, const EncodeOptions& opt,
                                 EncodeReport* report) const {
    // centroids=auto: the span's C, chosen from its length; the encoding holds it.
    if (config_.auto_centroids && smoothing_stages(config_) > 0)
      return CudaCodec(span_config(config_, host.tokens)).encode_on_device(x, dtype, host, opt, report);
    const cuda::QvgShape sh = cuda::make_encode_shape(config_, host.heads, host.tokens, host.dim);
    cuda::GpuKMeansOptions km;
    km.params = config_.kmeans;
    DeviceBuffer<uint16_t> warm;
    if (opt.warm_start && sh.stages > 0) {
      const EncodedTensor& w = *opt.warm_start;
      QVG_CHECK(method_traits(w.config.method).clustered && w.config.stages == sh.stages &&
                    w.config.kmeans.centroids == sh.centroids && w.heads == host.heads && w.dim == host.dim &&
                    w.config.centroid_format == config_.centroid_format &&
                    w.centroids.size() == static_cast<size_t>(cuda::centroid_part_bytes(sh)),
                config_.name, ": the warm-start tensor does not match");
      // As the CPU's kmeans_ref and stage_centroids: finite centroids, FP8 ones without NaN and with valid scales.
      if (sh.fp8_centroids)
        check_fp8_centroids(w.centroids, static_cast<size_t>(cuda::centroid_values(sh)), "k-means: warm-start");
      else
        check_bf16_finite(w.centroids, "k-means: warm-start centroid");
      warm.resize(w.centroids.size() / 2);
      upload_bytes(warm, w.centroids, nullptr);
      km.warm_from_part(sh, warm.get());
    }
    // Scratch (input copy, parts, k-means buffers) kept across calls: a
    // cache encodes every span with the same codec.
    std::lock_guard<std::mutex> lock(mutex_);
    if (!x) {
      upload_view(host);
      x = xd_.get();
    }
    std::vector<KMeansStats> stats;
    encoder_.encode(x, dtype, sh, km, parts_, nullptr, report ? &stats : nullptr);
    EncodedTensor e = encoded_header(config_, host, opt.role);
    download_parts(parts_, e, nullptr);
    check_span_scales(e);
    if (report) {
      report->kmeans = std::move(stats);
      report->kmeans_seconds = 0;
      for (const auto& s : report->kmeans) report->kmeans_seconds += s.seconds;
    }
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int) const override {
    QVG_CHECK(e.config.method == config_.method, "decoding a ", method_name(e.config.method), " tensor with a ",
              method_name(config_.method), " codec");
    DeviceBuffer<float> o(static_cast<size_t>(e.values()));
    decode_into(e, o.get(), DeviceElement::f32);
    HeadTensor result(e.heads, e.tokens, e.dim);
    o.download(result.data.data(), result.data.size());
    QVG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    out = std::move(result);
  }

 private:
  CodecConfig config_;
  std::unique_ptr<Codec> reference_;  // the CPU reference's encode (methods not encoded on the device)
  mutable std::mutex mutex_;          // guards the scratch below (encode is const and may be called from threads)
  mutable cuda::Encoder encoder_;
  mutable DeviceBuffer<float> xd_;

  /// x's values into xd_ as [heads][tokens][dim]: one copy when contiguous,
  /// else one strided copy per head (its rows, token_stride apart).
  void upload_view(const HeadTensorView& x) const {
    const size_t n = static_cast<size_t>(x.numel());
    if (x.contiguous()) {
      xd_.upload(x.data, n);
      return;
    }
    xd_.resize(n);
    const size_t row = static_cast<size_t>(x.dim) * sizeof(float);
    for (int64_t h = 0; h < x.heads; ++h)
      QVG_CUDA_CHECK(cudaMemcpy2DAsync(xd_.get() + h * x.tokens * x.dim, row, x.row(h, 0),
                                       static_cast<size_t>(x.token_stride) * sizeof(float), row,
                                       static_cast<size_t>(x.tokens), cudaMemcpyHostToDevice, nullptr));
  }
  mutable DeviceParts parts_;
};

}  // namespace

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    // Without NVIDIA's kernel driver the runtime reports "driver version is insufficient".
    const bool no_driver = (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) &&
                           !std::filesystem::exists("/proc/driver/nvidia/version");
    if (why)
      *why = no_driver            ? std::string("no NVIDIA GPU driver is loaded on this machine (no "
                                                "/proc/driver/nvidia/version): no GPU to run on")
             : err != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(err)
                                  : std::string("no CUDA device found");
    cudaGetLastError();  // clear the sticky-free error state of the failed query
    return false;
  }
  return true;
}

std::unique_ptr<Codec> make_cuda_codec(const CodecConfig& config) {
  const MethodTraits& t = method_traits(config.method);
  QVG_CHECK(t.device_decode, config.name, ": method ", t.name, " has no CUDA codec");
  return std::make_unique<CudaCodec>(config);
}

std::unique_ptr<Codec> make_codec(const CodecConfig& config, Backend backend) {
  return backend == Backend::cuda ? make_cuda_codec(config) : make_codec(config);
}

EncodedTensor cuda_qvg_encode_given_centroids(const HeadTensor& x, const CodecConfig& c,
                                              const std::vector<uint8_t>& centroids, const std::vector<uint8_t>& ids,
                                              TensorRole role) {
  check_device();
  check_finite(x, "input tensor");
  QVG_CHECK(c.centroid_format == CentroidFormat::bf16, c.name, ": given centroids are BF16 (centroid_format=bf16)");
  const cuda::QvgShape sh = cuda::make_encode_shape(c, x.heads, x.tokens, x.dim);
  check_bf16_finite(centroids, c.name + ": given centroid");
  DeviceParts parts;
  parts.allocate(sh);
  upload_bytes(parts.centroids, centroids, nullptr);
  upload_bytes(parts.ids, ids, nullptr);
  DeviceBuffer<float> xd;
  xd.upload(x.data.data(), x.data.size());
  cuda::Encoder enc;
  enc.quantize_given(xd.get(), DeviceElement::f32, sh, parts, nullptr);
  EncodedTensor e = encoded_header(c, x, role);
  download_parts(parts, e, nullptr);
  check_span_scales(e);  // finite centroids: an overflow leaves inf (never NaN) in the residual's max
  return e;
}

std::vector<uint16_t> cuda_decode_bf16(const EncodedTensor& e) {
  check_device();
  DeviceBuffer<uint16_t> o(static_cast<size_t>(e.values()));
  decode_into(e, o.get(), DeviceElement::bf16);
  std::vector<uint16_t> out(static_cast<size_t>(e.values()));
  o.download(out.data(), out.size());
  QVG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return out;
}

EncodedTensor cuda_encode_device(const CodecConfig& config, const void* x, DeviceElement type, int64_t heads,
                                 int64_t tokens, int64_t dim, const EncodeOptions& opt) {
  check_device();
  QVG_CHECK(heads > 0 && tokens > 0 && dim > 0, "cuda_encode_device: empty shape [", heads, ", ", tokens, ", ", dim,
            "]");
  QVG_CHECK(x != nullptr, "cuda_encode_device: null input");
  int64_t n = 0;
  QVG_CHECK(!__builtin_mul_overflow(heads, tokens, &n) && !__builtin_mul_overflow(n, dim, &n),
            "cuda_encode_device: shape [", heads, ", ", tokens, ", ", dim, "] overflows");
  // The encode kernels read 16 bytes at a time: a view that starts elsewhere
  // (DLPack promises element alignment only) is copied to aligned memory.
  std::shared_ptr<void> aligned;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    const size_t bytes = static_cast<size_t>(n) * element_bytes(type);
    aligned = cuda_allocate(bytes);
    QVG_CUDA_CHECK(cudaMemcpy(aligned.get(), x, bytes, cudaMemcpyDeviceToDevice));
    x = aligned.get();
  }
  float bad = 0, max_abs = 0;
  const int64_t at = cuda::first_nonfinite(x, type, n, &bad, nullptr, &max_abs);
  QVG_CHECK(at < 0, "input tensor holds a non-finite value (", bad, ") at head ", at / (tokens * dim), ", token ",
            (at % (tokens * dim)) / dim, ", channel ", at % dim);
  check_magnitude(config, max_abs);
  CudaCodec codec(config);
  if (!encodes_on_device(config))  // the CPU reference's encode
    return codec.encode(cuda::download_as_float(x, type, heads, tokens, dim, nullptr), opt, nullptr);
  HeadTensorView shape;  // the shape only: encode_on_device reads x
  shape.heads = heads;
  shape.tokens = tokens;
  shape.dim = dim;
  return codec.encode_on_device(x, type, shape, opt, nullptr);
}

void cuda_decode_device(const EncodedTensor& e, void* out, DeviceElement type) {
  check_device();
  QVG_CHECK(out != nullptr, "cuda_decode_device: null output");
  QVG_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0,
            "cuda_decode_device: out must be 16-byte aligned (the decode stores 16 bytes at a time; cudaMalloc's "
            "memory is)");
  decode_into(e, out, type);
}

}  // namespace qvg
