// QuaRot (Ashkboos et al., 2024), as a KV-cache baseline: every token row of
// D values is rotated by the normalized Walsh-Hadamard transform (H_D /
// sqrt(D), Sylvester order, D a power of two; reference/baselines.h), then
// quantized asymmetrically per token (one group of D values, FP16 scale and
// zero point). Decode dequantizes and rotates back (the transform is its own
// inverse), so reconstructions are in the original basis.
//
// Parts (docs/FORMAT.md "## QuaRot"): codes [H][N][ceil(D*b/8)] packed LSB
// first; scales FP16 [H][N]; zero_points FP16 [H][N].
#include <algorithm>

#include "core/codecs.h"
#include "qvg/pack.h"
#include "reference/baselines.h"
#include "util/parallel.h"

namespace qvg {

PartBytes quarot_expected_bytes(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim) {
  PartBytes b;
  b.codes = static_cast<size_t>(heads * tokens) * packed_bytes(static_cast<size_t>(dim), c.bits);
  b.scales = static_cast<size_t>(heads * tokens * 2);
  b.zero_points = static_cast<size_t>(heads * tokens * 2);
  return b;
}

namespace {

class QuarotCodec final : public Codec {
 public:
  explicit QuarotCodec(CodecConfig c) : config_(std::move(c)) {}
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport* report) const override {
    check_encode_input(config_, x);
    if (report) *report = EncodeReport{};
    EncodedTensor e = encoded_header(config_, x, opt.role);
    const PartBytes b = quarot_expected_bytes(config_, x.heads, x.tokens, x.dim);
    e.codes.resize(b.codes);
    e.scales.resize(b.scales);
    e.zero_points.resize(b.zero_points);
    const int64_t n = x.tokens, d = x.dim;
    const int bits = config_.bits;
    const size_t row_bytes = packed_bytes(static_cast<size_t>(d), bits);
    parallel_for(x.heads, opt.threads, [&](int64_t h) {
      std::vector<float> y(static_cast<size_t>(d));
      std::vector<uint8_t> q(static_cast<size_t>(d));
      for (int64_t t = 0; t < n; ++t) {
        const float* row = x.row(h, t);
        std::copy(row, row + d, y.begin());
        wht_normalized_ref(y.data(), d);
        const auto [mn, mx] = std::minmax_element(y.begin(), y.end());
        AsymParams p;
        QVG_CHECK(asym_params(*mn, *mx, bits, &p), config_.name, ": token ", t, " of head ", h,
                  " spans [", *mn, ", ", *mx,
                  "] after the Hadamard rotation; its scale or zero point does not fit FP16 "
                  "(|v| <= 65504)");
        const size_t gi = static_cast<size_t>(h * n + t);
        put_u16(e.scales, gi, p.scale);
        put_u16(e.zero_points, gi, p.zero);
        const float s = fp16_to_float(p.scale), z = fp16_to_float(p.zero);
        for (int64_t k = 0; k < d; ++k) q[k] = asym_quantize_value(y[k], s, z, bits);
        pack_codes(q.data(), static_cast<size_t>(d), bits, e.codes.data() + gi * row_bytes);
      }
    });
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int threads) const override {
    check_decode_header(config_, e);
    check_decode_parts(e, quarot_expected_bytes(e.config, e.heads, e.tokens, e.dim));
    const int64_t n = e.tokens, d = e.dim;
    const int bits = e.config.bits;
    const size_t row_bytes = packed_bytes(static_cast<size_t>(d), bits);
    out = HeadTensor(e.heads, n, d);
    parallel_for(e.heads, threads, [&](int64_t h) {
      std::vector<uint8_t> q(static_cast<size_t>(d));
      for (int64_t t = 0; t < n; ++t) {
        const size_t gi = static_cast<size_t>(h * n + t);
        const float s = fp16_to_float(get_u16(e.scales, gi));
        const float z = fp16_to_float(get_u16(e.zero_points, gi));
        QVG_CHECK(std::isfinite(s) && s >= 0 && std::isfinite(z),
                  "encoded quarot tensor is corrupt: token ", t, " of head ", h, " has scale ", s,
                  " and zero point ", z);
        unpack_codes(e.codes.data() + gi * row_bytes, static_cast<size_t>(d), bits, q.data());
        float* row = out.head(h) + t * d;
        for (int64_t k = 0; k < d; ++k) row[k] = asym_dequantize_value(q[k], s, z);
        wht_normalized_ref(row, d);
      }
    });
  }

 private:
  CodecConfig config_;
};

}  // namespace

std::unique_ptr<Codec> make_quarot_codec(const CodecConfig& c) { return std::make_unique<QuarotCodec>(c); }

}  // namespace qvg
