// QVG and RTN through the Codec interface: accounting, ordering, determinism,
// odd sizes, stability, bad input.
#include <gtest/gtest.h>

#include "error_util.h"

#include <cmath>
#include <cstring>
#include <random>

#include "qvg/codec.h"
#include "qvg/data.h"
#include "qvg/eval.h"
#include "qvg/half.h"
#include "qvg/fp8.h"
#include "qvg/kmeans.h"
#include "qvg/methods.h"
#include "qvg/qvg_steps.h"
#include "overflow_util.h"

namespace qvg {
namespace {

// Clustered data with a few outlier channels: tokens are drawn around
// `clusters` prototypes (as video tokens of one object look alike).
HeadTensor clustered(int64_t h, int64_t n, int64_t d, int clusters, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HeadTensor x(h, n, d);
  for (int64_t hh = 0; hh < h; ++hh) {
    std::vector<float> proto(static_cast<size_t>(clusters * d));
    for (auto& p : proto) p = nd(gen);
    for (int64_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(gen() % clusters);
      for (int64_t k = 0; k < d; ++k) {
        const float outlier = (k % 37 == 5) ? 8.0f : 1.0f;
        x.at(hh, i, k) = outlier * (proto[c * d + k] + 0.3f * nd(gen));
      }
    }
  }
  return x;
}

using test::error_of;

double mse(const HeadTensor& a, const HeadTensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.data.size(); ++i) s += std::pow(double(a.data[i]) - b.data[i], 2.0);
  return s / static_cast<double>(a.data.size());
}

struct Result {
  EncodedTensor enc;
  HeadTensor rec;
  double mse;
};

Result run(const std::string& spec, const HeadTensor& x, int threads = 0) {
  auto codec = make_codec(spec);
  EncodeOptions opt;
  opt.threads = threads;
  Result r{codec->encode(x, opt), {}, 0};
  codec->decode(r.enc, r.rec, threads);
  r.mse = mse(x, r.rec);
  return r;
}

TEST(QvgCodec, BufferSizesMatchTheFormula) {
  const HeadTensor x = clustered(2, 1000, 128, 30, 1);
  for (const char* spec : {"qvg", "qvg-pro", "qvg-int4", "qvg-pro-int4", "rtn", "rtn-int4",
                           "qvg:centroids=64,scale=fp16", "rtn:block=32,scale=fp16"}) {
    const auto r = run(spec, x);
    const CodecConfig c = parse_codec_spec(spec);
    EXPECT_NEAR(r.enc.bits_per_value(), qvg_bits_per_value_formula(c, x.tokens, x.dim), 1e-12) << spec;
    EXPECT_NEAR(r.enc.ratio_to_bf16(), 16.0 / r.enc.bits_per_value(), 1e-12);
    const PartBytes b = r.enc.bytes();
    const int s = c.method == Method::qvg ? c.stages : 0;
    EXPECT_EQ(b.codes, size_t(2 * 1000 * 128 * c.bits / 8));
    EXPECT_EQ(b.ids, size_t(s * 2 * 1000));
    EXPECT_EQ(b.centroids, size_t(s * 2 * (s ? span_config(c, x.tokens).kmeans.centroids : 0) * 128 * 2));
  }
  // The Self-Forcing span of docs/FORMAT.md ("QVG and RTN"): 2.30 bits, 6.97x smaller than BF16
  // (plus 32 bits per head for the FP32 span scale: 7e-6 bits per value).
  const CodecConfig q = parse_codec_spec("qvg");
  EXPECT_NEAR(qvg_bits_per_value_formula(q, 37440, 128), 2.0 + 0.125 + 0.0625 + 16.0 * 256 / 37440, 1e-5);
  EXPECT_NEAR(16.0 / qvg_bits_per_value_formula(q, 37440, 128), 6.97, 0.01);
}

TEST(QvgCodec, ErrorOrdering) {
  const HeadTensor x = clustered(2, 3000, 128, 60, 2);
  const double int2 = run("qvg:centroids=64", x).mse, int4 = run("qvg-int4:centroids=64", x).mse;
  const double s1 = run("qvg:block=16,centroids=64", x).mse, s4 = run("qvg-pro:centroids=64", x).mse;
  const double b64 = run("rtn", x).mse, b16 = run("rtn:block=16", x).mse;
  EXPECT_LT(int4, int2);
  EXPECT_LT(s4, s1);  // S=4 < S=1 at B=16
  EXPECT_LT(b16, b64);
  // QVG at C = 32 (2.36 bits at N = 3000) beats RTN with more bits (B16: 2.5 bits).
  const Result q = run("qvg:centroids=32", x), r16 = run("rtn:block=16", x);
  EXPECT_LT(q.enc.bits_per_value(), r16.enc.bits_per_value());
  EXPECT_LT(q.mse, r16.mse);
  // With C >= the number of clusters, smoothing removes the cluster structure.
  EXPECT_LT(int2 * 5, b64) << int2 << " vs " << b64;
}

TEST(QvgCodec, BeatsRtnOnVideoLikeDataAtEqualOrHigherCompression) {
  VideoLikeParams p;
  p.heads = 2;
  p.frames = 4;  // 6,240 tokens
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const HeadTensor x = make_video_like(p, role);
    // QVG with C = 64 stores 2.35 bits per value here; RTN at B = 16 stores 2.5.
    const Result q = run("qvg:centroids=64", x), r = run("rtn:block=16", x);
    EXPECT_LT(q.enc.bits_per_value(), r.enc.bits_per_value());
    EXPECT_LT(q.mse, r.mse) << (role == TensorRole::key ? "keys" : "values");
    // More stages and more bits keep helping on this data.
    EXPECT_LT(run("qvg-pro:centroids=64", x).mse, run("qvg:centroids=64,block=16", x).mse);
    EXPECT_LT(run("qvg-int4:centroids=64", x).mse, q.mse);
  }
}

