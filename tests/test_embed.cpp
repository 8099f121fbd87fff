// What an engine that embeds the library uses beyond the codecs: encodes of
// its own buffers in place (HeadTensorView, in the three layouts), and
// encoded tensors as bytes (serialize_encoded / deserialize_encoded) in the
// layout the Python pickles' fields and the streaming cache file already use.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "cache/checksum.h"
#include "error_util.h"
#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/config.h"
#include "qvg/cuda.h"
#include "qvg/serialize.h"
#include "qvg/tensor.h"

namespace qvg {
namespace {

using test::error_of;

const std::string kData = std::string(QVG_SOURCE_DIR) + "/tests/data/";

/// Value i of the test input: a multiple of 1/64 in [-1, 1], from an integer
/// hash (exact in float; python/tests/test_qvg.py computes the same values).
float value_at(uint64_t i) {
  const uint64_t h = (i * 2654435761ull) % 4294967296ull;
  return static_cast<float>(static_cast<int64_t>((h >> 7) % 129) - 64) / 64.0f;
}

HeadTensor input(int64_t heads, int64_t tokens, int64_t dim) {
  HeadTensor x(heads, tokens, dim);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = value_at(i);
  return x;
}

/// x as [tokens][heads][dim].
std::vector<float> as_thd(const HeadTensor& x) {
  std::vector<float> b(x.data.size());
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t n = 0; n < x.tokens; ++n)
      for (int64_t d = 0; d < x.dim; ++d) b[static_cast<size_t>((n * x.heads + h) * x.dim + d)] = x.at(h, n, d);
  return b;
}

/// x as rows 0 .. tokens-1 of [heads][row_stride][dim]; the other rows hold NaN
/// (an encode that read them would refuse the input).
std::vector<float> as_rows(const HeadTensor& x, int64_t row_stride) {
  std::vector<float> b(static_cast<size_t>(x.heads * row_stride * x.dim), std::numeric_limits<float>::quiet_NaN());
  for (int64_t h = 0; h < x.heads; ++h)
    std::memcpy(b.data() + h * row_stride * x.dim, x.head(h), static_cast<size_t>(x.tokens * x.dim) * 4);
  return b;
}

void expect_same_parts(const EncodedTensor& a, const EncodedTensor& b, const std::string& what) {
  EXPECT_TRUE(same_codec(a.config, b.config)) << what;
  EXPECT_EQ(a.role, b.role) << what;
  EXPECT_EQ(a.heads, b.heads) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.dim, b.dim) << what;
  for (const PartField& p : kPartFields) EXPECT_TRUE(a.*p.data == b.*p.data) << what << ": part " << p.name;
}

// Every method, one spec each with several stages or a window where it has them.
const char* const kSpecs[] = {"qvg:centroids=8,stages=2,block=16", "qvg:centroids=4,centroid_format=fp8",
                              "rtn",                                "kivi:group=16,residual=8",
                              "quarot",                             "bf16",
                              "fp8:block=16"};

// ---- HeadTensorView ------------------------------------------------------------------

TEST(HeadTensorView, FactoriesDescribeTheLayouts) {
  const HeadTensor x = input(3, 5, 8);
  const HeadTensorView v = x;
  EXPECT_EQ(v.data, x.data.data());
  EXPECT_EQ(v.head_stride, 40);
  EXPECT_EQ(v.token_stride, 8);
  EXPECT_TRUE(v.contiguous());
  const std::vector<float> t = as_thd(x), r = as_rows(x, 7);
  const HeadTensorView tv = HeadTensorView::thd(t.data(), 5, 3, 8), rv = HeadTensorView::rows(r.data(), 3, 5, 8, 7);
  EXPECT_EQ(tv.head_stride, 8);
  EXPECT_EQ(tv.token_stride, 24);
  EXPECT_FALSE(tv.contiguous());
  EXPECT_EQ(rv.head_stride, 56);
  EXPECT_FALSE(rv.contiguous());
  EXPECT_TRUE(HeadTensorView::rows(r.data(), 3, 7, 8, 7).contiguous());
  EXPECT_TRUE(HeadTensorView::thd(t.data(), 15, 1, 8).contiguous());
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t n = 0; n < 5; ++n)
      for (int64_t d = 0; d < 8; ++d) {
        ASSERT_EQ(tv.at(h, n, d), x.at(h, n, d));
        ASSERT_EQ(rv.at(h, n, d), x.at(h, n, d));
      }
  EXPECT_EQ(tv.to_tensor().data, x.data);
  EXPECT_EQ(rv.to_tensor().data, x.data);
}

