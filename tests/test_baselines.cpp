// KIVI and QuaRot baselines: bytes against an independent reference written
// from docs/FORMAT.md, per-element error bounds, window exactness, byte
// counts, stability, thread independence and bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "qvg/config.h"
#include "qvg/half.h"
#include "reference/baselines.h"

namespace qvg {
namespace {

// ---------------------------------------------------------------- data

/// Gaussian [heads, tokens, dim] with per-channel offsets (keys have them) and
/// optional outlier channels (every `outlier_every`-th channel scaled by 20).
HeadTensor make_data(int64_t h, int64_t n, int64_t d, unsigned seed, int outlier_every = 0) {
  HeadTensor x(h, n, d);
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> offset(static_cast<size_t>(d));
  for (auto& o : offset) o = 0.5f * nd(gen);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < d; ++c) {
        float v = offset[c] + nd(gen);
        if (outlier_every > 0 && c % outlier_every == 3) v = 20.0f + 2.0f * nd(gen);
        x.at(i, t, c) = v;
      }
  return x;
}

double mse(const HeadTensor& a, const HeadTensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.data.size(); ++i) s += (double(a.data[i]) - b.data[i]) * (double(a.data[i]) - b.data[i]);
  return s / static_cast<double>(a.data.size());
}

bool same_floats(const HeadTensor& a, const HeadTensor& b) {
  return a.same_shape(b) && std::memcmp(a.data.data(), b.data.data(), a.data.size() * 4) == 0;
}

bool same_bytes(const EncodedTensor& a, const EncodedTensor& b) {
  return a.codes == b.codes && a.scales == b.scales && a.zero_points == b.zero_points &&
         a.span_scales == b.span_scales && a.centroids == b.centroids && a.ids == b.ids &&
         a.full_precision == b.full_precision;
}

CodecConfig kivi_config(int bits, int group, int residual) {
  CodecConfig c = parse_codec_spec(bits == 2 ? "kivi" : "kivi-int4");
  c.group = group;
  c.residual = residual;
  return c;
}

EncodeOptions role_opt(TensorRole r, int threads = 1) {
  EncodeOptions o;
  o.role = r;
  o.threads = threads;
  return o;
}

// ------------------------------------------------ independent reference

void put16(std::vector<uint8_t>& buf, size_t i, uint16_t v) {
  buf[2 * i] = static_cast<uint8_t>(v & 0xFF);
  buf[2 * i + 1] = static_cast<uint8_t>(v >> 8);
}

/// Writes b-bit code q as element i of a group that starts at byte `base`
/// (FORMAT.md: element i at bit i*b of the group, least significant first).
void put_code(std::vector<uint8_t>& buf, size_t base, size_t i, int bits, unsigned q) {
  const size_t bit = i * static_cast<size_t>(bits);
  buf[base + bit / 8] = static_cast<uint8_t>(buf[base + bit / 8] | (q << (bit % 8)));
}

/// One group quantized as FORMAT.md says (float32 arithmetic); fills the
/// element bounds (double) used by the error checks.
struct RefGroup {
  uint16_t s16 = 0, z16 = 0;
  std::vector<unsigned> q;
  std::vector<float> rec;
  double bound = 0;  ///< per-element error bound of the group
};

RefGroup ref_group(const std::vector<float>& v, int bits) {
  RefGroup g;
  float mn = v[0], mx = v[0];
  for (float a : v) {
    if (a < mn) mn = a;
    if (a > mx) mx = a;
  }
  const int qmax = (1 << bits) - 1;
  g.s16 = fp16_from_float((mx - mn) / static_cast<float>(qmax));
  g.z16 = fp16_from_float(mn);
  const float s = fp16_to_float(g.s16), z = fp16_to_float(g.z16);
  for (float a : v) {
    long q = 0;
    if (s > 0) q = std::lrint((a - z) / s);
    q = std::clamp(q, 0L, static_cast<long>(qmax));
    g.q.push_back(static_cast<unsigned>(q));
    g.rec.push_back(static_cast<float>(q) * s + z);
  }
  // Rounding to the grid costs s/2; the grid [z, z + qmax*s] may miss [mn, mx]
  // by the FP16 rounding of z and of qmax*s; plus float evaluation.
  const double s_exact = (double(mx) - double(mn)) / qmax;
  g.bound = 0.5 * s + std::fabs(double(z) - mn) + qmax * std::fabs(double(s) - s_exact) +
            1e-6 * (std::fabs(double(mn)) + std::fabs(double(mx)) + 1e-30);
  return g;
}

struct Reference {
  EncodedTensor e;       ///< expected bytes (parts only)
  HeadTensor rec;        ///< expected reconstruction
  HeadTensor bound;      ///< per-element error bound (0 for the BF16 window)
  std::vector<bool> bf16;  ///< element is in the BF16 window
};