TEST(QvgCodec, DeterministicForAnyThreadCount) {
  const HeadTensor x = clustered(5, 700, 64, 20, 3);
  for (const char* spec : {"qvg:centroids=32", "qvg-pro:centroids=16,init=random", "rtn"}) {
    const auto a = run(spec, x, 1), b = run(spec, x, 3), c = run(spec, x, 8);
    for (const Result* o : {&b, &c}) {
      EXPECT_EQ(a.enc.codes, o->enc.codes) << spec;
      EXPECT_EQ(a.enc.scales, o->enc.scales);
      EXPECT_EQ(a.enc.span_scales, o->enc.span_scales);
      EXPECT_EQ(a.enc.centroids, o->enc.centroids);
      EXPECT_EQ(a.enc.ids, o->enc.ids);
      EXPECT_EQ(a.rec.data, o->rec.data);
    }
  }
  const auto s1 = run("qvg:centroids=32,seed=1", x), s2 = run("qvg:centroids=32,seed=2", x);
  EXPECT_NE(s1.enc.centroids, s2.enc.centroids) << "the seed reaches k-means";
}

// Head-sharded encodes (config_for_heads): heads [first, first + n) of a
// tensor encoded alone store the bytes those heads have in the encoding of
// the whole tensor, part by part (the layouts of docs/FORMAT.md: per stage,
// then per head), for every start of k-means (random rows, k-means++) and
// with FP8 centroids; without the shift the seeds differ and so do the bytes.
TEST(QvgCodec, HeadShardsEqualTheSameHeadsOfTheWholeTensor) {
  constexpr int64_t kH = 6, kN = 500, kD = 64;
  const HeadTensor x = clustered(kH, kN, kD, 24, 17);
  auto heads_of = [&](int64_t first, int64_t n) {
    HeadTensor y(n, kN, kD);
    std::copy(x.head(first), x.head(first) + n * kN * kD, y.data.begin());
    return y;
  };
  // The bytes of heads [first, first + n) of a part laid out [S][H][per_head].
  auto slice = [](const std::vector<uint8_t>& part, int64_t stages, int64_t heads, int64_t first, int64_t n) {
    std::vector<uint8_t> out;
    if (part.empty()) return out;
    const int64_t per_head = static_cast<int64_t>(part.size()) / (stages * heads);
    for (int64_t s = 0; s < stages; ++s)
      out.insert(out.end(), part.begin() + (s * heads + first) * per_head,
                 part.begin() + (s * heads + first + n) * per_head);
    return out;
  };
  for (const std::string spec : {"qvg:centroids=32,init=random", "qvg-pro:centroids=8,iters=4",
                                 "qvg:centroids=16,centroid_format=fp8", "rtn"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const EncodedTensor whole = make_codec(c)->encode(x);
    const int64_t S = smoothing_stages(c);
    for (const auto& [first, n] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {5, 1}}) {
      const std::string what = spec + ", heads " + std::to_string(first) + "+" + std::to_string(n);
      const EncodedTensor part = make_codec(config_for_heads(c, first))->encode(heads_of(first, n));
      EXPECT_EQ(part.codes, slice(whole.codes, 1, kH, first, n)) << what;
      EXPECT_EQ(part.scales, slice(whole.scales, 1, kH, first, n)) << what;
      EXPECT_EQ(part.span_scales, slice(whole.span_scales, 1, kH, first, n)) << what;
      EXPECT_EQ(part.ids, slice(whole.ids, S, kH, first, n)) << what;
      if (c.centroid_format == CentroidFormat::fp8) {  // S·H·C·D codes, then S·H FP32 scales
        const int64_t codes = S * kH * c.kmeans.centroids * kD;
        const std::vector<uint8_t> cc(whole.centroids.begin(), whole.centroids.begin() + codes),
            cs(whole.centroids.begin() + codes, whole.centroids.end());
        std::vector<uint8_t> want = slice(cc, S, kH, first, n), scales = slice(cs, S, kH, first, n);
        want.insert(want.end(), scales.begin(), scales.end());
        EXPECT_EQ(part.centroids, want) << what;
      } else {
        EXPECT_EQ(part.centroids, slice(whole.centroids, S, kH, first, n)) << what;
      }
      if (S > 0 && first > 0)
        EXPECT_NE(make_codec(c)->encode(heads_of(first, n)).centroids, part.centroids)
            << what << ": the shift matters";
    }
    EXPECT_EQ(config_for_heads(c, 0).kmeans.seed, c.kmeans.seed);
  }
  EXPECT_EQ(config_for_heads(parse_codec_spec("kivi"), 3).kmeans.seed, parse_codec_spec("kivi").kmeans.seed)
      << "no k-means, no shift";
  EXPECT_THROW(config_for_heads(parse_codec_spec("qvg"), -1), Error);
}