// An encode of a view gives the bytes of the encode of the same values in a
// HeadTensor, for every method, both roles and all three layouts (odd token
// counts: a KIVI window and partial groups).
TEST(HeadTensorView, EncodesTheBytesOfTheCopyingEncode) {
  for (const char* spec : kSpecs)
    for (const TensorRole role : {TensorRole::key, TensorRole::value}) {
      const HeadTensor x = input(3, 67, 64);
      const std::vector<float> t = as_thd(x), r = as_rows(x, 70);
      const auto codec = make_codec(spec);
      EncodeOptions opt;
      opt.role = role;
      const EncodedTensor ref = codec->encode(x, opt);
      const std::string what = std::string(spec) + (role == TensorRole::key ? " keys" : " values");
      expect_same_parts(codec->encode(HeadTensorView::thd(t.data(), 67, 3, 64), opt), ref, what + ", thd");
      expect_same_parts(codec->encode(HeadTensorView::rows(r.data(), 3, 67, 64, 70), opt), ref, what + ", rows");
      expect_same_parts(codec->encode(HeadTensorView::htd(x.data.data(), 3, 67, 64), opt), ref, what + ", htd");
    }
}

// The CUDA codec uploads a view's rows (one strided copy per head) and
// encodes the bytes it encodes from a HeadTensor. Skips without a device.
TEST(HeadTensorView, CudaCodecEncodesViewsAlike) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  for (const char* spec : {"qvg:centroids=8,stages=2,block=16", "rtn"}) {
    const HeadTensor x = input(3, 67, 64);
    const std::vector<float> t = as_thd(x), r = as_rows(x, 70);
    const auto codec = make_codec(parse_codec_spec(spec), Backend::cuda);
    const EncodedTensor ref = codec->encode(x);
    expect_same_parts(codec->encode(HeadTensorView::thd(t.data(), 67, 3, 64)), ref, std::string(spec) + ", thd");
    expect_same_parts(codec->encode(HeadTensorView::rows(r.data(), 3, 67, 64, 70)), ref, std::string(spec) + ", rows");
  }
}

// A cache fed token-major views holds and returns what one fed HeadTensors does.
TEST(HeadTensorView, CacheAppendReadsViewsInPlace) {
  CacheConfig c;
  c.layers = 1;
  c.heads = 2;
  c.dim = 32;
  c.key = parse_codec_spec("qvg:centroids=4,block=16");
  c.value = parse_codec_spec("kivi:group=16,residual=4");
  c.policy.quant_factor = 2;
  StreamingKVCache a(c), b(c);
  for (int chunk = 0; chunk < 5; ++chunk) {
    HeadTensor k = input(2, 24, 32), v = input(2, 24, 32);
    for (float& f : k.data) f *= static_cast<float>(chunk + 1) / 4.0f;
    for (float& f : v.data) f = -f;
    const std::vector<float> kt = as_thd(k), vt = as_thd(v);
    a.append(0, k, v);
    b.append(0, HeadTensorView::thd(kt.data(), 24, 2, 32), HeadTensorView::thd(vt.data(), 24, 2, 32));
  }
  ASSERT_EQ(a.spans_encoded(0), 2);
  const CacheRead ra = a.read(0), rb = b.read(0);
  EXPECT_EQ(ra.k.data, rb.k.data);
  EXPECT_EQ(ra.v.data, rb.v.data);
  EXPECT_EQ(a.memory().total.kv_bytes(), b.memory().total.kv_bytes());
}