/// KIVI written from its definition: element by element, group by group.
Reference kivi_reference(const HeadTensor& x, int bits, int64_t G, int64_t R, TensorRole role) {
  const int64_t H = x.heads, N = x.tokens, D = x.dim;
  int64_t nq = 0;
  if (N >= R) nq = role == TensorRole::key ? (N - R) / G * G : N - R;
  const int64_t groups = role == TensorRole::key ? (nq / G) * D : nq * (D / G);
  const size_t gbytes = static_cast<size_t>((G * bits + 7) / 8);
  Reference r;
  r.e.codes.assign(static_cast<size_t>(H * groups) * gbytes, 0);
  r.e.scales.assign(static_cast<size_t>(H * groups * 2), 0);
  r.e.zero_points.assign(static_cast<size_t>(H * groups * 2), 0);
  r.e.full_precision.assign(static_cast<size_t>(H * (N - nq) * D * 2), 0);
  r.rec = HeadTensor(H, N, D);
  r.bound = HeadTensor(H, N, D);
  r.bf16.assign(x.data.size(), false);
  for (int64_t h = 0; h < H; ++h) {
    size_t gi = static_cast<size_t>(h * groups);
    auto emit = [&](const std::vector<std::pair<int64_t, int64_t>>& members) {  // (token, channel)
      std::vector<float> v;
      for (auto [t, c] : members) v.push_back(x.at(h, t, c));
      const RefGroup g = ref_group(v, bits);
      put16(r.e.scales, gi, g.s16);
      put16(r.e.zero_points, gi, g.z16);
      for (size_t i = 0; i < members.size(); ++i) {
        put_code(r.e.codes, gi * gbytes, i, bits, g.q[i]);
        r.rec.at(h, members[i].first, members[i].second) = g.rec[i];
        r.bound.at(h, members[i].first, members[i].second) = static_cast<float>(g.bound);
      }
      ++gi;
    };
    if (role == TensorRole::key) {
      for (int64_t k = 0; k < nq / G; ++k)
        for (int64_t c = 0; c < D; ++c) {
          std::vector<std::pair<int64_t, int64_t>> m;
          for (int64_t t = k * G; t < (k + 1) * G; ++t) m.push_back({t, c});
          emit(m);
        }
    } else {
      for (int64_t t = 0; t < nq; ++t)
        for (int64_t j = 0; j < D / G; ++j) {
          std::vector<std::pair<int64_t, int64_t>> m;
          for (int64_t c = j * G; c < (j + 1) * G; ++c) m.push_back({t, c});
          emit(m);
        }
    }
    for (int64_t t = nq; t < N; ++t)
      for (int64_t c = 0; c < D; ++c) {
        const uint16_t b = bf16_from_float(x.at(h, t, c));
        put16(r.e.full_precision, static_cast<size_t>((h * (N - nq) + (t - nq)) * D + c), b);
        r.rec.at(h, t, c) = bf16_to_float(b);
        r.bf16[static_cast<size_t>((h * N + t) * D + c)] = true;
      }
  }
  return r;
}

/// The fast WHT exactly as FORMAT.md orders it (reimplemented here).
void fwht_doc_order(std::vector<float>& y) {
  const size_t d = y.size();
  for (size_t h = 1; h < d; h <<= 1)
    for (size_t j = 0; j < d; ++j)
      if ((j & h) == 0) {
        const float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
  const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (auto& v : y) v *= norm;
}

/// The Sylvester-order normalized Hadamard matrix applied in double.
std::vector<double> hadamard_matrix_apply(const std::vector<float>& x) {
  const size_t d = x.size();
  std::vector<double> y(d, 0.0);
  for (size_t i = 0; i < d; ++i) {
    for (size_t j = 0; j < d; ++j) y[i] += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
    y[i] /= std::sqrt(static_cast<double>(d));
  }
  return y;
}

/// QuaRot from its definition: rotate, one asymmetric group per token, rotate back.
Reference quarot_reference(const HeadTensor& x, int bits) {
  const int64_t H = x.heads, N = x.tokens, D = x.dim;
  const size_t rb = static_cast<size_t>((D * bits + 7) / 8);
  Reference r;
  r.e.codes.assign(static_cast<size_t>(H * N) * rb, 0);
  r.e.scales.assign(static_cast<size_t>(H * N * 2), 0);
  r.e.zero_points.assign(static_cast<size_t>(H * N * 2), 0);
  r.rec = HeadTensor(H, N, D);
  r.bound = HeadTensor(H, N, D);  // bound in the rotated basis, per element
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < N; ++t) {
      std::vector<float> y(x.head(h) + t * D, x.head(h) + (t + 1) * D);
      fwht_doc_order(y);
      RefGroup g = ref_group(y, bits);
      const size_t gi = static_cast<size_t>(h * N + t);
      put16(r.e.scales, gi, g.s16);
      put16(r.e.zero_points, gi, g.z16);
      for (int64_t k = 0; k < D; ++k) put_code(r.e.codes, gi * rb, static_cast<size_t>(k), bits, g.q[k]);
      fwht_doc_order(g.rec);
      for (int64_t k = 0; k < D; ++k) {
        r.rec.at(h, t, k) = g.rec[k];
        r.bound.at(h, t, k) = static_cast<float>(g.bound);
      }
    }
  return r;
}

void expect_parts_equal(const EncodedTensor& got, const EncodedTensor& want, const std::string& what) {
  EXPECT_EQ(got.codes, want.codes) << what << ": codes";
  EXPECT_EQ(got.scales, want.scales) << what << ": scales";
  EXPECT_EQ(got.zero_points, want.zero_points) << what << ": zero_points";
  EXPECT_EQ(got.full_precision, want.full_precision) << what << ": full_precision";
  EXPECT_TRUE(got.span_scales.empty() && got.centroids.empty() && got.ids.empty()) << what;
}

