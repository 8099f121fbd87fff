// KIVI (Liu et al., 2024): keys quantized per channel in groups of G tokens,
// values per token in groups of G channels, asymmetric min/max with FP16
// scale and zero point; the newest tokens stay in BF16.
//
// Parts (docs/FORMAT.md "## KIVI"), head-major, every group's G codes packed
// into ceil(G*b/8) bytes (LSB first, qvg/pack.h):
//   keys:   codes [H][Ng][D][ceil(G*b/8)], scales/zero_points FP16 [H][Ng][D],
//           Nq = Ng*G = floor((N-R)/G)*G quantized tokens (0 when N < R)
//   values: codes [H][Nq][D/G][ceil(G*b/8)], scales/zero_points FP16 [H][Nq][D/G],
//           Nq = N-R quantized tokens (0 when N < R)
//   full_precision: BF16 [H][N-Nq][D], tokens Nq..N-1 in order.
#include <algorithm>

#include "core/codecs.h"
#include "qvg/pack.h"
#include "reference/baselines.h"
#include "util/parallel.h"

namespace qvg {

int64_t kivi_quantized_tokens(const CodecConfig& c, TensorRole role, int64_t tokens) {
  if (tokens < c.residual) return 0;
  const int64_t older = tokens - c.residual;
  return role == TensorRole::key ? older / c.group * c.group : older;
}

PartBytes kivi_expected_bytes(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens,
                              int64_t dim) {
  const int64_t nq = kivi_quantized_tokens(c, role, tokens);
  // Number of quantization groups per head: Ng * D for keys, Nq * D/G for values.
  const int64_t groups = role == TensorRole::key ? nq / c.group * dim : nq * (dim / c.group);
  PartBytes b;
  b.codes = static_cast<size_t>(heads * groups) * packed_bytes(static_cast<size_t>(c.group), c.bits);
  b.scales = static_cast<size_t>(heads * groups * 2);
  b.zero_points = static_cast<size_t>(heads * groups * 2);
  b.full_precision = static_cast<size_t>(heads * (tokens - nq) * dim * 2);
  return b;
}

namespace {

const char* role_name(TensorRole r) { return r == TensorRole::key ? "key" : "value"; }

class KiviCodec final : public Codec {
 public:
  explicit KiviCodec(CodecConfig c) : config_(std::move(c)) {}
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport* report) const override {
    check_encode_input(config_, x);
    QVG_CHECK(opt.role == TensorRole::key || opt.role == TensorRole::value, config_.name,
              ": unknown tensor role ", static_cast<int>(opt.role));
    if (report) *report = EncodeReport{};
    EncodedTensor e = encoded_header(config_, x, opt.role);
    const PartBytes b = kivi_expected_bytes(config_, e.role, x.heads, x.tokens, x.dim);
    e.codes.resize(b.codes);
    e.scales.resize(b.scales);
    e.zero_points.resize(b.zero_points);
    e.full_precision.resize(b.full_precision);
    parallel_for(x.heads, opt.threads, [&](int64_t h) { encode_head(x, h, e); });
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int threads) const override {
    check_decode_header(config_, e);
    QVG_CHECK(e.role == TensorRole::key || e.role == TensorRole::value,
              "encoded kivi tensor has an unknown role ", static_cast<int>(e.role));
    check_decode_parts(e, kivi_expected_bytes(e.config, e.role, e.heads, e.tokens, e.dim));
    out = HeadTensor(e.heads, e.tokens, e.dim);
    parallel_for(e.heads, threads, [&](int64_t h) { decode_head(e, h, out); });
  }

 private:
  // One group: n values at x[i * stride], i < n. Writes its scale, zero point
  // (FP16, at group index gi) and packed codes.
  static void encode_group(const float* x, int64_t n, int64_t stride, int bits, size_t gi,
                           EncodedTensor& e, uint8_t* tmp, const char* what, int64_t h, int64_t a,
                           int64_t c) {
    float mn = x[0], mx = x[0];
    for (int64_t i = 1; i < n; ++i) {
      mn = std::min(mn, x[i * stride]);
      mx = std::max(mx, x[i * stride]);
    }
    AsymParams p;
    QVG_CHECK(asym_params(mn, mx, bits, &p), e.config.name, ": the ", what, " group at head ", h,
              (e.role == TensorRole::key ? ", tokens from " : ", token "), a,
              (e.role == TensorRole::key ? ", channel " : ", channels from "), c, " spans [", mn,
              ", ", mx, "]; its scale or zero point does not fit FP16 (|v| <= 65504)");
    put_u16(e.scales, gi, p.scale);
    put_u16(e.zero_points, gi, p.zero);
    const float s = fp16_to_float(p.scale), z = fp16_to_float(p.zero);
    for (int64_t i = 0; i < n; ++i) tmp[i] = asym_quantize_value(x[i * stride], s, z, bits);
    const size_t gb = packed_bytes(static_cast<size_t>(n), bits);
    pack_codes(tmp, static_cast<size_t>(n), bits, e.codes.data() + gi * gb);
  }

