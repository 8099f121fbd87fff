// Tensor files: .npy and .safetensors readers/writers, K/V layouts, and every corruption
// the readers must turn into a qvg::Error naming the file and the problem.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>

#include <unistd.h>

#include "file_util.h"
#include "error_util.h"
#include "qvg/half.h"
#include "qvg/io.h"

namespace fs = std::filesystem;
using namespace qvg;
using test::le16, test::le32, test::le64, test::npy_file, test::st_file;

namespace {

// ---- helpers -------------------------------------------------------------------------------

class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("qvg_test_io_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

// Runs f; expects a qvg::Error whose message contains the path and every word.
void expect_error(const std::function<void()>& f, const std::string& path,
                  std::initializer_list<const char*> words) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    std::string rest = m;  // the words are looked for outside the path (file names echo them)
    if (!path.empty()) {
      const size_t at = m.find(path);
      EXPECT_NE(at, std::string::npos) << "path missing in: " << m;
      if (at != std::string::npos) rest.erase(at, path.size());
    }
    for (const char* w : words)
      EXPECT_NE(rest.find(w), std::string::npos) << "'" << w << "' missing in: " << m;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qvg::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected qvg::Error mentioning " << path;
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    s += le32(u);
  }
  return s;
}

HeadTensor random_heads(int64_t h, int64_t n, int64_t d, uint32_t seed) {
  HeadTensor x(h, n, d);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (auto& v : x.data) v = dist(rng);
  // A few values that exercise the conversions: signed zero, tiny, large, f16 overflow.
  if (x.data.size() >= 6) {
    x.data[0] = -0.0f;
    x.data[1] = 1e-6f;
    x.data[2] = -70000.0f;
    x.data[3] = 65504.0f;
    x.data[4] = 1.0f + 1.0f / 512.0f;  // a bf16 tie (rounds to even)
    x.data[5] = 3e-38f;
  }
  return x;
}

float round_to(DType t, float v) {
  return t == DType::f16 ? round_fp16(v) : t == DType::bf16 ? round_bf16(v) : v;
}

bool same_bits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

}  // namespace

// ---- basics --------------------------------------------------------------------------------

TEST(IoBasics, DTypeTable) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::i32, DType::i64})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_TRUE(dtype_is_float(DType::bf16));
  EXPECT_FALSE(dtype_is_float(DType::i32));
  expect_error([] { parse_dtype("f64"); }, "", {"unknown dtype", "f64"});
  EXPECT_EQ(parse_layout("thd"), KvLayout::thd);
  EXPECT_EQ(parse_layout("htd"), KvLayout::htd);
  EXPECT_STREQ(layout_name(KvLayout::thd), "thd");
  expect_error([] { parse_layout("nhd"); }, "", {"unknown layout", "nhd"});
}