TEST(QvgCodec, OddSizes) {
  for (int64_t n : {1, 7, 33, 4681}) {
    const HeadTensor x = clustered(3, n, 64, 5, static_cast<unsigned>(n));
    const int c = static_cast<int>(std::min<int64_t>(n, 16));
    for (const std::string& spec : std::vector<std::string>{"qvg:block=16,centroids=" + std::to_string(c),
                                   "qvg-pro:stages=2,centroids=" + std::to_string(c), "rtn:block=32",
                                   "rtn-int4:block=64"}) {
      const Result r = run(spec, x);
      ASSERT_TRUE(r.rec.same_shape(x));
      for (float v : r.rec.data) ASSERT_TRUE(std::isfinite(v));
      double energy = 0;
      for (float v : x.data) energy += double(v) * v;
      EXPECT_LT(r.mse, 0.5 * energy / x.data.size()) << spec << " n=" << n;
      if (n == 1 && spec.rfind("qvg", 0) == 0) EXPECT_LT(r.mse, 1e-4) << "one token = one centroid";
    }
  }
}

TEST(QvgCodec, EncodeDecodeEncodeIsStable) {
  // Given the same centroids and ids, re-encoding the reconstruction gives
  // the same codes and scales (the reconstruction is a fixed point). Codecs
  // of at most one stage only: with more, the later stages' points are
  // rounded to BF16 (docs/FORMAT.md, Encode 1), and the reconstruction minus
  // the first stage is not a BF16 value in general.
  const HeadTensor x = clustered(2, 500, 128, 12, 4);
  for (const char* spec : {"qvg:centroids=32", "qvg-int4:centroids=16", "rtn", "rtn-int4:scale=fp16",
                           "qvg:centroids=32,levels=midrise"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const Result a = run(spec, x);
    const EncodedTensor b = qvg_encode_given_centroids_ref(a.rec, c, a.enc.centroids, a.enc.ids);
    EXPECT_EQ(a.enc.codes, b.codes) << spec;
    EXPECT_EQ(a.enc.scales, b.scales) << spec;
    HeadTensor rec2;
    make_codec(c)->decode(b, rec2);
    for (size_t i = 0; i < rec2.data.size(); ++i)
      ASSERT_NEAR(rec2.data[i], a.rec.data[i], 1e-5f * (1 + std::fabs(a.rec.data[i]))) << spec;
  }
}

TEST(QvgCodec, GivenCentroidsReproduceEncode) {
  const HeadTensor x = clustered(3, 400, 64, 10, 5);
  const Result a = run("qvg-pro:centroids=16", x);
  const EncodedTensor b =
      qvg_encode_given_centroids_ref(x, parse_codec_spec("qvg-pro:centroids=16"), a.enc.centroids, a.enc.ids);
  EXPECT_EQ(a.enc.codes, b.codes);
  EXPECT_EQ(a.enc.scales, b.scales);
  EXPECT_EQ(a.enc.span_scales, b.span_scales);
}

// Stage 0 clusters X; stage s + 1 the BF16 points bf16(P_s - bf16(c_s)[ids])
// (docs/FORMAT.md, Encode 1), while the residual R that is finally quantized
// stays float. Redone here stage by stage with kmeans_ref: the same
// centroids and ids, and the codes quantize the float R.
TEST(QvgCodec, LaterStagesClusterBf16Points) {
  const HeadTensor x = clustered(2, 700, 64, 12, 8);
  const CodecConfig c = parse_codec_spec("qvg-pro:stages=3,centroids=16,iters=3");
  const EncodedTensor e = make_codec(c)->encode(x);
  const int64_t n = x.tokens, d = x.dim, cn = c.kmeans.centroids;
  auto centroid = [&](size_t i) {  // BF16 bits, little-endian
    return static_cast<uint16_t>(e.centroids[2 * i] | (e.centroids[2 * i + 1] << 8));
  };
  int64_t rounded_differs = 0;  // the rounding must matter somewhere, or the test shows nothing
  HeadTensor r(x.heads, n, d);    // the residual: the last stage's points minus its centroids, float
  for (int64_t h = 0; h < x.heads; ++h) {
    std::vector<float> pts(x.head(h), x.head(h) + n * d);
    for (int s = 0; s < c.stages; ++s) {
      KMeansParams kp = c.kmeans;
      kp.seed = qvg_kmeans_seed(c, s, h);
      const KMeansResult km = kmeans_ref(pts.data(), n, d, kp);
      const size_t cbase = static_cast<size_t>((s * x.heads + h) * cn * d);
      for (size_t k = 0; k < km.centroids.size(); ++k)
        ASSERT_EQ(centroid(cbase + k), bf16_from_float(km.centroids[k])) << "stage " << s << " head " << h;
      const uint8_t* ids = e.ids.data() + (s * x.heads + h) * n;
      ASSERT_TRUE(std::equal(km.ids.begin(), km.ids.end(), ids)) << "stage " << s << " head " << h;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < d; ++k) {
          const float v = pts[i * d + k] - bf16_to_float(centroid(cbase + static_cast<size_t>(ids[i] * d + k)));
          if (s + 1 == c.stages) {
            r.head(h)[i * d + k] = v;
          } else {
            rounded_differs += round_bf16(v) != v;
            pts[i * d + k] = round_bf16(v);
          }
        }
    }
  }
  EXPECT_GT(rounded_differs, 0);
  // Codes and scales: R group-quantized as RTN does (the same quantizer
  // without stages).
  CodecConfig rc = c;
  rc.method = Method::rtn;
  const EncodedTensor rq = make_codec(rc)->encode(r);
  EXPECT_EQ(rq.codes, e.codes);
  EXPECT_EQ(rq.scales, e.scales);
  EXPECT_EQ(rq.span_scales, e.span_scales);
  const EncodedTensor q = qvg_encode_given_centroids_ref(x, c, e.centroids, e.ids);
  EXPECT_EQ(q.codes, e.codes);
  EXPECT_EQ(q.scales, e.scales);
  EXPECT_EQ(q.span_scales, e.span_scales);
}