  void encode_head(const HeadTensorView& x, int64_t h, EncodedTensor& e) const {
    const int64_t n = x.tokens, d = x.dim, g = config_.group;
    const int bits = config_.bits;
    const int64_t nq = kivi_quantized_tokens(config_, e.role, n);
    const int64_t ts = x.token_stride;
    std::vector<uint8_t> tmp(static_cast<size_t>(g));
    if (e.role == TensorRole::key) {
      // Group (k, c): channel c of tokens k*G .. k*G+G-1.
      const int64_t ng = nq / g;
      for (int64_t k = 0; k < ng; ++k)
        for (int64_t c = 0; c < d; ++c)
          encode_group(x.row(h, k * g) + c, g, ts, bits, static_cast<size_t>((h * ng + k) * d + c), e,
                       tmp.data(), "key", h, k * g, c);
    } else {
      // Group (t, j): channels j*G .. j*G+G-1 of token t.
      const int64_t gpr = d / g;
      for (int64_t t = 0; t < nq; ++t)
        for (int64_t j = 0; j < gpr; ++j)
          encode_group(x.row(h, t) + j * g, g, 1, bits, static_cast<size_t>((h * nq + t) * gpr + j), e,
                       tmp.data(), "value", h, t, j * g);
    }
    const size_t base = static_cast<size_t>(h * (n - nq) * d);
    for (int64_t t = nq; t < n; ++t)
      for (int64_t c = 0; c < d; ++c)
        put_u16(e.full_precision, base + static_cast<size_t>((t - nq) * d + c), bf16_from_float(x.row(h, t)[c]));
  }

  static void decode_group(const EncodedTensor& e, size_t gi, int64_t n, int64_t stride, uint8_t* tmp,
                           float* out, int64_t h) {
    const float s = fp16_to_float(get_u16(e.scales, gi));
    const float z = fp16_to_float(get_u16(e.zero_points, gi));
    QVG_CHECK(std::isfinite(s) && s >= 0 && std::isfinite(z), "encoded kivi ", role_name(e.role),
              " tensor is corrupt: group ", gi, " (head ", h, ") has scale ", s,
              " and zero point ", z);
    const size_t gb = packed_bytes(static_cast<size_t>(n), e.config.bits);
    unpack_codes(e.codes.data() + gi * gb, static_cast<size_t>(n), e.config.bits, tmp);
    for (int64_t i = 0; i < n; ++i) out[i * stride] = asym_dequantize_value(tmp[i], s, z);
  }

  static void decode_head(const EncodedTensor& e, int64_t h, HeadTensor& out) {
    const int64_t n = e.tokens, d = e.dim, g = e.config.group;
    const int64_t nq = kivi_quantized_tokens(e.config, e.role, n);
    float* oh = out.head(h);
    std::vector<uint8_t> tmp(static_cast<size_t>(g));
    if (e.role == TensorRole::key) {
      const int64_t ng = nq / g;
      for (int64_t k = 0; k < ng; ++k)
        for (int64_t c = 0; c < d; ++c)
          decode_group(e, static_cast<size_t>((h * ng + k) * d + c), g, d, tmp.data(), oh + k * g * d + c, h);
    } else {
      const int64_t gpr = d / g;
      for (int64_t t = 0; t < nq; ++t)
        for (int64_t j = 0; j < gpr; ++j)
          decode_group(e, static_cast<size_t>((h * nq + t) * gpr + j), g, 1, tmp.data(), oh + t * d + j * g, h);
    }
    const size_t base = static_cast<size_t>(h * (n - nq) * d);
    for (int64_t i = 0; i < (n - nq) * d; ++i)
      oh[nq * d + i] = bf16_to_float(get_u16(e.full_precision, base + static_cast<size_t>(i)));
  }

  CodecConfig config_;
};

}  // namespace

std::unique_ptr<Codec> make_kivi_codec(const CodecConfig& c) { return std::make_unique<KiviCodec>(c); }

}  // namespace qvg