TEST(IoBasics, ThdLayoutMapsAxes) {
  // file [tokens=2, heads=3, dim=2], value = 100 n + 10 h + d
  RawTensor t;
  t.dtype = DType::f32;
  t.shape = {2, 3, 2};
  std::vector<float> v;
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 3; ++h)
      for (int d = 0; d < 2; ++d) v.push_back(100.0f * n + 10.0f * h + d);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  const HeadTensor x = to_head_tensor(t, KvLayout::thd);
  ASSERT_EQ(x.heads, 3);
  ASSERT_EQ(x.tokens, 2);
  ASSERT_EQ(x.dim, 2);
  for (int h = 0; h < 3; ++h)
    for (int n = 0; n < 2; ++n)
      for (int d = 0; d < 2; ++d) EXPECT_EQ(x.at(h, n, d), 100.0f * n + 10.0f * h + d);
  // The same bytes read as htd: [heads=2, tokens=3, dim=2].
  const HeadTensor y = to_head_tensor(t, KvLayout::htd);
  EXPECT_EQ(y.heads, 2);
  EXPECT_EQ(y.tokens, 3);
  EXPECT_EQ(y.data, v);
  // And back.
  const RawTensor back = from_head_tensor(x, KvLayout::thd, DType::f32);
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.bytes, t.bytes);
  // A view of the same bytes (a caller's array) converts the same, and a
  // view one byte short is refused as a RawTensor one is.
  const RawTensorView view{t.dtype, t.shape, t.bytes};
  EXPECT_EQ(to_head_tensor(view, KvLayout::thd).data, x.data);
  EXPECT_EQ(to_head_tensor(view, KvLayout::htd).data, y.data);
  RawTensor short_t = t;
  short_t.bytes.pop_back();
  const RawTensorView short_view{t.dtype, t.shape, std::span<const uint8_t>(t.bytes).first(t.bytes.size() - 1)};
  for (const auto& convert : {std::function<void()>([&] { to_head_tensor(short_t, KvLayout::thd, "k.npy"); }),
                              std::function<void()>([&] { to_head_tensor(short_view, KvLayout::thd, "k.npy"); })}) {
    try {
      convert();
      ADD_FAILURE() << "a short tensor was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("k.npy: shape [2, 3, 2] of f32 needs 48 bytes but the tensor holds 47"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- round trips -------------------------------------------------------------------------

TEST_F(IoTest, KvRoundTripEveryDtypeLayoutBatchAndFormat) {
  const HeadTensor x = random_heads(3, 7, 5, 42);
  for (const char* ext : {".npy", ".safetensors"})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (KvLayout layout : {KvLayout::thd, KvLayout::htd})
        for (bool batch : {false, true}) {
          SCOPED_TRACE(std::string(ext) + " " + dtype_name(dt) + " " + layout_name(layout) +
                       (batch ? " batch" : ""));
          const std::string p = path(std::string("kv") + ext);
          save_kv(p, x, layout, dt, "k", batch);
          KvFileInfo info;
          const std::string name = std::string(ext) == ".npy" ? "" : "k";
          const HeadTensor y = load_kv(p, layout, name, DType::bf16, &info);
          EXPECT_EQ(info.dtype, dt);
          EXPECT_EQ(info.leading_batch, batch);
          EXPECT_EQ(info.shape.size(), batch ? 4u : 3u);
          ASSERT_TRUE(y.same_shape(x));
          for (size_t i = 0; i < x.data.size(); ++i)
            ASSERT_TRUE(same_bits(y.data[i], round_to(dt, x.data[i])))
                << "i=" << i << " x=" << x.data[i] << " y=" << y.data[i];
          // One rounding is final: writing the decoded values again gives identical bytes.
          const std::string bytes = slurp(p);
          save_kv(p, y, layout, dt, "k", batch);
          EXPECT_EQ(slurp(p), bytes);
        }
}

TEST_F(IoTest, RawRoundTripIntegerDtypes) {
  NamedTensors ts;
  RawTensor a{DType::u8, {3, 2}, {0, 1, 2, 253, 254, 255}};
  RawTensor b{DType::i32, {2}, {}};
  const int32_t bv[2] = {-7, 2147483647};
  b.bytes.resize(8);
  std::memcpy(b.bytes.data(), bv, 8);
  RawTensor c{DType::i64, {1, 1}, {}};
  const int64_t cv = -1234567890123LL;
  c.bytes.resize(8);
  std::memcpy(c.bytes.data(), &cv, 8);
  RawTensor scalar{DType::f32, {}, {0, 0, 0x80, 0x3F}};
  RawTensor empty{DType::f16, {0, 4}, {}};
  for (const RawTensor* t : {&a, &b, &c, &scalar, &empty}) {
    write_npy(path("t.npy"), *t);
    const RawTensor r = read_npy(path("t.npy"));
    EXPECT_EQ(r.dtype, t->dtype);
    EXPECT_EQ(r.shape, t->shape);
    EXPECT_EQ(r.bytes, t->bytes);
  }
  ts = {{"a", a}, {"b", b}, {"c", c}, {"scalar", scalar}, {"empty", empty}};
  write_safetensors(path("t.safetensors"), ts);
  const NamedTensors r = read_safetensors(path("t.safetensors"));
  ASSERT_EQ(r.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(r[i].first, ts[i].first);
    EXPECT_EQ(r[i].second.dtype, ts[i].second.dtype);
    EXPECT_EQ(r[i].second.shape, ts[i].second.shape);
    EXPECT_EQ(r[i].second.bytes, ts[i].second.bytes);
  }
}

TEST_F(IoTest, NonFiniteValuesAreReadAsTheyAre) {
  HeadTensor x(1, 2, 2);
  x.data = {NAN, INFINITY, -INFINITY, 1.0f};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    save_kv(path("nf.safetensors"), x, KvLayout::htd, dt);
    const HeadTensor y = load_kv(path("nf.safetensors"), KvLayout::htd);
    EXPECT_TRUE(std::isnan(y.data[0]));
    EXPECT_EQ(y.data[1], INFINITY);
    EXPECT_EQ(y.data[2], -INFINITY);
    EXPECT_EQ(y.data[3], 1.0f);
  }
}

// ---- golden bytes (independent of our writers) ---------------------------------------------

TEST_F(IoTest, GoldenNpyV1) {
  // What np.save(np.arange(6, dtype='<f4').reshape(2, 3)) writes: 10-byte preamble, a
  // 118-byte header (59 chars of dict, 58 spaces, '\n'), 24 bytes of data.
  std::string g = std::string("\x93NUMPY\x01\x00", 8) + std::string("\x76\x00", 2) +
                  "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                  std::string(58, ' ') + "\n" + f32_bytes({0, 1, 2, 3, 4, 5});
  ASSERT_EQ(g.size(), 128u + 24u);
  const std::string p = write("golden.npy", g);
  const RawTensor t = read_npy(p);
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t.bytes.size(), 24u);
  EXPECT_EQ(std::string(t.bytes.begin(), t.bytes.end()), f32_bytes({0, 1, 2, 3, 4, 5}));
  // Our writer produces exactly these bytes.
  write_npy(path("ours.npy"), t);
  EXPECT_EQ(slurp(path("ours.npy")), g);
  // Rank 2 is not a K/V tensor.
  expect_error([&] { load_kv(p, KvLayout::htd); }, p, {"shape [2, 3]"});
}