TEST(QvgCodec, WarmStartUsesPreviousCentroids) {
  const HeadTensor x = clustered(2, 2000, 64, 24, 6);
  const HeadTensor y = clustered(2, 2000, 64, 24, 6);  // same distribution, same seed -> same data
  auto codec = make_codec("qvg:centroids=24,iters=30");
  EncodeReport cold_rep, warm_rep;
  const EncodedTensor first = codec->encode(x, {}, &cold_rep);
  EncodeOptions opt;
  opt.warm_start = &first;
  codec->encode(y, opt, &warm_rep);
  int cold_it = 0, warm_it = 0;
  for (const auto& s : cold_rep.kmeans) cold_it += s.iterations;
  for (const auto& s : warm_rep.kmeans) {
    warm_it += s.iterations;
    EXPECT_TRUE(s.warm_started);
  }
  EXPECT_LT(warm_it, cold_it);
  // A mismatched warm start is an error, not garbage.
  const EncodedTensor other = make_codec("qvg:centroids=8")->encode(x);
  opt.warm_start = &other;
  EXPECT_THROW(codec->encode(y, opt), Error);
  // So is one whose centroids hold a BF16 infinity or NaN (a corrupted file).
  for (const uint16_t bits : {uint16_t{0x7F80}, uint16_t{0xFFC1}}) {
    EncodedTensor broken = first;
    broken.centroids[6] = static_cast<uint8_t>(bits & 0xFF);  // centroid 0, value 3 (little-endian BF16)
    broken.centroids[7] = static_cast<uint8_t>(bits >> 8);
    opt.warm_start = &broken;
    test::expect_encode_error([&] { codec->encode(y, opt); }, "warm-start centroid value 3 is not finite", "warm start with a non-finite centroid");
  }
}

// Finite inputs near FLT_MAX: x - c overflows float for clusters of mixed
// signs (3e38 - (-1e38)). The encoder says so instead of returning a tensor
// with an infinite span scale (which only the decoder rejected); inputs up to
// the stated safe bound, 2^(126 - S), encode and decode to finite values.
// An input near float's top is refused before k-means by the magnitude
// policy (check_magnitude: above 2^56), naming it; at the range's top the
// encode is finite. (Its residual-overflow check still guards the paths that
// skip the policy: DeviceCodec and hand-made centroids, below.)
TEST(QvgCodec, HugeInputIsRefusedAndTheRangesTopEncodes) {
  for (const std::string spec : {"qvg:centroids=2", "qvg-pro:centroids=2"}) {
    const auto codec = make_codec(spec);
    const HeadTensor hot = test::overflow_input(3.0e38f);
    test::expect_encode_error([&] { codec->encode(hot); }, "largest magnitude", spec);
    HeadTensor top = test::overflow_input(1.0f);
    float m = 0;
    for (float v : top.data) m = std::max(m, std::fabs(v));
    for (float& v : top.data) v *= std::ldexp(1.0f, 56) / m;  // largest magnitude exactly 2^56
    test::expect_finite_decode(codec->encode(top), spec);
  }
}

// Warm or given centroids are not bounded by the input (a file or a pickle
// can hold any bytes): an infinite warm-start or given centroid is an error
// naming the cause, not a tensor with an infinite span scale.
TEST(QvgCodec, InfiniteWarmOrGivenCentroidsAreErrors) {
  HeadTensor x(1, 8, 64);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = -1.0f - 0.01f * static_cast<float>(i % 7);
  const auto codec = make_codec("qvg:centroids=2,iters=0");
  EncodedTensor warm = codec->encode(x);
  for (size_t i = 0; i + 1 < warm.centroids.size(); i += 2) warm.centroids[i] = 0x80, warm.centroids[i + 1] = 0x7F;
  EncodeOptions opt;
  opt.warm_start = &warm;
  EXPECT_THROW(codec->encode(x, opt), Error);
  const CodecConfig c = parse_codec_spec("qvg:centroids=2");
  std::vector<uint8_t> cent(warm.centroids.size(), 0), ids(warm.ids.size(), 0);
  cent[1] = 0x7F, cent[0] = 0x80;  // value 0: +inf
  test::expect_encode_error([&] { qvg_encode_given_centroids_ref(x, c, cent, ids, TensorRole::key, 1); }, "not finite",
                            "an infinite given centroid");
}

