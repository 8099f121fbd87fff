// RoPE: Wan's 3-D split, against a literal transcription of Wan's rope_apply,
// orthogonality, relative-position property, inverse, 1-D, pairing, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <random>

#include "qvg/io.h"
#include "qvg/rope.h"

namespace qvg {
namespace {

HeadTensor random_tensor(int64_t h, int64_t n, int64_t d, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HeadTensor x(h, n, d);
  for (auto& v : x.data) v = nd(gen);
  return x;
}

std::vector<int32_t> random_positions(int64_t n, int pd, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> u(0, 200);
  std::vector<int32_t> p(static_cast<size_t>(n * pd));
  for (auto& v : p) v = u(gen);
  return p;
}

// Wan 2.1 rope_params + rope_apply written out as the Python does it: a table
// of complex exponentials per part (theta^(-2j/part_dim) * position), the
// channels viewed as complex numbers (2i, 2i+1), everything in double.
std::vector<std::complex<double>> wan_reference_row(const float* x, int64_t d, int32_t t, int32_t y, int32_t w) {
  const int64_t c = d / 2;
  const int64_t ct = c - 2 * (c / 3), ch = c / 3;  // pairs: time, height, width
  std::vector<std::complex<double>> out(static_cast<size_t>(c));
  auto param = [](int64_t part_dim, int64_t j, int32_t pos) {
    const double f = 1.0 / std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(part_dim));
    return std::polar(1.0, static_cast<double>(pos) * f);
  };
  for (int64_t i = 0; i < c; ++i) {
    std::complex<double> m;
    if (i < ct)
      m = param(2 * ct, i, t);
    else if (i < ct + ch)
      m = param(2 * ch, i - ct, y);
    else
      m = param(2 * ch, i - ct - ch, w);
    out[static_cast<size_t>(i)] = std::complex<double>(x[2 * i], x[2 * i + 1]) * m;
  }
  return out;
}

TEST(Rope, WanSplit) {
  const WanRopeSplit s128 = wan_rope_split(128);
  EXPECT_EQ(s128.time, 44);
  EXPECT_EQ(s128.height, 42);
  EXPECT_EQ(s128.width, 42);
  const WanRopeSplit s64 = wan_rope_split(64);
  EXPECT_EQ(s64.time, 24);
  EXPECT_EQ(s64.height, 20);
  EXPECT_EQ(s64.width, 20);
  for (int d = 2; d <= 256; d += 2) {
    const WanRopeSplit s = wan_rope_split(d);
    EXPECT_EQ(s.time + s.height + s.width, d);
    EXPECT_EQ(s.time % 2, 0);
    // Wan's table (d - 4(d//6), 2(d//6), 2(d//6)) equals its split of c = d/2 pairs.
    EXPECT_EQ(s.height / 2, (d / 2) / 3);
  }
}

TEST(Rope, Wan3dMatchesLiteralWanReference) {
  for (int64_t d : {128, 64, 22}) {
    HeadTensor x = random_tensor(3, 17, d, 7);
    const HeadTensor x0 = x;
    const auto pos = random_positions(17, 3, 9);
    apply_rope(x, pos, RopeConfig{});
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t n = 0; n < 17; ++n) {
        const auto ref = wan_reference_row(x0.head(h) + n * d, d, pos[n * 3], pos[n * 3 + 1], pos[n * 3 + 2]);
        for (int64_t i = 0; i < d / 2; ++i) {
          // float32 results of the same double computation (1 ulp for FMA contraction)
          EXPECT_NEAR(x.at(h, n, 2 * i), ref[i].real(), 1e-6) << "d " << d << " pair " << i;
          EXPECT_NEAR(x.at(h, n, 2 * i + 1), ref[i].imag(), 1e-6) << "d " << d << " pair " << i;
        }
      }
  }
}