TEST_F(IoTest, GoldenNpyHeaderVariants) {
  const std::string data = f32_bytes({1.5f, -2.0f});
  // v2.0 (u32 length), v3.0 (utf-8 header): same content.
  for (int major : {2, 3}) {
    const std::string p = write("v" + std::to_string(major) + ".npy",
                                npy_file(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data));
    const RawTensor t = read_npy(p);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(std::string(t.bytes.begin(), t.bytes.end()), data);
  }
  // Key order, double quotes, no trailing comma, Python 2 long suffix, 1.0 padding to 16.
  std::string odd = std::string("\x93NUMPY\x01\x00", 8);
  const std::string dict = "{\"shape\": (1L, 2L), \"fortran_order\": False, \"descr\": \"<f4\"}";
  const std::string hdr = dict + std::string((16 - (10 + dict.size() + 1) % 16) % 16, ' ') + "\n";
  odd += le16(static_cast<uint16_t>(hdr.size())) + hdr + data;
  const RawTensor t = read_npy(write("odd.npy", odd));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 2}));
  // Fortran order with at most one dimension above 1 is the same bytes: accepted.
  const RawTensor f = read_npy(write(
      "f1.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", data)));
  EXPECT_EQ(f.shape, (std::vector<int64_t>{1, 2}));
}

TEST_F(IoTest, GoldenNpyHalfAndBf16) {
  // f16: 1.0 = 0x3C00, -2.0 = 0xC000; shape (1, 1, 2) read as a K/V tensor.
  const std::string p16 = write(
      "h.npy", npy_file(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 1, 2), }",
                        le16(0x3C00) + le16(0xC000)));
  HeadTensor x = load_kv(p16, KvLayout::thd);
  EXPECT_EQ(x.data, (std::vector<float>{1.0f, -2.0f}));
  // bf16 as np.save writes an ml_dtypes.bfloat16 array: '<V2'. 1.0 = 0x3F80, 0.5 = 0x3F00.
  for (const char* descr : {"<V2", "|V2", "<u2", "<i2"}) {
    const std::string p = write(
        "b.npy", npy_file(1, std::string("{'descr': '") + descr +
                                 "', 'fortran_order': False, 'shape': (1, 1, 2), }",
                          le16(0x3F80) + le16(0x3F00)));
    expect_error([&] { read_npy(p); }, p, {"unsupported dtype", descr, "bf16"});
    const RawTensor t = read_npy(p, DType::bf16);
    EXPECT_EQ(t.dtype, DType::bf16);
    x = load_kv(p, KvLayout::htd, "", DType::bf16);
    EXPECT_EQ(x.data, (std::vector<float>{1.0f, 0.5f}));
  }
  // The dtype name as str(dtype) writes it is unambiguous.
  const std::string pn = write(
      "bn.npy", npy_file(1, "{'descr': 'bfloat16', 'fortran_order': False, 'shape': (1, 1, 2), }",
                         le16(0x3F80) + le16(0x3F00)));
  EXPECT_EQ(load_kv(pn, KvLayout::htd).data, (std::vector<float>{1.0f, 0.5f}));
  // The hint is ignored for typed data ('<f2' stays f16).
  EXPECT_EQ(read_npy(p16, DType::bf16).dtype, DType::f16);
  // Our bf16 writer uses '<V2'.
  RawTensor b{DType::bf16, {2}, {0x80, 0x3F, 0x00, 0x3F}};
  write_npy(path("ours.npy"), b);
  EXPECT_NE(slurp(path("ours.npy")).find("'descr': '<V2'"), std::string::npos);
}