TEST(QvgCodec, RejectsBadInput) {
  const HeadTensor x = clustered(1, 50, 64, 4, 7);
  EXPECT_THROW(run("qvg:centroids=256", x), Error);  // C = 256 > N = 50
  EXPECT_THROW(run("qvg:centroids=300", x), Error);   // C > 256
  EXPECT_THROW(run("rtn:block=48", x), Error);        // block not allowed
  EXPECT_THROW(run("rtn:block=128", x), Error);       // D = 64 not a multiple of 128
  EXPECT_THROW(run("rtn:bits=3", x), Error);
  EXPECT_THROW(make_codec("qvgg"), Error);
  EXPECT_THROW(make_codec("qvg:centroid=4"), Error);
  EXPECT_THROW(make_codec("qvg:centroids=four"), Error);
  EXPECT_THROW(make_codec("qvg:centroids"), Error);
  EXPECT_THROW(make_codec("qvg:seed=-1"), Error);  // wrapped to 2^64 - 1 (a fuzzing find)
  EXPECT_EQ(parse_codec_spec("qvg:seed=18446744073709551615").kmeans.seed, 18446744073709551615ull);
  HeadTensor empty(1, 0, 64);
  EXPECT_THROW(run("rtn", empty), Error);
  HeadTensor bad = x;
  bad.at(0, 3, 7) = NAN;
  try {
    run("rtn", bad);
    FAIL() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 3, channel 7"), std::string::npos) << e.what();
  }
  bad.at(0, 3, 7) = INFINITY;
  EXPECT_THROW(run("qvg:centroids=4", bad), Error);
  // Decoding damaged tensors.
  auto codec = make_codec("qvg:centroids=4");
  EncodedTensor e = codec->encode(x);
  HeadTensor out;
  EncodedTensor t = e;
  t.codes.pop_back();
  EXPECT_THROW(codec->decode(t, out), Error);
  t = e;
  t.ids[0] = 200;
  EXPECT_THROW(codec->decode(t, out), Error);
  t = e;
  t.span_scales.assign(4, 0xFF);  // NaN
  EXPECT_THROW(codec->decode(t, out), Error);
  for (const float bad_span : {0.0f, -1.0f, INFINITY}) {  // finite and positive only
    t = e;
    std::memcpy(t.span_scales.data(), &bad_span, 4);
    test::expect_encode_error([&] { codec->decode(t, out); }, "span scale of head 0", "span scale " + std::to_string(bad_span));
  }
  EXPECT_THROW(make_codec("rtn")->decode(e, out), Error);  // another method's tensor
  t = e;
  t.config.block = 0;  // a damaged config must not divide by zero
  EXPECT_THROW(codec->decode(t, out), Error);
  t = e;
  t.config.kmeans.centroids = 0;
  EXPECT_THROW(codec->decode(t, out), Error);
}

TEST(Evaluate, RowsForEveryMethodAndTensorWithAttentionError) {
  EvalInput in;
  in.name = "clustered";
  in.k = clustered(2, 600, 64, 8, 21);
  in.v = clustered(2, 600, 64, 8, 22);
  in.q = select_tokens(in.k, 32);
  std::vector<std::string> seen;
  EvalOptions opt;
  opt.threads = 2;
  opt.on_reconstruction = [&](const std::string& m, const std::string& t, const HeadTensor& x) {
    EXPECT_TRUE(x.same_shape(in.k));
    seen.push_back(m + "/" + t);
  };
  const auto rows = evaluate(in, {"bf16", "rtn", "qvg:centroids=16"}, opt);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(seen.size(), 6u);
  for (const auto& r : rows) {
    ASSERT_TRUE(r.attn_rel_l2.has_value());
    EXPECT_GE(*r.attn_rel_l2, 0.0);
  }
  // bf16 rounds K and V by <= 2^-9 relative, but the outlier channels make
  // the logits large (|q.k| / sqrt(D) in the tens), which amplifies it: ask
  // only for a tenth of RTN's attention error. Attention error follows the
  // K/V errors' order.
  EXPECT_LT(*rows[0].attn_rel_l2, 0.1 * *rows[2].attn_rel_l2);
  EXPECT_LT(*rows[4].attn_rel_l2, *rows[2].attn_rel_l2) << "qvg attention error below rtn's";
  EXPECT_NE(format_table(rows, "k").find("qvg:centroids=16"), std::string::npos);
}

TEST(Evaluate, RejectsBadInputBeforeWork) {
  EvalInput in;
  in.k = clustered(2, 100, 64, 4, 1);
  in.v = clustered(2, 99, 64, 4, 2);
  EXPECT_THROW(evaluate(in, {"rtn"}), Error);  // K/V shape mismatch
  in.v = clustered(2, 100, 64, 4, 2);
  EXPECT_THROW(evaluate(in, {"rtn", "nosuch"}), Error);
  EXPECT_THROW(evaluate(in, {}), Error);
  EXPECT_THROW(evaluate(in, {"rtn:block=128"}), Error);  // D = 64
  in.q = clustered(3, 10, 64, 4, 3);  // 3 query heads over 2 KV heads
  EXPECT_THROW(evaluate(in, {"rtn"}), Error);
  in.q.reset();
  in.v.at(1, 2, 3) = NAN;
  EXPECT_THROW(evaluate(in, {"rtn"}), Error);
}

