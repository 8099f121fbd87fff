// The KIVI, QuaRot and BF16 codecs on the CUDA backend: host tensors in and
// out. Encode runs the CPU reference (same bytes by definition); decode
// checks the encoded tensor on the host exactly as the CPU decoder does
// (same qvg::Error for the same bad input), uploads the parts and runs
// src/cuda/baseline_kernels.cuh.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>

#include "cpu/baselines.h"
#include "cpu/codecs.h"
#include "cuda/baseline_cuda.h"
#include "cuda/baseline_kernels.cuh"
#include "cuda/check.h"
#include "qvg/cuda.h"

namespace qvg {

namespace {

using cuda::BaselineParts;
using cuda::BaselineShape;
using cuda::DeviceBuffer;

const char* role_name(TensorRole r) { return r == TensorRole::key ? "key" : "value"; }

void check_device() {
  std::string why;
  QVG_CHECK(cuda_available(&why), "CUDA backend: ", why);
}

/// Every FP16 scale finite and >= 0, every zero point finite (the CPU
/// decoders' corruption check, same message). Group gi belongs to head
/// gi / groups_per_head.
void check_scales(const EncodedTensor& e, int64_t groups_per_head) {
  const size_t groups = e.scales.size() / 2;
  for (size_t gi = 0; gi < groups; ++gi) {
    const float s = fp16_to_float(get_u16(e.scales, gi));
    const float z = fp16_to_float(get_u16(e.zero_points, gi));
    if (std::isfinite(s) && s >= 0 && std::isfinite(z)) continue;
    const int64_t h = static_cast<int64_t>(gi) / groups_per_head;
    if (e.config.method == Method::quarot)
      QVG_CHECK(false, "encoded quarot tensor is corrupt: token ", static_cast<int64_t>(gi) - h * e.tokens,
                " of head ", h, " has scale ", s, " and zero point ", z);
    QVG_CHECK(false, "encoded kivi ", role_name(e.role), " tensor is corrupt: group ", gi, " (head ", h,
              ") has scale ", s, " and zero point ", z);
  }
}

/// Everything the CPU decoder checks, in its order, then the GPU kernels'
/// limits; returns the kernels' shape.
BaselineShape checked_shape(const EncodedTensor& e) {
  const CodecConfig& c = e.config;
  QVG_CHECK(is_cuda_baseline_method(c.method), c.name, ": the CUDA baseline decoder serves kivi, quarot and bf16, not ",
            method_name(c.method));
  check_decode_header(c, e);  // non-empty shape, valid config: before the sizes, which divide by the group
  if (c.method == Method::kivi)
    QVG_CHECK(e.role == TensorRole::key || e.role == TensorRole::value, "encoded kivi tensor has an unknown role ",
              static_cast<int>(e.role));
  PartBytes need;
  if (c.method == Method::bf16)
    need.full_precision = static_cast<size_t>(e.values()) * 2;
  else
    need = c.method == Method::kivi ? kivi_expected_bytes(c, e.role, e.heads, e.tokens, e.dim)
                                    : quarot_expected_bytes(c, e.heads, e.tokens, e.dim);
  check_decode_parts(e, need);  // every part's size

  QVG_CHECK(e.dim % cuda::kBaselineVals == 0, c.name, ": the CUDA backend needs dim a multiple of ",
            cuda::kBaselineVals, ", got ", e.dim);
  QVG_CHECK(c.method != Method::quarot || e.dim <= 32 * cuda::kBaselineVals, c.name,
            ": the CUDA QuaRot decoder supports dim up to ", 32 * cuda::kBaselineVals, ", got ", e.dim);
  QVG_CHECK(e.heads <= INT_MAX && e.dim <= INT_MAX, c.name, ": tensor too large for the CUDA backend");

  BaselineShape sh;
  sh.method = c.method;
  sh.role = e.role;
  sh.heads = static_cast<int>(e.heads);
  sh.tokens = e.tokens;
  sh.dim = static_cast<int>(e.dim);
  sh.bits = c.bits;
  sh.group = c.group;
  if (c.method == Method::kivi) {
    sh.quantized = kivi_quantized_tokens(c, e.role, e.tokens);
    const int64_t ng = sh.quantized / c.group;
    check_scales(e, e.role == TensorRole::key ? ng * e.dim : sh.quantized * (e.dim / c.group));
  } else if (c.method == Method::quarot) {
    // The reference's constant, by the reference's expression (wht_normalized_ref).
    sh.norm = static_cast<float>(1.0 / sqrt(static_cast<double>(e.dim)));
    check_scales(e, e.tokens);
  }
  return sh;
}

template <typename T>
void upload_part(DeviceBuffer<T>& dst, const std::vector<uint8_t>& src) {
  dst.resize(src.size() / sizeof(T));
  if (!src.empty()) QVG_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.data(), src.size(), cudaMemcpyHostToDevice, nullptr));
}