TEST(Rope, OneDimensionalKnownValues) {
  // D = 4, position 1: pair 0 turns by 1 rad, pair 1 by 1/100 rad.
  HeadTensor x(1, 1, 4);
  x.data = {1.0f, 0.0f, 1.0f, 0.0f};
  const std::vector<int32_t> pos = {1};
  apply_rope(x, pos, RopeConfig{RopeMode::rope_1d});
  EXPECT_FLOAT_EQ(x.data[0], static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(x.data[1], static_cast<float>(std::sin(1.0)));
  EXPECT_FLOAT_EQ(x.data[2], static_cast<float>(std::cos(0.01)));
  EXPECT_FLOAT_EQ(x.data[3], static_cast<float>(std::sin(0.01)));
  // Half pairing: pairs (0, 2) and (1, 3).
  HeadTensor y(1, 1, 4);
  y.data = {1.0f, 1.0f, 0.0f, 0.0f};
  apply_rope(y, pos, RopeConfig{RopeMode::rope_1d, 10000.0, RopePairing::half});
  EXPECT_FLOAT_EQ(y.data[0], static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(y.data[2], static_cast<float>(std::sin(1.0)));
  EXPECT_FLOAT_EQ(y.data[1], static_cast<float>(std::cos(0.01)));
  EXPECT_FLOAT_EQ(y.data[3], static_cast<float>(std::sin(0.01)));
}

TEST(Rope, PartsFollowTheirOwnCoordinate) {
  // Moving only x (width) changes only the width channels [86, 128) for D = 128.
  HeadTensor a = random_tensor(1, 1, 128, 3), b = a;
  apply_rope(a, std::vector<int32_t>{5, 7, 11}, RopeConfig{});
  apply_rope(b, std::vector<int32_t>{5, 7, 12}, RopeConfig{});
  for (int k = 0; k < 86; ++k) EXPECT_EQ(a.data[k], b.data[k]) << k;
  int changed = 0;
  for (int k = 86; k < 128; ++k) changed += a.data[k] != b.data[k];
  EXPECT_GT(changed, 30);
}

TEST(Rope, OrthogonalInverseAndZeroIsIdentity) {
  for (RopeMode mode : {RopeMode::rope_1d, RopeMode::wan_3d})
    for (RopePairing pairing : {RopePairing::interleaved, RopePairing::half}) {
      const RopeConfig c{mode, 10000.0, pairing};
      const int pd = rope_position_dims(mode);
      const HeadTensor x0 = random_tensor(2, 50, 128, 11);
      HeadTensor x = x0;
      const auto pos = random_positions(50, pd, 5);
      apply_rope(x, pos, c);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t n = 0; n < 50; ++n) {
          double a = 0, b = 0;
          for (int64_t k = 0; k < 128; ++k) {
            a += double(x0.at(h, n, k)) * x0.at(h, n, k);
            b += double(x.at(h, n, k)) * x.at(h, n, k);
          }
          EXPECT_NEAR(a, b, 1e-5 * a);
        }
      apply_rope(x, pos, c, /*inverse=*/true);
      for (size_t i = 0; i < x.data.size(); ++i) EXPECT_NEAR(x.data[i], x0.data[i], 2e-6) << i;
      HeadTensor z = x0;
      apply_rope(z, std::vector<int32_t>(static_cast<size_t>(50 * pd), 0), c);
      EXPECT_EQ(z.data, x0.data);
    }
}

// apply_rope tabulates cos/sin over the range of each coordinate when that
// is smaller than tokens x pairs, and computes them per token otherwise: the
// two paths give the same bits (a token rotated alone, tabulated, equals the
// same token inside a batch whose positions are too spread to tabulate).
TEST(Rope, TabulatedAndPerTokenAnglesAgreeBitForBit) {
  for (RopeMode mode : {RopeMode::rope_1d, RopeMode::wan_3d}) {
    const RopeConfig c{mode, 10000.0, RopePairing::interleaved};
    const int pd = rope_position_dims(mode);
    const HeadTensor x0 = random_tensor(2, 3, 128, 31);
    std::vector<int32_t> pos;
    for (int32_t v : {7, -3, 2000000})
      for (int d = 0; d < pd; ++d) pos.push_back(v + d);
    HeadTensor batch = x0;
    apply_rope(batch, pos, c);  // range 2,000,004 > 3 tokens: per token
    for (int64_t n = 0; n < 3; ++n) {
      HeadTensor one(2, 1, 128);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t k = 0; k < 128; ++k) one.at(h, 0, k) = x0.at(h, n, k);
      apply_rope(one, std::span<const int32_t>(pos).subspan(static_cast<size_t>(n * pd), static_cast<size_t>(pd)),
                 c);  // one token: tabulated
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t k = 0; k < 128; ++k) EXPECT_EQ(one.at(h, 0, k), batch.at(h, n, k)) << n << " " << k;
    }
  }
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const HeadTensor q0 = random_tensor(1, 1, 128, 21), k0 = random_tensor(1, 1, 128, 22);
  auto dot_at = [&](std::vector<int32_t> pq, std::vector<int32_t> pk) {
    HeadTensor q = q0, k = k0;
    apply_rope(q, pq, RopeConfig{});
    apply_rope(k, pk, RopeConfig{});
    double s = 0;
    for (int i = 0; i < 128; ++i) s += double(q.data[i]) * k.data[i];
    return s;
  };
  const double base = dot_at({9, 4, 20}, {3, 1, 5});
  EXPECT_NEAR(dot_at({19, 14, 40}, {13, 11, 25}), base, 1e-4);
  EXPECT_GT(std::abs(dot_at({9, 4, 20}, {3, 1, 6}) - base), 1e-3);
}

