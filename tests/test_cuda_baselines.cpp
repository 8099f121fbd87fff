// KIVI, QuaRot and BF16 on the CUDA backend against the CPU reference (label
// "gpu"; skipped where no device is usable). Encode is the CPU reference;
// the GPU float decode must equal the CPU decode bit for bit, the BF16 and
// FP16 outputs the CPU decode rounded to nearest even, and every input the
// CPU decoder refuses (or the GPU kernels cannot take) throws qvg::Error.
#include <gtest/gtest.h>

#include "gpu_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/device_codec.h"
#include "qvg/half.h"

namespace qvg {
namespace {

EncodeOptions role_opt(TensorRole r) {
  EncodeOptions o;
  o.role = r;
  return o;
}

const char* role_str(TensorRole r) { return r == TensorRole::key ? "key" : "value"; }

// Key-like data: per-channel offset and spread (so per-channel and per-token
// groups differ), one huge positive and one huge negative outlier, a zero
// token row and a zero channel (KIVI groups with s = 0 for both roles).
HeadTensor test_input(int64_t heads, int64_t n, int64_t d, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> mean(static_cast<size_t>(d)), sd(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    mean[c] = 2.0f * nd(gen);
    sd[c] = 0.1f + std::fabs(nd(gen));
  }
  HeadTensor x(heads, n, d);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < d; ++c) x.at(h, t, c) = mean[c] + sd[c] * nd(gen);
  // Outliers within what KIVI/QuaRot can encode (FP16 scale and zero point).
  x.at(0, 0, 0) = 5.0e4f;
  x.at(heads - 1, n - 1, d - 1) = -3.0e4f;
  if (heads > 1) {
    for (int64_t c = 0; c < d; ++c) x.at(1, n / 2, c) = 0.0f;  // zero row
    for (int64_t t = 0; t < n; ++t) x.at(1, t, 3) = 0.0f;      // zero channel
  }
  return x;
}

// Index of the first float whose bits differ, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  return -1;
}

// GPU float decode == CPU decode (bytes); BF16 / FP16 = the CPU decode rounded.
void expect_gpu_decode_matches(const EncodedTensor& e, const std::string& what) {
  HeadTensor cpu, gpu;
  make_codec(e.config)->decode(e, cpu);
  make_codec(e.config, Backend::cuda)->decode(e, gpu);
  ASSERT_TRUE(cpu.same_shape(gpu)) << what;
  ASSERT_EQ(cpu.data.size(), gpu.data.size()) << what;
  const int64_t i = first_difference(cpu.data, gpu.data);
  if (i >= 0) {
    const int64_t d = e.dim, n = e.tokens;
    ADD_FAILURE() << what << ": float decode differs first at head " << i / (n * d) << ", token " << i / d % n
                  << ", channel " << i % d << ": CPU " << cpu.data[i] << " (0x" << std::hex
                  << float_bits(cpu.data[i]) << "), GPU " << std::dec << gpu.data[i] << " (0x" << std::hex
                  << float_bits(gpu.data[i]) << ")" << std::dec;
  }
  const std::vector<uint16_t> b = cuda_decode_bf16(e);
  ASSERT_EQ(b.size(), cpu.data.size()) << what;
  size_t bad_bf16 = 0;
  for (size_t k = 0; k < b.size(); ++k) bad_bf16 += b[k] != bf16_from_float(cpu.data[k]);
  EXPECT_EQ(bad_bf16, 0u) << what << ": BF16 output = the CPU decode rounded to BF16";
  std::vector<uint16_t> f(cpu.data.size());
  {
    const std::shared_ptr<void> out = cuda_allocate(f.size() * 2);
    cuda_decode_device(e, out.get(), DeviceElement::f16);
    cuda_copy_to_host(f.data(), out.get(), f.size() * 2);
  }
  size_t bad_fp16 = 0;
  for (size_t k = 0; k < f.size(); ++k) bad_fp16 += f[k] != fp16_from_float(cpu.data[k]);
  EXPECT_EQ(bad_fp16, 0u) << what << ": FP16 output = the CPU decode rounded to FP16";
}

std::string label(const std::string& spec, TensorRole r, int64_t n, int64_t d) {
  std::ostringstream os;
  os << spec << " " << role_str(r) << " N=" << n << " D=" << d;
  return os.str();
}