// ----------------------------------------------------------------- KIVI

struct KiviCase {
  int64_t d, g, r;
};
// Exercise the window logic: R not a multiple of G, R = 0, R > some N, G = D,
// and G = 3 (a group's codes end in a partial byte).
const KiviCase kKiviCases[] = {{32, 8, 5}, {32, 32, 32}, {24, 3, 0}, {32, 16, 40}, {16, 4, 1}};
const int64_t kTokens[] = {1, 7, 33, 97};

TEST(Kivi, MatchesReferenceBytesAndBoundsOnOddSizes) {
  int checked_quantized = 0;
  for (const auto& kc : kKiviCases)
    for (int64_t n : kTokens)
      for (int bits : {2, 4})
        for (TensorRole role : {TensorRole::key, TensorRole::value}) {
          const std::string what = "D" + std::to_string(kc.d) + " G" + std::to_string(kc.g) + " R" +
                                   std::to_string(kc.r) + " N" + std::to_string(n) + " b" +
                                   std::to_string(bits) + (role == TensorRole::key ? " key" : " value");
          const HeadTensor x = make_data(3, n, kc.d, static_cast<unsigned>(n * 131 + kc.g + bits));
          const CodecConfig c = kivi_config(bits, static_cast<int>(kc.g), static_cast<int>(kc.r));
          const auto codec = make_codec(c);
          const EncodedTensor e = codec->encode(x, role_opt(role));
          EXPECT_EQ(e.role, role) << what;
          const Reference ref = kivi_reference(x, bits, kc.g, kc.r, role);
          expect_parts_equal(e, ref.e, what);
          HeadTensor y;
          codec->decode(e, y, 1);
          ASSERT_TRUE(y.same_shape(x)) << what;
          EXPECT_TRUE(same_floats(y, ref.rec)) << what << ": reconstruction differs from the reference";
          for (size_t i = 0; i < x.data.size(); ++i) {
            if (ref.bf16[i]) {
              ASSERT_EQ(y.data[i], round_bf16(x.data[i])) << what << " element " << i;
            } else {
              ++checked_quantized;
              ASSERT_LE(std::fabs(double(y.data[i]) - x.data[i]), ref.bound.data[i]) << what << " element " << i;
            }
          }
        }
  EXPECT_GT(checked_quantized, 10000);
}

TEST(Kivi, WindowSplitFollowsTheSpec) {
  // keys: whole groups only; the leftover tokens stay in BF16 with the window.
  const CodecConfig c = kivi_config(2, 8, 5);
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::key, 4), 0);     // N < R
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::key, 12), 0);    // 7 older tokens < G
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::key, 13), 8);
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::key, 97), 88);   // 92 older -> 11 groups
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::value, 4), 0);
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::value, 12), 7);
  EXPECT_EQ(kivi_quantized_tokens(c, TensorRole::value, 97), 92);
}

TEST(Kivi, ByteCountsEqualTheFormula) {
  for (const auto& kc : kKiviCases)
    for (int64_t n : kTokens)
      for (int bits : {2, 4})
        for (TensorRole role : {TensorRole::key, TensorRole::value}) {
          const int64_t H = 2, D = kc.d, G = kc.g, R = kc.r;
          const HeadTensor x = make_data(H, n, D, 7);
          const EncodedTensor e = make_codec(kivi_config(bits, int(G), int(R)))->encode(x, role_opt(role));
          int64_t nq = 0, groups = 0;
          if (n >= R) nq = role == TensorRole::key ? (n - R) / G * G : n - R;
          groups = role == TensorRole::key ? nq / G * D : nq * D / G;
          const PartBytes b = e.bytes();
          EXPECT_EQ(b.codes, size_t(H * groups * ((G * bits + 7) / 8)));
          EXPECT_EQ(b.scales, size_t(H * groups * 2));
          EXPECT_EQ(b.zero_points, size_t(H * groups * 2));
          EXPECT_EQ(b.full_precision, size_t(H * (n - nq) * D * 2));
          EXPECT_EQ(b.total(), b.codes + b.scales + b.zero_points + b.full_precision);
          EXPECT_DOUBLE_EQ(e.bits_per_value(), 8.0 * double(b.total()) / double(H * n * D));
        }
  // Self-Forcing-sized span, one head: b + 32/G (FP16 scale + zero) + BF16 window.
  const int64_t N = 37440, D = 128;
  const HeadTensor x = make_data(1, N, D, 3);
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const EncodedTensor e = make_codec("kivi")->encode(x, role_opt(role, 2));
    const int64_t nq = role == TensorRole::key ? (N - 32) / 32 * 32 : N - 32;
    const double formula = (2.0 + 32.0 / 32) * double(nq) / N + 16.0 * double(N - nq) / N;
    EXPECT_NEAR(e.bits_per_value(), formula, 1e-12);
    std::printf("kivi INT2 G32 R32 %s, N=%lld D=%lld: %.4f bits/value, %.3fx smaller than BF16\n",
                role == TensorRole::key ? "keys" : "values", (long long)N, (long long)D, e.bits_per_value(),
                e.ratio_to_bf16());
  }
}

