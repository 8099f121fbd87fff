// qvg's codebook residual code (code=cq): index packing on odd sizes, the
// decode against a direct computation from the parts, the encoder's choice
// (nearest stored codeword, token scales), exact bytes against
// expected_part_bytes and the bits formula, the spec (existing specs
// unchanged), cache-file and encoded-tensor checks, bad input, who encodes it for CUDA
// (the CPU reference), quality ordering and the budget rule's family.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "error_util.h"
#include "qvg/budget.h"
#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/data.h"
#include "qvg/fp8.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#include "qvg/metrics.h"
#include "qvg/qvg_steps.h"
#include "qvg/video.h"
#include "reference/cq_code.h"
#include "util/cq_arith.h"
#include "util/rng.h"

namespace qvg {
namespace {

using test::error_of;

HeadTensor normal_tensor(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed) {
  HeadTensor x(heads, tokens, dim);
  SplitMix64 rng(seed);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < tokens; ++i) {
      const double token_scale = 0.25 + 2.0 * static_cast<double>(i % 7) / 7.0;  // uneven token RMS
      for (int64_t q = 0; q < dim; ++q)
        x.head(h)[i * dim + q] =
            static_cast<float>(rng.normal() * token_scale * (1.0 + 0.1 * static_cast<double>(q % 5)));
    }
  return x;
}

float f32(const std::vector<uint8_t>& b, size_t i) {
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

// ---- packing -------------------------------------------------------------------------

TEST(CqPack, RoundTripsEveryWidthOnOddSizes) {
  SplitMix64 rng(7);
  for (int b = 1; b <= 8; ++b)
    for (int64_t n : {1, 7, 31, 33, 65}) {
      std::vector<uint8_t> idx(static_cast<size_t>(n)), back(static_cast<size_t>(n));
      for (auto& v : idx) v = static_cast<uint8_t>(rng.next() & ((1u << b) - 1));
      std::vector<uint8_t> packed(static_cast<size_t>((n * b + 7) / 8), 0xAB);
      cq_pack_indices_ref(idx.data(), n, b, packed.data());
      cq_unpack_indices_ref(packed.data(), n, b, back.data());
      EXPECT_EQ(idx, back) << "b = " << b << ", n = " << n;
      // Bit j*b+t of the row is bit t of index j, LSB first; the unused high bits are 0.
      for (int64_t j = 0; j < n; ++j)
        for (int t = 0; t < b; ++t) {
          const int64_t bit = j * b + t;
          EXPECT_EQ((packed[bit / 8] >> (bit % 8)) & 1, (idx[j] >> t) & 1);
        }
      if ((n * b) % 8) EXPECT_EQ(packed.back() >> ((n * b) % 8), 0);
    }
}

TEST(CqPack, TwoBitIndicesPackLikeInt2Codes) {
  const uint8_t idx[4] = {1, 2, 3, 0};
  uint8_t out = 0;
  cq_pack_indices_ref(idx, 4, 2, &out);
  EXPECT_EQ(out, 0x39);  // 01 | 10 << 2 | 11 << 4 | 00 << 6
}

// ---- decode and encode against direct computations -------------------------------------

struct Case {
  std::string spec;
  int64_t heads, tokens, dim;
};

const Case kCases[] = {
    {"qvg:code=cq,stages=0", 2, 37, 16},
    {"qvg:code=cq,cq_dim=1,cq_codewords=4,stages=0", 1, 9, 8},
    {"qvg:code=cq,cq_dim=4,cq_codewords=8,centroids=4", 2, 40, 24},  // 6 indices of 3 bits: 18 bits, 3 bytes a row
    {"qvg:code=cq,cq_dim=8,cq_codewords=32,centroid_format=fp8,centroids=3", 1, 50, 16},
    {"qvg:code=cq,cq_codewords=256,centroids=2,stages=2", 1, 300, 8},
    {"qvg:code=cq,cq_codewords=16,centroids=1", 1, 5, 8},  // fewer tokens than codewords
};

TEST(CqCodec, DecodeEqualsTheDirectComputationFromTheParts) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.spec);
    const CodecConfig c = parse_codec_spec(k.spec);
    const HeadTensor x = normal_tensor(k.heads, k.tokens, k.dim, 11);
    const auto codec = make_codec(c);
    const EncodedTensor e = codec->encode(x);
    HeadTensor y;
    codec->decode(e, y);
    // Direct: the residual part from the parts' bytes, then each stage's centroid (BF16 or FP8 * scale).
    const int64_t g = c.cq_dim, kw = c.cq_codewords, d = k.dim, n = k.tokens, groups = d / g;
    const int b = static_cast<int>(std::log2(kw));
    const int64_t row = (groups * b + 7) / 8;
    const bool fp8 = c.centroid_format == CentroidFormat::fp8;
    const int64_t S = c.stages, C = S > 0 ? std::min<int64_t>(c.kmeans.centroids, n) : 0;
    const size_t stage_bytes = static_cast<size_t>(S * k.heads * C * d * (fp8 ? 1 : 2) + (fp8 ? S * k.heads * 4 : 0));
    auto codeword = [&](int64_t h, int64_t j, int64_t w, int64_t t) -> float {
      const size_t q = static_cast<size_t>(((h * groups + j) * kw + w) * g + t);
      if (!fp8) return bf16_to_float(static_cast<uint16_t>(e.centroids[stage_bytes + 2 * q] |
                                                           (e.centroids[stage_bytes + 2 * q + 1] << 8)));
      const float scale = f32(e.centroids, (stage_bytes + static_cast<size_t>(k.heads * d * kw)) / 4 + h);
      return fp8_e4m3_to_float(e.centroids[stage_bytes + q]) * scale;
    };
    auto centroid = [&](int64_t s, int64_t h, int64_t id, int64_t q) -> float {
      const size_t at = static_cast<size_t>(((s * k.heads + h) * C + id) * d + q);
      if (!fp8) return bf16_to_float(static_cast<uint16_t>(e.centroids[2 * at] | (e.centroids[2 * at + 1] << 8)));
      const size_t scale_at = static_cast<size_t>(S * k.heads * C * d) / 4 + static_cast<size_t>(s * k.heads + h);
      return fp8_e4m3_to_float(e.centroids[at]) * f32(e.centroids, scale_at);
    };
    for (int64_t h = 0; h < k.heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const float s = fp8_e4m3_to_float(e.scales[static_cast<size_t>(h * n + i)]) * f32(e.span_scales, h);
        const uint8_t* r = e.codes.data() + (h * n + i) * row;
        for (int64_t j = 0; j < groups; ++j) {
          int w = 0;
          for (int t = 0; t < b; ++t) w |= ((r[(j * b + t) / 8] >> ((j * b + t) % 8)) & 1) << t;
          for (int64_t t = 0; t < g; ++t) {
            float want = s * codeword(h, j, w, t);
            for (int64_t st = S - 1; st >= 0; --st)
              want += centroid(st, h, e.ids[static_cast<size_t>((st * k.heads + h) * n + i)], j * g + t);
            ASSERT_EQ(y.head(h)[i * d + j * g + t], want) << "head " << h << " token " << i << " channel " << j * g + t;
          }
        }
      }
  }
}