TEST(CudaBaselines, WithoutDeviceFactoriesThrow) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a device is usable: covered by the other tests";
  EXPECT_FALSE(why.empty());
  EXPECT_THROW(make_codec(parse_codec_spec("kivi"), Backend::cuda), Error);
  EXPECT_THROW(make_codec(parse_codec_spec("quarot"), Backend::cuda), Error);
}

TEST(CudaBaselines, KiviDecodeIsBitIdentical) {
  REQUIRE_GPU();
  // Default G = R = 32; R = 0 (quantized from the first token); G below 16
  // (a thread's 16 values span several value groups), G = 1 (every group has
  // s = 0), G = D (one value group per token); R larger than some N.
  const std::vector<std::string> specs = {
      "kivi", "kivi-int4", "kivi:residual=0", "kivi-int4:residual=0,group=16", "kivi:group=8,residual=5",
      "kivi-int4:group=4,residual=3", "kivi:group=1,residual=2", "kivi-int4:group=64,residual=128",
      "kivi:group=64,residual=0", "kivi-int4:group=128,residual=7"};
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 7, 33, 4681})
      for (const std::string& spec : specs) {
        const CodecConfig c = parse_codec_spec(spec);
        if (d % c.group) continue;
        const HeadTensor x = test_input(3, n, d, static_cast<unsigned>(n * 131 + d));
        for (TensorRole r : {TensorRole::key, TensorRole::value})
          expect_gpu_decode_matches(make_codec(c)->encode(x, role_opt(r)), label(spec, r, n, d));
      }
}

TEST(CudaBaselines, QuarotDecodeIsBitIdentical) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 7, 33, 4681})
      for (const std::string spec : {"quarot", "quarot-int4"}) {
        const HeadTensor x = test_input(3, n, d, static_cast<unsigned>(n * 7 + d));
        expect_gpu_decode_matches(make_codec(spec)->encode(x), label(spec, TensorRole::key, n, d));
      }
  // Every row width the kernel takes: 1 to 32 threads per row (0 to 5
  // butterfly stages across threads).
  for (int64_t d : {16, 32, 256, 512})
    for (int64_t n : {7, 33})
      for (const std::string spec : {"quarot", "quarot-int4"}) {
        const HeadTensor x = test_input(2, n, d, static_cast<unsigned>(n + d));
        expect_gpu_decode_matches(make_codec(spec)->encode(x), label(spec, TensorRole::key, n, d));
      }
}

TEST(CudaBaselines, Bf16DecodeIsBitIdentical) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 33, 4681}) {
      const HeadTensor x = test_input(2, n, d, static_cast<unsigned>(n + 3 * d));
      expect_gpu_decode_matches(make_codec("bf16")->encode(x), label("bf16", TensorRole::key, n, d));
    }
}

// fp8 reaches the GPU only through its method row (MethodTraits::
// decode_on_device): float decode bit for bit, BF16 / FP16 the CPU decode
// rounded; every block size, odd token counts, values spanning E4M3's
// subnormals, and the device-resident path (DeviceEncodedTensor::from_host
// + DeviceCodec::decode) too.
TEST(CudaBaselines, Fp8DecodeIsBitIdentical) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (int64_t n : {1, 7, 33, 4681})
      for (const std::string spec : {"fp8", "fp8:block=16", "fp8:block=64", "fp8:block=128"}) {
        if (d % parse_codec_spec(spec).block) continue;
        HeadTensor x = test_input(3, n, d, static_cast<unsigned>(n * 17 + d));
        for (int64_t c = 0; c < d; c += 5) x.at(2, 0, c) *= 1e-4f;  // small values: E4M3 subnormals
        expect_gpu_decode_matches(make_codec(spec)->encode(x), label(spec, TensorRole::key, n, d));
      }
  const HeadTensor x = test_input(2, 33, 128, 5);
  const EncodedTensor e = make_codec("fp8")->encode(x);
  HeadTensor cpu;
  make_codec("fp8")->decode(e, cpu);
  const DeviceEncodedTensor de = DeviceEncodedTensor::from_host(e, nullptr);
  const std::shared_ptr<void> out = cuda_allocate(cpu.data.size() * 4);
  DeviceCodec(e.config).decode(de, out.get(), DeviceElement::f32, nullptr);
  std::vector<float> gpu(cpu.data.size());
  cuda_copy_to_host(gpu.data(), out.get(), gpu.size() * 4);
  EXPECT_EQ(first_difference(cpu.data, gpu), -1);
  const EncodedTensor back = de.to_host(nullptr);
  EXPECT_EQ(back.codes, e.codes);
  EXPECT_EQ(back.scales, e.scales);
}