TEST(Kivi, Int4BeatsInt2) {
  const HeadTensor x = make_data(4, 200, 64, 11);
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    HeadTensor y2, y4;
    const auto c2 = make_codec(kivi_config(2, 32, 8)), c4 = make_codec(kivi_config(4, 32, 8));
    c2->decode(c2->encode(x, role_opt(role)), y2);
    c4->decode(c4->encode(x, role_opt(role)), y4);
    EXPECT_LT(mse(x, y4), 0.1 * mse(x, y2));
  }
}

// Encode -> decode -> encode. For KIVI and QuaRot it is NOT an identity in
// general: when a group's range is below the FP16 resolution of its minimum
// (|min| / s beyond ~2^10), z = fp16(min) != min moves the codes, and the
// re-encoded group has different scale/zero/codes. On well-conditioned
// groups (all of these Gaussian + offset + outlier data) it holds exactly for
// KIVI: the decoded group contains z (code 0) and z + qmax*s (code qmax), so
// min/max, s, z and every code come back unchanged.
TEST(Kivi, EncodeDecodeEncodeIsStableOnWellConditionedData) {
  for (const auto& kc : kKiviCases)
    for (int64_t n : kTokens)
      for (int bits : {2, 4})
        for (TensorRole role : {TensorRole::key, TensorRole::value}) {
          const auto codec = make_codec(kivi_config(bits, int(kc.g), int(kc.r)));
          const HeadTensor x = make_data(2, n, kc.d, static_cast<unsigned>(n + bits), 5);
          const EncodedTensor e1 = codec->encode(x, role_opt(role));
          HeadTensor y1, y2;
          codec->decode(e1, y1);
          const EncodedTensor e2 = codec->encode(y1, role_opt(role));
          EXPECT_TRUE(same_bytes(e1, e2)) << "D" << kc.d << " G" << kc.g << " R" << kc.r << " N" << n;
          codec->decode(e2, y2);
          EXPECT_TRUE(same_floats(y1, y2));
        }
}

TEST(Kivi, IllConditionedGroupIsNotStableButConvergesWithinBound) {
  // Values 1.0001 .. 1.0002: the FP16 zero point (1.0) sits below the group by
  // more than the group's range, so every code saturates; re-encoding gives a
  // different (zero-scale) group. What holds: the second reconstruction stays
  // within the per-element bound of the first, and a third encode is a fixed point.
  HeadTensor x(1, 32, 32);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = 1.0001f + 0.0001f * float(i % 7) / 6.0f;
  const auto codec = make_codec(kivi_config(2, 32, 0));
  const EncodedTensor e1 = codec->encode(x, role_opt(TensorRole::value));
  HeadTensor y1, y2, y3;
  codec->decode(e1, y1);
  const EncodedTensor e2 = codec->encode(y1, role_opt(TensorRole::value));
  EXPECT_FALSE(same_bytes(e1, e2));
  codec->decode(e2, y2);
  const Reference r1 = kivi_reference(y1, 2, 32, 0, TensorRole::value);
  for (size_t i = 0; i < y1.data.size(); ++i)
    EXPECT_LE(std::fabs(double(y2.data[i]) - y1.data[i]), r1.bound.data[i]);
  const EncodedTensor e3 = codec->encode(y2, role_opt(TensorRole::value));
  EXPECT_TRUE(same_bytes(e2, e3));
  codec->decode(e3, y3);
  EXPECT_TRUE(same_floats(y2, y3));
}

TEST(Kivi, ConstantGroupsAndZerosRoundTrip) {
  HeadTensor x(2, 40, 16);
  for (int64_t t = 0; t < 40; ++t)
    for (int64_t c = 0; c < 16; ++c) x.at(1, t, c) = 3.25f;  // head 0 all zeros
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const auto codec = make_codec(kivi_config(2, 8, 4));
    HeadTensor y;
    codec->decode(codec->encode(x, role_opt(role)), y);
    EXPECT_TRUE(same_floats(x, y));  // s = 0: q = 0, value = z exactly
  }
}

TEST(Kivi, ThreadCountDoesNotChangeBytes) {
  const HeadTensor x = make_data(7, 97, 32, 21, 8);
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const auto codec = make_codec(kivi_config(2, 8, 5));
    const EncodedTensor e1 = codec->encode(x, role_opt(role, 1));
    const EncodedTensor e4 = codec->encode(x, role_opt(role, 4));
    const EncodedTensor e0 = codec->encode(x, role_opt(role, 0));
    EXPECT_TRUE(same_bytes(e1, e4));
    EXPECT_TRUE(same_bytes(e1, e0));
    HeadTensor y1, y4;
    codec->decode(e1, y1, 1);
    codec->decode(e1, y4, 4);
    EXPECT_TRUE(same_floats(y1, y4));
  }
}

TEST(Kivi, DecodeUsesTheStoredRole) {
  const HeadTensor x = make_data(1, 50, 32, 4);
  const auto codec = make_codec(kivi_config(2, 8, 5));
  EncodedTensor e = codec->encode(x, role_opt(TensorRole::key));
  e.role = TensorRole::value;  // now the part sizes do not match a value encoding
  HeadTensor y;
  EXPECT_THROW(codec->decode(e, y), Error);
}

// --------------------------------------------------------------- QuaRot

