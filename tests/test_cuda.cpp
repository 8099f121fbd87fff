// CUDA backend against the CPU reference (label "gpu"; skipped where no
// device is usable). Byte-identical encodes given the same ids, bit-identical
// decodes, GPU k-means equal to the CPU's on inputs without near-ties.
#include <gtest/gtest.h>

#include "gpu_util.h"
#include "overflow_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/data.h"
#include "qvg/fixed_sum.h"
#include "qvg/fp8.h"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "qvg/metrics.h"
#include "qvg/qvg_steps.h"
#include "qvg/rope.h"
#if QVG_WITH_CUDA
#include "cuda/qvg_cuda.h"
#endif

namespace qvg {
namespace {

// Well separated blobs (no near-ties in the assignment) with noise.
HeadTensor blobs(int64_t h, int64_t n, int64_t d, int k, unsigned seed, float spread = 0.05f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HeadTensor x(h, n, d);
  for (int64_t hh = 0; hh < h; ++hh) {
    std::vector<float> c(static_cast<size_t>(k * d));
    for (auto& v : c) v = 3.0f * nd(gen);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = static_cast<int64_t>(gen() % k);
      for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) = c[j * d + q] + spread * nd(gen);
    }
  }
  return x;
}

void expect_same_parts(const EncodedTensor& a, const EncodedTensor& b, const std::string& what) {
  EXPECT_EQ(a.codes, b.codes) << what;
  EXPECT_EQ(a.scales, b.scales) << what;
  EXPECT_EQ(a.span_scales, b.span_scales) << what;
  EXPECT_EQ(a.centroids, b.centroids) << what;
  EXPECT_EQ(a.ids, b.ids) << what;
}

TEST(Cuda, ReportsAvailability) {
  std::string why;
  const bool ok = cuda_available(&why);
  if (!ok) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(make_cuda_codec(parse_codec_spec("qvg")), Error);
  }
}

TEST(Cuda, QuantizeGivenCentroidsIsByteIdentical) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 7, 33, 4681})
      for (const std::string spec : {"rtn", "rtn-int4:block=16", "rtn:scale=fp16,block=32", "qvg:centroids=4",
                                     "qvg-pro:centroids=4", "qvg-int4:centroids=4,levels=midrise",
                                     "qvg:centroids=4,scale=fp16,block=128", "rtn:levels=midrise,block=64",
                                     "qvg-pro:stages=6,centroids=4"}) {  // 6: the untiled kernels
        const CodecConfig c = parse_codec_spec(spec);
        if (d % c.block) continue;
        if (c.method == Method::qvg && n < c.kmeans.centroids) continue;
        HeadTensor x = blobs(3, n, d, 5, static_cast<unsigned>(n + d), 1.0f);
        x.at(0, 0, 0) = 1e4f;  // one huge value: span scale keeps the rest in range
        if (n > 3) for (int64_t q = 0; q < d; ++q) x.at(1, 2, q) = 0.0f;  // a zero row
        const EncodedTensor ref = make_codec(c)->encode(x);
        const EncodedTensor gpu = cuda_qvg_encode_given_centroids(x, c, ref.centroids, ref.ids);
        expect_same_parts(ref, gpu, spec + " d=" + std::to_string(d) + " n=" + std::to_string(n));
      }
}

// Values at and next to the rounding boundaries of the quantizer (x / s +
// h at half-integers, and within 2^-24 .. 2^-10 of them on both sides):
// the GPU's fast quantizer (quantize16) must give quantize_value's codes, by
// its own rounding or by redoing the unit. Each block of 16 holds a 1, its
// largest magnitude (so s = 1 / L up to the scale's rounding), and 15
// values x = (k + 1/2 - h) / L + delta within [-1, 1]; INT2 and INT4, both
// level rules, FP8 and FP16 scales.
TEST(Cuda, QuantizeAtRoundingBoundariesIsByteIdentical) {
  REQUIRE_GPU();
  const float deltas[] = {0.0f, 0x1p-24f, -0x1p-24f, 0x1p-20f, -0x1p-20f, 0x1p-16f, -0x1p-16f,
                          0x1p-14f, -0x1p-14f, 0x1p-12f, -0x1p-12f, 0x1p-10f, -0x1p-10f};
  for (const std::string spec : {"rtn:block=16", "rtn-int4:block=16", "rtn:levels=midrise,block=16",
                                 "rtn-int4:levels=midrise,block=16", "rtn-int4:block=16,scale=fp16"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const bool sym = c.levels == LevelRule::symmetric;
    const float lmax = sym ? static_cast<float>((1 << (c.bits - 1)) - 1) : 0.5f * static_cast<float>((1 << c.bits) - 1);
    const float h = sym ? 0.0f : lmax;
    const int codes = 1 << c.bits;
    HeadTensor x(2, 80, 64);
    std::mt19937 gen(static_cast<unsigned>(c.bits * 3 + (sym ? 0 : 1)));
    for (int64_t hh = 0; hh < x.heads; ++hh)
      for (int64_t n = 0; n < x.tokens; ++n)
        for (int64_t k = 0; k < x.dim; ++k) {
          if (k % 16 == 0) {
            x.at(hh, n, k) = (n + k) % 2 ? 1.0f : -1.0f;
            continue;
          }
          const int step = static_cast<int>(gen() % (codes + 2)) - 1 - (sym ? codes / 2 : 0);
          const float v = (static_cast<float>(step) + 0.5f - h) / lmax + deltas[gen() % 13];
          x.at(hh, n, k) = std::fmin(std::fmax(v, -1.0f), 1.0f);
        }
    expect_same_parts(make_codec(c)->encode(x), make_codec(c, Backend::cuda)->encode(x), spec);
  }
}

// Block scales at every FP8 E4M3 value and at every midpoint between two
// neighbours (the ties of round-to-nearest-even), subnormal to 448, and
// just beside them: the GPU's scale encode (the hardware conversion) must
// store the CPU's bytes. INT2 symmetric (L = 1) with one block of maximum
// 448 makes the span 1, so a block's scale is its maximum exactly; INT4
// and FP16 scales take the division path.
TEST(Cuda, BlockScalesAtFp8TiesAreByteIdentical) {
  REQUIRE_GPU();
  std::vector<float> maxima;
  for (int c = 1; c < 0x7F; ++c) {
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(c)), next = fp8_e4m3_to_float(static_cast<uint8_t>(c + 1));
    maxima.push_back(v);
    if (c + 1 < 0x7F) {
      const float mid = 0.5f * (v + next);  // exact: one more bit than E4M3 has
      for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) maxima.push_back(m);
    }
  }
  maxima.push_back(0.5f * fp8_e4m3_to_float(1));  // half the smallest subnormal: a tie with 0
  // (Nothing above 448: the largest block scale sets the span, so that r =
  // scale / span never exceeds 448 by more than a rounding.)
  const int64_t blocks = static_cast<int64_t>(maxima.size()) + 1;
  HeadTensor x(1, (blocks + 3) / 4, 64);  // four blocks of 16 a row
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t b = 0; b < x.tokens * 4; ++b) {
    const float m = b == 0 ? 448.0f : b <= static_cast<int64_t>(maxima.size()) ? maxima[b - 1] : 0.0f;
    for (int k = 0; k < 16; ++k) x.data[b * 16 + k] = k == 5 ? m : m * u(gen);
  }
  for (const std::string spec : {"rtn:block=16", "rtn-int4:block=16", "rtn:block=16,scale=fp16"}) {
    const CodecConfig c = parse_codec_spec(spec);
    expect_same_parts(make_codec(c)->encode(x), make_codec(c, Backend::cuda)->encode(x), spec);
  }
}

#if QVG_WITH_CUDA
// Device code encodes FP8 with the hardware conversion (fp8_e4m3_from_float's
// device branch): it must give the rule's byte (the specification, the CPU's
// encoding) for every float. On the device, all 2^32 bit patterns against the
// rule run there; then the device encode of every 251st pattern and of the
// edge values against the host rule (so a device build of the rule that went
// wrong with the hardware would not pass unnoticed).
TEST(Cuda, Fp8HardwareEncodeEqualsRuleOnEveryFloat) {
  REQUIRE_GPU();
  uint32_t first = 0;
  EXPECT_EQ(cuda::fp8_e4m3_rule_mismatches(&first, nullptr), 0u) << "lowest differing bits 0x" << std::hex << first;
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) {
    const uint32_t b = static_cast<uint32_t>(u);
    float v;
    std::memcpy(&v, &b, 4);
    x.push_back(v);
  }
  for (int c = 0; c < 0x7F; ++c) {  // every midpoint and its neighbours, both signs
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const float mid = 0.5f * (v + (c + 1 < 0x7F ? fp8_e4m3_to_float(static_cast<uint8_t>(c + 1)) : 480.0f));
    for (float m : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      x.push_back(m);
      x.push_back(-m);
    }
  }
  for (float m : {INFINITY, -INFINITY, NAN, -NAN, 464.0f, 465.0f, 1e30f, 0.0009765625f, 0.00097656256f})
    x.push_back(m);
  cuda::DeviceBuffer<float> xd;
  xd.upload(x.data(), x.size());
  cuda::DeviceBuffer<uint8_t> yd(x.size());
  cuda::fp8_e4m3_encode(xd.get(), static_cast<int64_t>(x.size()), yd.get(), nullptr);
  std::vector<uint8_t> y(x.size());
  yd.download(y.data(), y.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (y[i] != fp8_e4m3_from_float_rule(x[i]) && wrong++ < 5)
      ADD_FAILURE() << "x = " << x[i] << ": device " << int(y[i]) << ", rule " << int(fp8_e4m3_from_float_rule(x[i]));
  EXPECT_EQ(wrong, 0) << "of " << x.size();
}
#endif