TEST(CqCodec, EncoderStoresTokenRmsAndTheNearestStoredCodeword) {
  const CodecConfig c = parse_codec_spec("qvg:code=cq,cq_dim=2,cq_codewords=8,stages=0");
  const int64_t n = 45, d = 16, groups = d / 2;
  const HeadTensor x = normal_tensor(1, n, d, 3);
  const EncodedTensor e = make_codec(c)->encode(x);
  double most = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) sq += static_cast<double>(x.data[i * d + q]) * x.data[i * d + q];
    most = std::max(most, std::sqrt(sq / d));
  }
  const float span = f32(e.span_scales, 0);
  EXPECT_EQ(span, static_cast<float>(most) / 448.0f);
  const std::vector<float> books = cq_head_codebooks(e, 0);
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) sq += static_cast<double>(x.data[i * d + q]) * x.data[i * d + q];
    const uint8_t code = e.scales[i];
    EXPECT_EQ(code, fp8_e4m3_from_float(static_cast<float>(std::sqrt(sq / d)) / span));
    const float s = fp8_e4m3_to_float(code) * span;
    uint8_t idx[8];
    cq_unpack_indices_ref(e.codes.data() + i * 3, groups, 3, idx);
    for (int64_t j = 0; j < groups; ++j) {
      const float u0 = x.data[i * d + 2 * j] / s, u1 = x.data[i * d + 2 * j + 1] / s;
      auto dist = [&](int w) {
        const double a = u0 - books[(j * 8 + w) * 2], bb = u1 - books[(j * 8 + w) * 2 + 1];
        return a * a + bb * bb;
      };
      for (int w = 0; w < 8; ++w)
        EXPECT_LE(dist(idx[j]), dist(w) * (1 + 1e-5) + 1e-9) << "token " << i << " group " << j;
    }
  }
}

