// Group quantization: per-value rules, the span scale, degenerate blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "qvg/group_quant.h"

namespace qvg {
namespace {

std::vector<float> randn(size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

struct RowResult {
  std::vector<float> out;
  std::vector<uint8_t> codes, scales;
  float span;
};

RowResult roundtrip(const std::vector<float>& x, int64_t d, const GroupQuantParams& p) {
  const int64_t n = static_cast<int64_t>(x.size()) / d;
  RowResult r;
  r.span = span_scale_for(max_block_scale_ref(x.data(), n, d, p), p.scale_format);
  r.codes.resize(static_cast<size_t>(n * d * p.bits / 8));
  r.scales.resize(static_cast<size_t>(n * (d / p.block) * scale_bytes(p.scale_format)));
  r.out.resize(x.size());
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* c = r.codes.data() + i * d * p.bits / 8;
    uint8_t* s = r.scales.data() + i * (d / p.block) * scale_bytes(p.scale_format);
    group_quantize_row_ref(x.data() + i * d, d, p, r.span, c, s);
    group_dequantize_row_ref(c, s, d, p, r.span, r.out.data() + i * d);
  }
  return r;
}

double mse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s / a.size();
}

TEST(GroupQuant, SymmetricInt2UsesThreeLevels) {
  EXPECT_EQ(level_max(LevelRule::symmetric, 2), 1.0f);
  EXPECT_EQ(level_max(LevelRule::symmetric, 4), 7.0f);
  EXPECT_EQ(level_max(LevelRule::midrise, 2), 1.5f);
  // Codes are offset binary: q + 2^(b-1).
  EXPECT_EQ(quantize_value(0.9f, 1.0f, LevelRule::symmetric, 2), 3);
  EXPECT_EQ(quantize_value(-0.9f, 1.0f, LevelRule::symmetric, 2), 1);
  EXPECT_EQ(quantize_value(0.4f, 1.0f, LevelRule::symmetric, 2), 2);
  EXPECT_EQ(quantize_value(0.5f, 1.0f, LevelRule::symmetric, 2), 2);  // tie -> even (0)
  EXPECT_EQ(quantize_value(1.5f, 1.0f, LevelRule::symmetric, 2), 3);  // clamped
  EXPECT_EQ(quantize_value(5.0f, 0.0f, LevelRule::symmetric, 2), 2);  // zero scale -> 0
  EXPECT_EQ(dequantize_value(1, 2.0f, LevelRule::symmetric, 2), -2.0f);
  EXPECT_EQ(dequantize_value(0, 2.0f, LevelRule::midrise, 2), -3.0f);
  EXPECT_EQ(dequantize_value(3, 2.0f, LevelRule::midrise, 2), 3.0f);
}

TEST(GroupQuant, ErrorWithinHalfStepOfDecodedScale) {
  const int64_t d = 128;
  for (int bits : {2, 4})
    for (int block : {16, 32, 64, 128})
      for (ScaleFormat f : {ScaleFormat::fp8, ScaleFormat::fp16}) {
        GroupQuantParams p{bits, block, f, LevelRule::symmetric};
        const auto x = randn(d * 9, 11 + bits + block);
        const auto r = roundtrip(x, d, p);
        for (int64_t i = 0; i < 9 * d; ++i) {
          const int64_t row = i / d, blk = (i % d) / block;
          const uint8_t* sc = r.scales.data() + (row * (d / block) + blk) * scale_bytes(f);
          const uint16_t code = scale_bytes(f) == 2 ? uint16_t(sc[0] | sc[1] << 8) : sc[0];
          const float s = decode_block_scale(code, r.span, f);
          const float lmax = level_max(p.levels, bits);
          // Inside the range: error <= s/2 (rounding); outside (x beyond lmax*s
          // after FP8 rounded the scale down by <= 1/16): error <= |x| - lmax*s.
          const float bound = std::max(0.5f * s, std::fabs(x[i]) - lmax * s) * (1 + 1e-6f);
          ASSERT_LE(std::fabs(x[i] - r.out[i]), bound) << "bits " << bits << " block " << block;
        }
      }
}

TEST(GroupQuant, OrderingMoreBitsAndSmallerBlocksHelp) {
  const int64_t d = 128;
  const auto x = randn(d * 200, 5);
  auto err = [&](int bits, int block) {
    return mse(x, roundtrip(x, d, GroupQuantParams{bits, block, ScaleFormat::fp8, LevelRule::symmetric}).out);
  };
  EXPECT_LT(err(4, 64), err(2, 64));
  EXPECT_LT(err(2, 16), err(2, 64));
  EXPECT_LT(err(4, 16), err(4, 128));
  // Using all four INT2 levels beats the paper's three on Gaussian data.
  const double midrise = mse(x, roundtrip(x, d, GroupQuantParams{2, 64, ScaleFormat::fp8, LevelRule::midrise}).out);
  EXPECT_LT(midrise, err(2, 64));
}

TEST(GroupQuant, DegenerateBlocksStayFinite) {
  const int64_t d = 64;
  std::vector<float> x(d * 4, 0.0f);
  // Row 0: zeros. Row 1: tiny values that would underflow an absolute FP8 scale.
  // Row 2: huge values above FP8's 448. Row 3: a mixture.
  for (int64_t k = 0; k < d; ++k) {
    x[1 * d + k] = 1e-6f * ((k % 3) - 1);
    x[2 * d + k] = 1e5f * ((k % 5) - 2);
    x[3 * d + k] = k < 32 ? 3e4f : 1e-3f * k;
  }
  for (ScaleFormat f : {ScaleFormat::fp8, ScaleFormat::fp16})
    for (int bits : {2, 4}) {
      GroupQuantParams p{bits, 16, f, LevelRule::symmetric};
      const auto r = roundtrip(x, d, p);
      for (float v : r.out) ASSERT_TRUE(std::isfinite(v));
      for (int64_t k = 0; k < d; ++k) EXPECT_EQ(r.out[k], 0.0f) << "zeros decode to zeros";
      // Huge values: relative error of the row as for ordinary data.
      double num = 0, den = 0;
      for (int64_t k = 0; k < d; ++k) {
        num += std::pow(x[2 * d + k] - r.out[2 * d + k], 2.0);
        den += std::pow(x[2 * d + k], 2.0);
      }
      EXPECT_LT(std::sqrt(num / den), bits == 2 ? 0.6 : 0.1);
    }
  // A row of only tiny values gets its own span scale and is not flushed.
  std::vector<float> tiny(x.begin() + d, x.begin() + 2 * d);
  const auto r = roundtrip(tiny, d, GroupQuantParams{2, 16, ScaleFormat::fp8, LevelRule::symmetric});
  for (int64_t k = 0; k < d; ++k) EXPECT_NEAR(r.out[k], tiny[k], 1e-7f);
}

TEST(GroupQuant, SpanScaleKeepsFp8ScalesInRange) {
  const int64_t d = 64;
  for (float mag : {1e-8f, 1e-3f, 1.0f, 1e3f, 1e7f}) {
    auto x = randn(d * 16, 9, mag);
    GroupQuantParams p{4, 16, ScaleFormat::fp8, LevelRule::symmetric};
    const auto r = roundtrip(x, d, p);
    uint8_t maxcode = 0;
    for (uint8_t c : r.scales) {
      ASSERT_NE(c & 0x7F, 0x7F) << "NaN scale";
      maxcode = std::max<uint8_t>(maxcode, c);
    }
    EXPECT_EQ(maxcode, 0x7E) << "largest block uses FP8's top (448) at magnitude " << mag;
    const double rel = std::sqrt(mse(x, r.out)) / mag;
    EXPECT_LT(rel, 0.15) << "relative error independent of magnitude " << mag;
  }
}

}  // namespace
}  // namespace qvg