// The GPU encode takes the quantizer's span scale from its last k-means
// assignment (max |x - bf16(c)| found in the same pass) instead of a separate
// pass: its bytes must equal quantizing its own centroids and ids on the CPU
// (the reference), for one stage, four and six (where the later stages
// cluster BF16 points and the last stage's final assignment finds max |R| on
// them), INT2 and INT4, bf16 input and float.
TEST(Cuda, EncodeEqualsQuantizingItsOwnCentroids) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (const std::string spec : {"qvg:centroids=16,init=random,iters=3", "qvg-pro:centroids=8,init=random,iters=2",
                                   "qvg-int4:centroids=8,init=random", "qvg-pro-int4:centroids=4,init=random,iters=2",
                                   "qvg-pro:stages=6,centroids=4,init=random,iters=2"}) {
      const CodecConfig c = parse_codec_spec(spec);
      HeadTensor x = blobs(3, 1500, d, 12, static_cast<unsigned>(d), 0.8f);
      x.at(2, 9, 1) = -50.0f;  // an outlier that sets one head's span scale
      const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x);
      const EncodedTensor ref = qvg_encode_given_centroids_ref(x, c, gpu.centroids, gpu.ids);
      expect_same_parts(ref, gpu, spec + " d=" + std::to_string(d));
    }
}

TEST(Cuda, DecodeIsBitIdentical) {
  REQUIRE_GPU();
  const HeadTensor x = blobs(4, 777, 128, 9, 3, 0.7f);
  for (const std::string spec : {"rtn", "rtn-int4", "qvg:centroids=16", "qvg-pro:centroids=16",
                                 "qvg-pro-int4:centroids=8,levels=midrise,scale=fp16",
                                 "qvg-pro:stages=6,centroids=8",  // 6 stages: past the tile kernel's 4
                                 "qvg:centroids=16,centroid_format=fp8",
                                 "qvg-pro-int4:centroids=8,scale=fp16,centroid_format=fp8",
                                 "qvg-pro:stages=6,centroids=8,centroid_format=fp8"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const EncodedTensor e = make_codec(c)->encode(x);
    HeadTensor cpu, gpu;
    make_codec(c)->decode(e, cpu);
    make_codec(c, Backend::cuda)->decode(e, gpu);
    ASSERT_EQ(cpu.data.size(), gpu.data.size());
    EXPECT_EQ(0, std::memcmp(cpu.data.data(), gpu.data.data(), cpu.data.size() * 4)) << spec << ": float decode";
    const std::vector<uint16_t> b = cuda_decode_bf16(e);
    size_t mismatches = 0;
    for (size_t i = 0; i < b.size(); ++i) mismatches += b[i] != bf16_from_float(cpu.data[i]);
    EXPECT_EQ(mismatches, 0u) << spec << ": bf16 decode equals the CPU decode rounded to bf16";
  }
}

#if QVG_WITH_CUDA
// DeviceBuffer outside pool mode only grows (a smaller resize keeps the
// allocation: no cudaFree, which synchronizes the device, for scratch that
// alternates between shapes); in pool mode every size is its own allocation.
TEST(Cuda, DeviceBufferScratchOnlyGrows) {
  REQUIRE_GPU();
  cuda::DeviceBuffer<float> b(100);
  float* const first = b.get();
  b.resize(50);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(b.size(), 50u);
  EXPECT_EQ(b.bytes(), 200u);
  EXPECT_EQ(b.capacity_bytes(), 400u);
  b.resize(100);
  EXPECT_EQ(b.get(), first) << "back within the capacity";
  b.resize(300);
  EXPECT_EQ(b.size(), 300u);
  EXPECT_EQ(b.capacity_bytes(), 1200u);
  std::vector<float> host(300, 1.5f), back(300);
  b.upload(host.data(), host.size());
  b.download(back.data(), back.size());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(back, host) << "the grown allocation holds all 300";
  b.resize(0);
  EXPECT_EQ(b.get(), nullptr);
  EXPECT_EQ(b.capacity_bytes(), 0u);
  cuda::DeviceBuffer<float> pooled;
  pooled.use_pool(nullptr);
  pooled.resize(100);
  pooled.resize(50);
  EXPECT_EQ(pooled.capacity_bytes(), 200u) << "pool mode: exact allocations";
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}
#endif

// The CPU reference's overflow case (test_codecs: finite inputs near
// FLT_MAX whose residual overflows float) is an encode error on the GPU too,
// not a tensor with an infinite span scale; at the safe bound the GPU encode
// decodes to finite values.
// The host-form CUDA codec follows the magnitude policy (check_magnitude):
// an input near float's top is refused naming its largest magnitude, and
// the range's top (2^56) encodes to a finite decode; code=cq's encode
// (its residual's RMS in double, the span scale from their max) as well.
TEST(Cuda, HugeInputIsRefusedAndTheRangesTopEncodes) {
  REQUIRE_GPU();
  for (const std::string spec :
       {"qvg:centroids=2,init=random", "qvg-pro:centroids=2,init=random", "qvg:centroids=2,init=random,code=cq"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const auto gpu = make_codec(c, Backend::cuda);
    const HeadTensor hot = test::overflow_input(3.0e38f);
    test::expect_encode_error([&] { gpu->encode(hot); }, "largest magnitude", spec);
    HeadTensor top = test::overflow_input(1.0f);
    float m = 0;
    for (float v : top.data) m = std::max(m, std::fabs(v));
    for (float& v : top.data) v *= std::ldexp(1.0f, 56) / m;
    test::expect_finite_decode(gpu->encode(top), spec);
  }
}

#if QVG_WITH_CUDA
using cuda::DecodeKernel;
/// cuda_decode_bf16 with the chosen decode kernel (the codecs run
/// `automatic`); the parts are checked on upload as the codecs check them.
std::vector<uint16_t> decode_bf16_with(const EncodedTensor& e, DecodeKernel k) {
  const cuda::QvgShape sh = cuda::make_shape(e.config, e.heads, e.tokens, e.dim);
  cuda::DeviceParts parts;
  cuda::upload_parts(e, sh, parts, nullptr);
  cuda::DeviceBuffer<uint16_t> out(static_cast<size_t>(e.values()));
  cuda::decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr, k);
  std::vector<uint16_t> host(static_cast<size_t>(e.values()));
  out.download(host.data(), host.size());
  QVG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return host;
}
#else
enum class DecodeKernel { lines, vals16 };
std::vector<uint16_t> decode_bf16_with(const EncodedTensor& e, DecodeKernel) { return cuda_decode_bf16(e); }
#endif
const DecodeKernel kDecodeKernels[] = {DecodeKernel::lines, DecodeKernel::vals16};

// Every decode kernel gives the same bits (rows kernel: tails where the
// rows do not fill the last warp; lines kernel: runs of rows cut short; D =
// 64 and 128, INT2 and INT4, FP8 and FP16 scales, both level rules, 0 to 4
// stages).
TEST(Cuda, DecodeKernelsAgree) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 5, 777, 776})  // 3 x 776: the lines kernel's aligned id runs; the rest unaligned
      for (const std::string spec :
           {"rtn", "rtn-int4:block=16", "qvg:centroids=1", "qvg-pro-int4:centroids=1", "qvg:centroids=4",
            "qvg-pro:centroids=4,block=32", "rtn:scale=fp16,block=32", "qvg-int4:centroids=4,levels=midrise",
            "qvg-pro:centroids=4,scale=fp16,levels=midrise", "qvg-pro:centroids=4,stages=2",
            "qvg-pro-int4:centroids=4,stages=3", "qvg:centroids=4,centroid_format=fp8",
            "qvg-pro:centroids=4,stages=3,levels=midrise,centroid_format=fp8",
            "qvg-pro-int4:centroids=1,scale=fp16,centroid_format=fp8"}) {
        const CodecConfig c = parse_codec_spec(spec);
        if (c.method == Method::qvg && c.kmeans.centroids > n) continue;  // more centroids than tokens: an error
        const HeadTensor x = blobs(3, n, d, 3, static_cast<unsigned>(n), 0.7f);
        const EncodedTensor e = make_codec(c)->encode(x);
        HeadTensor cpu;
        make_codec(e.config)->decode(e, cpu);
        for (DecodeKernel k : kDecodeKernels) {
          const std::vector<uint16_t> b = decode_bf16_with(e, k);
          size_t mismatches = 0;
          for (size_t i = 0; i < b.size(); ++i) mismatches += b[i] != bf16_from_float(cpu.data[i]);
          EXPECT_EQ(mismatches, 0u) << spec << " d=" << d << " n=" << n << " kernel " << static_cast<int>(k);
        }
      }
}