TEST(CqCodec, DeterministicAndThreadIndependent) {
  const CodecConfig c = parse_codec_spec("qvg:code=cq,centroids=8");
  const HeadTensor x = normal_tensor(3, 200, 32, 5);
  EncodeOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const EncodedTensor a = make_codec(c)->encode(x, one), b = make_codec(c)->encode(x, two);
  for (const PartField& p : kPartFields) EXPECT_TRUE(a.*(p.data) == b.*(p.data)) << p.name;
  // Heads encoded on their own (config_for_heads) store those heads of the whole encoding.
  HeadTensor last(1, x.tokens, x.dim);
  std::copy_n(x.head(2), x.tokens * x.dim, last.data.begin());
  const EncodedTensor e2 = make_codec(config_for_heads(c, 2))->encode(last, one);
  const int64_t row = cq_row_bytes(c, x.dim);
  EXPECT_TRUE(std::equal(e2.codes.begin(), e2.codes.end(), a.codes.begin() + 2 * x.tokens * row));
}

TEST(CqCodec, ZerosAndSingleTokensDecodeExactly) {
  for (const char* spec : {"qvg:code=cq,stages=0", "qvg:code=cq,centroids=1",
                           "qvg:code=cq,cq_dim=8,cq_codewords=256,centroid_format=fp8"}) {
    SCOPED_TRACE(spec);
    const auto codec = make_codec(spec);
    HeadTensor zeros(2, 5, 16), y;
    codec->decode(codec->encode(zeros), y);
    for (float v : y.data) ASSERT_EQ(v, 0.0f);
    HeadTensor one(1, 1, 16);  // one token: its own centroid (S = 1) or its own codewords
    for (int q = 0; q < 16; ++q) one.data[q] = static_cast<float>(q % 3) - 1.0f;
    codec->decode(codec->encode(one), y);
    EXPECT_LT(compare(one, y).mse, 0.05);
  }
}

// ---- bytes -----------------------------------------------------------------------------