TEST(Hadamard, MatchesSylvesterMatrixAndIsOrthogonal) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t d : {1, 2, 4, 8, 16, 64, 128, 256}) {
    std::vector<float> x(static_cast<size_t>(d));
    for (auto& v : x) v = nd(gen);
    std::vector<float> y = x;
    wht_normalized_ref(y.data(), d);
    const std::vector<double> want = hadamard_matrix_apply(x);
    double n_x = 0, n_y = 0;
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[i], want[i], 1e-5) << "d=" << d << " i=" << i;
      n_x += double(x[i]) * x[i];
      n_y += double(y[i]) * y[i];
    }
    EXPECT_NEAR(std::sqrt(n_y), std::sqrt(n_x), 1e-6 * std::sqrt(n_x)) << "norm, d=" << d;
    std::vector<float> z = y;
    wht_normalized_ref(z.data(), d);  // H(H(x)) = x
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(z[i], x[i], 1e-6 * (1 + std::fabs(x[i]))) << "d=" << d;
    // Same floats as the order written in FORMAT.md.
    std::vector<float> w = x;
    fwht_doc_order(w);
    EXPECT_EQ(std::memcmp(w.data(), y.data(), y.size() * 4), 0) << "d=" << d;
  }
  // Sylvester order: basis vector e_k maps to column k, H[i][k] = (-1)^popcount(i&k)/sqrt(d).
  for (int64_t k = 0; k < 8; ++k) {
    std::vector<float> e(8, 0.0f);
    e[k] = 1.0f;
    wht_normalized_ref(e.data(), 8);
    for (int64_t i = 0; i < 8; ++i)
      EXPECT_FLOAT_EQ(e[i], (std::popcount(uint64_t(i & k)) % 2 ? -1.0f : 1.0f) / std::sqrt(8.0f));
  }
}

TEST(Quarot, MatchesReferenceBytesAndBoundsOnOddSizes) {
  for (int64_t d : {1, 8, 64, 128})
    for (int64_t n : kTokens)
      for (int bits : {2, 4}) {
        const std::string what = "D" + std::to_string(d) + " N" + std::to_string(n) + " b" + std::to_string(bits);
        const HeadTensor x = make_data(3, n, d, static_cast<unsigned>(d * 7 + n + bits), 16);
        const auto codec = make_codec(bits == 2 ? "quarot" : "quarot-int4");
        const EncodedTensor e = codec->encode(x, role_opt(TensorRole::value));
        EXPECT_EQ(e.role, TensorRole::value);
        const Reference ref = quarot_reference(x, bits);
        expect_parts_equal(e, ref.e, what);
        HeadTensor y;
        codec->decode(e, y, 1);
        EXPECT_TRUE(same_floats(y, ref.rec)) << what << ": reconstruction differs from the reference";
        // Error in the original basis: the rotation is orthogonal, so a row's
        // L2 error is at most sqrt(sum of per-element bounds^2) in the rotated basis.
        for (int64_t h = 0; h < x.heads; ++h)
          for (int64_t t = 0; t < n; ++t) {
            double err = 0, bound = 0, norm = 0;
            for (int64_t k = 0; k < d; ++k) {
              err += std::pow(double(y.at(h, t, k)) - x.at(h, t, k), 2);
              bound += std::pow(double(ref.bound.at(h, t, k)), 2);
              norm += std::pow(double(x.at(h, t, k)), 2);
            }
            ASSERT_LE(std::sqrt(err), std::sqrt(bound) + 1e-5 * std::sqrt(norm)) << what << " h" << h << " t" << t;
          }
      }
}

TEST(Quarot, ByteCountsEqualTheFormula) {
  for (int64_t d : {1, 8, 128})
    for (int64_t n : kTokens)
      for (int bits : {2, 4}) {
        const HeadTensor x = make_data(2, n, d, 3);
        const EncodedTensor e = make_codec(bits == 2 ? "quarot" : "quarot-int4")->encode(x);
        const PartBytes b = e.bytes();
        EXPECT_EQ(b.codes, size_t(2 * n * ((d * bits + 7) / 8)));
        EXPECT_EQ(b.scales, size_t(2 * n * 2));
        EXPECT_EQ(b.zero_points, size_t(2 * n * 2));
        EXPECT_EQ(b.full_precision + b.centroids + b.ids + b.span_scales, 0u);
      }
  const HeadTensor x = make_data(1, 37440, 128, 3);
  const EncodedTensor e = make_codec("quarot")->encode(x, role_opt(TensorRole::key, 2));
  EXPECT_NEAR(e.bits_per_value(), 2.0 + 32.0 / 128, 1e-12);
  std::printf("quarot INT2, N=37440 D=128: %.4f bits/value, %.3fx smaller than BF16\n", e.bits_per_value(),
              e.ratio_to_bf16());
}

