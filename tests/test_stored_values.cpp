// Values inside well-formed encoded tensors and cache files (issue 41): a part
// whose sizes and checksums are right can still hold NaN, an infinity or
// finite numbers whose decode overflows float. check_encoded_tensor refuses
// them, naming part and position; StreamingKVCache::load runs it on every
// span. References: every encoder's output passes (also at the top of each
// codec's range), and the check refuses a tensor exactly when its decode
// holds a non-finite value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cache/checksum.h"
#include "error_util.h"
#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/config.h"

namespace qvg {
namespace {

constexpr int64_t kHeads = 2, kTokens = 96, kDim = 64;

HeadTensor normal(float max_abs, int64_t tokens = kTokens, uint32_t seed = 3) {
  HeadTensor x(kHeads, tokens, kDim);
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  float m = 0;
  for (float& v : x.data) m = std::max(m, std::fabs(v = nd(gen)));
  for (float& v : x.data) v = static_cast<float>(static_cast<double>(v) / m * max_abs);
  return x;
}

std::string error_of(const EncodedTensor& e) {
  return test::error_of([&] { check_encoded_tensor(e); });
}

bool decodes_finite(const EncodedTensor& e) {
  HeadTensor out;
  make_codec(e.config)->decode(e, out);
  for (float v : out.data)
    if (!std::isfinite(v)) return false;
  return true;
}

void put_f32(std::vector<uint8_t>& b, size_t i, float v) { std::memcpy(b.data() + 4 * i, &v, 4); }

const std::vector<std::string> kSpecs = {"bf16", "rtn", "rtn-int4", "rtn:scale=fp16,levels=midrise", "qvg:centroids=16",
                                         "qvg-pro:centroids=8", "qvg:centroids=16,centroid_format=fp8", "kivi",
                                         "quarot"};

TEST(StoredValues, WhatEncodersWritePasses) {
  for (const std::string& spec : kSpecs) {
    const CodecConfig c = parse_codec_spec(spec);
    // Magnitude 1 and the top of the codec's range (encodable_magnitudes); for
    // bf16 and rtn the largest value BF16 holds and the largest float.
    const MagnitudeRange r = encodable_magnitudes(c);
    std::vector<float> tops = {1.0f};
    if (std::isfinite(r.hi)) tops.push_back(static_cast<float>(r.hi));
    else if (c.method == Method::bf16) tops.push_back(3.3895313e38f);
    else if (c.method == Method::rtn) tops.push_back(std::numeric_limits<float>::max());
    else tops.push_back(60000.0f);  // kivi, quarot: FP16 scales and zero points in range
    for (const float top : tops)
      for (const TensorRole role : {TensorRole::key, TensorRole::value}) {
        SCOPED_TRACE(spec + " at " + std::to_string(top));
        EncodeOptions opt;
        opt.role = role;
        const EncodedTensor e = make_codec(c)->encode(normal(top), opt);
        EXPECT_EQ(error_of(e), "");
        EXPECT_TRUE(decodes_finite(e));
      }
  }
}

TEST(StoredValues, NonFiniteStoredValuesAreNamed) {
  auto expect = [](EncodedTensor e, const std::string& fragment) {
    const std::string got = error_of(e);
    EXPECT_NE(got.find(fragment), std::string::npos) << "got: " << got << "\nwanted: " << fragment;
  };
  const HeadTensor x = normal(1.0f);
  {  // BF16 centroids [S][H][C][D]: stage 0, head 1, centroid 3, channel 5
    EncodedTensor e = make_codec("qvg:centroids=16")->encode(x);
    const size_t i = ((0 * kHeads + 1) * 16 + 3) * kDim + 5;
    e.centroids[2 * i] = 0xFF;
    e.centroids[2 * i + 1] = 0xFF;
    expect(e, "part 'centroids' holds a non-finite value (BF16 0xffff) at stage 0, head 1, centroid 3, channel 5");
  }
  {  // FP8 centroid codes, then FP32 scales [S][H]
    EncodedTensor e = make_codec("qvg:centroids=16,centroid_format=fp8")->encode(x);
    e.centroids[(1 * 16 + 2) * kDim + 7] = 0x7F;
    expect(e, "part 'centroids' holds NaN (FP8 0x7f) at stage 0, head 1, centroid 2, channel 7");
    e = make_codec("qvg:centroids=16,centroid_format=fp8")->encode(x);
    std::vector<uint8_t>& b = e.centroids;
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(b.data() + kHeads * 16 * kDim + 4, &inf, 4);
    expect(e, "FP8 centroid scale inf at stage 0, head 1");
  }
  {  // FP8 block scales [H][N][D/B], B = 64: one block per token
    EncodedTensor e = make_codec("rtn")->encode(x);
    e.scales[1 * kTokens + 40] = 0xFF;
    expect(e, "part 'scales' holds NaN (FP8 0xff) at head 1, token 40, block 0");
  }
  {  // FP16 block scales
    EncodedTensor e = make_codec("rtn:scale=fp16,block=32")->encode(x);
    e.scales[2 * (kTokens * 2 + 5) + 1] = 0x7C;  // head 1, token 2, block 1: +inf
    e.scales[2 * (kTokens * 2 + 5)] = 0x00;
    expect(e, "part 'scales' holds a non-finite value (FP16 0x7c00) at head 1, token 2, block 1");
  }
  {  // span scales
    EncodedTensor e = make_codec("qvg:centroids=16")->encode(x);
    put_f32(e.span_scales, 1, std::nanf(""));
    expect(e, "part 'span_scales' holds nan at head 1");
  }
  {  // bf16 method: full_precision [H][N][D]
    EncodedTensor e = make_codec("bf16")->encode(x);
    const size_t i = (1 * kTokens + 9) * kDim + 4;
    e.full_precision[2 * i] = 0x80;
    e.full_precision[2 * i + 1] = 0x7F;  // 0x7f80: +inf
    expect(e, "part 'full_precision' holds a non-finite value (BF16 0x7f80) at head 1, token 9, channel 4");
  }
  {  // KIVI keys: 96 tokens, R = G = 32 -> tokens 64..95 in the window [H][32][D]
    EncodedTensor e = make_codec("kivi")->encode(x);
    const size_t i = (0 * 32 + 3) * kDim + 2;
    e.full_precision[2 * i] = 0xC1;
    e.full_precision[2 * i + 1] = 0xFF;  // NaN
    expect(e, "part 'full_precision' holds a non-finite value (BF16 0xffc1) at head 0, token 67, channel 2");
    e = make_codec("kivi")->encode(x);
    e.scales[1] = 0xBC;  // group 0: -1.0
    e.scales[0] = 0x00;
    expect(e, "part 'scales' holds -1 (FP16 0xbc00) at head 0, group 0 (a scale is finite and >= 0)");
  }
  {  // QuaRot: scales and zero points [H][N]
    EncodedTensor e = make_codec("quarot")->encode(x);
    e.zero_points[2 * (kTokens + 11) + 1] = 0xFE;  // head 1, token 11: NaN
    expect(e, "part 'zero_points' holds nan (FP16 0x");
    expect(e, ") at head 1, token 11");
  }
  {  // ids at or above C
    EncodedTensor e = make_codec("qvg:centroids=16")->encode(x);
    e.ids[1 * kTokens + 8] = 16;
    expect(e, "part 'ids' holds 16 at stage 0, head 1, token 8 (C = 16 centroids)");
  }
}

// Finite parts whose decode overflows: the check refuses exactly the tensors
// whose decode holds a non-finite value (the reference is the decode itself).
TEST(StoredValues, RefusedExactlyWhenTheDecodeOverflows) {
  int refused = 0, passed = 0;
  for (const std::string& spec : {"rtn", "qvg:centroids=16", "qvg-pro:centroids=8"})
    for (int e2 = 100; e2 <= 136; e2 += 2) {
      EncodedTensor e = make_codec(spec)->encode(normal(1.0f));
      // Head 1's span scale times 2^e2 / 448 (the stored block scales reach 448).
      const float span = static_cast<float>(std::ldexp(1.0, e2) / 448.0);  // finite up to 2^136
      put_f32(e.span_scales, 1, span);
      const std::string err = error_of(e);
      SCOPED_TRACE(spec + " span scale " + std::to_string(span) + ": " + err);
      EXPECT_EQ(err.empty(), decodes_finite(e));
      if (!err.empty()) {
        EXPECT_NE(err.find("decode beyond the float range at head 1, token "), std::string::npos);
        ++refused;
      } else {
        ++passed;
      }
    }
  EXPECT_GT(refused, 0);
  EXPECT_GT(passed, 0);
  // The case: span scale 7.7e37 with every scale code kept.
  EncodedTensor e = make_codec("rtn")->encode(normal(1.0f));
  put_f32(e.span_scales, 0, 7.7e37f);
  EXPECT_NE(error_of(e).find("decode beyond the float range at head 0"), std::string::npos) << error_of(e);
  // A given decode is used instead of decoding again; it must be the tensor's.
  HeadTensor out;
  make_codec("rtn")->decode(e, out);
  EXPECT_THROW(check_encoded_tensor(e, &out), Error);
}

// ---- cache files ----------------------------------------------------------------------

uint32_t get_le32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t get_le64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

/// Offset in a cache file of layer 0's first span's part `part` (kPartFields
/// index) of its keys (value = false: values), walking docs/FORMAT.md's layout.
size_t span_part_offset(const std::vector<uint8_t>& f, bool keys, int part) {
  size_t pos = 20;
  pos += 16 + get_le64(f, pos + 8) + 4;  // CONF
  pos += 16;                             // LAYR head: payload follows
  pos += 4 + 4 + 3 * 8;                  // layer, flags, counters
  EXPECT_GE(get_le64(f, pos), 1u) << "layer 0 holds no span";
  pos += 16 + 5 * 8;  // span and chunk counts; span id .. tokens
  for (int t = 0; t < (keys ? 1 : 2); ++t) {
    pos += 8;  // centroids C
    for (int p = 0; p < 7; ++p) {
      if (t == (keys ? 0 : 1) && p == part) return pos + 8;
      pos += 8 + get_le64(f, pos);
    }
  }
  return 0;
}

/// Rewrites the section CRCs over the bytes (as fuzz_cache_file does).
void fix_checksums(std::vector<uint8_t>& b) {
  size_t pos = 20;
  while (b.size() - pos >= 20) {
    const uint64_t n = get_le64(b, pos + 8);
    const uint32_t crc = crc32(b.data() + pos, 16 + n);
    std::memcpy(b.data() + pos + 16 + n, &crc, 4);
    pos += 16 + n + 4;
  }
}

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::string load_error(const std::string& path) {
  return test::error_of([&] { StreamingKVCache::load(path); });
}

TEST(StoredValues, LoadRefusesValuesNoEncoderWrites) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "qvg_stored_values.qvgc").string();
  struct Case {
    std::string key, value;
    bool keys;
    int part;       // kPartFields index: 1 scales, 3 span_scales, 4 centroids, 6 full_precision
    size_t offset;  // byte inside the part
    std::vector<uint8_t> bytes;
    std::string fragment;
  };
  const float big = 7.7e37f;
  std::vector<uint8_t> big_bytes(4);
  std::memcpy(big_bytes.data(), &big, 4);
  const std::vector<Case> cases = {
      {"qvg:centroids=16", "rtn", true, 4, 2 * 10, {0xFF, 0xFF},
       "layer 0, span 0, keys: encoded tensor: part 'centroids' holds a non-finite value (BF16 0xffff) at stage 0, "
       "head 0, centroid 0, channel 10"},
      {"rtn", "kivi", false, 6, 2 * (64 + 1), {0x80, 0xFF},
       "layer 0, span 0, values: encoded tensor: part 'full_precision' holds a non-finite value (BF16 0xff80) at "
       "head 0, token "},
      {"bf16", "rtn", true, 6, 0, {0xC0, 0x7F},
       "layer 0, span 0, keys: encoded tensor: part 'full_precision' holds a non-finite value (BF16 0x7fc0) at head "
       "0, token 0, channel 0"},
      {"rtn", "rtn", false, 3, 4, big_bytes, "layer 0, span 0, values: encoded tensor: its values decode beyond the "
                                              "float range at head 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " / " + c.value);
    CacheConfig cfg;
    cfg.layers = 1;
    cfg.heads = kHeads;
    cfg.dim = kDim;
    cfg.key = parse_codec_spec(c.key);
    cfg.value = parse_codec_spec(c.value);
    cfg.policy.quant_factor = 2;
    StreamingKVCache cache(cfg);
    const HeadTensor k = normal(1.0f, 48, 1), v = normal(1.0f, 48, 2);
    for (int chunk = 0; chunk < 3; ++chunk) cache.append(0, k, v);
    cache.save(path);
    ASSERT_EQ(load_error(path), "");  // as written
    std::vector<uint8_t> f = read_file(path);
    const size_t at = span_part_offset(f, c.keys, c.part) + c.offset;
    ASSERT_GT(at, 20u);
    std::memcpy(f.data() + at, c.bytes.data(), c.bytes.size());
    fix_checksums(f);
    write_file(path, f);
    const std::string err = load_error(path);
    EXPECT_NE(err.find(c.fragment), std::string::npos) << err;
    EXPECT_EQ(err.rfind(path + ": ", 0), 0u) << err;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace qvg
