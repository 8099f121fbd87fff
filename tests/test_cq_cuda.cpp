// qvg's codebook residual code (code=cq) on the GPU (label gpu; skipped where
// no device is usable): the fused decode (src/cuda/decode_cq.cuh) against the
// CPU reference decode, bit-identical in float (the same float operations in
// the same order) and its BF16 / FP16 rounding for those outputs, for every
// cq_dim and index width, both codebook formats, 0 to 2 stages, dims 16 to
// 128 and odd token counts; the range decode into a larger buffer; the CUDA
// codecs' encode (the CPU reference's, uploaded: the same bytes), warm starts
// included; pack / unpack; the GPU encoder's refusal.
#include <gtest/gtest.h>

#include "gpu_util.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/device_codec.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#include "qvg/qvg_steps.h"
#include "util/rng.h"
#if QVG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace qvg {
namespace {

#if QVG_WITH_CUDA

/// Tokens of uneven RMS whose channels differ in scale: every codeword and
/// token scale in use.
HeadTensor normal_tensor(int64_t heads, int64_t tokens, int64_t dim, uint64_t seed) {
  HeadTensor x(heads, tokens, dim);
  SplitMix64 rng(seed);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < tokens; ++i) {
      const double token_scale = 0.25 + 2.0 * static_cast<double>(i % 7) / 7.0;
      for (int64_t q = 0; q < dim; ++q)
        x.head(h)[i * dim + q] =
            static_cast<float>(rng.normal() * token_scale * (1.0 + 0.1 * static_cast<double>(q % 5)));
    }
  return x;
}

/// n floats of host memory -> device memory at d.
void upload_floats(void* d, const float* x, size_t n) {
  ASSERT_EQ(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice), cudaSuccess);
}

/// x's float values in device memory.
std::shared_ptr<void> to_device(const HeadTensor& x) {
  auto d = cuda_allocate(x.data.size() * 4);
  upload_floats(d.get(), x.data.data(), x.data.size());
  return d;
}

/// Bit patterns of the float values (== on the patterns: NaN-free data, -0 kept apart).
std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

void expect_same_parts(const EncodedTensor& want, const EncodedTensor& got, const std::string& what) {
  for (const PartField& p : kPartFields) EXPECT_TRUE(want.*(p.data) == got.*(p.data)) << what << ": part " << p.name;
}

/// e (a CPU encoding) decoded by the device into f32, bf16 and f16 equals the
/// CPU decode, and its BF16 / FP16 rounding (round to nearest even).
void expect_device_decode_equals_cpu(const EncodedTensor& e, const std::string& what) {
  HeadTensor cpu;
  make_codec(e.config)->decode(e, cpu);
  const DeviceEncodedTensor d = DeviceEncodedTensor::from_host(e);
  const DeviceCodec codec(e.config);
  const size_t n = cpu.data.size();
  auto out = cuda_allocate(n * 4);
  codec.decode(d, out.get(), DeviceElement::f32, nullptr);
  EXPECT_TRUE(bits_of(download<float>(out.get(), n)) == bits_of(cpu.data)) << what << ": f32";
  codec.decode(d, out.get(), DeviceElement::bf16, nullptr);
  const std::vector<uint16_t> bf = download<uint16_t>(out.get(), n);
  codec.decode(d, out.get(), DeviceElement::f16, nullptr);
  const std::vector<uint16_t> hf = download<uint16_t>(out.get(), n);
  size_t bad_bf = 0, bad_hf = 0;
  for (size_t i = 0; i < n; ++i) {
    bad_bf += bf[i] != bf16_from_float(cpu.data[i]);
    bad_hf += hf[i] != fp16_from_float(cpu.data[i]);
  }
  EXPECT_EQ(bad_bf, 0u) << what << ": bf16 values differing from the rounded CPU decode";
  EXPECT_EQ(bad_hf, 0u) << what << ": f16 values differing from the rounded CPU decode";
}