TEST_F(IoTest, GoldenSafetensors) {
  const std::string json =
      "{\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[4,8]},"
      "\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
  const std::string p = write("g.safetensors",
                              st_file(json, le16(0x3C00) + le16(0xC000) + le16(0x3F80) + le16(0x3F00)));
  std::map<std::string, std::string> meta;
  const NamedTensors ts = read_safetensors(p, &meta);
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].first, "a");  // file (offset) order
  EXPECT_EQ(ts[0].second.dtype, DType::f16);
  EXPECT_EQ(ts[0].second.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(ts[1].first, "b");
  EXPECT_EQ(ts[1].second.dtype, DType::bf16);
  EXPECT_EQ(ts[1].second.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(meta.at("format"), "pt");
  const RawTensor b = read_safetensors_tensor(p, "b");
  EXPECT_EQ(b.bytes, (std::vector<uint8_t>{0x80, 0x3F, 0x00, 0x3F}));
  const auto hdr = read_safetensors_header(p);
  EXPECT_EQ(hdr[1].begin, 4u);
  EXPECT_EQ(hdr[1].end, 8u);

  // Our writer: exact bytes for one F32 tensor with metadata (metadata first, then the
  // tensors in the given order; compact JSON padded with spaces to a multiple of 8).
  const std::string want_json =
      "{\"__metadata__\":{\"k\":\"v\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  NamedTensors one = {{"x", RawTensor{DType::f32, {2}, {0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0}}}};
  write_safetensors(path("ours.safetensors"), one, {{"k", "v"}});
  EXPECT_EQ(slurp(path("ours.safetensors")),
            st_file(want_json, f32_bytes({1.0f, -2.0f})));
  NamedTensors two = {{"zz", RawTensor{DType::u8, {3}, {1, 2, 3}}},
                      {"a", RawTensor{DType::i32, {1}, {5, 0, 0, 0}}}};
  write_safetensors(path("two.safetensors"), two);
  const std::string two_json =
      "{\"zz\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
      "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[3,7]}}";
  const std::string got = slurp(path("two.safetensors"));
  EXPECT_EQ(got, st_file(two_json, std::string("\x01\x02\x03\x05\x00\x00\x00", 7)));
  EXPECT_EQ((got.size() - 7) % 8, 0u);  // data buffer starts 8-aligned
}

TEST_F(IoTest, SafetensorsSelectByName) {
  const HeadTensor k = random_heads(2, 3, 4, 1), v = random_heads(2, 3, 4, 2);
  NamedTensors ts = {{"k", from_head_tensor(k, KvLayout::thd, DType::f32)},
                     {"v", from_head_tensor(v, KvLayout::thd, DType::bf16, true)}};
  const std::string p = path("kv.safetensors");
  write_safetensors(p, ts);
  EXPECT_EQ(load_kv(p, KvLayout::thd, "k").data, k.data);
  const HeadTensor v2 = load_kv(p, KvLayout::thd, "v");
  for (size_t i = 0; i < v.data.size(); ++i) EXPECT_EQ(v2.data[i], round_bf16(v.data[i]));
  expect_error([&] { load_kv(p, KvLayout::thd, "q"); }, p, {"no tensor named 'q'", "'k', 'v'"});
  expect_error([&] { load_kv(p, KvLayout::thd); }, p, {"2 tensors", "'k', 'v'"});
  write_safetensors(path("none.safetensors"), {});
  expect_error([&] { read_safetensors_tensor(path("none.safetensors")); },
               path("none.safetensors"), {"no tensors"});
}

TEST_F(IoTest, WriterRejectsBadInput) {
  const RawTensor t{DType::u8, {2}, {1, 2}};
  const std::string p = path("w.safetensors");
  expect_error([&] { write_safetensors(p, {{"a", t}, {"a", t}}); }, p, {"duplicate", "'a'"});
  expect_error([&] { write_safetensors(p, {{"", t}}); }, p, {"empty name"});
  expect_error([&] { write_safetensors(p, {{"__metadata__", t}}); }, p, {"reserved"});
  const RawTensor bad{DType::f32, {3}, {1, 2}};
  expect_error([&] { write_safetensors(p, {{"a", bad}}); }, p, {"needs 12 bytes", "holds 2"});
  expect_error([&] { write_npy(path("w.npy"), bad); }, path("w.npy"), {"needs 12 bytes"});
  expect_error([&] { write_npy((dir_ / "no" / "such" / "dir.npy").string(), t); }, "dir.npy",
               {"cannot open for writing"});
  HeadTensor x(1, 1, 2);
  expect_error([&] { save_kv(path("x.bin"), x, KvLayout::thd, DType::f32); }, path("x.bin"),
               {"extension", ".bin"});
  expect_error([&] { from_head_tensor(x, KvLayout::thd, DType::i32); }, "", {"i32"});
}

// ---- corrupt .npy ---------------------------------------------------------------------------

TEST_F(IoTest, NpyCorruptions) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::string data = f32_bytes({1, 2, 3, 4});
  auto check = [&](const std::string& name, const std::string& bytes,
                   std::initializer_list<const char*> words) {
    SCOPED_TRACE(name);
    const std::string p = write(name, bytes);
    expect_error([&] { read_npy(p); }, p, words);
  };
  expect_error([&] { read_npy(path("missing.npy")); }, path("missing.npy"), {"not found"});
  expect_error([&] { read_npy(dir_.string()); }, dir_.string(), {"directory"});
  check("empty.npy", "", {"truncated"});
  check("short.npy", std::string("\x93NUMPY\x01", 7), {"truncated"});
  check("magic.npy", "PK\x03\x04 this is a zip file, not npy", {"bad magic"});
  std::string v = npy_file(1, ok_dict, data);
  v[6] = 4;
  check("version.npy", v, {"version 4.0"});
  // header length beyond the end of the file
  std::string longhdr = npy_file(1, ok_dict, data);
  longhdr[8] = '\xFF';
  longhdr[9] = '\xFF';
  check("longhdr.npy", longhdr, {"truncated", "header length 65535"});
  // v2 header length of 4 GB: refused before allocating
  std::string huge = std::string("\x93NUMPY\x02\x00", 8) + le32(0xFFFFFFF0u) + "{}";
  check("hugehdr.npy", huge, {"header length", "limit"});
  // malformed dicts
  check("notdict.npy", npy_file(1, "['descr', '<f4']", data), {"malformed", "not a dict"});
  check("garbage.npy", npy_file(1, "{'descr': <f4>}", data), {"malformed", "unexpected character"});
  check("unterminated.npy", npy_file(1, "{'descr': '<f4, 'shape': (2, 2)}", data), {"malformed"});
  check("nokey.npy", npy_file(1, "{'descr': '<f4', 'shape': (2, 2), }", data),
        {"missing key 'fortran_order'"});
  check("extrakey.npy",
        npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", data),
        {"unexpected key 'x'"});
  check("shapelist.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 2]}", data),
        {"'shape' is not a tuple"});
  check("shapestr.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}", data),
        {"non-integer"});
  check("bigint.npy",
        npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", data),
        {"integer too large"});
  check("nested.npy", npy_file(1, "{'descr': " + std::string(40, '(') + "}", data),
        {"nesting too deep"});
  check("structured.npy",
        npy_file(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data),
        {"structured"});
  // layout, byte order, dtypes
  check("fortran.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data),
        {"Fortran"});
  check("bigendian.npy", npy_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data),
        {"'>f4'", "big-endian"});
  check("f64.npy", npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", data),
        {"unsupported dtype '<f8'", "float64"});
  check("pickle.npy", npy_file(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", data),
        {"'|O'", "pickle"});
  check("c64.npy", npy_file(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data),
        {"unsupported dtype '<c8'"});
  // data size vs shape
  check("truncdata.npy", npy_file(1, ok_dict, data.substr(0, 10)),
        {"truncated", "needs 16 data bytes", "holds 10"});
  check("trailing.npy", npy_file(1, ok_dict, data + "xx"), {"size mismatch", "trailing"});
  check("negdim.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }", data),
        {"negative dimension"});
  check("overflow.npy",
        npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", data),
        {"too large"});
  check("hugeshape.npy",
        npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", data),
        {"truncated", "needs 4000000000000 data bytes"});
}

