// Device-resident encoded tensors and the stream-ordered DeviceCodec
// (qvg/device_codec.h) against the CPU reference (label "gpu"; skipped where
// no device is usable): encodes byte-identical to the reference (the same
// stopping rule, decided on the device) on inputs without near-ties, warm
// starts included;
// decodes bit-identical; damaged tensors refused on upload.
#include <gtest/gtest.h>

#include "blobs.h"
#include "gpu_util.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include "qvg/codec.h"
#include "qvg/device_codec.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#if QVG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace qvg {
namespace {

void expect_same_parts(const EncodedTensor& want, const EncodedTensor& got, const std::string& what) {
  for (const PartField& p : kPartFields) EXPECT_TRUE(want.*(p.data) == got.*(p.data)) << what << ": part " << p.name;
}

#if QVG_WITH_CUDA
/// x's float values in device memory.
std::shared_ptr<void> to_device(const HeadTensor& x) {
  auto d = cuda_allocate(x.data.size() * 4);
  EXPECT_EQ(cudaMemcpy(d.get(), x.data.data(), x.data.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

std::vector<float> download_floats(const void* d, size_t n) {
  std::vector<float> h(n);
  cuda_copy_to_host(h.data(), d, n * 4);
  return h;
}

TEST(DeviceCodec, EncodeEqualsTheCpuReferenceAndDecodesBitIdentically) {
  REQUIRE_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // (A random start with C = the blob count can put two centroids in one blob: near-ties there.
  // Random starts: qvg-pro below, whose first stage draws the same way.)
  for (const std::string spec : {"rtn", "rtn-int4:block=16",
                                 "qvg:centroids=8,iters=3", "qvg-pro:centroids=4,iters=2,init=random",
                                 "qvg-pro-int4:centroids=4,iters=2,scale=fp16,levels=midrise", "kivi", "quarot-int4",
                                 "bf16", "qvg:centroids=8,iters=3,centroid_format=fp8",
                                 "qvg-pro:centroids=4,iters=2,init=random,centroid_format=fp8"})
    for (int64_t d : {64, 128}) {
      const std::string what = spec + " d=" + std::to_string(d);
      const CodecConfig c = parse_codec_spec(spec);
      const HeadTensor x = blobs(3, 700, d, std::max(1, smoothing_stages(c)), c.kmeans.centroids,
                                 static_cast<unsigned>(d + smoothing_stages(c)));
      const auto xd = to_device(x);
      DeviceCodec codec(c);
      EncodeOptions opt;
      opt.role = TensorRole::value;
      const DeviceEncodedTensor e = codec.encode(xd.get(), DeviceElement::f32, x.heads, x.tokens, x.dim,
                                                 TensorRole::value, s);
      const EncodedTensor want = make_codec(c)->encode(x, opt);
      const EncodedTensor got = e.to_host(s);
      expect_same_parts(want, got, what);
      EXPECT_EQ(e.bytes().total(), want.bytes().total()) << what;
      EXPECT_DOUBLE_EQ(e.bits_per_value(), want.bits_per_value()) << what;
      HeadTensor cpu;
      make_codec(c)->decode(want, cpu);
      auto out = cuda_allocate(x.data.size() * 4);
      codec.decode(e, out.get(), DeviceElement::f32, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_TRUE(download_floats(out.get(), x.data.size()) == cpu.data) << what << ": f32 decode";
      // The host form uploaded again decodes the same.
      const DeviceEncodedTensor back = DeviceEncodedTensor::from_host(got, s);
      codec.decode(back, out.get(), DeviceElement::f32, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_TRUE(download_floats(out.get(), x.data.size()) == cpu.data) << what << ": from_host";
    }
  cudaStreamDestroy(s);
}

// The stopping rule on the device (DeviceCodec's): blobs whose heads stop at
// different iterations, some by tol before max_iter and some at max_iter
// (the CPU's statistics say which, and the test asks for both: 2 or 3
// iterations of at most 3 with one stage, 2 to 4 of at most 4 with two), give the
// CPU reference's parts; one and two stages, BF16 and FP8 centroids, D = 64
// and 128; iters=0 (the start's assignment is the result) too. More blobs
// than centroids (merged blobs, as in test_cuda's KMeansMatchesCpuWithoutNearTies)
// from a k-means++ start: no near-ties.
TEST(DeviceCodec, StoppingRuleOnTheDeviceEqualsTheCpuReference) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128})
    for (const std::string spec : {"qvg:centroids=4,iters=3,tol=1e-3,init=kmeans++",
                                   "qvg:centroids=4,iters=3,tol=1e-3,init=kmeans++,centroid_format=fp8",
                                   "qvg-pro:stages=2,centroids=4,iters=4,tol=1e-3,init=kmeans++",
                                   "qvg-pro:stages=2,centroids=4,iters=4,tol=1e-3,init=kmeans++,centroid_format=fp8",
                                   "qvg:centroids=4,iters=0,init=kmeans++"}) {
      const std::string what = spec + " d=" + std::to_string(d);
      const CodecConfig c = parse_codec_spec(spec);
      const HeadTensor x = blobs(8, 1200, d, smoothing_stages(c), 32, static_cast<unsigned>(5 * d + 1));
      EncodeOptions opt;
      opt.role = TensorRole::key;
      EncodeReport report;
      const EncodedTensor want = make_codec(c)->encode(x, opt, &report);
      if (c.kmeans.max_iter > 0) {
        int stopped = 0, ran_all = 0;
        for (const KMeansStats& st : report.kmeans) ++(st.iterations < c.kmeans.max_iter ? stopped : ran_all);
        EXPECT_GT(stopped, 0) << what << ": no head stopped before max_iter";
        EXPECT_GT(ran_all, 0) << what << ": every head stopped before max_iter";
      }
      const auto xd = to_device(x);
      const DeviceEncodedTensor e =
          DeviceCodec(c).encode(xd.get(), DeviceElement::f32, x.heads, x.tokens, x.dim, TensorRole::key, nullptr);
      expect_same_parts(want, e.to_host(), what);
    }
}

// centroids=auto (C resolved from the span's length and the budget: 16 for
// BF16 centroids at 0.25 bits over 1,024 tokens): DeviceCodec and the
// host-form CUDA codec give the CPU reference's parts, and the C stored is
// the resolved one (32 for FP8 centroids at the same bits). Blobs of C
// clusters from a k-means++ start, one centroid a blob (d2-rounds can put two
// into one: near-ties, where CPU and GPU may part).
TEST(DeviceCodec, AutoCentroidsEqualTheCpuReference) {
  REQUIRE_GPU();
  for (const auto& [spec, want_c] : std::vector<std::pair<std::string, int>>{
           {"qvg:centroids=auto,centroid_bits=0.25,iters=3,init=kmeans++", 16},
           {"qvg-pro:centroids=auto,centroid_bits=0.25,iters=2,stages=2,init=kmeans++", 16},
           {"qvg-pro:centroids=auto,centroid_bits=0.25,iters=2,stages=2,centroid_format=fp8,init=kmeans++", 32}}) {
    const CodecConfig c = parse_codec_spec(spec);
    ASSERT_TRUE(c.auto_centroids) << spec;
    const HeadTensor x = blobs(2, 1024, 128, smoothing_stages(c), want_c, 31);
    const auto xd = to_device(x);
    EncodeOptions opt;
    opt.role = TensorRole::key;
    const EncodedTensor want = make_codec(c)->encode(x, opt);
    EXPECT_EQ(want.config.kmeans.centroids, want_c) << spec;
    const DeviceEncodedTensor e =
        DeviceCodec(c).encode(xd.get(), DeviceElement::f32, x.heads, x.tokens, x.dim, TensorRole::key, nullptr);
    const EncodedTensor got = e.to_host();
    EXPECT_EQ(got.config.kmeans.centroids, want_c) << spec;
    expect_same_parts(want, got, spec + " (DeviceCodec)");
    expect_same_parts(want, make_codec(c, Backend::cuda)->encode(x, opt), spec + " (host-form CUDA codec)");
  }
}

// pack() writes every part into one device buffer in PartBytes' order, and
// unpack() of those bytes (as a peer device receives them) gives a tensor
// with the same parts; both refuse what they cannot do.
TEST(DeviceCodec, PackAndUnpackGiveTheSameParts) {
  REQUIRE_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (const std::string spec : {"rtn", "qvg:centroids=8,iters=2", "qvg-pro:centroids=4,iters=2",
                                 "qvg:centroids=auto,centroid_bits=0.25,iters=2",
                                 "qvg-pro:centroids=4,iters=2,centroid_format=fp8"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const HeadTensor x = blobs(2, 512, 64, std::max(1, smoothing_stages(c)), 8, 41);
    const auto xd = to_device(x);
    const DeviceEncodedTensor e =
        DeviceCodec(c).encode(xd.get(), DeviceElement::f32, x.heads, x.tokens, x.dim, TensorRole::value, s);
    const EncodedTensor host = e.to_host(s);
    const size_t n = e.bytes().total();
    auto packed = cuda_allocate(n);
    e.pack(packed.get(), s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<uint8_t> bytes(n), want;
    cuda_copy_to_host(bytes.data(), packed.get(), n);
    for (const PartField& p : kPartFields) want.insert(want.end(), (host.*(p.data)).begin(), (host.*(p.data)).end());
    EXPECT_TRUE(bytes == want) << spec << ": the parts in PartBytes' order";
    // The receiver knows the spec (as e's config states it, C resolved), role and shape.
    const DeviceEncodedTensor back =
        DeviceEncodedTensor::unpack(e.config(), TensorRole::value, x.heads, x.tokens, x.dim, packed.get(), s);
    packed.reset();  // unpack copied the bytes
    expect_same_parts(host, back.to_host(s), spec + ": unpacked");
    EXPECT_EQ(back.bytes().total(), n) << spec;
  }
  {  // (tensors made on s release their memory there: gone before s)
    const HeadTensor x = blobs(1, 256, 64, 1, 4, 5);
    const auto xd = to_device(x);
    const DeviceEncodedTensor kivi = DeviceCodec(parse_codec_spec("kivi"))
                                         .encode(xd.get(), DeviceElement::f32, 1, 256, 64, TensorRole::key, s);
    auto buf = cuda_allocate(kivi.bytes().total());
    EXPECT_THROW(kivi.pack(buf.get(), s), Error);  // encoded on the host: send to_host()'s parts
    EXPECT_THROW(DeviceEncodedTensor::unpack(parse_codec_spec("kivi"), TensorRole::key, 1, 256, 64, buf.get(), s),
                 Error);
    const DeviceEncodedTensor q = DeviceCodec(parse_codec_spec("qvg:centroids=4,iters=1"))
                                      .encode(xd.get(), DeviceElement::f32, 1, 256, 64, TensorRole::key, s);
    EXPECT_THROW(q.warm_state(s).pack(buf.get(), s), Error);
    EXPECT_THROW(q.pack(nullptr, s), Error);
    EXPECT_THROW(DeviceEncodedTensor::unpack(q.config(), TensorRole::key, 1, 256, 60, buf.get(), s), Error);  // dim
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStreamDestroy(s);
}

// A stream of spans, each warm-started from the last (or from its
// warm_state()): the same bytes as the CPU reference warm-started from the
// same host tensors; BF16 and FP8 centroids (an FP8 warm start is widened on
// the device). A warm start of the other centroid format is an error.
TEST(DeviceCodec, WarmStartEqualsTheCpuReference) {
  REQUIRE_GPU();
  for (const std::string spec : {"qvg-pro:centroids=8,iters=3,stages=2",
                                 "qvg-pro:centroids=8,iters=3,stages=2,centroid_format=fp8"}) {
  const CodecConfig c = parse_codec_spec(spec);
  DeviceCodec codec(c);
  DeviceEncodedTensor prev;
  EncodedTensor prev_host;
  for (int span = 0; span < 3; ++span) {
    const HeadTensor x = blobs(2, 640, 128, 2, 8, 100 + static_cast<unsigned>(span), 99);
    const auto xd = to_device(x);
    const DeviceEncodedTensor e =
        codec.encode(xd.get(), DeviceElement::f32, x.heads, x.tokens, x.dim, TensorRole::key, nullptr,
                     span ? &prev : nullptr);
    EncodeOptions opt;
    if (span) opt.warm_start = &prev_host;
    const EncodedTensor want = make_codec(c)->encode(x, opt);
    expect_same_parts(want, e.to_host(), spec + " span " + std::to_string(span));
    prev = span == 1 ? e.warm_state(nullptr) : e;
    prev_host = want;
  }
  }
  const HeadTensor x = blobs(2, 640, 128, 2, 8, 7, 99);
  const auto xd = to_device(x);
  const CodecConfig bf = parse_codec_spec("qvg:centroids=8,iters=2");
  const CodecConfig f8 = parse_codec_spec("qvg:centroids=8,iters=2,centroid_format=fp8");
  const DeviceEncodedTensor a = DeviceCodec(bf).encode(xd.get(), DeviceElement::f32, 2, 640, 128, TensorRole::key, nullptr);
  const DeviceEncodedTensor b = DeviceCodec(f8).encode(xd.get(), DeviceElement::f32, 2, 640, 128, TensorRole::key, nullptr);
  EXPECT_THROW(DeviceCodec(f8).encode(xd.get(), DeviceElement::f32, 2, 640, 128, TensorRole::key, nullptr, &a), Error);
  EXPECT_THROW(DeviceCodec(bf).encode(xd.get(), DeviceElement::f32, 2, 640, 128, TensorRole::key, nullptr, &b), Error);
}

// encode_batch gives each tensor the bytes encode() gives it alone: every
// start (each tensor's head h draws with head h's seed), several stages,
// FP8 centroids, rtn and a host-encoded method; groups of one, two and all
// tensors; then warm starts from the first batch, and a batch with warm
// starts for only some tensors refused.
TEST(DeviceCodec, EncodeBatchEqualsEncodingOneByOne) {
  REQUIRE_GPU();
  const int64_t count = 5, heads = 3, tokens = 700, dim = 64;
  std::vector<float> all;
  for (int64_t i = 0; i < count; ++i) {
    const HeadTensor x = blobs(heads, tokens, dim, 2, 6, 40 + static_cast<unsigned>(i), 5);
    all.insert(all.end(), x.data.begin(), x.data.end());
  }
  const size_t per = static_cast<size_t>(heads * tokens * dim);
  auto xd = cuda_allocate(all.size() * 4);
  ASSERT_EQ(cudaMemcpy(xd.get(), all.data(), all.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  auto tensor = [&](int64_t i) { return static_cast<const float*>(xd.get()) + i * static_cast<int64_t>(per); };
  for (const std::string spec :
       {"qvg:centroids=16,iters=3", "qvg:centroids=16,iters=3,init=random", "qvg:centroids=16,iters=3,init=kmeans++",
        "qvg-pro:centroids=8,iters=3", "qvg:centroids=16,iters=2,centroid_format=fp8",
        "qvg-pro:centroids=8,iters=2,centroid_format=fp8", "rtn", "kivi"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const DeviceCodec codec(c);
    std::vector<DeviceEncodedTensor> one;
    for (int64_t i = 0; i < count; ++i)
      one.push_back(codec.encode(tensor(i), DeviceElement::f32, heads, tokens, dim, TensorRole::key, nullptr));
    for (const int64_t group : {int64_t{1}, int64_t{2}, count}) {
      const std::vector<DeviceEncodedTensor> batch = codec.encode_batch(
          xd.get(), DeviceElement::f32, count, heads, tokens, dim, TensorRole::key, nullptr, nullptr,
          group * heads * tokens);
      ASSERT_EQ(batch.size(), static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i)
        expect_same_parts(one[i].to_host(), batch[i].to_host(),
                          spec + " tensor " + std::to_string(i) + ", groups of " + std::to_string(group));
    }
    if (smoothing_stages(c) == 0) continue;
    // Warm starts: each tensor from its own first encode.
    std::vector<const DeviceEncodedTensor*> warm;
    for (const DeviceEncodedTensor& e : one) warm.push_back(&e);
    const std::vector<DeviceEncodedTensor> batch = codec.encode_batch(
        xd.get(), DeviceElement::f32, count, heads, tokens, dim, TensorRole::key, nullptr, warm.data(), 2 * heads * tokens);
    for (int64_t i = 0; i < count; ++i) {
      const DeviceEncodedTensor want =
          codec.encode(tensor(i), DeviceElement::f32, heads, tokens, dim, TensorRole::key, nullptr, &one[i]);
      expect_same_parts(want.to_host(), batch[i].to_host(), spec + " warm tensor " + std::to_string(i));
    }
    warm[2] = nullptr;
    EXPECT_THROW(codec.encode_batch(xd.get(), DeviceElement::f32, count, heads, tokens, dim, TensorRole::key, nullptr,
                                    warm.data()),
                 Error)
        << spec << ": warm starts for some tensors only";
  }
}

// decode_rows writes exactly its rows of a larger destination.
TEST(DeviceCodec, DecodeRowsWritesOnlyItsRows) {
  REQUIRE_GPU();
  const CodecConfig c = parse_codec_spec("qvg:centroids=8,iters=2,init=random");
  const HeadTensor x = blobs(2, 300, 128, 1, 8, 7);
  const auto xd = to_device(x);
  DeviceCodec codec(c);
  const DeviceEncodedTensor e = codec.encode(xd.get(), DeviceElement::f32, 2, 300, 128, TensorRole::key, nullptr);
  HeadTensor cpu;
  make_codec(c)->decode(e.to_host(), cpu);
  const int64_t rows = 1000, at = 417;
  auto out = cuda_allocate(static_cast<size_t>(2 * rows * 128) * 2);
  ASSERT_EQ(cudaMemset(out.get(), 0xA5, static_cast<size_t>(2 * rows * 128) * 2), cudaSuccess);
  codec.decode_rows(e, out.get(), DeviceElement::bf16, rows, at, nullptr);
  std::vector<uint16_t> got(static_cast<size_t>(2 * rows * 128));
  cuda_copy_to_host(got.data(), out.get(), got.size() * 2);
  size_t wrong = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < 128; ++j) {
        const uint16_t v = got[static_cast<size_t>((h * rows + t) * 128 + j)];
        const bool in = t >= at && t < at + 300;
        wrong += in ? v != bf16_from_float(cpu.at(h, t - at, j)) : v != 0xA5A5;
      }
  EXPECT_EQ(wrong, 0u);
  EXPECT_THROW(codec.decode_rows(e, out.get(), DeviceElement::bf16, rows, rows - 10, nullptr), Error);
}

// decode_rows_token_major writes the values decode_rows writes, at token-major
// addresses ([rows][heads][dim]), and nothing else: every decode kernel (the
// lines decode with 0, 1, 2 and 4 stages, BF16 and FP8 centroids; the
// 16-values decode for dims the lines decode does not take; code=cq), bf16
// and f32 output, odd ranges.
TEST(DeviceCodec, DecodeRowsTokenMajorEqualsHeadMajorTransposed) {
  REQUIRE_GPU();
  struct Case {
    const char* spec;
    int64_t dim;
  };
  for (const Case& k : {Case{"qvg:centroids=8,iters=2,init=random", 128}, Case{"qvg:centroids=8,iters=2,init=random", 64},
                        Case{"qvg:centroids=8,iters=2,init=random,centroid_format=fp8", 128},
                        Case{"qvg-pro:centroids=8,iters=2,stages=2", 128},
                        Case{"qvg-pro:centroids=4,iters=2,stages=4,centroid_format=fp8", 64}, Case{"rtn", 128},
                        Case{"rtn-int4:block=16", 48}, Case{"qvg:centroids=8,iters=2,init=random,block=32", 96},
                        Case{"qvg:code=cq,cq_dim=2,cq_codewords=16,centroids=8,iters=2", 128}}) {
    const CodecConfig c = parse_codec_spec(k.spec);
    const int64_t heads = 3, tokens = 301, dim = k.dim;
    const HeadTensor x = blobs(heads, tokens, dim, 1, 8, 11);
    DeviceCodec codec(c);
    DeviceEncodedTensor e;
    if (device_encodes(c) && (smoothing_stages(c) == 0 || dim == 64 || dim == 128)) {  // GPU k-means: 64, 128
      const auto xd = to_device(x);
      e = codec.encode(xd.get(), DeviceElement::f32, heads, tokens, dim, TensorRole::key, nullptr);
    } else {
      e = DeviceEncodedTensor::from_host(make_codec(c)->encode(x));
    }
    for (const DeviceElement type : {DeviceElement::bf16, DeviceElement::f32}) {
      const size_t elt = type == DeviceElement::f32 ? 4 : 2;
      const std::string what = std::string(k.spec) + " dim " + std::to_string(dim) + (elt == 4 ? " f32" : " bf16");
      // The head-major decode of the whole tensor: what the rows must hold.
      auto whole = cuda_allocate(static_cast<size_t>(heads * tokens * dim) * elt);
      codec.decode_rows(e, whole.get(), type, tokens, 0, nullptr);
      std::vector<uint8_t> want(static_cast<size_t>(heads * tokens * dim) * elt);
      cuda_copy_to_host(want.data(), whole.get(), want.size());
      for (const auto& [begin, count, rows, at] :
           {std::array<int64_t, 4>{0, 301, 301, 0}, std::array<int64_t, 4>{17, 283, 400, 57},
            std::array<int64_t, 4>{300, 1, 5, 4}, std::array<int64_t, 4>{5, 7, 7, 0}}) {
        const size_t bytes = static_cast<size_t>(rows * heads * dim) * elt;
        auto out = cuda_allocate(bytes);
        ASSERT_EQ(cudaMemset(out.get(), 0xA5, bytes), cudaSuccess);
        codec.decode_rows_token_major(e, out.get(), type, rows, at, nullptr, begin, count);
        std::vector<uint8_t> got(bytes);
        cuda_copy_to_host(got.data(), out.get(), bytes);
        size_t wrong = 0;
        const size_t row = static_cast<size_t>(dim) * elt;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h) {
            const uint8_t* g = got.data() + static_cast<size_t>(r * heads + h) * row;
            if (r >= at && r < at + count)
              wrong += std::memcmp(g, want.data() + static_cast<size_t>(h * tokens + begin + r - at) * row, row) != 0;
            else
              wrong += std::any_of(g, g + row, [](uint8_t b) { return b != 0xA5; });
          }
        EXPECT_EQ(wrong, 0u) << what << " tokens [" << begin << ", +" << count << ") to rows " << at << " of " << rows;
      }
    }
    auto out = cuda_allocate(static_cast<size_t>(10 * heads * dim) * 2);
    EXPECT_THROW(codec.decode_rows_token_major(e, out.get(), DeviceElement::bf16, 10, 5, nullptr, 0, 6), Error)
        << k.spec << ": rows past the destination";
  }
}

// What the decoders refuse is refused on upload; a tensor of another method
// is refused by decode; a mismatched warm start by encode.
TEST(DeviceCodec, BadInputIsAnError) {
  REQUIRE_GPU();
  const CodecConfig c = parse_codec_spec("qvg:centroids=4,iters=2");
  const HeadTensor x = blobs(2, 64, 64, 1, 4, 3);
  EncodedTensor e = make_codec(c)->encode(x);
  e.ids[5] = 4;
  EXPECT_THROW(DeviceEncodedTensor::from_host(e), Error);
  e = make_codec(c)->encode(x);
  e.codes.pop_back();
  EXPECT_THROW(DeviceEncodedTensor::from_host(e), Error);
  const DeviceEncodedTensor good = DeviceEncodedTensor::from_host(make_codec(c)->encode(x));
  auto out = cuda_allocate(x.data.size() * 4);
  EXPECT_THROW(DeviceCodec(parse_codec_spec("rtn")).decode(good, out.get(), DeviceElement::f32, nullptr), Error);
  const auto xd = to_device(x);
  const DeviceEncodedTensor other = DeviceEncodedTensor::from_host(make_codec("qvg:centroids=2,iters=1")->encode(x));
  EXPECT_THROW(DeviceCodec(c).encode(xd.get(), DeviceElement::f32, 2, 64, 64, TensorRole::key, nullptr, &other), Error);
  EXPECT_TRUE(DeviceEncodedTensor().empty());
  EXPECT_THROW(DeviceEncodedTensor().to_host(), Error);
}
#endif

TEST(DeviceCodec, WithoutDeviceTheConstructorThrows) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a device is usable: covered by the other tests";
  EXPECT_THROW(DeviceCodec(parse_codec_spec("qvg")), Error);
  EXPECT_THROW(DeviceEncodedTensor::from_host(make_codec("rtn")->encode(blobs(1, 16, 64, 1, 2, 1))), Error);
}

}  // namespace
}  // namespace qvg