TEST(Rope, MatchesTheReferenceModelsKeys) {
  // models/golden: pre- and post-RoPE keys of the project's trained video DiT
  // (docs/MODEL.md section 5: Wan split 44/42/42, adjacent pairs, theta 10000;
  // cos/sin rounded to fp32 and an fp32 rotation there, float64 here).
  // ctx1 = context chunk 1, tokens 0..127 = frame 3, patch rows 0..7 of a 16 x 16 grid.
  const std::string path = std::string(QVG_SOURCE_DIR) + "/models/golden/golden.safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "the committed golden file is missing: " << path;
  for (int layer = 0; layer < 6; ++layer) {
    const std::string pre = "layer" + std::to_string(layer) + ".ctx1.k_pre";
    const std::string post = "layer" + std::to_string(layer) + ".ctx1.k";
    HeadTensor k = to_head_tensor(read_safetensors_tensor(path, pre), KvLayout::thd, pre);
    const HeadTensor want = to_head_tensor(read_safetensors_tensor(path, post), KvLayout::thd, post);
    ASSERT_EQ(k.tokens, 128);
    const std::vector<int32_t> frame3 = wan_grid_positions(3, 1, 16, 16);  // rows 0..15
    apply_rope(k, std::span<const int32_t>(frame3.data(), 128 * 3), RopeConfig{});
    double scale = 0, err = 0;
    for (size_t i = 0; i < k.data.size(); ++i) {
      scale = std::max(scale, double(std::abs(want.data[i])));
      err = std::max(err, std::abs(double(k.data[i]) - want.data[i]));
    }
    EXPECT_LT(err, 1e-5 * scale) << pre;
  }
}

TEST(Rope, Positions) {
  const auto p = wan_grid_positions(3, 2, 2, 3);
  ASSERT_EQ(p.size(), 2u * 2 * 3 * 3);
  // token n = (f * 2 + y) * 3 + x -> (3 + f, y, x)
  EXPECT_EQ((std::vector<int32_t>(p.begin(), p.begin() + 6)), (std::vector<int32_t>{3, 0, 0, 3, 0, 1}));
  EXPECT_EQ((std::vector<int32_t>(p.end() - 3, p.end())), (std::vector<int32_t>{4, 1, 2}));
  EXPECT_EQ(positions_1d(5, 3), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(rope_position_dims(RopeMode::none), 0);
  EXPECT_EQ(parse_rope_mode("3d"), RopeMode::wan_3d);
  EXPECT_THROW(parse_rope_mode("2d"), Error);
}

TEST(Rope, BadInput) {
  HeadTensor x = random_tensor(1, 4, 64, 1);
  const HeadTensor x0 = x;
  EXPECT_THROW(apply_rope(x, std::vector<int32_t>(11), RopeConfig{}), Error);  // needs 12
  EXPECT_THROW(apply_rope(x, std::vector<int32_t>(3), RopeConfig{RopeMode::rope_1d}), Error);
  EXPECT_THROW(apply_rope(x, std::vector<int32_t>(12), RopeConfig{RopeMode::wan_3d, 1.0}), Error);
  EXPECT_EQ(x.data, x0.data);
  HeadTensor odd = random_tensor(1, 1, 5, 1);
  EXPECT_THROW(apply_rope(odd, std::vector<int32_t>(1), RopeConfig{RopeMode::rope_1d}), Error);
  apply_rope(odd, {}, RopeConfig{RopeMode::none});  // none: nothing to check, nothing changes
}

}  // namespace
}  // namespace qvg