TEST(ConfigSpec, PresetsAndOverrides) {
  const CodecConfig q = parse_codec_spec("qvg");
  EXPECT_EQ(q.bits, 2);
  EXPECT_EQ(q.block, 64);
  EXPECT_EQ(q.stages, 1);
  EXPECT_EQ(q.kmeans.centroids, 256);
  EXPECT_EQ(q.levels, LevelRule::symmetric);
  const CodecConfig p = parse_codec_spec("qvg-pro-int4:block=32,levels=midrise,init=random,tol=0.01");
  EXPECT_EQ(p.bits, 4);
  EXPECT_EQ(p.block, 32);
  EXPECT_EQ(p.stages, 4);
  EXPECT_EQ(p.levels, LevelRule::midrise);
  EXPECT_EQ(p.kmeans.init, KMeansInit::random);
  EXPECT_DOUBLE_EQ(p.kmeans.tol, 0.01);
  EXPECT_EQ(describe(parse_codec_spec("qvg-pro")), "INT2 B16 fp8 S4 Cauto(0.25 b)");  // C 256 on long spans
  for (const auto& name : codec_presets()) EXPECT_NO_THROW(parse_codec_spec(name)) << name;
  // The CLI's default comparison: bf16 and every preset with codes of at most 2 bits (not the INT4
  // variants, not fp8), in order.
  std::vector<std::string> two_bit;
  for (const auto& name : codec_presets())
    if (name == "bf16" || code_bits(parse_codec_spec(name)) <= 2) two_bit.push_back(name);
  EXPECT_EQ(comparison_presets(), two_bit);
  EXPECT_EQ(comparison_presets(), (std::vector<std::string>{"bf16", "rtn", "kivi", "quarot", "qvg", "qvg-pro"}));
  EXPECT_EQ(comparison_presets().front(), "bf16");
}

// A key given twice was taken silently (the last one won: qvg:bits=2,bits=4 was
// INT4; issue 27); it is now an error naming the key, whatever the values.
TEST(ConfigSpec, RepeatedKeyIsAnError) {
  for (const char* spec : {"qvg:bits=2,bits=4", "qvg:bits=4,bits=4", "rtn:bits=2,block=32,bits=4",
                           "qvg-pro:centroids=8,iters=3,centroids=8"}) {
    const std::string e = error_of([&] { parse_codec_spec(spec); });
    const std::string key = std::string(spec).find("centroids=8,") != std::string::npos ? "centroids" : "bits";
    EXPECT_NE(e.find("codec option '" + key + "' is given twice in '" + spec + "'"), std::string::npos)
        << spec << ": " << e;
  }
  EXPECT_EQ(parse_codec_spec("qvg:bits=4,block=32").bits, 4);  // distinct keys still combine
}

// codec_spec is parse_codec_spec's inverse on every field but the name: each
// preset, with overrides of every key, including a tol with no short decimal
// form and the largest seed.
TEST(ConfigSpec, CodecSpecRoundTrips) {
  std::vector<std::string> specs = codec_presets();
  specs.push_back("qvg-pro-int4:block=32,scale=fp16,levels=midrise,centroids=17,iters=3,tol=0.1,init=random");
  specs.push_back("qvg:tol=0.30000000000000004,seed=18446744073709551615,stages=0");
  specs.push_back("kivi-int4:group=16,residual=0");
  for (const std::string& spec : specs) {
    const CodecConfig a = parse_codec_spec(spec);
    const CodecConfig b = parse_codec_spec(codec_spec(a));
    SCOPED_TRACE(spec + " -> " + codec_spec(a));
    EXPECT_EQ(b.method, a.method);
    EXPECT_EQ(b.bits, a.bits);
    EXPECT_EQ(b.block, a.block);
    EXPECT_EQ(b.scale_format, a.scale_format);
    EXPECT_EQ(b.levels, a.levels);
    EXPECT_EQ(b.stages, a.stages);
    EXPECT_EQ(b.kmeans.centroids, a.kmeans.centroids);
    EXPECT_EQ(b.kmeans.max_iter, a.kmeans.max_iter);
    EXPECT_EQ(b.kmeans.tol, a.kmeans.tol);  // exactly: 17 significant digits
    EXPECT_EQ(b.kmeans.init, a.kmeans.init);
    EXPECT_EQ(b.kmeans.seed, a.kmeans.seed);
    EXPECT_EQ(b.group, a.group);
    EXPECT_EQ(b.residual, a.residual);
    EXPECT_EQ(codec_spec(b), codec_spec(a));
  }
}


// ---- the method table ------------------------------------------------------------------

TEST(MethodTable, RowsAreInEnumOrderAndNameKnownFields) {
  const auto& table = method_table();
  std::vector<std::string> keys;
  for (const CodecField& f : codec_fields()) keys.push_back(f.key);
  for (size_t i = 0; i < table.size(); ++i) {
    const MethodTraits& row = table[i];
    SCOPED_TRACE(row.name);
    EXPECT_EQ(static_cast<size_t>(row.method), i);
    EXPECT_EQ(method_from_name(row.name), row.method);
    EXPECT_STRNE(row.summary, "");
    EXPECT_NE(row.make_cpu, nullptr);
    EXPECT_NE(row.expected_bytes, nullptr);
    EXPECT_NE(row.describe, nullptr);
    EXPECT_NE(row.check_values, nullptr);
    // The GPU encoder writes the group-quantized format only, which the GPU decodes.
    if (row.device_encode) EXPECT_TRUE(row.group_quantized && row.device_decode);
    for (const std::string& k : row.fields) EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
    // The clustered flag and the smoothing stages say the same thing.
    CodecConfig c;
    c.method = row.method;
    EXPECT_EQ(row.clustered, smoothing_stages(c) > 0);
  }
  EXPECT_NE(error_of([] { method_from_name("nope"); }).find("qvg"), std::string::npos);
}