TEST(CqBytes, EveryPartMatchesExpectedBytesAndTheFormula) {
  for (const Case& k : kCases)
    for (const char* format : {"bf16", "fp8"}) {
      const std::string spec = k.spec.find("centroid_format") == std::string::npos
                                    ? k.spec + ",centroid_format=" + format
                                    : k.spec;
      SCOPED_TRACE(spec);
      const CodecConfig c = parse_codec_spec(spec);
      const HeadTensor x = normal_tensor(k.heads, k.tokens, k.dim, 2);
      const EncodedTensor e = make_codec(c)->encode(x);
      const PartBytes want = expected_part_bytes(e.config, TensorRole::key, k.heads, k.tokens, k.dim);
      const PartBytes got = e.bytes();
      for (const PartField& p : kPartFields) EXPECT_EQ(got.*(p.bytes), want.*(p.bytes)) << p.name;
      // By hand: indices, one FP8 scale a token, a span scale a head, stage centroids, codebooks.
      const int64_t H = k.heads, N = k.tokens, D = k.dim, G = c.cq_dim, K = c.cq_codewords;
      const int64_t S = c.stages, C = S > 0 ? std::min<int64_t>(c.kmeans.centroids, N) : 0;
      const int64_t vb = c.centroid_format == CentroidFormat::fp8 ? 1 : 2;
      EXPECT_EQ(got.codes, static_cast<size_t>(H * N * ((D / G * static_cast<int64_t>(std::log2(K)) + 7) / 8)));
      EXPECT_EQ(got.scales, static_cast<size_t>(H * N));
      EXPECT_EQ(got.span_scales, static_cast<size_t>(H * 4));
      EXPECT_EQ(got.centroids, static_cast<size_t>(S * H * C * D * vb + (vb == 1 ? S * H * 4 : 0) + H * D * K * vb +
                                                   (vb == 1 ? H * 4 : 0)));
      EXPECT_EQ(got.ids, static_cast<size_t>(S * H * N));
      EXPECT_EQ(got.zero_points + got.full_precision, 0u);
      EXPECT_NEAR(e.bits_per_value(), qvg_bits_per_value_formula(e.config, N, D), 1e-9);
    }
}

TEST(CqBytes, TheDemoSpanCosts) {
  // 768 tokens, D = 128, S = 1, C = 12 FP8 centroids, G = 2, K = 8: 1.5 + 8/128 + 8/128 + 12*8/768 + K*8/768
  // + 32 * 3 / (768 * 128) (span, centroid and codebook scales).
  const CodecConfig c = parse_codec_spec("qvg:code=cq,cq_dim=2,cq_codewords=8,centroids=12,centroid_format=fp8");
  const double want = 1.5 + 0.0625 + 0.0625 + 0.125 + 8.0 * 8 / 768 + 96.0 / (768 * 128);
  EXPECT_NEAR(span_bits_per_value(c, 768, 128), want, 1e-12);
}

// ---- specs -----------------------------------------------------------------------------

TEST(CqSpec, ExistingSpecsAreUnchangedAndCqRoundTrips) {
  EXPECT_EQ(codec_spec(parse_codec_spec("qvg")),
            "qvg:bits=2,block=64,scale=fp8,levels=symmetric,stages=1,centroids=auto,iters=10,tol=0.0001,"
            "init=d2-rounds,seed=1234,centroid_format=bf16,centroid_bits=0.25");
  EXPECT_EQ(codec_spec(parse_codec_spec("qvg:code=int")), codec_spec(parse_codec_spec("qvg")));
  const CodecConfig c = parse_codec_spec("qvg:code=cq,cq_dim=4,cq_codewords=64,centroid_format=fp8");
  const std::string spec = codec_spec(c);
  EXPECT_EQ(spec, "qvg:stages=1,centroids=auto,iters=10,tol=0.0001,init=d2-rounds,seed=1234,centroid_format=fp8,"
                  "centroid_bits=0.25,code=cq,cq_dim=4,cq_codewords=64");
  EXPECT_TRUE(same_codec(parse_codec_spec(spec), c));
  std::string diff;
  EXPECT_FALSE(same_codec(parse_codec_spec("qvg"), parse_codec_spec("qvg:code=cq"), &diff));
  EXPECT_EQ(diff, "code");
  EXPECT_FALSE(same_codec(c, parse_codec_spec("qvg:code=cq,cq_dim=4,centroid_format=fp8"), &diff));
  EXPECT_EQ(diff, "cq_codewords");
  EXPECT_EQ(describe(parse_codec_spec("qvg:code=cq,centroids=12,centroid_format=fp8")), "CQ G2 K16 S1 C12 fp8c");
  EXPECT_FALSE(reads_field(c, "bits"));
  EXPECT_TRUE(reads_field(parse_codec_spec("qvg"), "bits"));
  EXPECT_FALSE(reads_field(parse_codec_spec("qvg"), "cq_dim"));
  EXPECT_DOUBLE_EQ(code_bits(c), 1.5);
}