// Damaged tensors are errors on the GPU as on the CPU, before any kernel
// reads them: a centroid id not below C (the kernels would read past the
// tables), a span scale that is NaN, infinite, zero or negative; for the
// codec's decode and cuda_decode_bf16 alike.
TEST(Cuda, DamagedTensorsAreDecodeErrors) {
  REQUIRE_GPU();
  const CodecConfig c = parse_codec_spec("qvg-pro:centroids=4,iters=2");
  const EncodedTensor e = make_codec(c)->encode(blobs(2, 64, 128, 4, 3, 0.5f));
  auto gpu = make_codec(c, Backend::cuda);
  auto both = [&](const EncodedTensor& t, const std::string& phrase, const std::string& what) {
    HeadTensor out;
    test::expect_encode_error([&] { make_codec(c)->decode(t, out); }, phrase, "CPU: " + what);
    test::expect_encode_error([&] { gpu->decode(t, out); }, phrase, "GPU: " + what);
    test::expect_encode_error([&] { cuda_decode_bf16(t); }, phrase, "cuda_decode_bf16: " + what);
    for (DecodeKernel k : kDecodeKernels)
      test::expect_encode_error([&] { decode_bf16_with(t, k); }, phrase, "decode kernel: " + what);
  };
  EncodedTensor t = e;
  t.ids[t.ids.size() - 1] = 4;  // the last stage's last token
  both(t, "out of range (C = 4)", "id 4");
  t = e;
  t.ids[0] = 255;
  both(t, "out of range (C = 4)", "id 255");
  for (const float bad : {NAN, INFINITY, 0.0f, -2.0f}) {
    t = e;
    std::memcpy(t.span_scales.data() + 4, &bad, 4);  // head 1
    both(t, "span scale of head 1", "span scale " + std::to_string(bad));
  }
}

// Every stored block-scale code decodes as on the CPU, in every kernel: the
// 256 FP8 E4M3 codes (subnormals, both zeros, the NaNs) and the 65536 FP16
// codes (subnormals, infinities, NaNs), one a block, with and without
// stages. The decode kernels convert them in hardware, the CPU in software;
// a NaN scale decodes to NaN either way (its payload is not part of the
// result: any NaN matches).
TEST(Cuda, DecodeOfEveryScaleCode) {
  REQUIRE_GPU();
  auto is_nan = [](uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0; };
  for (const std::string spec : {"rtn:block=16", "qvg-pro:centroids=4,block=16", "rtn:block=16,scale=fp16",
                                 "qvg:centroids=4,block=16,scale=fp16,levels=midrise"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const bool fp8 = c.scale_format == ScaleFormat::fp8;
    const int64_t codes = fp8 ? 256 : 65536, d = 128, n = codes / (d / 16);  // one code a block
    const HeadTensor x = blobs(1, n, d, 4, 11, 0.8f);
    EncodedTensor e = make_codec(c)->encode(x);
    ASSERT_EQ(e.scales.size(), static_cast<size_t>(codes * (fp8 ? 1 : 2))) << spec;
    for (int64_t i = 0; i < codes; ++i) {
      if (fp8) {
        e.scales[i] = static_cast<uint8_t>(i);
      } else {
        e.scales[2 * i] = static_cast<uint8_t>(i & 0xFF);  // little-endian FP16 bits
        e.scales[2 * i + 1] = static_cast<uint8_t>(i >> 8);
      }
    }
    HeadTensor cpu;
    make_codec(e.config)->decode(e, cpu);
    for (DecodeKernel k : kDecodeKernels) {
      const std::vector<uint16_t> b = decode_bf16_with(e, k);
      size_t mismatches = 0, nans = 0;
      for (size_t i = 0; i < b.size(); ++i) {
        const uint16_t want = bf16_from_float(cpu.data[i]);
        nans += is_nan(want);
        mismatches += is_nan(want) ? !is_nan(b[i]) : b[i] != want;
      }
      EXPECT_EQ(mismatches, 0u) << spec << " kernel " << static_cast<int>(k);
      EXPECT_GT(nans, 0u) << spec << ": the NaN codes should decode to NaN";
    }
  }
}

#if QVG_WITH_CUDA
// A token range decoded into a larger destination (the streaming cache's
// read): the lines, tile and vals16 kernels write the whole-tensor decode's rows of
// the range at the destination's rows and nothing else (long and short
// ranges, 1 and 4 stages).
TEST(Cuda, DecodeOfARangeWritesOnlyItsRows) {
  REQUIRE_GPU();
  for (const std::string spec : {"rtn", "qvg:centroids=8,init=random", "qvg-pro:centroids=8,init=random,iters=2"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const HeadTensor x = blobs(3, 3000, 128, 6, 5, 0.6f);  // ranges from a multiple of 4: aligned id runs
    const cuda::QvgShape sh = cuda::make_shape(c, x.heads, x.tokens, x.dim);
    cuda::GpuKMeansOptions km;
    km.params = c.kmeans;
    cuda::DeviceBuffer<float> xd;
    xd.upload(x.data.data(), x.data.size());
    cuda::Encoder enc;
    cuda::DeviceParts parts;
    enc.encode(xd.get(), DeviceElement::f32, sh, km, parts, nullptr);
    cuda::DeviceBuffer<uint16_t> whole_d(x.data.size());
    cuda::decode(sh, parts.view(), whole_d.get(), DeviceElement::bf16, nullptr);
    std::vector<uint16_t> whole(x.data.size());
    whole_d.download(whole.data(), whole.size());
    for (const cuda::DecodeRange r : {cuda::DecodeRange{17, 2900, 3100, 150}, cuda::DecodeRange{1000, 7, 20, 3},
                                      cuda::DecodeRange{16, 2901, 3000, 99}})
      for (const DecodeKernel k : kDecodeKernels) {
        cuda::DeviceBuffer<uint16_t> out(static_cast<size_t>(x.heads * r.out_tokens * x.dim));
        QVG_CUDA_CHECK(cudaMemset(out.get(), 0xA5, out.bytes()));
        cuda::decode_range(sh, parts.view(), r, out.get(), DeviceElement::bf16, nullptr, k);
        std::vector<uint16_t> got(out.bytes() / 2);
        out.download(got.data(), got.size());
        size_t wrong = 0, touched = 0;
        for (int64_t h = 0; h < x.heads; ++h)
          for (int64_t t = 0; t < r.out_tokens; ++t) {
            const bool in = t >= r.out_offset && t < r.out_offset + r.count;
            for (int64_t j = 0; j < x.dim; ++j) {
              const uint16_t v = got[(h * r.out_tokens + t) * x.dim + j];
              if (in)
                wrong += v != whole[(h * x.tokens + r.begin + t - r.out_offset) * x.dim + j];
              else
                touched += v != 0xA5A5;
            }
          }
        const std::string what = spec + " range " + std::to_string(r.begin) + "+" + std::to_string(r.count) +
                                 " kernel " + std::to_string(static_cast<int>(k));
        EXPECT_EQ(wrong, 0u) << what << ": rows differ from the whole decode's";
        EXPECT_EQ(touched, 0u) << what << ": rows outside the range were written";
      }
  }
}

// 16-bit inputs are clustered and quantized as they are (no float copy):
// the same bytes as encoding their exact float values.
TEST(Cuda, HalfInputsEncodeLikeTheirFloatValues) {
  REQUIRE_GPU();
  for (const std::string spec : {"rtn", "qvg:centroids=16,init=random", "qvg-pro:centroids=8,init=random,iters=3",
                                 "qvg:centroids=8,iters=2"})  // the last: a k-means++ start
    for (const bool bf16 : {true, false}) {
      const CodecConfig c = parse_codec_spec(spec);
      HeadTensor x = blobs(3, 999, 128, 12, 11, 0.5f);
      std::vector<uint16_t> h(x.data.size());
      for (size_t i = 0; i < h.size(); ++i) {
        h[i] = bf16 ? bf16_from_float(x.data[i]) : fp16_from_float(x.data[i]);
        x.data[i] = bf16 ? bf16_to_float(h[i]) : fp16_to_float(h[i]);
      }
      const cuda::QvgShape sh = cuda::make_shape(c, x.heads, x.tokens, x.dim);
      cuda::GpuKMeansOptions km;
      km.params = c.kmeans;
      cuda::DeviceBuffer<uint16_t> xh;
      xh.upload(h.data(), h.size());
      cuda::DeviceBuffer<float> xf;
      xf.upload(x.data.data(), x.data.size());
      cuda::Encoder e1, e2;
      cuda::DeviceParts p1, p2;
      e1.encode(xh.get(), bf16 ? DeviceElement::bf16 : DeviceElement::f16, sh, km, p1, nullptr);
      e2.encode(xf.get(), DeviceElement::f32, sh, km, p2, nullptr);
      EncodedTensor b1, b2;
      cuda::download_parts(p1, b1, nullptr);
      cuda::download_parts(p2, b2, nullptr);
      expect_same_parts(b1, b2, spec + (bf16 ? " bf16" : " f16"));
    }
}

// The device-memory API (cuda_encode_device / cuda_decode_device, what the
// Python module's DLPack path calls) gives make_cuda_codec's bytes for the
// same values in f32, bf16 and f16, for every method, and decodes into
// device memory the CPU decode's float bits (bf16 / f16: those rounded to
// nearest even). A non-finite value is refused naming its position, as the
// host encode does; null pointers and empty shapes are errors.
TEST(Cuda, DeviceTensorsEncodeAndDecodeLikeHostTensors) {
  REQUIRE_GPU();
  for (const std::string spec : {"rtn", "qvg:centroids=16", "qvg-pro:centroids=8,iters=3", "kivi", "quarot", "bf16",
                                 "qvg-pro:centroids=8,iters=3,centroid_format=fp8"})
    for (const DeviceElement type : {DeviceElement::f32, DeviceElement::bf16, DeviceElement::f16}) {
      const CodecConfig c = parse_codec_spec(spec);
      HeadTensor x = blobs(2, 700, 64, 12, 5, 0.5f);
      std::vector<uint16_t> h(x.data.size());
      for (size_t i = 0; i < h.size(); ++i) {
        if (type == DeviceElement::f32) continue;
        h[i] = type == DeviceElement::bf16 ? bf16_from_float(x.data[i]) : fp16_from_float(x.data[i]);
        x.data[i] = type == DeviceElement::bf16 ? bf16_to_float(h[i]) : fp16_to_float(h[i]);
      }
      cuda::DeviceBuffer<uint16_t> xh;
      cuda::DeviceBuffer<float> xf;
      const void* xd = nullptr;
      if (type == DeviceElement::f32) {
        xf.upload(x.data.data(), x.data.size());
        xd = xf.get();
      } else {
        xh.upload(h.data(), h.size());
        xd = xh.get();
      }
      const std::string what = spec + " type " + std::to_string(static_cast<int>(type));
      EncodeOptions opt;
      opt.role = TensorRole::value;
      const EncodedTensor want = make_cuda_codec(c)->encode(x, opt);
      const EncodedTensor got = cuda_encode_device(c, xd, type, x.heads, x.tokens, x.dim, opt);
      EXPECT_EQ(got.role, TensorRole::value) << what;
      expect_same_parts(want, got, what);
      EXPECT_EQ(want.zero_points, got.zero_points) << what;
      EXPECT_EQ(want.full_precision, got.full_precision) << what;

      HeadTensor cpu;
      make_codec(c)->decode(got, cpu);
      const size_t es = element_bytes(type);
      const std::shared_ptr<void> out = cuda_allocate(cpu.data.size() * es);
      cuda_decode_device(got, out.get(), type);
      if (type == DeviceElement::f32) {
        std::vector<float> back(cpu.data.size());
        QVG_CUDA_CHECK(cudaMemcpy(back.data(), out.get(), back.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(0, std::memcmp(back.data(), cpu.data.data(), back.size() * 4)) << what;
      } else {
        std::vector<uint16_t> back(cpu.data.size());
        QVG_CUDA_CHECK(cudaMemcpy(back.data(), out.get(), back.size() * 2, cudaMemcpyDeviceToHost));
        size_t mismatches = 0;
        for (size_t i = 0; i < back.size(); ++i)
          mismatches += back[i] != (type == DeviceElement::bf16 ? bf16_from_float(cpu.data[i])
                                                                 : fp16_from_float(cpu.data[i]));
        EXPECT_EQ(mismatches, 0u) << what;
      }
    }
  // NaNs at head 1, token 7, channel 3 and later (another block, past the
  // finiteness kernel's grid stride too): the first is named. Then an inf
  // (bf16) there.
  HeadTensor x = blobs(2, 300, 64, 4, 9);
  x.at(1, 7, 3) = std::nanf("");
  x.at(1, 8, 0) = std::nanf("");
  x.at(1, 299, 63) = -INFINITY;
  cuda::DeviceBuffer<float> xf;
  xf.upload(x.data.data(), x.data.size());
  const CodecConfig q = parse_codec_spec("qvg:centroids=4");
  for (const std::string spec : {"qvg:centroids=4", "kivi"}) {
    try {
      cuda_encode_device(parse_codec_spec(spec), xf.get(), DeviceElement::f32, 2, 300, 64);
      ADD_FAILURE() << spec << ": a NaN was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite value (nan) at head 1, token 7, channel 3"), std::string::npos)
          << e.what();
    }
  }
  std::vector<uint16_t> hb(x.data.size(), 0x3f80);
  hb[static_cast<size_t>((1 * 300 + 7) * 64 + 3)] = 0x7f80;  // +inf
  cuda::DeviceBuffer<uint16_t> xb;
  xb.upload(hb.data(), hb.size());
  try {
    cuda_encode_device(q, xb.get(), DeviceElement::bf16, 2, 300, 64);
    ADD_FAILURE() << "an inf was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(inf) at head 1, token 7, channel 3"), std::string::npos) << e.what();
  }
  // A view that does not start on 16 bytes (DLPack promises element
  // alignment only): the bytes of the same values given aligned.
  {
    HeadTensor y = blobs(2, 256, 64, 4, 13, 0.5f);
    std::vector<float> shifted(y.data.size() + 1, 0.0f);
    std::copy(y.data.begin(), y.data.end(), shifted.begin() + 1);
    cuda::DeviceBuffer<float> ys;
    ys.upload(shifted.data(), shifted.size());
    for (const std::string spec : {"rtn", "qvg:centroids=8", "qvg-pro:centroids=4,iters=2"})
      expect_same_parts(make_cuda_codec(parse_codec_spec(spec))->encode(y),
                        cuda_encode_device(parse_codec_spec(spec), ys.get() + 1, DeviceElement::f32, 2, 256, 64),
                        spec + ": a view 4 bytes past 16-byte alignment");
  }
  EXPECT_THROW(cuda_encode_device(q, nullptr, DeviceElement::f32, 2, 300, 64), Error);
  EXPECT_THROW(cuda_encode_device(q, xf.get(), DeviceElement::f32, 2, 0, 64), Error);
  const EncodedTensor e = cuda_encode_device(q, xb.get(), DeviceElement::bf16, 1, 300, 64);  // head 0: finite
  EXPECT_THROW(cuda_decode_device(e, nullptr, DeviceElement::f32), Error);
  const std::shared_ptr<void> big = cuda_allocate(static_cast<size_t>(e.values()) * 4 + 16);
  EXPECT_THROW(cuda_decode_device(e, static_cast<char*>(big.get()) + 4, DeviceElement::f32), Error);  // misaligned
  EXPECT_THROW(cuda_allocate(0), Error);
  EXPECT_EQ(cuda_current_device(), 0);
}