// The table's flags as the CPU code reads them: codebooks only where the
// method reads `code`; the uncompressed method has 16 code bits; the list of
// names that messages print.
TEST(MethodTable, FlagsAnswerForConfigs) {
  EXPECT_TRUE(uses_codebooks(parse_codec_spec("qvg:code=cq")));
  EXPECT_FALSE(uses_codebooks(parse_codec_spec("qvg")));
  CodecConfig rtn = parse_codec_spec("rtn");
  rtn.code = ResidualCode::codebook;  // a field rtn does not read
  EXPECT_FALSE(uses_codebooks(rtn));
  EXPECT_EQ(code_bits(parse_codec_spec("bf16")), 16.0);
  EXPECT_EQ(code_bits(parse_codec_spec("rtn-int4")), 4.0);
  EXPECT_EQ(method_names_where([](const MethodTraits& t) { return t.group_quantized; }), "rtn and qvg");
  EXPECT_EQ(code_bits(parse_codec_spec("fp8")), 8.0);
  EXPECT_EQ(code_bits(parse_codec_spec("qvg:code=cq,cq_dim=4,cq_codewords=256")), 2.0);
  EXPECT_EQ(method_names_where([](const MethodTraits& t) { return !t.group_quantized; }),
            "bf16, kivi, quarot and fp8");
  EXPECT_EQ(method_names_where([](const MethodTraits& t) { return t.uncompressed; }), "bf16");
}

// Every preset, both roles, an odd token count: the CPU encoding has exactly
// the bytes the table's expected_bytes says, part by part.
TEST(MethodTable, EncodingsHaveTheTableBytes) {
  const HeadTensor x = clustered(2, 301, 64, 8, 21);
  std::vector<std::string> specs = codec_presets();
  specs.push_back("qvg:centroid_format=fp8,centroids=16");
  specs.push_back("qvg-pro:centroid_format=fp8,centroids=16,scale=fp16");
  for (const std::string& spec : specs)
    for (TensorRole role : {TensorRole::key, TensorRole::value}) {
      SCOPED_TRACE(spec);
      CodecConfig c = parse_codec_spec(spec);
      c.kmeans.max_iter = 3;
      c = span_config(c, x.tokens);
      EncodeOptions opt;
      opt.role = role;
      const EncodedTensor e = make_codec(c)->encode(x, opt);
      const PartBytes got = e.bytes(), want = expected_part_bytes(c, role, x.heads, x.tokens, x.dim);
      for (const PartField& p : kPartFields) EXPECT_EQ(got.*(p.bytes), want.*(p.bytes)) << p.name;
      if (c.method == Method::qvg || c.method == Method::rtn)
        EXPECT_NEAR(e.bits_per_value(), qvg_bits_per_value_formula(c, x.tokens, x.dim), 1e-12);
    }
}

TEST(ConfigSpec, CanonicalSpecNamesOnlyTheMethodsFields) {
  EXPECT_EQ(codec_spec(parse_codec_spec("rtn")), "rtn:bits=2,block=64,scale=fp8,levels=symmetric");
  CodecConfig bf16 = parse_codec_spec("bf16");
  bf16.bits = 4;  // fields the method does not read (set in code; a spec refuses them)
  bf16.kmeans.centroids = 3;
  EXPECT_EQ(codec_spec(bf16), "bf16");
  EXPECT_EQ(codec_spec(parse_codec_spec("kivi-int4:residual=8")), "kivi:bits=4,group=32,residual=8");
  std::string diff;
  CodecConfig rtn = parse_codec_spec("rtn");
  rtn.kmeans.centroids = 7;
  rtn.stages = 3;
  EXPECT_TRUE(same_codec(parse_codec_spec("rtn"), rtn, &diff));
  EXPECT_FALSE(same_codec(parse_codec_spec("qvg"), parse_codec_spec("qvg:iters=9"), &diff));
  EXPECT_EQ(diff, "iters");
  EXPECT_FALSE(same_codec(parse_codec_spec("qvg"), parse_codec_spec("rtn"), &diff));
  EXPECT_EQ(diff, "method");
}

// A key the method does not read was accepted and did nothing (issue 41): each is
// refused, naming the key, the method and what it reads; the same keys work for
// the methods that read them.
TEST(ConfigSpec, KeysTheMethodDoesNotReadAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bf16:bits=2", "codec option 'bits' in 'bf16:bits=2' does nothing for method bf16 (it has no options)"},
      {"rtn:centroids=4",
       "codec option 'centroids' in 'rtn:centroids=4' does nothing for method rtn (it reads bits, block, scale, "
       "levels)"},
      {"quarot:group=32", "codec option 'group' in 'quarot:group=32' does nothing for method quarot (it reads bits)"},
      {"qvg:residual=4", "codec option 'residual' in 'qvg:residual=4' does nothing for method qvg (it reads bits, "
                         "block, scale, levels, stages, centroids, iters, tol, init, seed, centroid_format, "
                         "centroid_bits, code, cq_dim, cq_codewords)"},
      {"qvg:code=cq,bits=4", "codec option 'bits' in 'qvg:code=cq,bits=4' does nothing with code=cq (this config "
                             "reads stages, centroids, iters, tol, init, seed, centroid_format, centroid_bits, code, "
                             "cq_dim, cq_codewords)"},
      {"qvg:cq_dim=4", "codec option 'cq_dim' in 'qvg:cq_dim=4' does nothing with code=int"},
      {"kivi:block=16", "codec option 'block' in 'kivi:block=16' does nothing for method kivi (it reads bits, group, "
                        "residual)"},
      {"qvg-pro-int4:group=8", "does nothing for method qvg"},
  };
  for (const auto& c : cases) {  // (not a structured binding: clang 14 cannot capture one)
    const std::string got = error_of([&] { parse_codec_spec(c.first); });
    EXPECT_NE(got.find(c.second), std::string::npos) << c.first << ": " << got;
  }
  for (const char* ok : {"rtn:block=16", "kivi:group=16", "kivi:residual=4", "qvg:centroids=4", "quarot:bits=4"})
    EXPECT_NO_THROW(parse_codec_spec(ok)) << ok;
}