/// Plain per-token asymmetric min/max quantization (no rotation), in double.
HeadTensor plain_per_token(const HeadTensor& x, int bits) {
  HeadTensor y(x.heads, x.tokens, x.dim);
  const double qmax = (1 << bits) - 1;
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t t = 0; t < x.tokens; ++t) {
      double mn = x.at(h, t, 0), mx = mn;
      for (int64_t k = 0; k < x.dim; ++k) {
        mn = std::min(mn, double(x.at(h, t, k)));
        mx = std::max(mx, double(x.at(h, t, k)));
      }
      const double s = (mx - mn) / qmax;
      for (int64_t k = 0; k < x.dim; ++k) {
        const double q = s > 0 ? std::clamp(std::nearbyint((x.at(h, t, k) - mn) / s), 0.0, qmax) : 0.0;
        y.at(h, t, k) = static_cast<float>(q * s + mn);
      }
    }
  return y;
}

TEST(Quarot, BeatsPlainPerTokenQuantizationOnOutlierChannels) {
  // 128 channels, 2 of them outliers around +20 (keys of real models look so):
  // plain min/max spends the grid on the outliers, the rotation spreads them
  // (measured: ~5x lower MSE at INT2, ~4x at INT4). Not a law: with 4 outlier
  // channels around +50 the rotated rows take values near +-4*50/sqrt(128)
  // and QuaRot INT2 is ~2.5x WORSE than plain (INT4 still ~1.9x better).
  const HeadTensor x = make_data(4, 256, 128, 77, 64);
  for (int bits : {2, 4}) {
    HeadTensor y;
    const auto codec = make_codec(bits == 2 ? "quarot" : "quarot-int4");
    codec->decode(codec->encode(x), y);
    const double m_rot = mse(x, y), m_plain = mse(x, plain_per_token(x, bits));
    std::printf("INT%d per-token MSE: plain %.4g, QuaRot %.4g (%.2fx lower)\n", bits, m_plain, m_rot,
                m_plain / m_rot);
    EXPECT_LT(m_rot, 0.5 * m_plain) << "bits " << bits;
  }
}

TEST(Quarot, Int4BeatsInt2) {
  const HeadTensor x = make_data(4, 100, 128, 9, 32);
  HeadTensor y2, y4;
  const auto c2 = make_codec("quarot"), c4 = make_codec("quarot-int4");
  c2->decode(c2->encode(x), y2);
  c4->decode(c4->encode(x), y4);
  EXPECT_LT(mse(x, y4), 0.1 * mse(x, y2));
}

// QuaRot re-encoding goes through two float32 Hadamard transforms, which are
// exact inverses only up to rounding (~1e-7 relative). Codes move only if a
// rotated value lands within that rounding of a rounding boundary, and the
// FP16 scale/zero only if min/max land within it of an FP16 rounding midpoint
// — possible, so byte identity is not guaranteed. What the test requires:
// every code equal, and scale/zero equal except at most a few values that
// differ by one FP16 ulp; the second reconstruction within 1e-5 of the first.
TEST(Quarot, EncodeDecodeEncodeIsStableUpToFloatRounding) {
  int differing_meta = 0;
  size_t total_meta = 0;
  for (int64_t d : {8, 64, 128})
    for (int bits : {2, 4}) {
      const HeadTensor x = make_data(3, 97, d, static_cast<unsigned>(d + bits), 16);
      const auto codec = make_codec(bits == 2 ? "quarot" : "quarot-int4");
      const EncodedTensor e1 = codec->encode(x);
      HeadTensor y1, y2;
      codec->decode(e1, y1);
      const EncodedTensor e2 = codec->encode(y1);
      EXPECT_EQ(e1.codes, e2.codes) << "d=" << d << " bits=" << bits;
      for (size_t i = 0; i < e1.scales.size() / 2; ++i) {
        for (auto part : {&EncodedTensor::scales, &EncodedTensor::zero_points}) {
          const int a = (e1.*part)[2 * i] | ((e1.*part)[2 * i + 1] << 8);
          const int b = (e2.*part)[2 * i] | ((e2.*part)[2 * i + 1] << 8);
          EXPECT_LE(std::abs(a - b), 1);
          differing_meta += a != b;
          ++total_meta;
        }
      }
      codec->decode(e2, y2);
      for (size_t i = 0; i < y1.data.size(); ++i) ASSERT_NEAR(y2.data[i], y1.data[i], 1e-5 * (1 + std::fabs(y1.data[i])));
    }
  std::printf("quarot re-encode: %d of %zu FP16 scales/zero points moved by one ulp\n", differing_meta, total_meta);
  EXPECT_LE(differing_meta * 100, static_cast<int>(total_meta));
}

TEST(Quarot, ThreadCountDoesNotChangeBytes) {
  const HeadTensor x = make_data(7, 97, 64, 21, 8);
  const auto codec = make_codec("quarot");
  const EncodedTensor e1 = codec->encode(x, role_opt(TensorRole::key, 1));
  const EncodedTensor e4 = codec->encode(x, role_opt(TensorRole::key, 4));
  EXPECT_TRUE(same_bytes(e1, e4));
  HeadTensor y1, y4;
  codec->decode(e1, y1, 1);
  codec->decode(e1, y4, 4);
  EXPECT_TRUE(same_floats(y1, y4));
}

// ------------------------------------------------------------ bad input

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no qvg::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << "message: " << err.what();
  }
}