// The k-means update's cluster sums (cuda::centroid_sums: the bucket kernel
// the encoder runs, with the launcher's chunks, the largest (8192 rows) and
// odd ones (777), and the shared-atomic kernel) equal the CPU's fixed-point sums and
// counts bit for bit: float, bf16 and f16 input, D = 64 and 128, C = 1, 7
// and 256, row counts ending in a partial pass and heads whose ids are not
// 4-byte aligned (n = 3001: one chunk shorter than the largest), many chunks
// a head (n = 20000: the last one shorter), an inactive head (left
// untouched), every row in one cluster, 90 % of the rows in one (the last)
// cluster, exact ties of the rounding to the quantum, zeros, subnormals, and
// heads whose largest |x| is tiny (the double-precision path) or huge (a
// quantum above 1).
TEST(Cuda, CentroidSumsEqualTheCpuFixedPointSums) {
  REQUIRE_GPU();
  // 0: normal with ties, 1: inactive, 2: tiny, 3: huge, one cluster, 4: zero, 5: one cluster of 90 %
  constexpr int kHeads = 6;
  for (const DeviceElement t : {DeviceElement::f32, DeviceElement::bf16, DeviceElement::f16})
    for (const int64_t d : {64, 128})
      for (const auto& shape : std::vector<std::pair<int64_t, int>>{{1, 1}, {3001, 7}, {3001, 256}, {20000, 256}}) {
        const int64_t n = shape.first;
        const int cc = shape.second;
        const std::string what = std::string(t == DeviceElement::f32 ? "f32" : t == DeviceElement::bf16 ? "bf16" : "f16") +
                                 " d=" + std::to_string(d) + " n=" + std::to_string(n) + " C=" + std::to_string(cc);
        auto round_to = [&](float v) {
          if (t == DeviceElement::bf16) return round_bf16(v);
          if (t == DeviceElement::f16) return round_fp16(std::clamp(v, -6e4f, 6e4f));
          return v;
        };
        std::mt19937 gen(static_cast<unsigned>(n + d + cc));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const float tiny = t == DeviceElement::f16 ? 1e-6f : 1e-30f, huge = t == DeviceElement::f16 ? 1e4f : 1e20f;
        const float scale[kHeads] = {3.0f, 1.0f, tiny, huge, 0.0f, 1.0f};
        HeadTensor x(kHeads, n, d);
        std::vector<uint8_t> ids(static_cast<size_t>(kHeads * n));
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t i = 0; i < n; ++i) {
            const unsigned r = gen();
            ids[static_cast<size_t>(h * n + i)] = h == 3                 ? 0
                                                  : h == 5 && r % 10 != 0 ? static_cast<uint8_t>(cc - 1)
                                                                          : static_cast<uint8_t>(r % static_cast<unsigned>(cc));
            for (int64_t k = 0; k < d; ++k) x.at(h, i, k) = round_to(scale[h] * nd(gen));
          }
        std::vector<unsigned> head_max(kHeads);
        std::vector<int> e(kHeads);
        auto find_max = [&] {
          for (int64_t h = 0; h < kHeads; ++h) {
            float m = 0.0f;
            for (int64_t i = 0; i < n * d; ++i) m = std::max(m, std::fabs(x.data[static_cast<size_t>(h * n * d + i)]));
            std::memcpy(&head_max[h], &m, 4);
            e[h] = fixed_sum_exponent(m, n);
          }
        };
        find_max();
        // Below each head's largest |x|: odd multiples of half its quantum
        // (ties, rounded to even), zeros, subnormals.
        if (n > 1)
          for (const int64_t h : {0, 2, 3})
            for (int64_t k = 0; k < d; ++k) {
              const float tie = std::ldexp(static_cast<float>(2 * (k % 5) + 1), e[h] - 1) * (k % 2 ? -1.0f : 1.0f);
              x.at(h, 1, k) = round_to(tie);
              x.at(h, n - 1, k) = k % 3 == 0 ? 0.0f : round_to((k % 2 ? -1.0f : 1.0f) * 1e-40f * static_cast<float>(k));
            }
        find_max();
        std::vector<uint64_t> want_sums(static_cast<size_t>(kHeads * cc * d), 0);
        std::vector<int> want_counts(static_cast<size_t>(kHeads * cc), 0);
        for (int64_t h = 0; h < kHeads; ++h) {
          if (h == 1) continue;  // inactive
          for (int64_t i = 0; i < n; ++i) {
            const int64_t slot = h * cc + ids[static_cast<size_t>(h * n + i)];
            ++want_counts[static_cast<size_t>(slot)];
            for (int64_t k = 0; k < d; ++k)
              want_sums[static_cast<size_t>(slot * d + k)] += static_cast<uint64_t>(to_fixed(x.at(h, i, k), e[h]));
          }
        }
        cuda::DeviceBuffer<float> xf;
        cuda::DeviceBuffer<uint16_t> x16;
        const void* xd = nullptr;
        if (t == DeviceElement::f32) {
          xf.upload(x.data.data(), x.data.size());
          xd = xf.get();
        } else {
          std::vector<uint16_t> h16(x.data.size());
          for (size_t i = 0; i < h16.size(); ++i)
            h16[i] = t == DeviceElement::bf16 ? bf16_from_float(x.data[i]) : fp16_from_float(x.data[i]);
          x16.upload(h16.data(), h16.size());
          xd = x16.get();
        }
        const std::vector<int> active = {1, 0, 1, 1, 1, 1};
        cuda::DeviceBuffer<uint8_t> ids_d;
        ids_d.upload(ids.data(), ids.size());
        cuda::DeviceBuffer<unsigned> max_d;
        max_d.upload(head_max.data(), head_max.size());
        cuda::DeviceBuffer<int> active_d;
        active_d.upload(active.data(), active.size());
        cuda::DeviceBuffer<unsigned long long> sums_d(want_sums.size());
        cuda::DeviceBuffer<int> counts_d(want_counts.size());
        const std::pair<cuda::SumKernel, int64_t> variants[] = {
            {cuda::SumKernel::buckets, 0},
            {cuda::SumKernel::buckets, 8192},
            {cuda::SumKernel::buckets, 777},
            {cuda::SumKernel::atomics, 0}};
        for (const auto& [kernel, chunk] : variants) {
          const std::string which = what + (kernel == cuda::SumKernel::atomics ? " atomics" : " buckets") +
                                    (chunk ? " chunk=" + std::to_string(chunk) : "");
          QVG_CUDA_CHECK(cudaMemset(sums_d.get(), 0, sums_d.bytes()));
          QVG_CUDA_CHECK(cudaMemset(counts_d.get(), 0, counts_d.bytes()));
          cuda::centroid_sums(xd, t, kHeads, n, static_cast<int>(d), cc, ids_d.get(), max_d.get(), active_d.get(),
                              sums_d.get(), counts_d.get(), nullptr, kernel, chunk);
          std::vector<uint64_t> got_sums(want_sums.size());
          std::vector<int> got_counts(want_counts.size());
          QVG_CUDA_CHECK(cudaMemcpy(got_sums.data(), sums_d.get(), sums_d.bytes(), cudaMemcpyDeviceToHost));
          QVG_CUDA_CHECK(cudaMemcpy(got_counts.data(), counts_d.get(), counts_d.bytes(), cudaMemcpyDeviceToHost));
          EXPECT_EQ(got_counts, want_counts) << which;
          size_t wrong = 0;
          for (size_t i = 0; i < want_sums.size(); ++i) wrong += got_sums[i] != want_sums[i];
          EXPECT_EQ(wrong, 0u) << which << ": sums differing from the CPU's";
        }
      }
}