// Every G and every index width (K = 2 .. 256) with BF16 and FP8 codebooks:
// one stage, D = 64, an odd token count (the last row group partial). A
// block decodes about 61 rows here, so K <= 32 takes the codebooks from
// shared memory and K >= 64 gathers them from global memory (decode_cq.cu).
TEST(CqCuda, DecodeEqualsTheCpuReferenceForEveryDimAndWidth) {
  REQUIRE_GPU();
  const HeadTensor x = normal_tensor(2, 301, 64, 7);
  for (int g : {1, 2, 4, 8})
    for (int k = 2; k <= 256; k *= 2)
      for (const char* fmt : {"bf16", "fp8"}) {
        const std::string spec = "qvg:code=cq,cq_dim=" + std::to_string(g) + ",cq_codewords=" + std::to_string(k) +
                                  ",centroids=8,iters=2,centroid_format=" + fmt;
        const CodecConfig c = parse_codec_spec(spec);
        expect_device_decode_equals_cpu(make_codec(c)->encode(x), spec);
      }
}

// Stages 0 to 2, dims 16 to 128 (units per row 1 to 8, row bytes that are
// no multiple of 4), token counts around the 32-token row groups.
TEST(CqCuda, DecodeEqualsTheCpuReferenceAcrossShapes) {
  REQUIRE_GPU();
  for (const char* spec : {"qvg:code=cq,stages=0", "qvg:code=cq,stages=0,centroid_format=fp8,cq_codewords=8",
                           "qvg:code=cq,centroids=4,iters=2,cq_dim=4,cq_codewords=8",
                           "qvg:code=cq,stages=2,centroids=4,iters=2,cq_dim=1,cq_codewords=32",
                           "qvg:code=cq,stages=2,centroids=6,iters=2,centroid_format=fp8,cq_dim=8,cq_codewords=128"})
    for (int64_t d : {16, 48, 64, 128})
      for (int64_t n : {1, 31, 33, 97}) {
        const CodecConfig c = parse_codec_spec(spec);
        if (smoothing_stages(c) > 0 && c.kmeans.centroids > n) continue;
        const HeadTensor x = normal_tensor(3, n, d, static_cast<uint64_t>(d * 1000 + n));
        expect_device_decode_equals_cpu(make_codec(c)->encode(x),
                                        std::string(spec) + " d=" + std::to_string(d) + " n=" + std::to_string(n));
      }
}

// decode_rows: a sub-range of tokens into rows of a larger buffer; the rows
// around it keep their values.
TEST(CqCuda, DecodeRowsWritesOnlyItsRows) {
  REQUIRE_GPU();
  const CodecConfig c = parse_codec_spec("qvg:code=cq,cq_dim=2,cq_codewords=16,centroids=8,iters=2");
  const HeadTensor x = normal_tensor(2, 300, 128, 3);
  const EncodedTensor e = make_codec(c)->encode(x);
  HeadTensor cpu;
  make_codec(c)->decode(e, cpu);
  const DeviceEncodedTensor d = DeviceEncodedTensor::from_host(e);
  const DeviceCodec codec(c);
  const int64_t out_tokens = 400, offset = 57, begin = 33, count = 201;
  const size_t n = static_cast<size_t>(2 * out_tokens * 128);
  auto out = cuda_allocate(n * 4);
  const std::vector<float> fill(n, -7.0f);
  upload_floats(out.get(), fill.data(), n);
  codec.decode_rows(d, out.get(), DeviceElement::f32, out_tokens, offset, nullptr, begin, count);
  const std::vector<float> got = download<float>(out.get(), n);
  size_t bad = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < out_tokens; ++t)
      for (int64_t q = 0; q < 128; ++q) {
        const float v = got[static_cast<size_t>((h * out_tokens + t) * 128 + q)];
        const bool inside = t >= offset && t < offset + count;
        const float want = inside ? cpu.head(h)[(begin + t - offset) * 128 + q] : -7.0f;
        bad += std::memcmp(&v, &want, 4) != 0;
      }
  EXPECT_EQ(bad, 0u);
}

