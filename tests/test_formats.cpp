// FP8 E4M3, FP16, BF16 conversions and INT2/INT4 packing.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qvg/fp8.h"
#include "qvg/half.h"
#include "qvg/pack.h"

#if QVG_HAVE_CUDA_FP8_HEADER
#include <cuda_fp8.h>
#endif

namespace qvg {
namespace {

// Independent reference: the nearest finite E4M3 value by exhaustive search;
// ties go to the code with an even mantissa; |x| > 464 saturates; any NaN -> 0x7F.
uint8_t fp8_brute(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a > 464.0) return sign | 0x7E;
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return sign | best;
}

TEST(Fp8, DecodesEveryCodeAsTheFormatDefines) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const int e = (c >> 3) & 0xF, m = c & 7;
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(static_cast<double>(v), (c & 0x80) ? -mag : mag) << "code " << c;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1.0p-9f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(fp8_e4m3_from_float(fp8_e4m3_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Fp8, TiesRoundToEven) {
  // Midpoints between neighbouring codes, both signs.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = fp8_e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact: both have <= 4 significant bits
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(fp8_e4m3_from_float(mid), even) << "between " << lo << " and " << hi;
    EXPECT_EQ(fp8_e4m3_from_float(-mid), 0x80 | even);
    EXPECT_EQ(fp8_e4m3_from_float(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(fp8_e4m3_from_float(std::nextafter(mid, 1e9f)), c + 1);
  }
}

TEST(Fp8, SaturatesSubnormalsZerosAndNaN) {
  EXPECT_EQ(fp8_e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(464.0f), 0x7E);  // tie between 448 and "480" -> even (448)
  EXPECT_EQ(fp8_e4m3_from_float(465.0f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(INFINITY), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(-INFINITY), 0xFE);
  EXPECT_EQ(fp8_e4m3_from_float(0x1.0p-9f), 0x01);
  EXPECT_EQ(fp8_e4m3_from_float(0x1.0p-10f), 0x00);  // tie with 0 -> even (0)
  EXPECT_EQ(fp8_e4m3_from_float(std::nextafter(0x1.0p-10f, 1.0f)), 0x01);
  EXPECT_EQ(fp8_e4m3_from_float(0x1.8p-9f), 0x02);  // 1.5 * 2^-9: tie 1|2 -> even
  EXPECT_EQ(fp8_e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(fp8_e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(fp8_e4m3_from_float(-1e-30f), 0x80);
  EXPECT_EQ(fp8_e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(fp8_e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7F);  // canonical NaN
}

// The FP8 centroid scale (fp8_centroid_scale_for, shared by the CPU and GPU
// encoders) against its definition, the least 2^e with 448 * 2^e >= absmax
// (e in [-100, 127]), searched over e: every float exponent at 1, 1.75 (448's
// mantissa) and the floats on either side of it, subnormals and zero.
TEST(Fp8, CentroidScaleIsTheLeastPowerOfTwoThatFits) {
  auto least = [](float a) {
    if (!(a > 0)) return 1.0f;
    int e = -100;
    while (e < 127 && std::ldexp(448.0, e) < a) ++e;
    return std::ldexp(1.0f, e);
  };
  std::vector<float> vals = {0.0f, -0.0f, 448.0f, 449.0f, 1.0f, 0x1.0p-149f, 0x1.0p-126f, FLT_MAX};
  for (int e = -149; e <= 127; ++e)
    for (float m : {1.0f, 1.75f, 1.5f, 1.99f}) {
      const float v = std::ldexp(m, e);
      if (!(v > 0) || !std::isfinite(v)) continue;
      vals.insert(vals.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, FLT_MAX)});
    }
  for (float v : vals) {
    const float s = fp8_centroid_scale_for(v);
    EXPECT_EQ(s, least(v)) << "absmax " << v;
    if (v > 0 && v <= std::ldexp(448.0f, 127) && s > 0x1.0p-100f) EXPECT_LE(v / s, 448.0f) << v;
  }
}

TEST(Fp8, MatchesBruteForceOnRandomValues) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(1.0f + (gen() & 0xFFFFFF) / 16777216.0f, static_cast<int>(expo(gen))) *
                    ((gen() & 1) ? -1.0f : 1.0f);
    ASSERT_EQ(fp8_e4m3_from_float(x), fp8_brute(x)) << x;
  }
}

#if QVG_HAVE_CUDA_FP8_HEADER
// CUDA's own host implementation of __nv_cvt_float_to_fp8 is the definition we
// promise to match: compare on every 97th float bit pattern (44 million values).
TEST(Fp8, MatchesCudaSatfiniteConversion) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 97) {
    float x;
    const uint32_t b = static_cast<uint32_t>(u);
    std::memcpy(&x, &b, 4);
    const uint8_t ref = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    ASSERT_EQ(fp8_e4m3_from_float(x), ref) << "bits 0x" << std::hex << b;
  }
}
#endif

TEST(Half, Fp16MatchesCompilerConversion) {
  // _Float16 conversions in GCC round to nearest even (IEEE); compare on a
  // stride through all float bit patterns.
#if !defined(__FLT16_MAX__)
  GTEST_SKIP() << "this compiler has no _Float16 for this target (clang 14 on x86-64)";
#else
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
    float x;
    const uint32_t b = static_cast<uint32_t>(u);
    std::memcpy(&x, &b, 4);
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t ref;
    std::memcpy(&ref, &h, 2);
    const uint16_t got = fp16_from_float(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(got)));
      continue;
    }
    ASSERT_EQ(got, ref) << "bits 0x" << std::hex << b;
    ASSERT_EQ(fp16_to_float(got), static_cast<float>(h));
  }
#endif
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(bits_float(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(bf16_from_float(bits_float(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(bf16_from_float(bits_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(bf16_from_float(-2.0f), 0xC000);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(NAN))));
  EXPECT_EQ(bf16_to_float(bf16_from_float(INFINITY)), INFINITY);
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {  // every bf16 value round-trips
    const float v = bf16_to_float(static_cast<uint16_t>(hi));
    if (std::isnan(v)) continue;
    ASSERT_EQ(bf16_from_float(v), hi);
  }
}

TEST(Pack, GoldenBytes) {
  const uint8_t c2[4] = {1, 2, 3, 0};
  uint8_t out = 0xAA;
  pack_codes(c2, 4, 2, &out);
  EXPECT_EQ(out, 0x39);  // 1 | 2<<2 | 3<<4 | 0<<6
  const uint8_t c4[3] = {0xA, 0x5, 0xF};
  uint8_t out4[2] = {0xAA, 0xAA};
  pack_codes(c4, 3, 4, out4);
  EXPECT_EQ(out4[0], 0x5A);
  EXPECT_EQ(out4[1], 0x0F);  // trailing half byte is zero
}

TEST(Pack, RoundTripsOddSizes) {
  std::mt19937 gen(3);
  for (int bits : {2, 4}) {
    for (size_t n : {1u, 7u, 31u, 33u, 65u, 4681u}) {
      std::vector<uint8_t> codes(n), back(n);
      for (auto& c : codes) c = static_cast<uint8_t>(gen() & ((1u << bits) - 1));
      std::vector<uint8_t> packed(packed_bytes(n, bits) + 1, 0xEE);  // guard byte
      pack_codes(codes.data(), n, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xEE) << "wrote past packed_bytes";
      EXPECT_EQ(packed_bytes(n, bits), (n * bits + 7) / 8);
      unpack_codes(packed.data(), n, bits, back.data());
      EXPECT_EQ(codes, back) << "bits " << bits << " n " << n;
    }
  }
}

}  // namespace
}  // namespace qvg