TEST(HeadTensorView, BadViewsAreRefusedNamingTheProblem) {
  const auto codec = make_codec("rtn");
  std::vector<float> buf(2 * 8 * 64, 0.5f);
  EXPECT_NE(error_of([&] { HeadTensorView::thd(nullptr, 8, 2, 64); }).find("thd view: null data for a shape [2, 8, 64]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { HeadTensorView::rows(buf.data(), 2, 8, 64, 7); })
                .find("rows view: row_stride (7) is below tokens (8)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { HeadTensorView::htd(buf.data(), 2, -8, 64); }).find("must be non-negative"),
            std::string::npos);
  EXPECT_NE(error_of([&] { HeadTensorView::thd(buf.data(), int64_t{1} << 40, int64_t{1} << 20, 64); })
                .find("too large"),
            std::string::npos);
  HeadTensorView v = HeadTensorView::htd(buf.data(), 2, 8, 64);
  v.token_stride = 32;  // rows would overlap
  EXPECT_NE(error_of([&] { codec->encode(v); }).find("the token stride >= dim (64)"), std::string::npos);
  v.token_stride = 64;
  v.head_stride = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_NE(error_of([&] { codec->encode(v); }).find("reaches beyond 2^63 bytes"), std::string::npos);
  // A HeadTensor whose data does not match its shape, at the conversion.
  HeadTensor short_x(2, 8, 64);
  short_x.data.pop_back();
  EXPECT_NE(error_of([&] { codec->encode(short_x); }).find("data holds 1023 values but the shape [2, 8, 64] needs 1024"),
            std::string::npos);
  // A non-finite value is named by its place in [heads, tokens, dim], whatever the layout.
  std::vector<float> t(buf);
  t[static_cast<size_t>((5 * 2 + 1) * 64 + 3)] = std::numeric_limits<float>::infinity();  // token 5, head 1, channel 3
  EXPECT_NE(error_of([&] { codec->encode(HeadTensorView::thd(t.data(), 8, 2, 64)); })
                .find("holds a non-finite value (inf) at head 1, token 5, channel 3"),
            std::string::npos);
  CacheConfig c;
  c.layers = 1;
  c.heads = 2;
  c.dim = 64;
  StreamingKVCache cache(c);
  const HeadTensorView good = HeadTensorView::thd(buf.data(), 8, 2, 64);
  EXPECT_NE(error_of([&] { cache.append(0, good, HeadTensorView::thd(t.data(), 8, 2, 64)); })
                .find("the value chunk holds a non-finite value (inf) at head 1, token 5, channel 3"),
            std::string::npos);
  HeadTensorView null_view = good;
  null_view.data = nullptr;
  EXPECT_NE(error_of([&] { cache.append(0, good, null_view); }).find("the value chunk: null data"), std::string::npos);
  EXPECT_EQ(cache.chunks_appended(0), 0);
}

// ---- serialize_encoded / deserialize_encoded -------------------------------------------

/// Recomputes the record's CRC after a test changed its bytes.
void reseal(std::vector<uint8_t>& b) {
  const uint32_t crc = crc32(b.data(), b.size() - 4);
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.is_open()) << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(EncodedRecord, RoundTripsEveryMethod) {
  for (const char* spec : kSpecs)
    for (const TensorRole role : {TensorRole::key, TensorRole::value}) {
      const auto codec = make_codec(spec);
      EncodeOptions opt;
      opt.role = role;
      const EncodedTensor e = codec->encode(input(2, 45, 64), opt);
      const std::vector<uint8_t> bytes = serialize_encoded(e);
      const EncodedTensor back = deserialize_encoded(bytes);
      expect_same_parts(back, e, spec);
      EXPECT_EQ(codec_spec(back.config), codec_spec(e.config)) << spec;
      EXPECT_EQ(serialize_encoded(back), bytes) << spec;
      HeadTensor a, b;
      codec->decode(e, a);
      make_codec(codec_spec(back.config))->decode(back, b);
      EXPECT_EQ(a.data, b.data) << spec;
      // The overhead beyond the parts: header 24, spec, role, shape, C, part lengths, CRC.
      EXPECT_EQ(bytes.size(),
                e.bytes().total() + 24 + 4 + codec_spec(e.config).size() + 4 + 24 + 8 + 7 * 8 + 4)
          << spec;
    }
}

// tests/data/encoded_*.qvgt: records of input(2, 40, 32) (QVG_WRITE_GOLDEN=1
// rewrites them). The bytes are the format's and the CPU reference's: a
// record read back writes the same bytes, and the encode of the input today
// gives them. python/tests/test_qvg.py reads the same files.
TEST(EncodedRecord, GoldenFiles) {
  const struct {
    const char* file;
    const char* spec;
    TensorRole role;
  } cases[] = {
      {"encoded_qvg.qvgt",
       "qvg:bits=2,block=16,scale=fp8,levels=symmetric,stages=2,centroids=8,iters=10,tol=0.0001,init=kmeans++,"
       "seed=1234,centroid_format=bf16",
       TensorRole::key},
      {"encoded_kivi.qvgt", "kivi:bits=2,group=16,residual=8", TensorRole::value},
  };
  for (const auto& c : cases) {
    EncodeOptions opt;
    opt.role = c.role;
    const std::vector<uint8_t> now = serialize_encoded(make_codec(c.spec)->encode(input(2, 40, 32), opt));
    const std::string path = kData + c.file;
    if (std::getenv("QVG_WRITE_GOLDEN")) {
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(now.data()),
                                                  static_cast<std::streamsize>(now.size()));
    }
    const std::vector<uint8_t> golden = read_file(path);
    const EncodedTensor e = deserialize_encoded(golden);
    EXPECT_EQ(codec_spec(e.config), codec_spec(parse_codec_spec(c.spec))) << c.file;
    EXPECT_EQ(e.role, c.role) << c.file;
    EXPECT_EQ(e.heads * e.tokens * e.dim, 2 * 40 * 32) << c.file;
    EXPECT_EQ(serialize_encoded(e), golden) << c.file;
    EXPECT_EQ(now, golden) << c.file << ": the encode of the input no longer gives the golden bytes";
  }
}

/// The bytes of a streaming cache file from `pos` on, read as little-endian.
struct FileCursor {
  const std::vector<uint8_t>& b;
  size_t pos = 0;
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b.at(pos + static_cast<size_t>(i))) << (8 * i);
    pos += 8;
    return v;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b.at(pos + static_cast<size_t>(i))) << (8 * i);
    pos += 4;
    return v;
  }
};