// The device's random start (cuda::random_rows: the shuffle's draws made in
// parallel) picks the rows kmeans_random_rows picks, for C up to 256, C = n,
// n beyond 2^32 and seeds that wrap around 2^64.
TEST(Cuda, RandomRowsEqualTheCpuShuffle) {
  REQUIRE_GPU();
  constexpr int kHeads = 3;
  for (const auto& [n, cc] : std::vector<std::pair<int64_t, int>>{
           {1, 1}, {2, 2}, {5, 3}, {17, 16}, {256, 256}, {300, 256}, {1000, 1}, {29640, 256}, {int64_t{1} << 40, 256}})
    for (const uint64_t seed : {uint64_t{1}, uint64_t{0x9E3779B97F4A7C15ull}, ~uint64_t{0}}) {
      cuda::DeviceBuffer<int64_t> rows_d(static_cast<size_t>(kHeads * cc));
      cuda::random_rows(n, cc, kHeads, seed, rows_d.get(), nullptr);
      std::vector<int64_t> got(rows_d.size());
      QVG_CUDA_CHECK(cudaMemcpy(got.data(), rows_d.get(), rows_d.bytes(), cudaMemcpyDeviceToHost));
      for (int h = 0; h < kHeads; ++h) {
        const std::vector<int64_t> want = kmeans_random_rows(n, cc, seed + static_cast<uint64_t>(h));
        EXPECT_EQ(std::vector<int64_t>(got.begin() + h * cc, got.begin() + (h + 1) * cc), want)
            << "n=" << n << " C=" << cc << " seed=" << seed << " head " << h;
      }
    }
}
#endif

// The streaming cache with its codecs on the GPU (CacheOptions::backend)
// holds and returns the same bytes as with the CPU reference: spans of 2
// chunks, warm-started k-means, on blobs without near-ties.
TEST(Cuda, StreamingCacheWithGpuCodecsMatchesCpu) {
  REQUIRE_GPU();
  for (const std::string spec : {"rtn", "kivi", "quarot", "qvg:centroids=4", "qvg-pro-int4:centroids=4",
                                 "qvg-pro:centroids=4,centroid_format=fp8"}) {
    CacheConfig cc;
    cc.layers = 1;
    cc.heads = 2;
    cc.dim = 64;
    cc.chunk_tokens = 96;
    cc.key = cc.value = parse_codec_spec(spec);
    cc.policy.quant_factor = 2;
    CacheOptions gpu;
    gpu.backend = Backend::cuda;
    StreamingKVCache a(cc), b(cc, gpu);
    for (int chunk = 0; chunk < 5; ++chunk) {
      // the same 4 blobs in every chunk: k-means has no near-ties to break differently
      const HeadTensor k = blobs(2, 96, 64, 4, 100, 0.05f), v = blobs(2, 96, 64, 4, 200, 0.05f);
      a.append(0, k, v);
      b.append(0, k, v);
    }
    ASSERT_EQ(a.spans_encoded(0), 2) << spec;
    ASSERT_EQ(b.spans_encoded(0), 2) << spec;
    const CacheRead ra = a.read(0), rb = b.read(0);
    EXPECT_EQ(0, std::memcmp(ra.k.data.data(), rb.k.data.data(), ra.k.data.size() * 4)) << spec << ": keys";
    EXPECT_EQ(0, std::memcmp(ra.v.data.data(), rb.v.data.data(), ra.v.data.size() * 4)) << spec << ": values";
    EXPECT_EQ(a.memory().total.kv_bytes(), b.memory().total.kv_bytes()) << spec;
  }
}