// An integer beyond int's range said only "needs an integer" (issue 41): the
// message gives the option's values.
TEST(ConfigSpec, IntegerOutOfRangeNamesTheRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"qvg:iters=99999999999", "codec option 'iters' needs an integer in 0..10000, got '99999999999'"},
      {"kivi:group=x", "codec option 'group' needs an integer in 1..4096, got 'x'"},
      {"kivi:residual=3000000000", "codec option 'residual' needs an integer in 0..2147483647, got '3000000000'"},
      {"rtn:bits=9999999999", "codec option 'bits' needs an integer of 2|4, got '9999999999'"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(error_of([&] { parse_codec_spec(c.first); }), c.second) << c.first;
  }
}

// ---- FP8 centroids (centroid_format=fp8) -------------------------------------------------

/// The centroids part of an fp8 encoding read back by hand (docs/FORMAT.md):
/// S*H*C*D E4M3 codes, then S*H FP32 scales.
std::vector<float> fp8_part_values(const EncodedTensor& e, float* top_octave) {
  const int64_t s = e.config.stages, c = e.config.kmeans.centroids, n = s * e.heads * c * e.dim;
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t sh = 0; sh < s * e.heads; ++sh) {
    float scale;
    std::memcpy(&scale, e.centroids.data() + n + 4 * sh, 4);
    int exp = 0;
    EXPECT_EQ(std::frexp(scale, &exp), 0.5f) << "scale " << scale << " is not a power of two";
    float amax = 0;
    for (int64_t i = sh * c * e.dim; i < (sh + 1) * c * e.dim; ++i) {
      const float code = fp8_e4m3_to_float(e.centroids[static_cast<size_t>(i)]);
      amax = std::max(amax, std::abs(code));
      out[static_cast<size_t>(i)] = code * scale;
    }
    // The least power of two that fits: halving it would put absmax above 448,
    // so the codes use the top octave of E4M3 (absmax code >= 224).
    if (amax < 224.0f) *top_octave = 0;
  }
  return out;
}

// An fp8 encoding is a BF16-centroid encoding whose centroids are the FP8
// values times their scale: the same codes, scales and ids as the reference
// encode given those centroids, and the same decoded bits.
TEST(QvgCodec, Fp8CentroidsAreTheBf16FormatWithDequantizedCentroids) {
  const HeadTensor x = clustered(3, 700, 64, 20, 5);
  for (const char* spec : {"qvg:centroid_format=fp8,centroids=32", "qvg-pro:centroid_format=fp8,centroids=32"}) {
    SCOPED_TRACE(spec);
    const Result r8 = run(spec, x);
    float top_octave = 1;
    const std::vector<float> vals = fp8_part_values(r8.enc, &top_octave);
    EXPECT_EQ(top_octave, 1.0f) << "a centroid scale is larger than needed";
    CodecConfig c16 = parse_codec_spec(spec);
    c16.centroid_format = CentroidFormat::bf16;
    std::vector<uint8_t> cents16(vals.size() * 2);
    for (size_t i = 0; i < vals.size(); ++i) {
      const uint16_t b = bf16_from_float(vals[i]);
      ASSERT_EQ(bf16_to_float(b), vals[i]) << "FP8 times a power of two is a BF16 value";
      cents16[2 * i] = static_cast<uint8_t>(b);
      cents16[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
    const EncodedTensor e16 = qvg_encode_given_centroids_ref(x, c16, cents16, r8.enc.ids);
    EXPECT_EQ(e16.codes, r8.enc.codes);
    EXPECT_EQ(e16.scales, r8.enc.scales);
    EXPECT_EQ(e16.span_scales, r8.enc.span_scales);
    HeadTensor rec16;
    make_codec(c16)->decode(e16, rec16, 1);
    EXPECT_EQ(rec16.data, r8.rec.data);
    // FP8 centroids cost little accuracy: within 10 % of BF16 centroids' MSE
    // (the residual is quantized after the FP8 rounding, so it absorbs most of it).
    const double m16 = run(codec_spec(c16), x).mse;
    EXPECT_LT(r8.mse, 1.10 * m16) << r8.mse << " vs " << m16;
    EXPECT_LT(r8.enc.bits_per_value(), run(codec_spec(c16), x).enc.bits_per_value());
  }
}

TEST(QvgCodec, Fp8CentroidsRejectedWhereUnsupported) {
  const HeadTensor x = clustered(1, 64, 64, 4, 6);
  const CodecConfig c = parse_codec_spec("qvg:centroid_format=fp8,centroids=8");
  EXPECT_NE(error_of([&] { qvg_encode_given_centroids_ref(x, c, {}, {}); }).find("centroid_format=bf16"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_codec_spec("qvg:centroid_format=fp4"); }).find("centroid_format"),
            std::string::npos);
  // A NaN code in the centroids part is a decode error, not NaN output.
  Result r = run("qvg:centroid_format=fp8,centroids=8", x);
  r.enc.centroids[3] = 0x7F;
  HeadTensor out;
  EXPECT_NE(error_of([&] { make_codec("qvg:centroid_format=fp8,centroids=8")->decode(r.enc, out, 1); }).find("NaN"),
            std::string::npos);
}

}  // namespace
}  // namespace qvg