TEST(CudaBaselines, EncodeIsTheCpuReference) {
  REQUIRE_GPU();
  const HeadTensor x = test_input(2, 300, 128, 5);
  for (const std::string spec : {"kivi", "kivi-int4:residual=0", "quarot", "quarot-int4"})
    for (TensorRole r : {TensorRole::key, TensorRole::value}) {
      const CodecConfig c = parse_codec_spec(spec);
      const EncodedTensor a = make_codec(c)->encode(x, role_opt(r));
      const EncodedTensor b = make_codec(c, Backend::cuda)->encode(x, role_opt(r));
      EXPECT_EQ(a.codes, b.codes) << spec;
      EXPECT_EQ(a.scales, b.scales) << spec;
      EXPECT_EQ(a.zero_points, b.zero_points) << spec;
      EXPECT_EQ(a.full_precision, b.full_precision) << spec;
      EXPECT_EQ(a.role, b.role) << spec;
    }
}

TEST(CudaBaselines, BadInputThrows) {
  REQUIRE_GPU();
  const HeadTensor x = test_input(2, 100, 64, 9);
  HeadTensor out;
  for (const std::string spec : {"kivi", "kivi-int4", "quarot", "quarot-int4", "bf16"})
    for (TensorRole r : {TensorRole::key, TensorRole::value}) {
      const CodecConfig c = parse_codec_spec(spec);
      const auto gpu = make_codec(c, Backend::cuda);
      const EncodedTensor e = make_codec(c)->encode(x, role_opt(r));
      const std::string what = spec + " " + role_str(r);
      // A truncated part: the one every method has, then each other one.
      for (auto part : {&EncodedTensor::codes, &EncodedTensor::scales, &EncodedTensor::zero_points,
                        &EncodedTensor::full_precision}) {
        if ((e.*part).empty()) continue;
        EncodedTensor broken = e;
        (broken.*part).pop_back();
        EXPECT_THROW(make_codec(c)->decode(broken, out), Error) << what << " (CPU)";
        EXPECT_THROW(gpu->decode(broken, out), Error) << what;
        EXPECT_THROW(cuda_decode_bf16(broken), Error) << what;
      }
      // A part from a longer tensor.
      EncodedTensor longer = e;
      longer.full_precision.push_back(0);
      longer.full_precision.push_back(0);
      EXPECT_THROW(gpu->decode(longer, out), Error) << what;
      if (c.method == Method::bf16) continue;
      // A corrupt last group, the CPU decoder's corruption error: FP16 bits
      // of a +inf scale, a negative scale (-1.0), a -inf zero point.
      for (int which : {0, 1, 2}) {
        EncodedTensor corrupt = e;
        std::vector<uint8_t>& part = which == 2 ? corrupt.zero_points : corrupt.scales;
        const uint16_t bits = which == 0 ? 0x7C00 : (which == 1 ? 0xBC00 : 0xFC00);
        part[part.size() - 2] = static_cast<uint8_t>(bits & 0xFF);  // the last group, little-endian
        part[part.size() - 1] = static_cast<uint8_t>(bits >> 8);
        EXPECT_THROW(make_codec(c)->decode(corrupt, out), Error) << what << " corruption " << which << " (CPU)";
        EXPECT_THROW(gpu->decode(corrupt, out), Error) << what << " corruption " << which;
        EXPECT_THROW(cuda_decode_bf16(corrupt), Error) << what << " corruption " << which;
      }
    }
  // A tensor of another method.
  const EncodedTensor q = make_codec("quarot")->encode(x);
  EXPECT_THROW(make_codec(parse_codec_spec("kivi"), Backend::cuda)->decode(q, out), Error);
  // Shapes the CPU takes but the GPU kernels do not: D not a multiple of 16,
  // QuaRot D above 512.
  const HeadTensor narrow = test_input(1, 40, 8, 2);
  for (const std::string spec : {"quarot", "kivi:group=8,residual=0", "bf16"}) {
    const EncodedTensor e = make_codec(spec)->encode(narrow);
    EXPECT_THROW(make_codec(parse_codec_spec(spec), Backend::cuda)->decode(e, out), Error) << spec << " D=8";
  }
  const EncodedTensor wide = make_codec("quarot")->encode(test_input(1, 3, 1024, 2));
  EXPECT_THROW(make_codec(parse_codec_spec("quarot"), Backend::cuda)->decode(wide, out), Error);
}

}  // namespace
}  // namespace qvg