/// Decode e (already checked into sh) into device_out, e.values() elements
/// of OutT (float, __nv_bfloat16 or __half). Synchronizes.
template <typename OutT>
void decode_into_device(const EncodedTensor& e, const BaselineShape& sh, OutT* device_out) {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint16_t> scales, zero_points, full_precision;
  upload_part(codes, e.codes);
  upload_part(scales, e.scales);
  upload_part(zero_points, e.zero_points);
  upload_part(full_precision, e.full_precision);
  BaselineParts p;
  p.codes = codes.get();
  p.scales = scales.get();
  p.zero_points = zero_points.get();
  p.full_precision = full_precision.get();
  QVG_CUDA_CHECK(cuda::launch_baseline_decode(sh, p, device_out, nullptr));
  QVG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

/// The same into host_out.
template <typename OutT>
void decode_on_device(const EncodedTensor& e, const BaselineShape& sh, void* host_out) {
  const size_t n = static_cast<size_t>(e.values());
  DeviceBuffer<OutT> out(n);
  decode_into_device<OutT>(e, sh, out.get());
  QVG_CUDA_CHECK(cudaMemcpy(host_out, out.get(), n * sizeof(OutT), cudaMemcpyDeviceToHost));
}

class CudaBaselineCodec final : public Codec {
 public:
  explicit CudaBaselineCodec(CodecConfig c) : config_(std::move(c)) {
    QVG_CHECK(is_cuda_baseline_method(config_.method), config_.name,
              ": the CUDA baseline codec serves kivi, quarot and bf16, not ", method_name(config_.method));
    check_device();
    reference_ = make_codec(config_);
  }
  const CodecConfig& config() const override { return config_; }

  /// The CPU reference's encode.
  EncodedTensor encode(const HeadTensor& x, const EncodeOptions& opt, EncodeReport* report) const override {
    return reference_->encode(x, opt, report);
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int) const override {
    QVG_CHECK(e.config.method == config_.method, "decoding a ", method_name(e.config.method), " tensor with a ",
              method_name(config_.method), " codec");
    const BaselineShape sh = checked_shape(e);
    HeadTensor result(e.heads, e.tokens, e.dim);
    decode_on_device<float>(e, sh, result.data.data());
    out = std::move(result);
  }

 private:
  CodecConfig config_;
  std::unique_ptr<Codec> reference_;
};

}  // namespace

bool is_cuda_baseline_method(Method m) { return m == Method::kivi || m == Method::quarot || m == Method::bf16; }

std::unique_ptr<Codec> make_cuda_baseline_codec(const CodecConfig& config) {
  return std::make_unique<CudaBaselineCodec>(config);
}

void cuda_baseline_decode_device(const EncodedTensor& e, void* out, DeviceElement type) {
  check_device();
  const BaselineShape sh = checked_shape(e);
  if (type == DeviceElement::f32)
    decode_into_device(e, sh, static_cast<float*>(out));
  else if (type == DeviceElement::bf16)
    decode_into_device(e, sh, static_cast<__nv_bfloat16*>(out));
  else
    decode_into_device(e, sh, static_cast<__half*>(out));
}

std::vector<uint16_t> cuda_baseline_decode_16(const EncodedTensor& e, Half16 type) {
  check_device();
  const BaselineShape sh = checked_shape(e);
  std::vector<uint16_t> out(static_cast<size_t>(e.values()));
  if (type == Half16::bf16)
    decode_on_device<__nv_bfloat16>(e, sh, out.data());
  else
    decode_on_device<__half>(e, sh, out.data());
  return out;
}

}  // namespace qvg