TEST(CqSpec, BadValuesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"qvg:code=pq", "codec option 'code' must be int or cq, got 'pq'"},
      {"qvg:code=cq,cq_dim=3", "cq_dim must be 1, 2, 4 or 8, got 3"},
      {"qvg:code=cq,cq_codewords=12", "cq_codewords must be a power of two 2..256, got 12"},
      {"qvg:code=cq,cq_codewords=512", "cq_codewords must be a power of two 2..256, got 512"},
      {"qvg:code=cq,cq_codewords=1", "cq_codewords must be a power of two 2..256, got 1"},
      {"rtn:code=cq", "does nothing for method rtn"},
  };
  for (const auto& c : cases) {
    const std::string got = error_of([&] { validate(parse_codec_spec(c.first), 128); });
    EXPECT_NE(got.find(c.second), std::string::npos) << c.first << ": " << got;
  }
  EXPECT_NE(error_of([&] { validate(parse_codec_spec("qvg:code=cq,cq_dim=8"), 20); })
                .find("head dim 20 is not a multiple of cq_dim 8"),
            std::string::npos);
}

// ---- damaged tensors, CUDA ----------------------------------------------------------------

TEST(CqChecks, DamagedPartsAreRefused) {
  const HeadTensor x = normal_tensor(2, 40, 16, 9);
  for (const char* spec : {"qvg:code=cq,centroids=4", "qvg:code=cq,centroids=4,centroid_format=fp8"}) {
    SCOPED_TRACE(spec);
    const auto codec = make_codec(parse_codec_spec(spec));
    const EncodedTensor e = codec->encode(x);
    EXPECT_NO_THROW(check_encoded_tensor(e));
    HeadTensor y;
    EncodedTensor short_codes = e;
    short_codes.codes.pop_back();
    EXPECT_NE(error_of([&] { codec->decode(short_codes, y); }).find("part 'codes' has"), std::string::npos);
    EncodedTensor nan_scale = e;
    nan_scale.scales[5] = 0x7F;
    EXPECT_NE(error_of([&] { check_encoded_tensor(nan_scale); }).find("part 'scales' holds NaN"), std::string::npos);
    EncodedTensor bad_book = e;
    const bool fp8 = e.config.centroid_format == CentroidFormat::fp8;
    const size_t book = e.centroids.size() - cq_codebook_bytes(e.config, 2, 16);
    if (fp8) {
      bad_book.centroids[book + 3] = 0xFF;  // NaN code
      EncodedTensor bad_scale = e;
      const float zero = 0;
      std::memcpy(bad_scale.centroids.data() + e.centroids.size() - 4, &zero, 4);  // head 1's codebook scale
      EXPECT_NE(error_of([&] { codec->decode(bad_scale, y); }).find("FP8 codebook scale of head 1 is 0"),
                std::string::npos);
    } else {
      bad_book.centroids[book + 7] = 0x7F;  // BF16 0x7F80 or above: infinity or NaN
      bad_book.centroids[book + 6] = 0xC0;
    }
    EXPECT_NE(error_of([&] { check_encoded_tensor(bad_book); }).find("non-finite codeword value at head 0"),
              std::string::npos);
  }
}