// tests/data/cache_good.qvgc (written by `qvg stream --save`, version 1 of the
// file, whose span records versions 1 and 2 share): the bytes of its
// first span's values, framed as a record with the file's spec and the span's
// shape, are read as an encoded tensor that decodes to what the cache returns
// for those tokens, and written back to the same bytes.
TEST(EncodedRecord, ReadsTheSpanBytesOfACacheFile) {
  const std::string path = kData + "cache_good.qvgc";
  const std::vector<uint8_t> file = read_file(path);
  const StreamingKVCache cache = StreamingKVCache::load(path);
  FileCursor cur{file, 20};
  cur.pos += 8;  // "CONF", flags
  const uint64_t conf_bytes = cur.u64();
  cur.pos += conf_bytes + 4 + 16;  // payload, CRC; "LAYR", flags, length
  cur.pos += 8 + 3 * 8;           // layer, flags, counters
  ASSERT_GE(cur.u64(), 1u) << "spans";
  cur.u64();                                 // chunks
  cur.pos += 8 * 3;                          // id, first_chunk, chunks
  const int64_t first_token = static_cast<int64_t>(cur.u64());
  const int64_t tokens = static_cast<int64_t>(cur.u64());
  auto skip_record = [&] {
    const size_t start = cur.pos;
    cur.u64();  // C
    for (int p = 0; p < 7; ++p) cur.pos += cur.u64();
    return std::vector<uint8_t>(file.begin() + static_cast<std::ptrdiff_t>(start),
                                file.begin() + static_cast<std::ptrdiff_t>(cur.pos));
  };
  skip_record();                                  // keys (rotated on read: compared through values)
  const std::vector<uint8_t> span_v = skip_record();
  // The value codec as the file's config gives it (version 1: its fields).
  const std::string spec = codec_spec(cache.config().value);
  const int64_t heads = cache.config().heads, dim = cache.config().dim;

  std::vector<uint8_t> rec(kEncodedRecordMagic, kEncodedRecordMagic + 8);
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) rec.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(kEncodedRecordVersion, 4);
  put(0, 4);
  put(4 + spec.size() + 4 + 24 + span_v.size(), 8);
  put(spec.size(), 4);
  rec.insert(rec.end(), spec.begin(), spec.end());
  put(1, 4);  // values
  put(static_cast<uint64_t>(heads), 8);
  put(static_cast<uint64_t>(tokens), 8);
  put(static_cast<uint64_t>(dim), 8);
  rec.insert(rec.end(), span_v.begin(), span_v.end());
  put(0, 4);
  reseal(rec);

  const EncodedTensor e = deserialize_encoded(rec);
  EXPECT_EQ(serialize_encoded(e), rec);
  HeadTensor decoded;
  make_codec(spec)->decode(e, decoded);
  const CacheRead r = cache.read(0);
  ASSERT_GE(r.v.tokens, first_token + tokens);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t n = 0; n < tokens; ++n)
      for (int64_t d = 0; d < dim; ++d)
        ASSERT_EQ(decoded.at(h, n, d), r.v.at(h, first_token + n, d)) << h << " " << n << " " << d;
}

