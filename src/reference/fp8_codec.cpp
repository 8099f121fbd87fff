// FP8: every value stored as an FP8 E4M3 code times a power-of-two scale per
// block of B values along dim (one E8M0 byte: 2^(s - 127)). The reference
// (the specification) of docs/FORMAT.md "## FP8"; its GPU decode is
// src/cuda/fp8_decode.cu.
//
// Encode, per block of B values of a token row, M = max |x|:
//   2^e  = fp8_centroid_scale_for(M): the least 2^e with M / 2^e <= 448,
//          e clamped to [-100, 127] (1 when M = 0); stored as s = e + 127
//   code = fp8_e4m3_from_float(x * 2^-e)   (the product is exact, no saturation)
// Decode: x^ = fp8_e4m3_to_float(code) * 2^(s - 127), exact in float.
// Inside the encodable range (2^-91 <= M <= 2^127, MethodTraits::encodable)
// e stays inside [-100, 119], so every decoded value is finite, and each
// value's error is at most max(2^-4 |x|, 2^-10 2^e): half a step of E4M3's
// 3 mantissa bits, or of its subnormal step 2^-9.
#include <cmath>
#include <string>

#include "core/codecs.h"
#include "qvg/fp8.h"
#include "qvg/methods.h"
#include "util/parallel.h"

namespace qvg {

PartBytes fp8_expected_bytes(const CodecConfig& c, TensorRole, int64_t heads, int64_t tokens, int64_t dim) {
  PartBytes b;
  b.codes = static_cast<size_t>(heads * tokens * dim);
  b.scales = static_cast<size_t>(heads * tokens * (dim / c.block));
  return b;
}

void check_fp8_values(const EncodedTensor& e, const HeadTensor*) {
  const int64_t blocks = e.dim / e.config.block;
  for (size_t i = 0; i < e.scales.size(); ++i) {
    const int s = e.scales[i];
    const int64_t row = static_cast<int64_t>(i) / blocks;
    QVG_CHECK(s <= 127 + kFp8MaxScaleExponent, "encoded fp8 tensor is corrupt: the scale of block ", i % blocks,
              " of token ", row % e.tokens, " of head ", row / e.tokens, " is ",
              s == 0xFF ? std::string("NaN (E8M0 0xFF)") : "2^" + std::to_string(s - 127) + ", above 2^" +
                  std::to_string(kFp8MaxScaleExponent) + " (its values could decode beyond the float range)");
  }
  for (size_t i = 0; i < e.codes.size(); ++i)
    if ((e.codes[i] & 0x7F) == 0x7F) {
      const int64_t row = static_cast<int64_t>(i) / e.dim;
      QVG_CHECK(false, "encoded fp8 tensor is corrupt: the code of channel ", static_cast<int64_t>(i) % e.dim,
                " of token ", row % e.tokens, " of head ", row / e.tokens, " is NaN (E4M3 0x",
                e.codes[i] == 0x7F ? "7F" : "FF", ")");
    }
}

namespace {

class Fp8Codec final : public Codec {
 public:
  explicit Fp8Codec(CodecConfig c) : config_(std::move(c)) {}
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport* report) const override {
    check_encode_input(config_, x);
    if (report) *report = EncodeReport{};
    EncodedTensor e = encoded_header(config_, x, opt.role);
    const PartBytes b = fp8_expected_bytes(config_, opt.role, x.heads, x.tokens, x.dim);
    e.codes.resize(b.codes);
    e.scales.resize(b.scales);
    const int64_t n = x.tokens, d = x.dim, block = config_.block;
    parallel_for(x.heads, opt.threads, [&](int64_t h) {
      for (int64_t t = 0; t < n; ++t) {
        const float* row = x.row(h, t);
        const int64_t r = h * n + t;
        for (int64_t b0 = 0; b0 < d; b0 += block) {
          float m = 0;
          for (int64_t j = b0; j < b0 + block; ++j) m = std::fmax(m, std::fabs(row[j]));
          int e2 = 0;
          std::frexp(fp8_centroid_scale_for(m), &e2);  // the scale 2^(e2 - 1)
          const int exponent = e2 - 1;
          e.scales[static_cast<size_t>(r * (d / block) + b0 / block)] = static_cast<uint8_t>(exponent + 127);
          const float inv = std::ldexp(1.0f, -exponent);
          for (int64_t j = b0; j < b0 + block; ++j)
            e.codes[static_cast<size_t>(r * d + j)] = fp8_e4m3_from_float(row[j] * inv);
        }
      }
    });
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int threads) const override {
    check_decode_header(config_, e);  // (bounds the shape before its sizes are computed)
    check_decode_parts(e, fp8_expected_bytes(e.config, e.role, e.heads, e.tokens, e.dim));
    check_fp8_values(e, nullptr);
    out = HeadTensor(e.heads, e.tokens, e.dim);
    const int64_t n = e.tokens, d = e.dim, block = e.config.block;
    parallel_for(e.heads, threads, [&](int64_t h) {
      for (int64_t r = h * n; r < (h + 1) * n; ++r)
        for (int64_t j = 0; j < d; ++j) {
          const float scale = std::ldexp(1.0f, e.scales[static_cast<size_t>(r * (d / block) + j / block)] - 127);
          out.data[static_cast<size_t>(r * d + j)] = fp8_e4m3_to_float(e.codes[static_cast<size_t>(r * d + j)]) * scale;
        }
    });
  }

 private:
  CodecConfig config_;
};

}  // namespace

std::unique_ptr<Codec> make_fp8_codec(const CodecConfig& c) { return std::make_unique<Fp8Codec>(c); }

}  // namespace qvg