// cq_assign_ref (codewords transposed, vectorized) picks what cq_sq_dist's
// direct loop picks, with its distance bit for bit; the codebook k-means
// returns BF16 values, is deterministic, and finds well-separated clusters.
TEST(CqCodec, AssignAndCodebookKMeansFollowTheirRules) {
  SplitMix64 rng(9);
  for (int g : {1, 2, 4, 8}) {
    const int k = 37, n = 513;
    std::vector<float> u(static_cast<size_t>(n * g)), book(static_cast<size_t>(k * g));
    for (float& v : u) v = static_cast<float>(rng.normal());
    for (float& v : book) v = round_bf16(static_cast<float>(rng.normal()));
    std::copy_n(book.begin(), g, book.begin() + 5 * g);  // a tie: codeword 0 wins
    std::vector<uint8_t> idx(static_cast<size_t>(n));
    std::vector<float> dist(static_cast<size_t>(n));
    cq_assign_ref(u.data(), n, g, book.data(), k, idx.data(), dist.data());
    for (int i = 0; i < n; ++i) {
      int arg = 0;
      float best = cq_sq_dist(u.data() + i * g, book.data(), g);
      for (int w = 1; w < k; ++w) {
        const float dw = cq_sq_dist(u.data() + i * g, book.data() + w * g, g);
        if (dw < best) best = dw, arg = w;
      }
      ASSERT_EQ(idx[i], arg) << "g " << g << " point " << i;
      ASSERT_EQ(std::memcmp(&dist[i], &best, 4), 0) << "g " << g << " point " << i;
      ASSERT_NE(idx[i], 5);
    }
    // Four clusters far apart: four codewords land on their means.
    std::vector<float> x(static_cast<size_t>(400 * g));
    for (int i = 0; i < 400; ++i)
      for (int t = 0; t < g; ++t)
        x[i * g + t] = static_cast<float>(10.0 * (i % 4) + 0.01 * rng.normal());
    std::vector<float> b1(static_cast<size_t>(4 * g)), b2(b1.size());
    cq_train_codebook_ref(x.data(), 400, g, 4, 20, 0.0, 7, b1.data());
    cq_train_codebook_ref(x.data(), 400, g, 4, 20, 0.0, 7, b2.data());
    EXPECT_TRUE(b1 == b2);
    std::vector<int> seen(4, 0);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(b1[w * g], round_bf16(b1[w * g]));
      const int cl = static_cast<int>(std::lround(b1[w * g] / 10.0f));
      ASSERT_TRUE(cl >= 0 && cl < 4) << b1[w * g];
      ++seen[cl];
    }
    EXPECT_EQ(seen, std::vector<int>(4, 1)) << "g " << g;
  }
}

TEST(CqChecks, TheCpuReferenceEncodesTheCodeForCuda) {
  EXPECT_TRUE(device_encodes(parse_codec_spec("qvg:code=cq")));
  EXPECT_TRUE(device_encodes(parse_codec_spec("qvg:code=cq,centroid_format=fp8,stages=0")));
  EXPECT_TRUE(device_encodes(parse_codec_spec("qvg")));
  EXPECT_TRUE(device_encodes(parse_codec_spec("rtn")));
  EXPECT_FALSE(device_encodes(parse_codec_spec("kivi")));
}

TEST(CqChecks, HostileMagnitudesFollowTheKMeansRange) {
  const MagnitudeRange r = encodable_magnitudes(parse_codec_spec("qvg:code=cq,stages=0"));
  EXPECT_EQ(r.lo, std::ldexp(1.0, -60));
  EXPECT_EQ(r.hi, std::ldexp(1.0, 56));
  // Scaling the input by a power of two inside it scales the decode exactly.
  const auto codec = make_codec(parse_codec_spec("qvg:code=cq,stages=0"));
  HeadTensor x = normal_tensor(1, 30, 8, 4), big = x;
  for (auto& v : big.data) v = std::ldexp(v, 40);
  HeadTensor y, yb;
  codec->decode(codec->encode(x), y);
  codec->decode(codec->encode(big), yb);
  for (size_t i = 0; i < y.data.size(); ++i) ASSERT_EQ(std::ldexp(y.data[i], 40), yb.data[i]);
}

// ---- the cache ----------------------------------------------------------------------------