TEST(EncodedRecord, DamagedRecordsAreRefusedNamingTheProblem) {
  const EncodedTensor e = make_codec("qvg:centroids=8")->encode(input(2, 40, 64));
  const std::vector<uint8_t> good = serialize_encoded(e);
  auto err = [](std::vector<uint8_t> b) { return error_of([&] { deserialize_encoded(b); }); };
  auto has = [](const std::string& msg, const char* part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                 : ::testing::AssertionFailure() << msg;
  };
  EXPECT_TRUE(has(err({}), "encoded tensor record: 0 bytes, fewer than its header and CRC (28)"));
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  EXPECT_TRUE(has(err(b), "bad magic"));
  b = good;
  b[8] = 9;
  EXPECT_TRUE(has(err(b), "unsupported version 9 (this build reads version 1)"));
  b = good;
  b.pop_back();
  EXPECT_TRUE(has(err(b), "runs past the end"));
  b = good;
  b.push_back(0);
  EXPECT_TRUE(has(err(b), "1 unexpected bytes after the record"));
  b = good;
  b[100] ^= 1;
  EXPECT_TRUE(has(err(b), "checksum mismatch"));
  // Consistent checksums over bad content.
  b = good;
  b[28] = '#';  // the spec's first byte
  reseal(b);
  EXPECT_TRUE(has(err(b), "encoded tensor record: spec \"#vg:"));
  const size_t spec_end = 28 + codec_spec(e.config).size();
  b = good;
  b[spec_end] = 2;
  reseal(b);
  EXPECT_TRUE(has(err(b), "role 2 (0 = key, 1 = value)"));
  b = good;
  b[spec_end + 4 + 8] = 0;  // tokens = 0
  reseal(b);
  EXPECT_TRUE(has(err(b), "tokens = 0 is out of range"));
  b = good;
  b[spec_end + 4 + 24] = 9;  // C
  reseal(b);
  EXPECT_TRUE(has(err(b), "records 9 centroids; its spec has 8"));
  b = good;
  b[spec_end + 4 + 16] = 33;  // dim: the parts no longer fit the shape
  reseal(b);
  EXPECT_TRUE(has(err(b), "encoded tensor record: "));
  // A NaN FP8 block scale (the parts' sizes right).
  const size_t codes_len_at = spec_end + 4 + 24 + 8;
  const size_t scales_at = codes_len_at + 8 + e.codes.size() + 8;
  b = good;
  b[scales_at] = 0x7F;
  reseal(b);
  EXPECT_TRUE(has(err(b), "part 'scales' holds NaN (FP8 0x7f) at head 0, token 0, block 0"));
  // serialize refuses a tensor it could not read back.
  EncodedTensor bad = e;
  bad.codes.pop_back();
  EXPECT_TRUE(has(error_of([&] { serialize_encoded(bad); }), "serialize_encoded: encoded tensor is inconsistent: part 'codes'"));
  bad = e;
  bad.tokens = 0;
  EXPECT_TRUE(has(error_of([&] { serialize_encoded(bad); }), "serialize_encoded: encoded tensor has an empty shape"));
}

}  // namespace
}  // namespace qvg