// ---- corrupt .safetensors -----------------------------------------------------------------

TEST_F(IoTest, SafetensorsCorruptions) {
  const std::string data = f32_bytes({1, 2, 3, 4});
  auto entry = [](const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  auto check = [&](const std::string& name, const std::string& bytes,
                   std::initializer_list<const char*> words) {
    SCOPED_TRACE(name);
    const std::string p = write(name + ".safetensors", bytes);
    expect_error([&] { read_safetensors(p); }, p, words);
  };
  const std::string ok = "{\"x\":" + entry("F32", "[2,2]", 0, 16) + "}";
  ASSERT_NO_THROW(read_safetensors(write("ok.safetensors", st_file(ok, data))));

  check("empty", "", {"truncated"});
  check("short", "abc", {"truncated"});
  check("hugelen", le64(1ull << 40) + "{}", {"header length", "limit"});
  check("longlen", le64(1000) + "{}", {"truncated", "header length 1000"});
  check("magic", std::string("\x93NUMPY\x01\x00\x76\x00", 10) + std::string(118, ' '),
        {"header length"});
  check("notjsonobj", st_file("[1, 2]", data), {"must start with '{'"});
  check("nulpad", st_file(ok + std::string(1, '\0'), data), {"only spaces may follow"});  // a fuzzing find
  check("badjson", st_file("{\"x\": {\"dtype\": \"F32\",", data), {"malformed", "JSON"});
  check("notobj", st_file("{\"x\": 3}", data), {"tensor 'x'", "not an object"});
  check("missing", st_file("{\"x\": {\"dtype\": \"F32\", \"shape\": [4]}}", data),
        {"tensor 'x'", "data_offsets"});
  check("dtype", st_file("{\"x\":" + entry("F64", "[2]", 0, 16) + "}", data),
        {"unsupported dtype 'F64'", "tensor 'x'"});
  check("dtypenum", st_file("{\"x\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,16]}}", data),
        {"dtype is not a string"});
  check("shapeneg", st_file("{\"x\":" + entry("F32", "[-4]", 0, 16) + "}", data),
        {"non-negative integer"});
  check("shapefloat", st_file("{\"x\":" + entry("F32", "[4.5]", 0, 16) + "}", data),
        {"non-negative integer"});
  check("shapeoverflow",
        st_file("{\"x\":" + entry("F32", "[4611686018427387904,4611686018427387904]", 0, 16) + "}", data),
        {"too large"});
  check("offsetsbad", st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", data),
        {"data_offsets is not [begin, end]"});
  check("offsetsneg", st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", data),
        {"data_offsets is not [begin, end]"});
  check("outofrange", st_file("{\"x\":" + entry("F32", "[8]", 0, 32) + "}", data),
        {"out of range", "tensor 'x'"});
  check("hugeoffset",
        st_file("{\"x\":" + entry("F32", "[4]", 18446744073709551600ull, 18446744073709551615ull) + "}", data),
        {"out of range"});
  check("reversed", st_file("{\"x\":" + entry("F32", "[0]", 16, 0) + "}", data), {"end 0 < begin 16"});
  check("mismatch", st_file("{\"x\":" + entry("F32", "[3]", 0, 16) + "}", data),
        {"size mismatch", "tensor 'x'", "needs 12 bytes"});
  check("overlap",
        st_file("{\"x\":" + entry("F32", "[3]", 0, 12) + ",\"y\":" + entry("F32", "[2]", 8, 16) + "}", data),
        {"overlap", "'x'", "'y'"});
  check("gap",
        st_file("{\"x\":" + entry("F32", "[1]", 0, 4) + ",\"y\":" + entry("F32", "[2]", 8, 16) + "}", data),
        {"gap"});
  check("duplicate",  // JSON keeps the last "x": bytes [0, 8) are then unindexed
        st_file("{\"x\":" + entry("F32", "[2]", 0, 8) + ",\"x\":" + entry("F32", "[2]", 8, 16) + "}", data),
        {"gap"});
  check("trailing", st_file(ok, data + "junkjunk"), {"size mismatch", "trailing"});
  check("truncdata", st_file(ok, data.substr(0, 12)), {"out of range"});
  check("deepjson", st_file("{\"x\":" + std::string(100000, '['), data), {"malformed", "JSON"});
  check("meta", st_file("{\"__metadata__\":{\"n\":3}}", ""), {"__metadata__", "not a string"});
  check("metaarr", st_file("{\"__metadata__\":[1]}", ""), {"__metadata__", "not an object"});
}

// ---- hostile shapes (issue 27) --------------------------------------------------------------

// A zero-length dim passed validation (numel 0) and the thd conversion then looped
// tokens x heads = 10^12 times: `qvg eval --layout thd` on np.zeros((10**6, 10**6, 0))
// never returned. Every empty K/V tensor is now an error naming the file and shape,
// before any loop.
TEST_F(IoTest, EmptyKvTensorIsRejectedFast) {
  const auto start = std::chrono::steady_clock::now();
  const std::string p =
      write("z.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 0), }", ""));
  for (KvLayout layout : {KvLayout::thd, KvLayout::htd})
    expect_error([&] { load_kv(p, layout); }, p, {"shape [1000000, 1000000, 0]", "is empty"});
  const std::string q = write("z4.npy", npy_file(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 0, 7, 64), }", ""));
  expect_error([&] { load_kv(q, KvLayout::thd); }, q, {"shape [1, 0, 7, 64]", "tokens 0", "is empty"});
  const RawTensor raw{DType::bf16, {1000000, 1000000, 0}, {}};
  expect_error([&] { to_head_tensor(raw, KvLayout::thd, "x"); }, "x", {"is empty"});
  const RawTensorView view{DType::f32, raw.shape, {}};
  expect_error([&] { to_head_tensor(view, KvLayout::thd, "x"); }, "x", {"is empty"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// include/qvg/tensor.h computed h * n * d before checking the shape: a safetensors
// header [2^63 - 1, 255, 0] (0 bytes of data) overflowed int64 (UB, caught by UBSan).
// The file is refused as empty; HeadTensor itself refuses shapes whose size
// overflows, with a message and before allocating.
TEST_F(IoTest, OverflowingShapesAreErrorsNotUndefinedBehaviour) {
  const std::string p = write(
      "o.safetensors",
      st_file("{\"k\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807,255,0],\"data_offsets\":[0,0]}}", ""));
  for (KvLayout layout : {KvLayout::thd, KvLayout::htd})
    expect_error([&] { load_kv(p, layout, "k"); }, p, {"shape [9223372036854775807, 255, 0]", "is empty"});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const auto& s : std::vector<std::array<int64_t, 3>>{
           {kMax, 255, 0}, {255, kMax, 0}, {0, 1ll << 32, 1ll << 32}, {1ll << 31, 1ll << 31, 4}, {1ll << 61, 1, 1}})
    expect_error([&] { HeadTensor x(s[0], s[1], s[2]); }, "", {"is too large"});  // (clang 14 cannot capture bindings)
  expect_error([] { HeadTensor x(-1, 2, 3); }, "", {"non-negative"});
  HeadTensor y(2, 0, 32);  // empty but indexable: fine (the codecs refuse it)
  EXPECT_EQ(y.numel(), 0);
  y.tokens = kMax;  // fields are public: numel() checks too
  expect_error([&] { (void)y.numel(); }, "", {"is too large"});
}

// memcpy(NULL, NULL, 0) (UB) converting empty tensors: an empty HeadTensor's data()
// may be null. It converts and writes as an empty file and reads back as one.
TEST_F(IoTest, EmptyTensorsConvertAndWrite) {
  const HeadTensor x(2, 0, 4);
  for (DType dt : {DType::f32, DType::bf16})
    for (KvLayout layout : {KvLayout::thd, KvLayout::htd}) {
      const RawTensor t = from_head_tensor(x, layout, dt);
      EXPECT_TRUE(t.bytes.empty());
      EXPECT_EQ(t.shape, (layout == KvLayout::thd ? std::vector<int64_t>{0, 2, 4} : std::vector<int64_t>{2, 0, 4}));
      write_npy(path("e.npy"), t);
      const RawTensor back = read_npy(path("e.npy"), DType::bf16);  // (bf16 is stored as <V2)
      EXPECT_EQ(back.shape, t.shape);
      EXPECT_TRUE(back.bytes.empty());
    }
}

TEST_F(IoTest, KvShapeAndNameErrors) {
  auto raw = [](std::vector<int64_t> shape, DType dt = DType::f32) {
    RawTensor t{dt, shape, {}};
    t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
    return t;
  };
  const std::string p = path("r.npy");
  write_npy(p, raw({4, 8}));
  expect_error([&] { load_kv(p, KvLayout::thd); }, p, {"shape [4, 8]", "[tokens, heads, dim]"});
  write_npy(p, raw({1, 2, 3, 4, 5}));
  expect_error([&] { load_kv(p, KvLayout::htd); }, p, {"shape [1, 2, 3, 4, 5]", "[heads, tokens, dim]"});
  write_npy(p, raw({2, 3, 4, 5}));
  expect_error([&] { load_kv(p, KvLayout::htd); }, p, {"shape [2, 3, 4, 5]", "batch dimension must be 1"});
  write_npy(p, raw({2, 3, 4}, DType::i32));
  expect_error([&] { load_kv(p, KvLayout::htd); }, p, {"f32, f16 or bf16", "i32"});
  write_npy(p, raw({1, 2, 3, 4}));
  const HeadTensor x = load_kv(p, KvLayout::thd);  // [1, tokens=2, heads=3, dim=4]
  EXPECT_EQ(x.heads, 3);
  EXPECT_EQ(x.tokens, 2);
  EXPECT_EQ(x.dim, 4);
  expect_error([&] { load_kv(p, KvLayout::thd, "k"); }, p, {"tensor name", "'k'"});
  const std::string q = write("kv.pt", "x");
  expect_error([&] { load_kv(q, KvLayout::thd); }, q, {"unknown tensor file extension '.pt'"});
  write_safetensors(path("s.safetensors"), {{"k", raw({3, 4})}});
  expect_error([&] { load_kv(path("s.safetensors"), KvLayout::thd, "k"); },
               path("s.safetensors") + ":k", {"shape [3, 4]"});
}

// Every truncation and many single-byte changes of a valid file either read or throw
// qvg::Error; nothing else (no crash, no other exception, no huge allocation).
TEST_F(IoTest, TruncationsAndByteFlipsNeverCrash) {
  const HeadTensor x = random_heads(2, 3, 4, 7);
  save_kv(path("a.npy"), x, KvLayout::thd, DType::f16);
  write_safetensors(path("a.safetensors"),
                    {{"k", from_head_tensor(x, KvLayout::htd, DType::bf16)},
                     {"v", from_head_tensor(x, KvLayout::thd, DType::f32, true)}},
                    {{"layer", "3"}});
  for (const char* name : {"a.npy", "a.safetensors"}) {
    SCOPED_TRACE(name);
    const std::string good = slurp(path(name));
    const bool npy = std::string(name) == "a.npy";
    int count = 0;
    auto attempt = [&](const std::string& bytes, const std::string& what) {
      // A new file each time: truncating one in place is slow on some file systems.
      const std::string p = write("mut" + std::to_string(count++) + "_" + name, bytes);
      try {
        if (npy)
          read_npy(p, DType::bf16);
        else
          read_safetensors(p);
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(p, 0), 0u) << what << ": " << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": not a qvg::Error: " << e.what();
      }
    };
    for (size_t n = 0; n < good.size(); ++n) attempt(good.substr(0, n), "truncated to " + std::to_string(n));
    const size_t header_end = npy ? 128 : 8 + static_cast<size_t>(static_cast<uint8_t>(good[0]));
    for (size_t i = 0; i < std::min(header_end, good.size()); ++i)
      for (int v : {0x00, 0x7F, 0xFF, int{'9'}, int{'-'}, int{'"'}, int{'\''}, int{'['}, int{'}'}}) {
        std::string bad = good;
        bad[i] = static_cast<char>(v);
        attempt(bad, "byte " + std::to_string(i) + " = " + std::to_string(v));
      }
  }
}

namespace qvg {
namespace {

// Messages quoting a damaged header escaped nothing: raw control bytes and
// invalid UTF-8 reached the terminal (issue 41). printable escapes them.
TEST(Printable, EscapesWhatATerminalActsOn) {
  EXPECT_EQ(printable("plain text 0-9 {'descr': '<f4'}"), "plain text 0-9 {'descr': '<f4'}");
  EXPECT_EQ(printable(std::string("a\x1b[31mb\x00\n\t\x7f", 11)), "a\\x1b[31mb\\x00\\x0a\\x09\\x7f");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");  // UTF-8 stays
  EXPECT_EQ(printable("\xc2\x9b"), "\\xc2\\x9b");          // C1 control U+009B (CSI)
  EXPECT_EQ(printable("\xff\xfe\xc3"), "\\xff\\xfe\\xc3");  // invalid and cut-off UTF-8
  EXPECT_EQ(printable("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");  // overlong, surrogate
}

TEST_F(IoTest, MalformedHeadersAreQuotedEscaped) {
  const std::string bad_descr = "{'descr': '\x1b]0;pwned\x07\xff', 'fortran_order': False, 'shape': (2,), }";
  const std::string bad_key = "{'descr': '<f4', '\x1b[2J': False, 'shape': (2,), }";
  // (JSON escapes become raw bytes once parsed: a name and a dtype holding ESC.)
  const std::string st = R"({"t\u001b[2J": {"dtype": "F\u001b32", "shape": [1], "data_offsets": [0, 4]}})";
  for (const std::string& p : {write("d.npy", npy_file(1, bad_descr, std::string(8, '\0'))),
                               write("k.npy", npy_file(1, bad_key, std::string(8, '\0'))),
                               write("s.safetensors", st_file(st, std::string(4, '\0')))}) {
    const std::string e =
        test::error_of([&] { (void)(p.ends_with(".npy") ? read_npy(p) : read_safetensors(p).at(0).second); });
    ASSERT_FALSE(e.empty()) << p;
    EXPECT_EQ(e, printable(e)) << p;  // nothing left to escape
    EXPECT_NE(e.find("\\x1b"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace qvg