TEST(Baselines, BadInputsThrow) {
  const HeadTensor ok = make_data(2, 40, 32, 1);
  auto enc = [&](const std::string& spec, const HeadTensor& x, TensorRole role = TensorRole::key) {
    return make_codec(spec)->encode(x, role_opt(role));
  };
  expect_error([&] { enc("kivi:bits=3", ok); }, "bits");
  expect_error([&] { enc("kivi:group=0", ok); }, "group");
  expect_error([&] { enc("kivi:group=5", ok); }, "not a multiple");
  expect_error([&] { enc("kivi:residual=-1", ok); }, "residual");
  expect_error([&] { enc("quarot:bits=8", ok); }, "bits");
  expect_error([&] { enc("quarot", make_data(1, 4, 24, 1)); }, "power-of-two");
  for (const char* spec : {"kivi", "quarot"}) {
    expect_error([&] { enc(spec, HeadTensor(2, 0, 32)); }, "N = 0");
    expect_error([&] { enc(spec, HeadTensor(0, 5, 32)); }, "no heads");
    HeadTensor bad = ok;
    bad.at(1, 39, 3) = std::nanf("");
    expect_error([&] { enc(spec, bad, TensorRole::value); }, "non-finite");
    bad.at(1, 39, 3) = INFINITY;
    expect_error([&] { enc(spec, bad); }, "non-finite");
    HeadTensor short_data = ok;
    short_data.data.pop_back();
    expect_error([&] { enc(spec, short_data); }, "needs");
    // Values whose range does not fit FP16 scale / zero point.
    HeadTensor huge = ok;
    huge.at(0, 0, 0) = 1e6f;
    for (TensorRole role : {TensorRole::key, TensorRole::value})
      expect_error([&] { enc(std::string(spec) + (spec == std::string("kivi") ? ":residual=0" : ""), huge, role); },
                   "FP16");
  }
  // Decoding inconsistent tensors.
  for (const char* spec : {"kivi:residual=8", "quarot"}) {
    const auto codec = make_codec(spec);
    const EncodedTensor good = codec->encode(ok, role_opt(TensorRole::value));
    HeadTensor y;
    EncodedTensor e = good;
    e.codes.pop_back();
    expect_error([&] { codec->decode(e, y); }, "'codes'");
    e = good;
    e.zero_points.push_back(0);
    expect_error([&] { codec->decode(e, y); }, "'zero_points'");
    e = good;
    e.tokens += 1;
    expect_error([&] { codec->decode(e, y); }, "inconsistent");
    e = good;
    e.config.bits = 3;
    expect_error([&] { codec->decode(e, y); }, "bits");
    e = good;
    e.scales[0] = 0x00;
    e.scales[1] = 0x7C;  // +inf
    expect_error([&] { codec->decode(e, y); }, "corrupt");
    e = good;
    e.tokens = 0;
    expect_error([&] { codec->decode(e, y); }, "empty shape");
  }
  // A tensor of another method.
  const EncodedTensor q = make_codec("quarot")->encode(ok);
  HeadTensor y;
  expect_error([&] { make_codec("kivi")->decode(q, y); }, "decoding a quarot tensor with a kivi codec");
  const EncodedTensor k = make_codec("kivi")->encode(ok);
  expect_error([&] { make_codec("quarot")->decode(k, y); }, "decoding a kivi tensor with a quarot codec");
}

// Every codec refuses a tensor of every other method with the same message,
// before anything else about the tensor is checked (the other method's
// config may not even be valid for this codec), and leaves `out` as it was.
// ---------------------------------------------------------------- fp8

/// Data over many binades: per block a magnitude from 2^-40 to 2^40, a zero
/// block, and values down in E4M3's subnormals of their block.
HeadTensor fp8_data(int64_t h, int64_t n, int64_t d, unsigned seed) {
  HeadTensor x = make_data(h, n, d, seed);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> exp(-40, 40);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t t = 0; t < n; ++t) {
      const float m = std::ldexp(1.0f, exp(gen));
      for (int64_t c = 0; c < d; ++c) x.at(i, t, c) *= (c % 7 == 0 ? 1e-4f : 1.0f) * m;
    }
  for (int64_t c = 0; c < 16; ++c) x.at(0, 0, c) = 0.0f;  // a zero block (B = 16)
  return x;
}

// Each value's error is at most half a step of E4M3 under its block's scale
// 2^e: max(2^-4 |x|, 2^-10 2^e); 2^e is the least power of two with the
// block's max |x| / 2^e <= 448 (a zero block: 1, codes zero); part sizes
// and bits per value are FORMAT.md's.
TEST(Fp8, ErrorWithinHalfAStepOfE4M3) {
  for (int block : {16, 32, 64, 128}) {
    const CodecConfig c = parse_codec_spec("fp8:block=" + std::to_string(block));
    const HeadTensor x = fp8_data(2, 37, 128, static_cast<unsigned>(block));
    const EncodedTensor e = make_codec(c)->encode(x);
    ASSERT_EQ(e.codes.size(), 2u * 37 * 128);
    ASSERT_EQ(e.scales.size(), 2u * 37 * 128 / block);
    EXPECT_DOUBLE_EQ(e.bits_per_value(), 8.0 + 8.0 / block);
    HeadTensor y;
    make_codec(c)->decode(e, y);
    for (int64_t r = 0; r < 2 * 37; ++r)
      for (int64_t b0 = 0; b0 < 128; b0 += block) {
        const int exponent = e.scales[static_cast<size_t>(r * (128 / block) + b0 / block)] - 127;
        float m = 0;
        for (int64_t j = b0; j < b0 + block; ++j) m = std::max(m, std::fabs(x.data[r * 128 + j]));
        if (m == 0) {
          EXPECT_EQ(exponent, 0);
        } else {
          EXPECT_LE(m, std::ldexp(448.0f, exponent)) << "row " << r << " block " << b0;
          EXPECT_GT(m, std::ldexp(224.0f, exponent)) << "row " << r << " block " << b0;  // the least
        }
        for (int64_t j = b0; j < b0 + block; ++j) {
          const double v = x.data[r * 128 + j], err = std::fabs(y.data[r * 128 + j] - v);
          EXPECT_LE(err, std::max(std::ldexp(std::fabs(v), -4), std::ldexp(1.0, exponent - 10)))
              << "B" << block << " row " << r << " channel " << j << ": " << v << " -> " << y.data[r * 128 + j];
        }
      }
  }
}