// The CUDA codecs encode code=cq on the GPU: the CPU reference's bytes, a
// warm start's centroids read from the device tensor as the CPU reads the
// host one; the device tensor packs, unpacks and decodes like the host one.
TEST(CqCuda, CodecsEncodeLikeTheCpuReference) {
  REQUIRE_GPU();
  for (const char* spec : {"qvg:code=cq,centroids=8,iters=2", "qvg:code=cq,centroids=8,iters=2,centroid_format=fp8"}) {
    const CodecConfig c = parse_codec_spec(spec);
    EXPECT_TRUE(device_encodes(c));
    const HeadTensor x0 = normal_tensor(2, 200, 64, 11), x1 = normal_tensor(2, 200, 64, 12);
    const EncodedTensor want0 = make_codec(c)->encode(x0);
    EncodeOptions opt;
    opt.warm_start = &want0;
    const EncodedTensor want1 = make_codec(c)->encode(x1, opt);
    // make_cuda_codec: host tensors in and out.
    const auto cuda = make_cuda_codec(c);
    expect_same_parts(want0, cuda->encode(x0), std::string(spec) + ": make_cuda_codec");
    HeadTensor cpu, gpu;
    make_codec(c)->decode(want1, cpu);
    cuda->decode(want1, gpu);
    EXPECT_TRUE(bits_of(gpu.data) == bits_of(cpu.data)) << spec << ": make_cuda_codec decode";
    // DeviceCodec: device tensors, a warm start from the device.
    const DeviceCodec codec(c);
    const auto xd0 = to_device(x0), xd1 = to_device(x1);
    const DeviceEncodedTensor e0 = codec.encode(xd0.get(), DeviceElement::f32, 2, 200, 64, TensorRole::key, nullptr);
    expect_same_parts(want0, e0.to_host(), std::string(spec) + ": DeviceCodec");
    const DeviceEncodedTensor e1 =
        codec.encode(xd1.get(), DeviceElement::f32, 2, 200, 64, TensorRole::key, nullptr, &e0);
    expect_same_parts(want1, e1.to_host(), std::string(spec) + ": warm start");
    const DeviceEncodedTensor w = e0.warm_state(nullptr);
    expect_same_parts(want1, codec.encode(xd1.get(), DeviceElement::f32, 2, 200, 64, TensorRole::key, nullptr, &w)
                                 .to_host(),
                      std::string(spec) + ": warm_state start");
    // pack / unpack.
    auto packed = cuda_allocate(e1.bytes().total());
    e1.pack(packed.get(), nullptr);
    const DeviceEncodedTensor back =
        DeviceEncodedTensor::unpack(c, TensorRole::key, 2, 200, 64, packed.get(), nullptr);
    expect_same_parts(want1, back.to_host(), std::string(spec) + ": unpacked");
    auto out = cuda_allocate(cpu.data.size() * 4);
    codec.decode(back, out.get(), DeviceElement::f32, nullptr);
    EXPECT_TRUE(bits_of(download<float>(out.get(), cpu.data.size())) == bits_of(cpu.data)) << spec << ": unpacked";
  }
}