#if QVG_WITH_CUDA
// StreamingKVCache::read_device writes the bytes read() returns: QVG / RTN
// spans decoded on the device (also spans whose first chunks were evicted),
// BF16 spans widened there, KIVI spans decoded on the host, BF16 and F32
// full-precision chunks, 3-D RoPE on read, into a destination with spare
// rows left untouched; reading twice (from the device copies) gives the same.
TEST(Cuda, CacheReadDeviceMatchesRead) {
  REQUIRE_GPU();
  for (const std::string spec : {"qvg:centroids=8", "rtn", "qvg-pro-int4:centroids=4", "kivi", "bf16"})
    for (const TailFormat tail : {TailFormat::bf16, TailFormat::f32})
      for (const bool rope : {true, false}) {
        CacheConfig cc;
        cc.layers = 2;
        cc.heads = 2;
        cc.dim = 64;
        cc.chunk_tokens = 48;  // 3 frames of a 4 x 4 grid
        cc.key = cc.value = parse_codec_spec(spec);
        cc.policy.quant_factor = 2;
        cc.policy.window_chunks = 3;  // evicts chunks, leaving a span partly live
        cc.tail = tail;
        cc.rope = rope ? RopeConfig{RopeMode::wan_3d, 10000.0, RopePairing::interleaved} : RopeConfig{RopeMode::none};
        StreamingKVCache cache(cc);
        for (int chunk = 0; chunk < 6; ++chunk)
          for (int layer = 0; layer < 2; ++layer) {
            const HeadTensor k = blobs(2, 48, 64, 6, 10 * chunk + layer, 0.5f);
            const HeadTensor v = blobs(2, 48, 64, 6, 10 * chunk + layer + 5, 0.5f);
            cache.append(layer, k, v, wan_grid_positions(3 * chunk, 3, 4, 4));
          }
        const std::string what = spec + (tail == TailFormat::bf16 ? " bf16 tail" : " f32 tail") +
                                 (rope ? " rope" : " no rope");
        for (int layer = 0; layer < 2; ++layer) {
          const CacheRead ref = cache.read(layer);
          const int64_t n = ref.k.tokens, stride = n + 3;
          const size_t total = static_cast<size_t>(2 * stride * 64);
          std::vector<float> sentinel(total, -7.25f);
          cuda::DeviceBuffer<float> dk, dv;
          dk.upload(sentinel.data(), total);
          dv.upload(sentinel.data(), total);
          ASSERT_EQ(cache.read_device(layer, dk.get(), dv.get(), stride), n) << what;
          ASSERT_EQ(cache.read_device(layer, dk.get(), dv.get(), stride), n) << what;  // again, from the mirrors
          std::vector<float> hk(total), hv(total);
          dk.download(hk.data(), total);
          dv.download(hv.data(), total);
          QVG_CUDA_CHECK(cudaDeviceSynchronize());
          size_t bad = 0, touched = 0;
          for (int h = 0; h < 2; ++h)
            for (int64_t t = 0; t < stride; ++t)
              for (int d = 0; d < 64; ++d) {
                const size_t at = static_cast<size_t>((h * stride + t) * 64 + d);
                if (t < n) {
                  bad += std::memcmp(&hk[at], ref.k.head(h) + t * 64 + d, 4) != 0;
                  bad += std::memcmp(&hv[at], ref.v.head(h) + t * 64 + d, 4) != 0;
                } else {
                  touched += hk[at] != -7.25f || hv[at] != -7.25f;
                }
              }
          EXPECT_EQ(bad, 0u) << what << " layer " << layer;
          EXPECT_EQ(touched, 0u) << what << " layer " << layer;
        }
        // the spans it copied (qvg / rtn / bf16; kivi spans are decoded on the host, and here every live
        // chunk is in a span)
        if (spec != "kivi") EXPECT_GT(cache.device_bytes(), 0) << what;
        cuda::DeviceBuffer<float> tiny(16);
        EXPECT_THROW(cache.read_device(0, tiny.get(), tiny.get(), 1), Error) << what;  // too few rows
        EXPECT_THROW(cache.read_device(5, tiny.get(), tiny.get(), 1000), Error) << what;  // no such layer
      }
}
#endif

TEST(Cuda, KMeansMatchesCpuWithoutNearTies) {
  REQUIRE_GPU();
  // Byte equality needs an assignment without near-ties at every iteration:
  // well separated blobs, one stage (the residual after it is the blobs'
  // noise, where near-ties are everywhere), and a k-means++ start, which puts
  // one centroid in each blob (or one between merged blobs; d2-rounds, the
  // default, may put two into one blob). A random start
  // can put two centroids in one blob, whose points then sit between them
  // (near-ties: rounding flips ids and the runs take different paths, into
  // different local minima); the random start is covered by the error
  // comparison on video-like data below.
  for (int64_t d : {64, 128}) {
    const HeadTensor x = blobs(3, 2000, d, 24, 11);
    for (const std::string spec : {"qvg:centroids=24,init=kmeans++", "qvg:centroids=16,iters=4,init=kmeans++"}) {
      const CodecConfig c = parse_codec_spec(spec);
      EncodeReport rc, rg;
      const EncodedTensor cpu = make_codec(c)->encode(x, {}, &rc);
      const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x, {}, &rg);
      expect_same_parts(cpu, gpu, spec + " d=" + std::to_string(d));
      ASSERT_EQ(rc.kmeans.size(), rg.kmeans.size());
      for (size_t i = 0; i < rc.kmeans.size(); ++i) {
        EXPECT_EQ(rc.kmeans[i].iterations, rg.kmeans[i].iterations) << spec << " run " << i;
        EXPECT_EQ(rc.kmeans[i].empty_reassigned, rg.kmeans[i].empty_reassigned) << spec << " run " << i;
        ASSERT_EQ(rc.kmeans[i].mse.size(), rg.kmeans[i].mse.size());
        for (size_t k = 0; k < rc.kmeans[i].mse.size(); ++k)
          EXPECT_NEAR(rc.kmeans[i].mse[k], rg.kmeans[i].mse[k], 1e-5 * rc.kmeans[i].mse[k]) << spec << " it " << k;
      }
    }
  }
}

// Blobs inside blobs: level l adds one of k random directions at scale
// 8 / 6^l, so stage l of QVG-Pro finds level l's k clusters, well separated
// at every stage (no near-ties), from a k-means++ start.
HeadTensor nested_blobs(int64_t h, int64_t n, int64_t d, int levels, int k, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HeadTensor x(h, n, d);
  for (int64_t hh = 0; hh < h; ++hh) {
    std::vector<float> dirs(static_cast<size_t>(levels * k * d));
    for (auto& v : dirs) v = nd(gen);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) = 0.002f * nd(gen);
      float scale = 8.0f;
      for (int l = 0; l < levels; ++l, scale /= 6.0f) {
        const int64_t j = static_cast<int64_t>(gen() % k);
        for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) += scale * dirs[(l * k + j) * d + q];
      }
    }
  }
  return x;
}

// Several stages: stage s > 0 clusters the BF16 points bf16(P(s-1) -
// bf16(c(s-1))) on both sides (on the GPU the last assignment of stage s - 1
// writes them), then the quantizer takes the last stage's points minus its
// centroids: the same bytes as the CPU where no stage has near-ties, 1 to 4
// stages. With FP8 centroids each stage's k-means centroids are stored as FP8
// codes and scales first, and the next points and the residual subtract those.
TEST(Cuda, MultiStageEncodeMatchesCpuWithoutNearTies) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int stages : {1, 2, 3, 4})
    for (const std::string format : {"bf16", "fp8"}) {
      const HeadTensor x = nested_blobs(2, 1200, d, stages, 4, static_cast<unsigned>(d + stages));
      const std::string spec =
          "qvg-pro:stages=" + std::to_string(stages) + ",centroids=4,iters=3,centroid_format=" + format;
      const CodecConfig c = parse_codec_spec(spec);
      const EncodedTensor cpu = make_codec(c)->encode(x);
      expect_same_parts(cpu, make_codec(c, Backend::cuda)->encode(x), spec + " d=" + std::to_string(d));
    }
}

// The benchmarks' setting, fixed iterations with no host synchronisation
// (no head list, the next stage's points written by the last assignment
// only, dist_for_empty and the reseed on the shared sums/counts buffer),
// against the CPU reference with tol = 0 (it stops only once the error no
// longer drops, when further iterations change nothing): the same bytes on
// blobs inside blobs, one and three stages, D = 64 and 128, bf16 input.
#if QVG_WITH_CUDA
TEST(Cuda, FixedIterationEncodeMatchesCpu) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (const std::string spec : {"qvg:centroids=4,iters=3,tol=0", "qvg-pro:stages=3,centroids=4,iters=3,tol=0",
                                   "qvg-pro:stages=3,centroids=4,iters=3,tol=0,centroid_format=fp8"}) {
      const CodecConfig c = parse_codec_spec(spec);
      HeadTensor x = nested_blobs(2, 1100, d, c.stages, 4, static_cast<unsigned>(7 * d + c.stages));
      std::vector<uint16_t> h(x.data.size());
      for (size_t i = 0; i < h.size(); ++i) {
        h[i] = bf16_from_float(x.data[i]);
        x.data[i] = bf16_to_float(h[i]);
      }
      const EncodedTensor cpu = make_codec(c)->encode(x);
      cuda::DeviceBuffer<uint16_t> xd;
      xd.upload(h.data(), h.size());
      cuda::Encoder enc;
      cuda::DeviceParts parts;
      enc.encode(xd.get(), DeviceElement::bf16, cuda::make_shape(c, x.heads, x.tokens, x.dim),
                 cuda::GpuKMeansOptions::fixed_iterations(c.kmeans), parts, nullptr);
      EncodedTensor got;
      cuda::download_parts(parts, got, nullptr);
      expect_same_parts(cpu, got, spec + " d=" + std::to_string(d));
    }
}
#endif

