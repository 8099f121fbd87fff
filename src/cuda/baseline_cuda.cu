// The GPU decode of the methods decoded on the GPU outside the group-quantized
// format (MethodTraits says which and how): the encoded tensor is checked on
// the host exactly as the CPU decoder checks it, its parts are uploaded, and
// the method's own hook (MethodTraits::decode_on_device) or, for KIVI, QuaRot
// and BF16, src/cuda/baseline_kernels.cuh decodes them.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>
#include <string_view>

#include "core/codecs.h"
#include "cuda/baseline_cuda.h"
#include "cuda/baseline_kernels.cuh"
#include "cuda/check.h"
#include "cuda/dispatch.h"
#include "cuda/qvg_cuda.h"
#include "qvg/methods.h"

namespace qvg::cuda {

namespace {

const char* role_name(TensorRole r) { return r == TensorRole::key ? "key" : "value"; }

/// Every FP16 scale finite and >= 0, every zero point finite (the CPU
/// decoders' corruption check, same message: a token's scale where t
/// quantizes rotated token rows, else a group's). Group gi belongs to head
/// gi / groups_per_head.
void check_scales(const EncodedTensor& e, const MethodTraits& t, int64_t groups_per_head) {
  const size_t groups = e.scales.size() / 2;
  for (size_t gi = 0; gi < groups; ++gi) {
    const float s = fp16_to_float(get_u16(e.scales, gi));
    const float z = fp16_to_float(get_u16(e.zero_points, gi));
    if (std::isfinite(s) && s >= 0 && std::isfinite(z)) continue;
    const int64_t h = static_cast<int64_t>(gi) / groups_per_head;
    if (t.rotated)
      QVG_CHECK(false, "encoded ", t.name, " tensor is corrupt: token ", static_cast<int64_t>(gi) - h * e.tokens,
                " of head ", h, " has scale ", s, " and zero point ", z);
    QVG_CHECK(false, "encoded ", t.name, " ", role_name(e.role), " tensor is corrupt: group ", gi, " (head ", h,
              ") has scale ", s, " and zero point ", z);
  }
}

/// The methods this decoder serves: decoded on the GPU, not in the
/// group-quantized format (qvg_cuda.cu decodes that).
bool served(const MethodTraits& t) { return t.device_decode && !t.group_quantized; }

/// Everything the CPU decoder checks, in its order, then the GPU kernels'
/// limits; returns the kernels' shape.
BaselineShape checked_shape(const EncodedTensor& e) {
  const CodecConfig& c = e.config;
  const MethodTraits& t = method_traits(c.method);
  QVG_CHECK(served(t), c.name, ": the GPU baseline decoder serves ", method_names_where(served), ", not ", t.name);
  check_decode_header(c, e);  // non-empty shape, valid config: before the sizes, which divide by the group
  if (t.role_layout)
    QVG_CHECK(e.role == TensorRole::key || e.role == TensorRole::value, "encoded ", t.name,
              " tensor has an unknown role ", static_cast<int>(e.role));
  const PartBytes need = expected_part_bytes(c, e.role, e.heads, e.tokens, e.dim);
  check_decode_parts(e, need);  // every part's size
  if (t.decode_on_device) t.check_values(e, nullptr);  // its CPU decoder's checks

  QVG_CHECK(e.dim % kBaselineVals == 0, c.name, ": the CUDA backend needs dim a multiple of ",
            kBaselineVals, ", got ", e.dim);
  QVG_CHECK(!t.rotated || e.dim <= 32 * kBaselineVals, c.name,
            ": the CUDA QuaRot decoder supports dim up to ", 32 * kBaselineVals, ", got ", e.dim);
  QVG_CHECK(e.heads <= INT_MAX && e.dim <= INT_MAX, c.name, ": tensor too large for the CUDA backend");

  BaselineShape sh;
  sh.rotated = t.rotated;
  sh.role = e.role;
  sh.heads = static_cast<int>(e.heads);
  sh.tokens = e.tokens;
  sh.dim = static_cast<int>(e.dim);
  sh.bits = c.bits;
  sh.group = c.group;
  // The tokens after the quantized ones are BF16 rows [H][N - Nq][D]: their part's size says how many.
  sh.quantized = e.tokens - static_cast<int64_t>(need.full_precision / 2) / (e.heads * e.dim);
  // The reference's constant, by the reference's expression (wht_normalized_ref).
  if (t.rotated) sh.norm = static_cast<float>(1.0 / sqrt(static_cast<double>(e.dim)));
  if (!t.decode_on_device) check_scales(e, t, static_cast<int64_t>(need.scales / 2) / e.heads);
  return sh;
}

/// The index of part `name` in kPartFields.
constexpr size_t part_index(std::string_view name) {
  for (size_t i = 0; i < std::size(kPartFields); ++i)
    if (name == kPartFields[i].name) return i;
  return std::size(kPartFields);
}

}  // namespace

void BaselineDeviceParts::use_pool(cudaStream_t s) {
  for (auto& p : parts) p.use_pool(s);
}

void BaselineDeviceParts::upload(const EncodedTensor& e, cudaStream_t s) {
  shape = checked_shape(e);
  config = e.config;
  role = e.role;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::vector<uint8_t>& src = e.*kPartFields[i].data;
    parts[i].upload(src.data(), src.size(), s);
  }
}

void BaselineDeviceParts::download(EncodedTensor& e, cudaStream_t s) const {
  for (size_t i = 0; i < parts.size(); ++i) download_bytes(parts[i], e.*kPartFields[i].data, s);
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
}

void BaselineDeviceParts::decode(void* out, DeviceElement type, cudaStream_t s) const {
  auto part = [&](std::string_view name) -> const uint8_t* { return parts[part_index(name)].get(); };
  if (const auto hook = method_traits(config.method).decode_on_device) {
    DeviceDecodeArgs a;
    a.config = &config;
    a.role = role;
    a.heads = shape.heads;
    a.tokens = shape.tokens;
    a.dim = shape.dim;
    a.codes = part("codes");
    a.scales = part("scales");
    a.zero_points = part("zero_points");
    a.span_scales = part("span_scales");
    a.centroids = part("centroids");
    a.ids = part("ids");
    a.full_precision = part("full_precision");
    a.out = out;
    a.type = type;
    a.stream = s;
    hook(a);
    return;
  }
  // FP16 / BF16 parts: 2-byte values (cudaMalloc's alignment).
  BaselineParts p;
  p.codes = part("codes");
  p.scales = reinterpret_cast<const uint16_t*>(part("scales"));
  p.zero_points = reinterpret_cast<const uint16_t*>(part("zero_points"));
  p.full_precision = reinterpret_cast<const uint16_t*>(part("full_precision"));
  with_element(type, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    QVG_CUDA_CHECK(launch_baseline_decode(shape, p, static_cast<OutT*>(out), s));
  });
}

void baseline_decode(const EncodedTensor& e, void* out, DeviceElement type, cudaStream_t stream) {
  BaselineDeviceParts parts;
  parts.upload(e, stream);
  parts.decode(out, type, stream);
  QVG_CUDA_CHECK(cudaStreamSynchronize(stream));  // the parts are freed on return
}

}  // namespace qvg::cuda