// The GPU encode of code=cq (src/cuda/encode_cq.cuh) gives the CPU
// reference's bytes: cq_dim 1/2/4/8, 4..256 codewords, BF16 and FP8
// codebooks, D 64 and 128, odd token counts (1, 301, and 4099: a sample of
// every 5th token for K = 16), 0, 1 or 2 stages. Without stages the whole
// encoding is compared; with stages the GPU's stage centroids and ids are
// given to the CPU reference (qvg_encode_given_centroids_ref, BF16 stage
// centroids) so that the comparison is of the codebook step alone (the stage
// k-means is the same bytes only where it has no near-ties: docs/FORMAT.md).
TEST(CqCuda, EncodeEqualsTheCpuReferenceAcrossShapes) {
  REQUIRE_GPU();
  int cases = 0;
  for (int g : {1, 2, 4, 8})
    for (int k : {4, 16, 64, 256})
      for (const char* fmt : {"bf16", "fp8"})
        for (int64_t d : {64, 128})
          for (int stages : {0, 1, 2}) {
            if (stages > 0 && std::string(fmt) == "fp8") continue;  // given centroids are BF16
            std::vector<int64_t> lengths{301};
            if (stages == 0 && d == 64) lengths.push_back(1);
            if (k == 16 && d == 128 && g == 2) lengths.push_back(4099);
            for (int64_t n : lengths) {
              const std::string spec = "qvg:code=cq,cq_dim=" + std::to_string(g) + ",cq_codewords=" +
                                       std::to_string(k) + ",centroid_format=" + fmt + ",stages=" +
                                       std::to_string(stages) + ",centroids=8,iters=6";
              const std::string what = spec + " D=" + std::to_string(d) + " N=" + std::to_string(n);
              const CodecConfig c = parse_codec_spec(spec);
              const HeadTensor x = normal_tensor(2, n, d, 100 + g * 7 + k + d + n + stages);
              const DeviceCodec codec(c);
              const auto xd = to_device(x);
              const EncodedTensor got =
                  codec.encode(xd.get(), DeviceElement::f32, 2, n, d, TensorRole::key, nullptr).to_host();
              const EncodedTensor want =
                  stages == 0 ? make_codec(c)->encode(x)
                              : qvg_encode_given_centroids_ref(x, c, got.centroids, got.ids, TensorRole::key);
              expect_same_parts(want, got, what);
              ++cases;
            }
          }
  EXPECT_GT(cases, 100);
}

// encode_batch (several tensors' heads encoded as one) gives each tensor what
// encode gives it alone: the codebooks and their FP8 scales split per tensor,
// each head seeded as in its own tensor; without stages, the CPU's bytes.
TEST(CqCuda, EncodeBatchEqualsOneByOne) {
  REQUIRE_GPU();
  for (const char* spec : {"qvg:code=cq,cq_dim=4,cq_codewords=16,stages=0,centroid_format=fp8",
                           "qvg:code=cq,cq_dim=2,cq_codewords=8,centroids=8,iters=3"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const int64_t count = 3, heads = 2, n = 150, d = 64;
    const HeadTensor x = normal_tensor(count * heads, n, d, 77);
    const DeviceCodec codec(c);
    const auto xd = to_device(x);
    const std::vector<DeviceEncodedTensor> batch =
        codec.encode_batch(xd.get(), DeviceElement::f32, count, heads, n, d, TensorRole::value, nullptr, nullptr,
                           2 * heads * n);  // groups of two tensors: a split group and a lone one
    ASSERT_EQ(batch.size(), static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const float* xi = static_cast<const float*>(xd.get()) + i * heads * n * d;
      const EncodedTensor alone =
          codec.encode(xi, DeviceElement::f32, heads, n, d, TensorRole::value, nullptr).to_host();
      expect_same_parts(alone, batch[static_cast<size_t>(i)].to_host(), std::string(spec) + ": tensor " +
                                                                             std::to_string(i));
      if (smoothing_stages(c) == 0) {
        HeadTensor xh(heads, n, d);
        std::copy_n(x.data.begin() + i * heads * n * d, heads * n * d, xh.data.begin());
        EncodeOptions opt;
        opt.role = TensorRole::value;
        expect_same_parts(make_codec(c)->encode(xh, opt), alone, std::string(spec) + ": CPU, tensor " +
                                                                     std::to_string(i));
      }
    }
  }
}

// The given-centroids encode (GPU group quantization only) refuses code=cq
// with the reason.
TEST(CqCuda, TheGpuEncoderRefusesTheCode) {
  REQUIRE_GPU();
  const CodecConfig c = parse_codec_spec("qvg:code=cq,centroids=4");
  const HeadTensor x = normal_tensor(1, 64, 64, 5);
  const EncodedTensor e = make_codec(c)->encode(x);
  try {
    cuda_qvg_encode_given_centroids(x, c, std::vector<uint8_t>(e.centroids.begin(), e.centroids.end()), e.ids);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("does not take code=cq"), std::string::npos) << err.what();
  }
}

#endif  // QVG_WITH_CUDA

}  // namespace
}  // namespace qvg