// The sampled starts on the GPU (kmeanspp_kernel, d2_start_kernel) pick the
// CPU's centres where no pick is a near-tie of the running distance sums:
// with iters=0 the encoded centroids are the start's, rounded to bf16. Blob
// data; all points (n <= 64 C or 16 C) and a subsample; repeated runs give
// the same bytes. Then the small shapes: C = 1, fewer points than the
// cluster's 8 blocks, and identical rows (every point soon coincides with a
// centre: whichever rows are picked, the centroids and ids are the same on
// both sides). d2_rounds also at C = 256 on 20,000 rows (its full sample of
// 4,096 rows, 8 rounds of 32 centres).
TEST(Cuda, SampledStartsMatchCpu) {
  REQUIRE_GPU();
  for (const std::string init : {",init=kmeans++", ",init=d2-rounds"}) {
    for (const auto& [n, base] : std::vector<std::pair<int64_t, std::string>>{
             {5, "qvg:centroids=2,iters=0"}, {7, "qvg:centroids=1,iters=0"}, {40, "qvg:centroids=1,iters=1"}}) {
      const std::string spec = base + init;
      const HeadTensor x = blobs(2, n, 64, 2, static_cast<unsigned>(n));
      const CodecConfig c = parse_codec_spec(spec);
      expect_same_parts(make_codec(c)->encode(x), make_codec(c, Backend::cuda)->encode(x),
                        spec + " n=" + std::to_string(n));
    }
    {
      HeadTensor x = blobs(2, 50, 128, 3, 9);
      for (int64_t h = 0; h < x.heads; ++h)  // every row of a head is its first row
        for (int64_t t = 1; t < x.tokens; ++t)
          std::copy_n(x.data.begin() + h * x.tokens * x.dim, x.dim, x.data.begin() + (h * x.tokens + t) * x.dim);
      const CodecConfig c = parse_codec_spec("qvg:centroids=3,iters=0" + init);
      expect_same_parts(make_codec(c)->encode(x), make_codec(c, Backend::cuda)->encode(x), "identical rows" + init);
    }
    std::vector<std::pair<int64_t, std::string>> cases;
    for (int64_t n : {300, 5000})
      for (const std::string spec : {"qvg:centroids=16,iters=0", "qvg:centroids=5,iters=0,seed=7"})
        cases.emplace_back(n, spec + init);
    if (init == ",init=d2-rounds") cases.emplace_back(20000, "qvg:centroids=256,iters=0" + init);
    for (int64_t d : {64, 128})
      for (const auto& [n, spec] : cases) {
        // d2-rounds: small integers, where every distance and running sum is
        // exact on both sides (the tensor cores' sums of products too), so
        // its picks must agree everywhere. (On blobs far from the origin the
        // distances cancel |x|^2 against 2 x.c: rounding near-ties at many
        // of 255 picks, seen on an H100 at C = 16 and 256.)
        HeadTensor x = blobs(2, n, d, 16, static_cast<unsigned>(n + d));
        if (init == ",init=d2-rounds") {
          std::mt19937 gen(static_cast<unsigned>(n + d));
          std::uniform_int_distribution<int> small(-6, 6);
          for (float& v : x.data) v = static_cast<float>(small(gen));
        }
        const CodecConfig c = parse_codec_spec(spec);
        const EncodedTensor cpu = make_codec(c)->encode(x);
        const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x);
        const EncodedTensor again = make_codec(c, Backend::cuda)->encode(x);
        const std::string what = spec + " d=" + std::to_string(d) + " n=" + std::to_string(n);
        expect_same_parts(cpu, gpu, what);
        EXPECT_EQ(gpu.centroids, again.centroids) << what << ": repeated GPU runs";
        EXPECT_EQ(gpu.ids, again.ids) << what << ": repeated GPU runs";
      }
  }
}

// The bf16 ranking of the tensor-core assignment must hand close calls to the
// exact re-ranking. Two centroids and a float token whose bf16 rounding (of x
// and of the centroids) moves the two values by 0.69 in opposite directions,
// more than the 2^-7 ||x|| ||c|| margin once used (0.53): the exact distances
// to the starting centroids (the rows' BF16 roundings, kmeans.h) are 24.188
// and 24.251, so the first centroid is the nearest. With iters=0 the ids are
// that one assignment to the starting rows (a random start: the rows
// kmeans_random_rows picks are set to the two centroids).
TEST(Cuda, AssignmentReRanksWhereBf16RoundingCouldFlipIt) {
  REQUIRE_GPU();
  const int64_t n = 8, d = 64;
  const CodecConfig c = parse_codec_spec("qvg:centroids=2,init=random,iters=0");
  const float a = 1.0f + 0x1p-8f - 0x1p-20f, b = 1.0f + 0x1p-8f + 0x1p-20f;  // bf16: 1 and 1 + 2^-7
  std::vector<float> c0(d, 0.0f), c1(d, 0.0f), q(d, 0.0f);
  for (int k = 0; k < 24; ++k) c0[k] = q[k] = a, c1[25 + k] = q[25 + k] = b;
  c0[24] = q[24] = a / 4;
  HeadTensor x(1, n, d);
  const std::vector<int64_t> rows = kmeans_random_rows(n, 2, qvg_kmeans_seed(c, 0, 0));
  int64_t query = 0;
  while (query == rows[0] || query == rows[1]) ++query;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k)
      x.at(0, i, k) = i == rows[1] ? c1[k] : i == query ? q[k] : c0[k];  // the rest: copies of c0
  const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x);
  EXPECT_EQ(gpu.ids[query], 0) << "the token nearest centroid 0 (24.19 vs 24.25) went to centroid 1";
  expect_same_parts(make_codec(c)->encode(x), gpu, "re-ranking case");
}

// Tensor-core assignment against an exact (double) one, C = 100 (a partial
// last pass of 16) and 256, D = 64 and 128, float and bf16-valued input: a
// token may go elsewhere than its exact nearest centroid only where three or
// more centroids lie within the ranking's error bound of the nearest (the
// documented exception); the bound here is 2^-6 ||x|| (||c|| + ||c*||) +
// 2^-12 |d*|, looser than the kernel's own, so it covers both input kinds.
TEST(Cuda, AssignmentIsExactOutsideThreeWayNearTies) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int cc : {100, 256})
      for (const bool bf16_values : {false, true}) {
        const int64_t n = 3000;
        const CodecConfig c = parse_codec_spec("qvg:init=random,iters=0,centroids=" + std::to_string(cc));
        HeadTensor x = blobs(2, n, d, 40, static_cast<unsigned>(d + cc), 0.6f);
        if (bf16_values)
          for (auto& v : x.data) v = bf16_to_float(bf16_from_float(v));
        const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x);
        int64_t wrong = 0, excused = 0;
        for (int64_t h = 0; h < x.heads; ++h) {
          const std::vector<int64_t> rows = kmeans_random_rows(n, cc, qvg_kmeans_seed(c, 0, h));
          for (int64_t i = 0; i < n; ++i) {
            std::vector<double> dist(static_cast<size_t>(cc)), cn(static_cast<size_t>(cc));
            double xn = 0;
            for (int64_t k = 0; k < d; ++k) xn += double(x.at(h, i, k)) * x.at(h, i, k);
            int best = 0;
            for (int j = 0; j < cc; ++j) {
              double s = 0, q = 0;
              for (int64_t k = 0; k < d; ++k) {
                // The start: the rows' BF16 roundings (kmeans.h).
                const double cv = round_bf16(x.at(h, rows[j], k)), e = x.at(h, i, k) - cv;
                s += e * e;
                q += cv * cv;
              }
              dist[j] = s, cn[j] = q;
              if (s < dist[best]) best = j;
            }
            const int got = gpu.ids[static_cast<size_t>(h * n + i)];
            if (got == best) continue;
            ++wrong;
            int close = 0;
            for (int j = 0; j < cc; ++j)
              close += dist[j] - dist[best] <=
                       0x1p-6 * std::sqrt(xn) * (std::sqrt(cn[j]) + std::sqrt(cn[best])) + 0x1p-12 * dist[best];
            excused += close >= 3;
          }
        }
        EXPECT_EQ(wrong, excused) << "d=" << d << " C=" << cc << (bf16_values ? " bf16-valued" : " float");
      }
}

// Exact ties: tokens that are copies of a few vectors, one of them zero, so a
// random start of 8 rows holds equal centroids (and zero ones, as residual
// stages can). Every tie goes to the lowest index, as the exact assignment
// has it: equal centroids never rank above the first of them, and two zero
// centroids are re-ranked like any near-tie.
TEST(Cuda, AssignmentBreaksExactTiesToTheLowestIndex) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int patterns : {2, 3, 9}) {
      const int64_t n = 200;
      const CodecConfig c = parse_codec_spec("qvg:init=random,iters=0,centroids=8");
      std::mt19937 gen(static_cast<unsigned>(d + patterns));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> pat(static_cast<size_t>(patterns * d), 0.0f);  // pattern 0 stays zero
      for (size_t k = static_cast<size_t>(d); k < pat.size(); ++k) pat[k] = bf16_to_float(bf16_from_float(nd(gen)));
      HeadTensor x(1, n, d);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < d; ++k) x.at(0, i, k) = pat[static_cast<size_t>((i % patterns) * d + k)];
      const std::vector<int64_t> rows = kmeans_random_rows(n, 8, qvg_kmeans_seed(c, 0, 0));
      const EncodedTensor gpu = make_codec(c, Backend::cuda)->encode(x);
      for (int64_t i = 0; i < n; ++i) {
        int best = 0;
        double best_d = INFINITY;
        for (int j = 0; j < 8; ++j) {
          double s = 0;
          for (int64_t k = 0; k < d; ++k) {
            const double e = double(x.at(0, i, k)) - x.at(0, rows[j], k);
            s += e * e;
          }
          if (s < best_d) best_d = s, best = j;  // strict: ties keep the lowest index
        }
        ASSERT_EQ(gpu.ids[static_cast<size_t>(i)], best) << "d=" << d << " patterns=" << patterns << " token " << i;
      }
    }
}