TEST(CqCache, FileRoundTripIsBitExactAndResumes) {
  VideoLikeParams p;
  p.frames = 8;
  p.height = 6;
  p.width = 8;
  p.heads = 2;
  p.dim = 32;
  p.threads = 1;
  const HeadTensor k = make_video_like(p, TensorRole::key), v = make_video_like(p, TensorRole::value);
  const int64_t tpc = 48;
  CacheConfig cfg;
  cfg.layers = 1;
  cfg.heads = 2;
  cfg.dim = 32;
  cfg.key = parse_codec_spec("qvg:code=cq,centroids=8,iters=3,centroid_format=fp8");
  cfg.value = parse_codec_spec("qvg:code=cq,cq_dim=4,cq_codewords=32,centroids=6,iters=3");
  cfg.policy.quant_factor = 2;
  auto chunk = [&](const HeadTensor& x, int64_t c) {
    HeadTensor out(2, tpc, 32);
    for (int64_t h = 0; h < 2; ++h) std::copy_n(x.head(h) + c * tpc * 32, tpc * 32, out.head(h));
    return out;
  };
  StreamingKVCache full(cfg, CacheOptions{1}), part(cfg, CacheOptions{1});
  for (int64_t c = 0; c < 8; ++c) full.append(0, chunk(k, c), chunk(v, c));
  for (int64_t c = 0; c < 5; ++c) part.append(0, chunk(k, c), chunk(v, c));
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "qvg_test_cq.qvgc").string();
  part.save(path);
  StreamingKVCache loaded = StreamingKVCache::load(path, cfg, CacheOptions{1});
  EXPECT_EQ(loaded.read(0).k.data, part.read(0).k.data);
  EXPECT_EQ(loaded.read(0).v.data, part.read(0).v.data);
  for (int64_t c = 5; c < 8; ++c) loaded.append(0, chunk(k, c), chunk(v, c));
  EXPECT_EQ(loaded.read(0).k.data, full.read(0).k.data);
  EXPECT_EQ(loaded.read(0).v.data, full.read(0).v.data);
  const std::string p2 = path + ".2", p3 = path + ".3";
  loaded.save(p2);
  full.save(p3);
  auto bytes = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(p2), bytes(p3));
  for (const auto& f : {path, p2, p3}) std::filesystem::remove(f);
}

// ---- quality and the budget ---------------------------------------------------------------

TEST(CqQuality, BeatsInt2AtEqualBitsAndMoreCodewordsLessError) {
  if (!video_support()) GTEST_SKIP() << "built without FFmpeg (the clip's frames are read through it)";
  ClipKVParams p;
  p.frames = 2;
  p.heads = 2;
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const HeadTensor x = make_clip_kv(p, role);
    auto err = [&](const std::string& spec) {
      const auto codec = make_codec(spec);
      HeadTensor y;
      const EncodedTensor e = codec->encode(x);
      codec->decode(e, y);
      return std::make_pair(compare(x, y).mse, e.bits_per_value());
    };
    const auto int2 = err("qvg:centroids=48,levels=midrise");
    const auto int2s = err("qvg:centroids=48");
    const auto cq = err("qvg:code=cq,centroids=48");
    EXPECT_LE(cq.second, int2.second + 0.03);
    EXPECT_LT(cq.first, 0.75 * std::min(int2.first, int2s.first));
    const auto k4 = err("qvg:code=cq,cq_codewords=4,centroids=48");
    const auto k64 = err("qvg:code=cq,cq_codewords=64,centroids=48");
    EXPECT_LT(cq.first, k4.first);
    EXPECT_LT(k64.first, cq.first);
  }
}

TEST(CqBudget, TheFamilyStaysWithinTheBudgetAndIntStaysInt) {
  const CodecConfig cq = parse_codec_spec("qvg:code=cq");
  EXPECT_EQ(budget_fields_of(cq), (std::vector<std::string>{"stages", "centroids", "cq_dim", "cq_codewords"}));
  EXPECT_EQ(budget_fields_of(parse_codec_spec("qvg")),
            (std::vector<std::string>{"bits", "block", "stages", "centroids"}));
  for (double budget : {1.5, 2.0, 2.5}) {
    const BudgetChoice c = choose_for_budget_any_format(cq, budget, 768, 128);
    ASSERT_TRUE(c.reachable) << budget;
    EXPECT_EQ(c.config.code, ResidualCode::codebook);
    EXPECT_LE(c.bits, budget * 1.03);
    EXPECT_LE(span_bits_per_value(c.config, 768, 128), budget * 1.03);
    const BudgetChoice i = choose_for_budget_any_format(parse_codec_spec("qvg"), budget, 768, 128);
    EXPECT_EQ(i.config.code, ResidualCode::integer);
  }
}

}  // namespace
}  // namespace qvg