// The decode is a fixed point (decoded values are E4M3 times powers of two):
// encode -> decode -> encode -> decode gives the same floats; the bytes do
// not depend on the thread count; larger blocks, fewer bits, no less error.
TEST(Fp8, DecodeIsAFixedPointAndThreadIndependent) {
  const HeadTensor x = fp8_data(3, 65, 64, 11);
  const auto codec = make_codec("fp8");
  EncodeOptions one, many;
  one.threads = 1;
  many.threads = 3;
  const EncodedTensor e = codec->encode(x, one);
  EXPECT_EQ(codec->encode(x, many).codes, e.codes);
  EXPECT_EQ(codec->encode(x, many).scales, e.scales);
  HeadTensor y, z;
  codec->decode(e, y);
  codec->decode(codec->encode(y), z);
  EXPECT_EQ(y.data, z.data);
  const HeadTensor g = make_data(2, 64, 128, 3);
  double prev = 0;
  for (int block : {16, 32, 64, 128}) {
    const auto cb = make_codec("fp8:block=" + std::to_string(block));
    HeadTensor d;
    cb->decode(cb->encode(g), d);
    double err = 0;
    for (size_t i = 0; i < g.data.size(); ++i) err += (d.data[i] - g.data[i]) * double(d.data[i] - g.data[i]);
    EXPECT_GE(err, prev * 0.999) << block;
    prev = err;
  }
}

// Damaged parts are refused by the decoder (and check_encoded_tensor) naming
// the position: a NaN code, a NaN scale, a scale whose values could decode
// beyond the float range; inputs outside 2^-91 .. 2^127 are refused.
TEST(Fp8, BadInputsThrow) {
  const HeadTensor x = make_data(2, 5, 32, 1);
  const auto codec = make_codec("fp8:block=16");
  const EncodedTensor good = codec->encode(x);
  HeadTensor y;
  EncodedTensor e = good;
  e.codes[32 + 3] = 0xFF;
  expect_error([&] { codec->decode(e, y); }, "the code of channel 3 of token 1 of head 0 is NaN (E4M3 0xFF)");
  expect_error([&] { check_encoded_tensor(e); }, "is NaN (E4M3 0xFF)");
  e = good;
  e.scales[2 * 5 + 1] = 0xFF;
  expect_error([&] { codec->decode(e, y); }, "the scale of block 1 of token 0 of head 1 is NaN (E8M0 0xFF)");
  e.scales[2 * 5 + 1] = 127 + 120;
  expect_error([&] { codec->decode(e, y); }, "is 2^120, above 2^119");
  e = good;
  e.scales.pop_back();
  expect_error([&] { codec->decode(e, y); }, "part 'scales' has 19 bytes");
  HeadTensor big = x;
  big.data[7] = 0x1p127f * 1.5f;
  expect_error([&] { codec->encode(big); }, "above");
  HeadTensor small = x;
  for (float& v : small.data) v *= 0x1p-100f;
  expect_error([&] { codec->encode(small); }, "below");
  for (float& v : big.data) v = 0;
  big.data[0] = 0x1p127f;  // the top of the range: its decode is finite and exact
  codec->decode(codec->encode(big), y);
  EXPECT_EQ(y.data[0], 0x1p127f);
}

TEST(Codecs, EveryCodecRefusesATensorOfAnotherMethod) {
  const HeadTensor x = make_data(2, 64, 64, 5);
  const std::vector<std::string> specs = {"qvg:iters=1,centroids=16", "qvg-pro:iters=1,centroids=8", "rtn", "kivi",
                                          "quarot", "bf16", "fp8"};
  for (const std::string& made_by : specs) {
    const EncodedTensor e = make_codec(made_by)->encode(x);
    for (const std::string& spec : specs) {
      auto codec = make_codec(spec);
      if (codec->config().method == e.config.method) continue;  // qvg and qvg-pro share one
      HeadTensor y(1, 1, 1);
      y.data[0] = 7.0f;
      expect_error([&] { codec->decode(e, y); }, std::string("decoding a ") + method_name(e.config.method) +
                                                     " tensor with a " + method_name(codec->config().method) +
                                                     " codec");
      EXPECT_EQ(y.heads, 1);
      EXPECT_EQ(y.data[0], 7.0f) << made_by << " decoded by " << spec;
    }
  }
}

}  // namespace
}  // namespace qvg