#if QVG_WITH_CUDA
// Heads that stop at different iterations: the first half well separated
// blobs (24 of them, for C = 16: the error stops falling after a few
// iterations), the second half normal noise (it keeps falling); bf16 values.
HeadTensor mixed_heads(int64_t h, int64_t n, int64_t d, unsigned seed) {
  HeadTensor x = blobs(h, n, d, 24, seed);
  std::mt19937 gen(seed + 1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t hh = h / 2; hh < h; ++hh)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) = nd(gen);
  for (float& v : x.data) v = bf16_to_float(bf16_from_float(v));
  return x;
}

/// Head h's bytes of a part of `heads` equal slices (after `skip` bytes).
std::vector<uint8_t> head_slice(const std::vector<uint8_t>& part, int64_t heads, int64_t h, size_t skip = 0,
                                size_t length = 0) {
  const size_t per = (length ? length : part.size() - skip) / static_cast<size_t>(heads);
  const auto at = part.begin() + static_cast<std::ptrdiff_t>(skip + per * static_cast<size_t>(h));
  return {at, at + static_cast<std::ptrdiff_t>(per)};
}

// The stopping rule decided on the device (GpuKMeansOptions::device_convergence,
// DeviceCodec's) writes each head's result from its final assignment, whether
// that is the last one launched (the head ran max_iter iterations) or an
// earlier one (it stopped by tol, and one pass after the loop writes max |R|
// and the stored centroids): every head's parts equal that head encoded alone
// with exactly its iteration count and no rule (fixed_iterations), and the
// whole tensor equals the host rule's encode, whose statistics give the
// counts. GPU against GPU, so near-ties do not matter; a warm start (the
// random start of an iters=0 encode) instead of per-head seeds. One stage,
// BF16 and FP8 centroids, D = 64 and 128.
TEST(Cuda, DeviceStoppingRuleWritesEachHeadsFinalAssignment) {
  REQUIRE_GPU();
  constexpr int64_t kHeads = 6, kTokens = 1500;
  for (int64_t d : {64, 128})
    for (const std::string format : {"bf16", "fp8"}) {
      const std::string what = "d=" + std::to_string(d) + " " + format;
      const HeadTensor x = mixed_heads(kHeads, kTokens, d, static_cast<unsigned>(d) + 3);
      std::vector<uint16_t> xb(x.data.size());
      for (size_t i = 0; i < xb.size(); ++i) xb[i] = bf16_from_float(x.data[i]);
      cuda::DeviceBuffer<uint16_t> xd;
      xd.upload(xb.data(), xb.size());
      const CodecConfig c0 = parse_codec_spec("qvg:centroids=16,iters=0,init=random");
      cuda::Encoder enc;
      cuda::DeviceParts start;
      enc.encode(xd.get(), DeviceElement::bf16, cuda::make_shape(c0, kHeads, kTokens, d),
                 cuda::GpuKMeansOptions::fixed_iterations(c0.kmeans), start, nullptr);
      const CodecConfig c = parse_codec_spec("qvg:centroids=16,iters=4,tol=1e-3,centroid_format=" + format);
      const cuda::QvgShape sh = cuda::make_shape(c, kHeads, kTokens, d);
      cuda::GpuKMeansOptions km;
      km.params = c.kmeans;
      km.warm_bf16 = start.centroids.get();
      km.device_convergence = true;
      cuda::DeviceParts on_device, on_host;
      enc.encode(xd.get(), DeviceElement::bf16, sh, km, on_device, nullptr);
      km.device_convergence = false;
      std::vector<KMeansStats> stats;
      enc.encode(xd.get(), DeviceElement::bf16, sh, km, on_host, nullptr, &stats);
      EncodedTensor dev, host;
      cuda::download_parts(on_device, dev, nullptr);
      cuda::download_parts(on_host, host, nullptr);
      expect_same_parts(host, dev, what + ": device rule against host rule");
      ASSERT_EQ(stats.size(), static_cast<size_t>(kHeads)) << what;
      int stopped = 0, ran_all = 0;
      for (int64_t h = 0; h < kHeads; ++h) {
        const int iters = stats[static_cast<size_t>(h)].iterations;
        ASSERT_GE(iters, 1) << what;
        ++(iters < c.kmeans.max_iter ? stopped : ran_all);
        CodecConfig ch = c;
        ch.kmeans.max_iter = iters;
        cuda::GpuKMeansOptions kh = cuda::GpuKMeansOptions::fixed_iterations(ch.kmeans);
        kh.warm_bf16 = start.centroids.get() + h * c.kmeans.centroids * d;
        cuda::DeviceParts alone;
        enc.encode(xd.get() + h * kTokens * d, DeviceElement::bf16, cuda::make_shape(ch, 1, kTokens, d), kh, alone,
                   nullptr);
        EncodedTensor one;
        cuda::download_parts(alone, one, nullptr);
        const std::string head = what + " head " + std::to_string(h) + " (" + std::to_string(iters) + " iterations)";
        EXPECT_EQ(one.codes, head_slice(dev.codes, kHeads, h)) << head;
        EXPECT_EQ(one.scales, head_slice(dev.scales, kHeads, h)) << head;
        EXPECT_EQ(one.span_scales, head_slice(dev.span_scales, kHeads, h)) << head;
        EXPECT_EQ(one.ids, head_slice(dev.ids, kHeads, h)) << head;
        if (format == "bf16") {
          EXPECT_EQ(one.centroids, head_slice(dev.centroids, kHeads, h)) << head;
        } else {  // FP8 codes [H][C][D], then FP32 scales [H]
          const size_t codes = static_cast<size_t>(kHeads * c.kmeans.centroids * d);
          std::vector<uint8_t> want = head_slice(dev.centroids, kHeads, h, 0, codes);
          const std::vector<uint8_t> scale = head_slice(dev.centroids, kHeads, h, codes);
          want.insert(want.end(), scale.begin(), scale.end());
          EXPECT_EQ(one.centroids, want) << head;
        }
      }
      // Both kinds of head in one encode (else the data no longer test what they are for).
      EXPECT_GT(stopped, 0) << what << ": no head stopped before max_iter";
      EXPECT_GT(ran_all, 0) << what << ": every head stopped before max_iter";
    }
}
#endif

TEST(Cuda, RepeatedRunsAreIdenticalAndErrorMatchesCpu) {
  REQUIRE_GPU();
  VideoLikeParams p;
  p.heads = 2;
  p.frames = 4;
  const HeadTensor x = make_video_like(p, TensorRole::key);
  for (const std::string spec : {"qvg:iters=3,init=random", "qvg-pro:iters=3,init=random"}) {
    const CodecConfig c = parse_codec_spec(spec);
    auto gpu_codec = make_codec(c, Backend::cuda);
    const EncodedTensor a = gpu_codec->encode(x), b = gpu_codec->encode(x);
    expect_same_parts(a, b, spec + ": repeated GPU runs");
    HeadTensor rg, rc;
    gpu_codec->decode(a, rg);
    const EncodedTensor cpu = make_codec(c)->encode(x);
    make_codec(c)->decode(cpu, rc);
    // Ids may differ where two centroids are nearly equidistant (float
    // summation order); the error must not: within 2 %.
    const double eg = compare(x, rg).mse, ec = compare(x, rc).mse;
    EXPECT_NEAR(eg, ec, 0.02 * ec) << spec;
  }
}

TEST(Cuda, WarmStartAndBadInput) {
  REQUIRE_GPU();
  const HeadTensor x = blobs(2, 1500, 128, 16, 5, 0.3f);
  const CodecConfig c = parse_codec_spec("qvg:centroids=16,iters=20");
  auto codec = make_codec(c, Backend::cuda);
  EncodeReport cold, warm;
  const EncodedTensor first = codec->encode(x, {}, &cold);
  EncodeOptions opt;
  opt.warm_start = &first;
  codec->encode(x, opt, &warm);
  for (size_t i = 0; i < warm.kmeans.size(); ++i) {
    EXPECT_TRUE(warm.kmeans[i].warm_started);
    EXPECT_LE(warm.kmeans[i].iterations, cold.kmeans[i].iterations);
  }
  for (const uint16_t bits : {uint16_t{0x7F80}, uint16_t{0xFFC1}}) {  // a BF16 infinity or NaN centroid: an error
    EncodedTensor broken = first;
    broken.centroids[6] = static_cast<uint8_t>(bits & 0xFF);
    broken.centroids[7] = static_cast<uint8_t>(bits >> 8);
    opt.warm_start = &broken;
    test::expect_encode_error([&] { codec->encode(x, opt); }, "warm-start centroid value 3 is not finite", "GPU warm start, non-finite");
  }
  opt.warm_start = nullptr;  // broken is gone
  HeadTensor bad = x;
  bad.at(1, 5, 3) = NAN;
  EXPECT_THROW(codec->encode(bad), Error);
  const HeadTensor odd = blobs(1, 100, 96, 4, 1);  // dim 96: no GPU k-means kernel
  EXPECT_THROW(make_codec(parse_codec_spec("qvg:centroids=4,block=32"), Backend::cuda)->encode(odd), Error);
  EncodedTensor broken = first;
  broken.codes.pop_back();
  HeadTensor out;
  EXPECT_THROW(codec->decode(broken, out), Error);
}

}  // namespace
}  // namespace qvg
