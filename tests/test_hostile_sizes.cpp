// Headers that claim absurd sizes (issue 27): 2^60 elements, and shapes whose
// products overflow 64 bits, in a .npy file, a .safetensors file, a streaming
// cache file and an encoded tensor's shape (as the Python unpickler takes it).
// Each must be refused with a qvg::Error naming the problem before anything of
// the claimed size is allocated: this binary replaces operator new to record
// the largest single allocation made while each file is read.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "cache/checksum.h"
#include "file_util.h"
#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/io.h"

namespace {

std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest{0};

}  // namespace

void* operator new(std::size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    size_t cur = g_largest.load(std::memory_order_relaxed);
    while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace qvg {
namespace {

using test::le64, test::npy_file, test::st_file;

constexpr size_t kAllocationBound = 1 << 20;  // every file here is a few KiB

/// Runs f, which must throw a qvg::Error containing every one of `words`;
/// returns the largest single allocation it made.
size_t refused(const std::function<void()>& f, std::initializer_list<const char*> words) {
  g_largest = 0;
  g_tracking = true;
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    g_tracking = false;
    ADD_FAILURE() << "expected qvg::Error, got another exception: " << e.what();
    return g_largest;
  }
  g_tracking = false;
  EXPECT_FALSE(message.empty()) << "no error";
  for (const char* w : words) EXPECT_NE(message.find(w), std::string::npos) << "'" << w << "' missing in: " << message;
  return g_largest;
}

class HostileSizes : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("qvg_test_sizes_") + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::filesystem::path dir_;
};

// The tracker itself: a 2 MiB vector is seen.
TEST(AllocationTracker, SeesALargeAllocation) {
  g_largest = 0;
  g_tracking = true;
  std::vector<uint8_t> v(2 << 20);
  g_tracking = false;
  EXPECT_GE(g_largest.load(), v.size());
}

TEST_F(HostileSizes, NpyHeaders) {
  const std::string p60 = write("n60.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }", ""));
  EXPECT_LT(refused([&] { read_npy(p60); }, {"n60.npy", "truncated", "shape [1152921504606846976] of f32 needs 4611686018427387904 data bytes"}),
            kAllocationBound);
  const std::string kv = write("kv60.npy", npy_file(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1073741824, 1048576, 1024), }", ""));
  EXPECT_LT(refused([&] { load_kv(kv, KvLayout::thd); }, {"kv60.npy", "truncated", "needs 2305843009213693952 data bytes"}),
            kAllocationBound);
  // Element count 2^64: overflows int64.
  const std::string o1 = write("o1.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""));
  EXPECT_LT(refused([&] { read_npy(o1); }, {"o1.npy", "shape [4294967296, 4294967296]", "too large"}), kAllocationBound);
  // Element count 2^62 fits, its byte count 2^65 does not.
  const std::string o2 = write("o2.npy", npy_file(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2147483648, 2147483648), }", ""));
  EXPECT_LT(refused([&] { read_npy(o2); }, {"o2.npy", "too large (byte count overflows)"}), kAllocationBound);
}

TEST_F(HostileSizes, SafetensorsHeaders) {
  const std::string p60 = write(
      "s60.safetensors",
      st_file(R"({"k":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}})", ""));
  EXPECT_LT(refused([&] { read_safetensors(p60); }, {"s60.safetensors", "out of range", "data buffer holds 0 bytes"}),
            kAllocationBound);
  const std::string m60 = write(
      "m60.safetensors", st_file(R"({"k":{"dtype":"BF16","shape":[1073741824,1048576,1024],"data_offsets":[0,8]}})",
                                 std::string(8, '\0')));
  EXPECT_LT(refused([&] { load_kv(m60, KvLayout::htd); }, {"m60.safetensors", "size mismatch", "needs 2305843009213693952 bytes"}),
            kAllocationBound);
  const std::string o1 = write(
      "o1.safetensors",
      st_file(R"({"k":{"dtype":"F16","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})", ""));
  EXPECT_LT(refused([&] { read_safetensors(o1); }, {"o1.safetensors", "too large"}), kAllocationBound);
  const std::string o2 = write(
      "o2.safetensors", st_file(R"({"k":{"dtype":"I64","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", ""));
  EXPECT_LT(refused([&] { read_safetensors(o2); }, {"o2.safetensors", "too large (byte count overflows)"}),
            kAllocationBound);
  // A data_offsets end that no file can reach (2^64 - 1).
  const std::string e = write(
      "end.safetensors",
      st_file(R"({"k":{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551615]}})", std::string(4, '\0')));
  EXPECT_LT(refused([&] { read_safetensors(e); }, {"end.safetensors", "out of range"}), kAllocationBound);
  // A tensor with an empty name (found by fuzz_safetensors, 2026-12-03: the header was accepted, but
  // the tensor could not be read by its name, as "" asks for a file's only tensor).
  const std::string empty = write(
      "empty.safetensors", st_file(R"({"":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"v":{"dtype":"U8",)"
                                   R"("shape":[4],"data_offsets":[4,8]}})",
                                   std::string(8, '\0')));
  for (const auto& read : std::vector<std::function<void()>>{[&] { read_safetensors_header(empty); },
                                                             [&] { read_safetensors(empty); },
                                                             [&] { read_safetensors_tensor(empty, "v"); }})
    refused(read, {"empty.safetensors", "a tensor has an empty name"});
}

// ---- the streaming cache file ---------------------------------------------------------

/// A saved cache as its sections, to edit and put back together with valid
/// checksums (docs/FORMAT.md, "Streaming cache file").
struct CacheFileParts {
  std::vector<uint8_t> header;                 // 20 bytes
  std::vector<std::vector<uint8_t>> sections;  // tag + flags + payload of each (length and CRC recomputed)

  explicit CacheFileParts(const std::vector<uint8_t>& f) : header(f.begin(), f.begin() + 20) {
    size_t pos = 20;
    while (pos < f.size()) {
      uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(f[pos + 8 + i]) << (8 * i);
      std::vector<uint8_t> s(f.begin() + static_cast<std::ptrdiff_t>(pos), f.begin() + static_cast<std::ptrdiff_t>(pos + 8));
      s.insert(s.end(), f.begin() + static_cast<std::ptrdiff_t>(pos + 16),
               f.begin() + static_cast<std::ptrdiff_t>(pos + 16 + n));
      sections.push_back(std::move(s));
      pos += 16 + n + 4;
    }
  }
  /// The payload of section i: byte `at` onwards.
  void set_u64(size_t i, size_t at, uint64_t v) {
    for (int b = 0; b < 8; ++b) sections[i][8 + at + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  std::string bytes() const {
    std::string out(header.begin(), header.end());
    for (const auto& s : sections) {
      std::string head(s.begin(), s.begin() + 8);
      head += le64(s.size() - 8);
      std::string payload(s.begin() + 8, s.end());
      const uint32_t crc = crc32_update(crc32(head.data(), head.size()), payload.data(), payload.size());
      out += head + payload + test::le32(crc);
    }
    return out;
  }
};

std::vector<uint8_t> saved(const StreamingKVCache& c, const std::string& path) {
  c.save(path);
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// 1 layer x 2 heads x 64 dims, chunks of 16 tokens, spans of 2 chunks (qvg, C = 4).
StreamingKVCache small_cache(int chunks) {
  CacheConfig c;
  c.layers = 1;
  c.heads = 2;
  c.dim = 64;
  c.key = parse_codec_spec("qvg:centroids=4");
  c.value = parse_codec_spec("qvg:centroids=4");
  c.policy.quant_factor = 2;
  StreamingKVCache cache(c, CacheOptions{1});
  HeadTensor x(2, 16, 64);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  for (int i = 0; i < chunks; ++i) cache.append(0, x, x);
  return cache;
}

// Layer payload offsets (version 2): u32 layer, u32 flags, i64 chunks / tokens /
// spans appended, u64 span count (at 32), u64 chunk count (at 40), records from 48.
// A span record: i64 id, first chunk, chunk count, first token, tokens (at 32), ...
// A chunk record: i64 index, first token, tokens (at 16), ...
constexpr size_t kSpanCount = 32, kRecords = 48, kSpanTokens = 32, kChunkTokens = 16;

TEST_F(HostileSizes, CacheFileCounts) {
  const std::string good = (dir_ / "good.qvgc").string();
  const CacheFileParts spans(saved(small_cache(3), good));  // one span (chunks 0, 1), chunk 2 in BF16
  ASSERT_EQ(spans.sections.size(), 2u);
  {  // 2^60 spans
    CacheFileParts f = spans;
    f.set_u64(1, kSpanCount, uint64_t{1} << 60);
    const std::string p = write("spans60.qvgc", f.bytes());
    EXPECT_LT(refused([&] { StreamingKVCache::load(p); }, {"spans60.qvgc", "1152921504606846976 spans", "cannot fit"}),
              kAllocationBound);
  }
  {  // a span of 2^60 tokens, with the parts of a 32-token span
    CacheFileParts f = spans;
    f.set_u64(1, kRecords + kSpanTokens, uint64_t{1} << 60);
    const std::string p = write("spantokens60.qvgc", f.bytes());
    EXPECT_LT(refused([&] { StreamingKVCache::load(p); }, {"spantokens60.qvgc", "layer 0"}), kAllocationBound);
  }
  {  // a section length of 2^60
    std::string b = spans.bytes();
    const size_t layer = 20 + 16 + (spans.sections[0].size() - 8) + 4;
    const std::string len = le64(uint64_t{1} << 60);
    b.replace(layer + 8, 8, len);
    const std::string p = write("section60.qvgc", b);
    EXPECT_LT(refused([&] { StreamingKVCache::load(p); }, {"section60.qvgc", "section length 1152921504606846976", "runs past"}),
              kAllocationBound);
  }
  const CacheFileParts tail(saved(small_cache(1), good));  // no span, one chunk in BF16
  for (const uint64_t tokens : {uint64_t{1} << 40, uint64_t{1} << 60}) {
    CacheFileParts f = tail;
    f.set_u64(1, kRecords + kChunkTokens, tokens);
    const std::string p = write("chunk" + std::to_string(tokens) + ".qvgc", f.bytes());
    EXPECT_LT(refused([&] { StreamingKVCache::load(p); },
                      {"layer 0", tokens == uint64_t{1} << 40 ? "truncated (chunk keys needs 281474976710656 bytes"
                                                              : "chunk tokens = 1152921504606846976 is out of range"}),
              kAllocationBound);
  }
}

TEST_F(HostileSizes, CacheFileConfig) {
  const std::string good = (dir_ / "good.qvgc").string();
  const CacheFileParts base(saved(small_cache(1), good));
  for (const char* field : {"heads", "dim", "layers"}) {
    CacheFileParts f = base;
    std::string conf(f.sections[0].begin() + 8, f.sections[0].end());
    const std::string from = std::string("\"") + field + "\":";
    const size_t at = conf.find(from);
    ASSERT_NE(at, std::string::npos) << conf;
    const size_t end = conf.find_first_of(",}", at);
    conf.replace(at + from.size(), end - at - from.size(), "1152921504606846976");
    f.sections[0].resize(8);
    f.sections[0].insert(f.sections[0].end(), conf.begin(), conf.end());
    const std::string p = write(std::string(field) + "60.qvgc", f.bytes());
    EXPECT_LT(refused([&] { StreamingKVCache::load(p); }, {field, "1152921504606846976 is out of range"}), kAllocationBound);
  }
}

// ---- an encoded tensor's shape (the Python unpickler takes any positive int64) -----------

TEST(HostileEncodedShapes, DecodeRefusesShapesTooLargeToHold) {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {int64_t{1} << 40, int64_t{1} << 40, 64},  // 2^86 values
      {int64_t{1} << 62, 4, 64},                 // h * n wraps to 0 in 64 bits
      {int64_t{1} << 57, 1, 64},                 // 2^63 values
      {1, int64_t{1} << 60, 64},                 // 2^66 values
      {int64_t{1} << 40, 1, int64_t{1} << 20},   // centroid bytes S x h x C x d x 2 overflow
  };
  for (const char* spec : {"qvg", "qvg-pro", "rtn", "kivi", "quarot", "bf16", "qvg:centroid_format=fp8"})
    for (const auto& [h, n, d] : shapes) {
      EncodedTensor e;
      e.config = parse_codec_spec(spec);
      e.heads = h;
      e.tokens = n;
      e.dim = d;
      try {
        validate(e.config, d);
      } catch (const Error&) {
        continue;  // (the unpickler refuses it before decode: quarot needs a power of two <= its limit)
      }
      HeadTensor out;
      const size_t largest = refused([&] { make_codec(e.config)->decode(e, out, 1); }, {});
      EXPECT_LT(largest, kAllocationBound) << spec << " [" << h << ", " << n << ", " << d << "]";
    }
}

}  // namespace
}  // namespace qvg
