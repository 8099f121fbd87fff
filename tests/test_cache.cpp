// StreamingKVCache: span schedule (quant_factor, keep_recent, sink, windows),
// token order, spans equal the codec on the same tokens (cold and warm
// start), C clamping, exact memory statistics, RoPE on read, save/load
// (bit-exact round trip and resume, damaged files), bad input with the cache
// unchanged, CRC-32 known vectors; the skeleton both caches share, over plain types.
#include <gtest/gtest.h>

#include "error_util.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/cache_skeleton.h"
#include "cache/checksum.h"
#include "qvg/cache.h"
#include "qvg/data.h"
#include "qvg/half.h"
#include "qvg/qvg_steps.h"

namespace qvg {
namespace {

#include "data/cache_v1_input.inc"

constexpr int kHeads = 2, kDim = 64, kGridH = 6, kGridW = 8;
constexpr int64_t kTpf = kGridH * kGridW;  // tokens per frame = tokens per chunk here

/// A video-like K/V stream of `frames` frames (one chunk per frame).
struct Stream {
  HeadTensor k, v;
  int64_t frames = 0;
  explicit Stream(int frames_, uint64_t seed = 1234) : frames(frames_) {
    VideoLikeParams p;
    p.frames = frames_;
    p.height = kGridH;
    p.width = kGridW;
    p.heads = kHeads;
    p.dim = kDim;
    p.clusters = 6;
    p.seed = seed;
    p.threads = 1;
    k = make_video_like(p, TensorRole::key);
    v = make_video_like(p, TensorRole::value);
  }
};

HeadTensor slice(const HeadTensor& x, int64_t first, int64_t n) {
  HeadTensor out(x.heads, n, x.dim);
  for (int64_t h = 0; h < x.heads; ++h)
    std::copy_n(x.head(h) + first * x.dim, n * x.dim, out.head(h));
  return out;
}

HeadTensor rounded_bf16(HeadTensor x) {
  for (auto& v : x.data) v = round_bf16(v);
  return x;
}

CacheConfig small_config(const std::string& spec = "qvg:centroids=16") {
  CacheConfig c;
  c.layers = 2;
  c.heads = kHeads;
  c.dim = kDim;
  c.key = parse_codec_spec(spec);
  c.value = parse_codec_spec(spec);
  c.policy.quant_factor = 3;
  return c;
}

std::vector<int32_t> chunk_positions(const CacheConfig& c, int64_t chunk) {
  if (c.rope.mode == RopeMode::wan_3d) return wan_grid_positions(chunk, 1, kGridH, kGridW);
  if (c.rope.mode == RopeMode::rope_1d) return positions_1d(chunk * kTpf, kTpf);
  return {};
}

AppendReport append_chunk(StreamingKVCache& cache, int layer, const Stream& s, int64_t chunk,
                          bool rotate_keys = false) {
  HeadTensor k = slice(s.k, chunk * kTpf, kTpf);
  const auto pos = chunk_positions(cache.config(), chunk);
  if (rotate_keys) apply_rope(k, wan_grid_positions(chunk, 1, kGridH, kGridW), RopeConfig{});
  return cache.append(layer, k, slice(s.v, chunk * kTpf, kTpf), pos);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("qvg_test_cache_" + name)).string();
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// How many temporary files of a save to `path` (path.tmp*) are left in its directory.
int temp_files_of(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

/// The whole state of a cache as bytes (its save file).
std::vector<uint8_t> snapshot(const StreamingKVCache& cache, const std::string& name) {
  const std::string p = temp_path(name);
  cache.save(p);
  auto b = file_bytes(p);
  std::filesystem::remove(p);
  return b;
}

using test::error_of;

// ---- checksum ------------------------------------------------------------------------

TEST(Checksum, Crc32KnownVectors) {
  auto crc = [](const std::string& s) { return crc32(s.data(), s.size()); };
  EXPECT_EQ(crc(""), 0u);
  EXPECT_EQ(crc("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  const std::string s = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32_update(crc32(s.data(), 10), s.data() + 10, s.size() - 10), crc(s));
}

// ---- span policy ---------------------------------------------------------------------

TEST(CacheSpans, EveryQuantFactorChunksThePreviousOnesBecomeASpan) {
  const Stream s(9);
  StreamingKVCache cache(small_config(), CacheOptions{1});
  for (int64_t c = 0; c < 9; ++c) {
    const AppendReport r = append_chunk(cache, 0, s, c);
    EXPECT_EQ(r.chunk, c);
    EXPECT_TRUE(r.evicted.empty());
    if (c % 3 == 2) {
      ASSERT_EQ(r.spans.size(), 1u) << c;
      EXPECT_EQ(r.spans[0].first_chunk, c - 2);
      EXPECT_EQ(r.spans[0].chunks, 3);
      EXPECT_EQ(r.spans[0].first_token, (c - 2) * kTpf);
      EXPECT_EQ(r.spans[0].tokens, 3 * kTpf);
      EXPECT_EQ(r.spans[0].centroids, 16);
    } else {
      EXPECT_TRUE(r.spans.empty()) << c;
    }
    EXPECT_EQ(cache.spans_encoded(0), (c + 1) / 3);
    EXPECT_EQ(cache.live_tokens(0), (c + 1) * kTpf);
    const LayerMemory m = cache.layer_memory(0);
    EXPECT_EQ(m.tokens_encoded, (c + 1) / 3 * 3 * kTpf);
    EXPECT_EQ(m.k.tail, static_cast<size_t>(((c + 1) % 3) * kTpf * kHeads * kDim * 2));
  }
  EXPECT_EQ(cache.spans_encoded(1), 0);  // layers are independent
  EXPECT_EQ(cache.chunks_appended(1), 0);
}

TEST(CacheSpans, SinkAndKeepRecent) {
  const Stream s(10);
  CacheConfig cfg = small_config();
  cfg.policy.sink = 2;
  cfg.policy.keep_recent = 1;
  StreamingKVCache cache(cfg, CacheOptions{1});
  std::vector<int64_t> span_at;  // chunk index whose append encoded a span
  for (int64_t c = 0; c < 10; ++c) {
    const AppendReport r = append_chunk(cache, 0, s, c);
    for (const auto& sp : r.spans) {
      span_at.push_back(c);
      // Sinks 0, 1 are never encoded; spans are 2..4 and 5..7.
      EXPECT_EQ(sp.first_chunk, 2 + 3 * static_cast<int64_t>(span_at.size() - 1));
    }
  }
  // Span 2..4 waits until 4 non-sink chunks are pending (keep_recent 1): chunk 5.
  EXPECT_EQ(span_at, (std::vector<int64_t>{5, 8}));
  const LayerMemory m = cache.layer_memory(0);
  EXPECT_EQ(m.tokens_encoded, 6 * kTpf);
  EXPECT_EQ(m.k.tail, static_cast<size_t>(4 * kTpf * kHeads * kDim * 2));  // sinks 0, 1 + pending 8, 9
}

TEST(CacheSpans, WindowEvictsOldChunksAndFreesWholeSpans) {
  const Stream s(8);
  CacheConfig cfg = small_config();
  cfg.policy.quant_factor = 2;
  cfg.policy.sink = 1;
  cfg.policy.window_chunks = 4;
  StreamingKVCache cache(cfg, CacheOptions{1});
  for (int64_t c = 0; c <= 4; ++c) EXPECT_TRUE(append_chunk(cache, 0, s, c).evicted.empty());
  EXPECT_EQ(cache.layer_memory(0).spans, 2);  // {1, 2}, {3, 4}
  AppendReport r = append_chunk(cache, 0, s, 5);
  EXPECT_EQ(r.evicted, (std::vector<int64_t>{1}));
  EXPECT_EQ(cache.read(0).chunks, (std::vector<int64_t>{0, 2, 3, 4, 5}));
  LayerMemory m = cache.layer_memory(0);
  EXPECT_EQ(m.spans, 2);  // span {1, 2} is still held for chunk 2
  EXPECT_EQ(m.tokens_live, 5 * kTpf);
  EXPECT_EQ(m.tokens_held, 6 * kTpf);
  EXPECT_EQ(m.bf16_bytes, static_cast<size_t>(2 * kHeads * 5 * kTpf * kDim * 2));
  r = append_chunk(cache, 0, s, 6);
  EXPECT_EQ(r.evicted, (std::vector<int64_t>{2}));
  ASSERT_EQ(r.spans.size(), 1u);
  EXPECT_EQ(r.spans[0].first_chunk, 5);
  m = cache.layer_memory(0);
  EXPECT_EQ(m.spans, 2);  // {1, 2} freed; {3, 4}, {5, 6}
  EXPECT_EQ(m.tokens_held, 5 * kTpf);
  EXPECT_EQ(cache.read(0).chunks, (std::vector<int64_t>{0, 3, 4, 5, 6}));
  {  // live_chunks: read's chunks and their tokens, without decoding
    const CacheRead rd = cache.read(0);
    std::vector<std::pair<int64_t, int64_t>> want;
    for (size_t i = 0; i < rd.chunks.size(); ++i) want.emplace_back(rd.chunks[i], rd.chunk_tokens[i]);
    EXPECT_EQ(cache.live_chunks(0), want);
    EXPECT_THROW(cache.live_chunks(1), Error);  // layer 1 has no chunk
  }

  // A token window: the newest non-sink chunks within 100 tokens (2 chunks of 48).
  CacheConfig tw = small_config();
  tw.policy.window_tokens = 100;
  StreamingKVCache t(tw, CacheOptions{1});
  for (int64_t c = 0; c < 5; ++c) append_chunk(t, 0, s, c);
  EXPECT_EQ(t.read(0).chunks, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(t.spans_encoded(0), 0);  // chunks leave the window before 3 are pending
  EXPECT_EQ(t.layer_memory(0).tokens_held, 2 * kTpf);
}

// ---- what read returns -----------------------------------------------------------------

TEST(CacheRead, TokenOrderAndExactWithALosslessSpanCodec) {
  const Stream s0(7, 1), s1(7, 2);
  StreamingKVCache cache(small_config("bf16"), CacheOptions{1});
  for (int64_t c = 0; c < 7; ++c) {
    append_chunk(cache, 0, s0, c);
    if (c < 5) append_chunk(cache, 1, s1, c);
  }
  const CacheRead r0 = cache.read(0), r1 = cache.read(1);
  EXPECT_EQ(cache.spans_encoded(0), 2);
  EXPECT_EQ(r0.k.data, rounded_bf16(s0.k).data);
  EXPECT_EQ(r0.v.data, rounded_bf16(s0.v).data);
  EXPECT_EQ(r1.k.data, rounded_bf16(slice(s1.k, 0, 5 * kTpf)).data);
  EXPECT_EQ(r1.chunk_tokens, std::vector<int64_t>(5, kTpf));
  EXPECT_TRUE(r0.positions.empty());
}

TEST(CacheRead, SpansEqualTheCodecOnTheSameTokensColdThenWarm) {
  const Stream s(6);
  StreamingKVCache cache(small_config(), CacheOptions{1});
  std::vector<SpanReport> spans;
  for (int64_t c = 0; c < 6; ++c)
    for (auto& sp : append_chunk(cache, 0, s, c).spans) spans.push_back(sp);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_FALSE(spans[0].k_warm_started);
  EXPECT_TRUE(spans[1].k_warm_started);
  EXPECT_TRUE(spans[1].v_warm_started);
  ASSERT_FALSE(spans[1].k.kmeans.empty());
  EXPECT_TRUE(spans[1].k.kmeans[0].warm_started);
  const CacheRead r = cache.read(0);
  const auto codec = make_codec("qvg:centroids=16");
  for (const bool key : {true, false}) {
    const HeadTensor& x = key ? s.k : s.v;
    EncodeOptions opt;
    opt.role = key ? TensorRole::key : TensorRole::value;
    opt.threads = 1;
    const EncodedTensor e0 = codec->encode(rounded_bf16(slice(x, 0, 3 * kTpf)), opt);
    opt.warm_start = &e0;
    const EncodedTensor e1 = codec->encode(rounded_bf16(slice(x, 3 * kTpf, 3 * kTpf)), opt);
    HeadTensor d0, d1;
    codec->decode(e0, d0, 1);
    codec->decode(e1, d1, 1);
    const HeadTensor& got = key ? r.k : r.v;
    EXPECT_EQ(slice(got, 0, 3 * kTpf).data, d0.data);
    EXPECT_EQ(slice(got, 3 * kTpf, 3 * kTpf).data, d1.data);
    EXPECT_EQ(spans[0].k_bytes.total(), e0.bytes().total());
  }
}

TEST(CacheRead, CentroidsClampedToShortSpans) {
  const Stream s(4);
  CacheConfig cfg = small_config("qvg:centroids=256");  // C = 256 > 3 x 48 tokens
  StreamingKVCache cache(cfg, CacheOptions{1, true});
  std::vector<SpanReport> spans;
  for (int64_t c = 0; c < 3; ++c)
    for (auto& sp : append_chunk(cache, 0, s, c).spans) spans.push_back(sp);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].centroids, 3 * kTpf);
  EXPECT_EQ(spans[0].k_bytes.centroids, static_cast<size_t>(1 * kHeads * 3 * kTpf * kDim * 2));
  ASSERT_TRUE(spans[0].k_error.has_value());
  EXPECT_LT(spans[0].k_error->rel_l2, 0.2);
  const CacheRead r = cache.read(0);  // decodes with the span's own (clamped) config
  EXPECT_NEAR(compare(rounded_bf16(slice(s.k, 0, 3 * kTpf)), r.k).rel_l2, spans[0].k_error->rel_l2, 1e-6);
}

TEST(CacheRead, EverySpanCodecWorks) {
  const Stream s(3);
  for (const char* spec : {"bf16", "rtn", "kivi", "quarot", "qvg-pro:centroids=8", "qvg-int4:centroids=8"}) {
    StreamingKVCache cache(small_config(spec), CacheOptions{1, true});
    SpanReport sp;
    for (int64_t c = 0; c < 3; ++c) {
      auto r = append_chunk(cache, 0, s, c);
      if (!r.spans.empty()) sp = r.spans[0];
    }
    ASSERT_TRUE(sp.k_error.has_value()) << spec;
    EXPECT_LT(sp.k_error->rel_l2, 0.7) << spec;
    const CacheRead r = cache.read(0);
    // The read equals the span's decode, whose error the report measured.
    EXPECT_NEAR(compare(rounded_bf16(s.k), r.k).rel_l2, sp.k_error->rel_l2, 1e-6) << spec;
    const LayerMemory m = cache.layer_memory(0);
    EXPECT_EQ(m.k.spans.total(), sp.k_bytes.total()) << spec;
    EXPECT_EQ(m.k.tail, 0u);
  }
}

// ---- warm start ----------------------------------------------------------------------

TEST(CacheWarmStart, SameQualityFewerIterations) {
  // 4 spans of 144 tokens; k-means runs to tolerance (max 50 iterations),
  // cold spans from k-means++. (From the d2_rounds start this stream's cold
  // spans took 60 iterations and the warm ones 70: the warm start saves the
  // start, not always iterations.)
  const Stream s(12);
  auto run = [&](bool warm) {
    CacheConfig cfg = small_config("qvg:centroids=16,iters=50,tol=1e-4,init=kmeans++");
    cfg.warm_start = warm;
    StreamingKVCache cache(cfg, CacheOptions{1, true});
    std::vector<SpanReport> spans;
    for (int64_t c = 0; c < 12; ++c)
      for (auto& sp : append_chunk(cache, 0, s, c).spans) spans.push_back(sp);
    EXPECT_EQ(cache.layer_memory(0).warm_start > 0, warm);
    return spans;
  };
  const auto cold = run(false), warm = run(true);
  ASSERT_EQ(cold.size(), 4u);
  ASSERT_EQ(warm.size(), 4u);
  auto iterations = [](const SpanReport& sp) {
    int n = 0;
    for (const auto& st : sp.k.kmeans) n += st.iterations;
    for (const auto& st : sp.v.kmeans) n += st.iterations;
    return n;
  };
  int it_cold = 0, it_warm = 0;
  for (size_t i = 1; i < 4; ++i) {  // span 0 has nothing to start from
    EXPECT_FALSE(cold[i].k_warm_started);
    EXPECT_TRUE(warm[i].k_warm_started);
    it_cold += iterations(cold[i]);
    it_warm += iterations(warm[i]);
    // Equal quality: reconstruction error within 5 % either way.
    EXPECT_NEAR(warm[i].k_error->rel_l2, cold[i].k_error->rel_l2, 0.05 * cold[i].k_error->rel_l2) << i;
    EXPECT_NEAR(warm[i].v_error->rel_l2, cold[i].v_error->rel_l2, 0.05 * cold[i].v_error->rel_l2) << i;
  }
  EXPECT_LT(it_warm, it_cold);
  std::printf("k-means iterations over spans 1..3: cold %d, warm %d\n", it_cold, it_warm);
}

// ---- memory ----------------------------------------------------------------------------

TEST(CacheMemory, ExactFromTheBuffers) {
  const Stream s(8);
  StreamingKVCache cache(small_config("qvg:centroids=16"), CacheOptions{1});
  for (int64_t c = 0; c < 8; ++c) append_chunk(cache, 0, s, c);
  for (int64_t c = 0; c < 4; ++c) append_chunk(cache, 1, s, c);
  const MemoryStats st = cache.memory();
  ASSERT_EQ(st.layers.size(), 2u);
  const CodecConfig qc = parse_codec_spec("qvg:centroids=16");
  for (int l = 0; l < 2; ++l) {
    const LayerMemory& m = st.layers[static_cast<size_t>(l)];
    const int64_t spans = l == 0 ? 2 : 1, tail_tokens = l == 0 ? 2 * kTpf : kTpf;
    EXPECT_EQ(m.spans, spans);
    const double span_bits = qvg_bits_per_value_formula(qc, 3 * kTpf, kDim) * kHeads * 3 * kTpf * kDim;
    EXPECT_NEAR(static_cast<double>(m.k.spans.total()), spans * span_bits / 8, 1e-6);
    EXPECT_EQ(m.k.spans.codes, static_cast<size_t>(spans * kHeads * 3 * kTpf * kDim * 2 / 8));
    EXPECT_EQ(m.k.spans.scales, static_cast<size_t>(spans * kHeads * 3 * kTpf * (kDim / 64)));
    EXPECT_EQ(m.k.spans.centroids, static_cast<size_t>(spans * kHeads * 16 * kDim * 2));
    EXPECT_EQ(m.k.spans.ids, static_cast<size_t>(spans * kHeads * 3 * kTpf));
    EXPECT_EQ(m.k.spans.span_scales, static_cast<size_t>(spans * kHeads * 4));
    EXPECT_EQ(m.k.tail, static_cast<size_t>(tail_tokens * kHeads * kDim * 2));
    EXPECT_EQ(m.k.total(), m.v.total());
    EXPECT_EQ(m.positions, 0u);
    EXPECT_EQ(m.warm_start, static_cast<size_t>(2 * kHeads * 16 * kDim * 2));
    EXPECT_EQ(m.tokens_live, spans * 3 * kTpf + tail_tokens);
    EXPECT_EQ(m.bf16_bytes, static_cast<size_t>(2 * kHeads * m.tokens_live * kDim * 2));
    EXPECT_GT(m.ratio(), 1.0);
    // The spans alone are at the codec's formula; the BF16 tail raises the whole cache's bits.
    EXPECT_NEAR(m.span_bits_per_value(kHeads, kDim), qvg_bits_per_value_formula(qc, 3 * kTpf, kDim), 1e-9);
    EXPECT_GT(m.bits_per_value(kHeads, kDim), m.span_bits_per_value(kHeads, kDim));
  }
  // No span held: the spans' bits are the whole cache's.
  StreamingKVCache young(small_config("qvg:centroids=16"), CacheOptions{1});
  append_chunk(young, 0, s, 0);
  const LayerMemory y = young.memory().layers[0];
  EXPECT_EQ(y.spans, 0);
  EXPECT_EQ(y.span_bits_per_value(kHeads, kDim), y.bits_per_value(kHeads, kDim));
  EXPECT_GT(y.bits_per_value(kHeads, kDim), 0.0);
  EXPECT_EQ(st.total.kv_bytes(), st.layers[0].kv_bytes() + st.layers[1].kv_bytes());
  EXPECT_EQ(st.total.bf16_bytes, st.layers[0].bf16_bytes + st.layers[1].bf16_bytes);
  EXPECT_EQ(st.total.total(), st.layers[0].total() + st.layers[1].total());
}

// ---- RoPE on read ------------------------------------------------------------------------

TEST(CacheRope, OnReadEqualsRotatingBeforeCachingLossless) {
  const Stream s(6);
  // FP32 tail, no spans: exact.
  CacheConfig pre = small_config("bf16");
  pre.policy.quant_factor = 100;
  pre.tail = TailFormat::f32;
  pre.rope = RopeConfig{RopeMode::wan_3d};
  CacheConfig post = pre;
  post.rope = RopeConfig{RopeMode::none};
  StreamingKVCache a(pre, CacheOptions{1}), b(post, CacheOptions{1});
  for (int64_t c = 0; c < 6; ++c) {
    append_chunk(a, 0, s, c);
    append_chunk(b, 0, s, c, /*rotate_keys=*/true);
  }
  const CacheRead ra = a.read(0), rb = b.read(0);
  ASSERT_EQ(ra.k.data.size(), rb.k.data.size());
  for (size_t i = 0; i < ra.k.data.size(); ++i) ASSERT_NEAR(ra.k.data[i], rb.k.data[i], 1e-6f * (1 + std::abs(rb.k.data[i])));
  EXPECT_EQ(ra.v.data, rb.v.data);
  EXPECT_EQ(ra.positions, wan_grid_positions(0, 6, kGridH, kGridW));
  EXPECT_EQ(a.layer_memory(0).positions, static_cast<size_t>(6 * kTpf * 3 * 4));

  // BF16 spans and tail: read = RoPE(bf16(k)) exactly; rotating before caching
  // differs only by where the BF16 rounding happens.
  CacheConfig pre16 = small_config("bf16");
  pre16.rope = RopeConfig{RopeMode::wan_3d};
  CacheConfig post16 = pre16;
  post16.rope = RopeConfig{RopeMode::none};
  StreamingKVCache c16(pre16, CacheOptions{1}), d16(post16, CacheOptions{1});
  for (int64_t c = 0; c < 5; ++c) {
    append_chunk(c16, 0, s, c);
    append_chunk(d16, 0, s, c, true);
  }
  HeadTensor want = rounded_bf16(slice(s.k, 0, 5 * kTpf));
  apply_rope(want, wan_grid_positions(0, 5, kGridH, kGridW), RopeConfig{});
  const CacheRead rc = c16.read(0), rd = d16.read(0);
  EXPECT_EQ(rc.k.data, want.data);
  double max_rel = 0, scale = 0;
  for (float v : rd.k.data) scale = std::max(scale, double(std::abs(v)));
  for (size_t i = 0; i < rc.k.data.size(); ++i) max_rel = std::max(max_rel, std::abs(double(rc.k.data[i]) - rd.k.data[i]) / scale);
  EXPECT_LT(max_rel, 1.0 / 128);
}

TEST(CacheRope, OneDimensionalPositions) {
  const Stream s(4);
  CacheConfig cfg = small_config("bf16");
  cfg.rope = RopeConfig{RopeMode::rope_1d};
  StreamingKVCache cache(cfg, CacheOptions{1});
  for (int64_t c = 0; c < 4; ++c) append_chunk(cache, 0, s, c);
  HeadTensor want = rounded_bf16(s.k);
  apply_rope(want, positions_1d(0, 4 * kTpf), cfg.rope);
  EXPECT_EQ(cache.read(0).k.data, want.data);
}

TEST(CacheRope, QvgKeyErrorPreVersusPostRope) {
  // Measured, not a law: pre-RoPE keys keep the token clusters that k-means
  // shares centroids over, so they should quantize at least as well.
  const Stream s(6);
  CacheConfig pre = small_config("qvg:centroids=16");
  pre.rope = RopeConfig{RopeMode::wan_3d};
  CacheConfig post = pre;
  post.rope = RopeConfig{RopeMode::none};
  StreamingKVCache a(pre, CacheOptions{1}), b(post, CacheOptions{1});
  for (int64_t c = 0; c < 6; ++c) {
    append_chunk(a, 0, s, c);
    append_chunk(b, 0, s, c, true);
  }
  HeadTensor ref = s.k;
  apply_rope(ref, wan_grid_positions(0, 6, kGridH, kGridW), RopeConfig{});
  const double e_pre = compare(ref, a.read(0).k).rel_l2, e_post = compare(ref, b.read(0).k).rel_l2;
  std::printf("QVG key rel. L2 error: pre-RoPE caching %.4f, post-RoPE caching %.4f\n", e_pre, e_post);
  EXPECT_LT(e_pre, e_post);
}

// ---- save / load -----------------------------------------------------------------------

CacheConfig rich_config() {
  CacheConfig cfg = small_config("qvg:centroids=16");
  cfg.value = parse_codec_spec("qvg-pro:centroids=8");
  cfg.policy.sink = 1;
  cfg.policy.keep_recent = 1;
  cfg.policy.window_chunks = 7;
  cfg.rope = RopeConfig{RopeMode::wan_3d};
  return cfg;
}

TEST(CacheFile, RoundTripIsBitExactAndResumeEqualsUninterrupted) {
  const Stream s(16);
  StreamingKVCache full(rich_config(), CacheOptions{1});
  StreamingKVCache part(rich_config(), CacheOptions{1});
  for (int64_t c = 0; c < 16; ++c) {
    append_chunk(full, 0, s, c);
    if (c < 9) append_chunk(full, 1, s, c);
  }
  for (int64_t c = 0; c < 10; ++c) append_chunk(part, 0, s, c);
  for (int64_t c = 0; c < 9; ++c) append_chunk(part, 1, s, c);
  const std::string path = temp_path("roundtrip.qvgc");
  part.save(path);
  StreamingKVCache loaded = StreamingKVCache::load(path, rich_config(), CacheOptions{1});
  EXPECT_EQ(temp_files_of(path), 0);
  for (int l = 0; l < 2; ++l) {
    const CacheRead a = part.read(l), b = loaded.read(l);
    EXPECT_EQ(a.k.data, b.k.data);
    EXPECT_EQ(a.v.data, b.v.data);
    EXPECT_EQ(a.chunks, b.chunks);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(part.layer_memory(l).total(), loaded.layer_memory(l).total());
  }
  EXPECT_EQ(snapshot(loaded, "a"), file_bytes(path));
  // Resume: the same later appends give the same bytes as never stopping.
  for (int64_t c = 10; c < 16; ++c) append_chunk(loaded, 0, s, c);
  EXPECT_GT(loaded.spans_encoded(0), part.spans_encoded(0));
  EXPECT_EQ(snapshot(loaded, "b"), snapshot(full, "c"));
  std::filesystem::remove(path);
}

// tests/data/cache_v1.qvgc was written by format version 1 (codecs stored
// field by field; tests/data/make_cache_v1.cpp). This build must load it to
// the same state as building the cache again from the same inputs: the same
// bits from read(), the same statistics, and, saved again (as version 2),
// the same bytes as the rebuilt cache's save.
TEST(CacheFile, ReadsVersion1Files) {
  const std::string v1 = std::string(QVG_SOURCE_DIR) + "/tests/data/cache_v1.qvgc";
  ASSERT_TRUE(std::filesystem::exists(v1)) << v1;
  EXPECT_EQ(file_bytes(v1)[8], 1);  // the version field (little-endian uint32 at byte 8)
  StreamingKVCache rebuilt(cache_v1_config(), CacheOptions{1});
  for (int chunk = 0; chunk < kCacheV1Chunks; ++chunk) {
    HeadTensor k, v;
    std::vector<int32_t> pos;
    cache_v1_chunk(chunk, k, v, pos);
    for (int layer = 0; layer < 2; ++layer) rebuilt.append(layer, k, v, pos);
  }
  StreamingKVCache loaded = StreamingKVCache::load(v1, cache_v1_config(), CacheOptions{1});
  for (int l = 0; l < 2; ++l) {
    const CacheRead a = rebuilt.read(l), b = loaded.read(l);
    EXPECT_EQ(a.k.data, b.k.data) << "layer " << l;
    EXPECT_EQ(a.v.data, b.v.data) << "layer " << l;
    EXPECT_EQ(a.chunks, b.chunks);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(rebuilt.layer_memory(l).total(), loaded.layer_memory(l).total());
    EXPECT_EQ(rebuilt.spans_encoded(l), loaded.spans_encoded(l));
  }
  EXPECT_EQ(snapshot(loaded, "v1_resaved"), snapshot(rebuilt, "v1_rebuilt"));
  // Resume from the old file: one more chunk continues exactly as the rebuilt cache
  // (the warm start reads the old file's centroids).
  HeadTensor k, v;
  std::vector<int32_t> pos;
  cache_v1_chunk(kCacheV1Chunks, k, v, pos);
  for (int layer = 0; layer < 2; ++layer) {
    loaded.append(layer, k, v, pos);
    rebuilt.append(layer, k, v, pos);
  }
  EXPECT_EQ(snapshot(loaded, "v1_resumed"), snapshot(rebuilt, "v1_rebuilt_resumed"));
}

// FP8 centroids (centroid_format=fp8) with the warm start: the held state is
// FP8 codes and scales; a saved cache loads and resumes exactly as one that
// never stopped.
TEST(CacheFile, Fp8CentroidsWarmStartRoundTrip) {
  const Stream s(10);
  CacheConfig cfg = small_config("qvg:centroid_format=fp8,centroids=8,iters=3");
  cfg.value = parse_codec_spec("qvg-pro:centroid_format=fp8,centroids=4,iters=2");
  ASSERT_TRUE(cfg.warm_start);
  StreamingKVCache full(cfg, CacheOptions{1}), part(cfg, CacheOptions{1});
  for (int64_t c = 0; c < 10; ++c) append_chunk(full, 0, s, c);
  for (int64_t c = 0; c < 6; ++c) append_chunk(part, 0, s, c);
  const std::string path = temp_path("fp8.qvgc");
  part.save(path);
  StreamingKVCache loaded = StreamingKVCache::load(path, cfg, CacheOptions{1});
  EXPECT_EQ(loaded.read(0).k.data, part.read(0).k.data);
  EXPECT_EQ(loaded.read(0).v.data, part.read(0).v.data);
  for (int64_t c = 6; c < 10; ++c) append_chunk(loaded, 0, s, c);
  EXPECT_EQ(snapshot(loaded, "fp8_resumed"), snapshot(full, "fp8_full"));
  std::filesystem::remove(path);
}

// centroids=auto with the warm start: the held state has the C resolved for
// the last span (here 9 for spans of 144 tokens at 1 bit per value), which
// the load takes as stored. It had checked it against the rule for a span
// of C tokens (C = 1) and refused the file.
TEST(CacheFile, AutoCentroidsWarmStartRoundTrip) {
  const Stream s(12);
  const CacheConfig cfg = small_config("qvg:centroids=auto,centroid_bits=1,iters=3");
  ASSERT_TRUE(cfg.warm_start && cfg.key.auto_centroids);
  StreamingKVCache full(cfg, CacheOptions{1}), part(cfg, CacheOptions{1});
  for (int64_t c = 0; c < 10; ++c) append_chunk(full, 0, s, c);
  AppendReport last;
  for (int64_t c = 0; c < 6; ++c) {
    const AppendReport r = append_chunk(part, 0, s, c);
    if (!r.spans.empty()) last = r;
  }
  ASSERT_FALSE(last.spans.empty());
  EXPECT_EQ(last.spans.back().centroids, 9);  // floor(1 bit x 144 tokens / 16 bits)
  const std::string path = temp_path("auto.qvgc");
  part.save(path);
  StreamingKVCache loaded = StreamingKVCache::load(path, cfg, CacheOptions{1});
  EXPECT_EQ(loaded.layer_memory(0).warm_start, part.layer_memory(0).warm_start);
  EXPECT_GT(loaded.layer_memory(0).warm_start, 0u);
  EXPECT_EQ(loaded.read(0).k.data, part.read(0).k.data);
  for (int64_t c = 6; c < 10; ++c) {
    const AppendReport r = append_chunk(loaded, 0, s, c);
    for (const SpanReport& sp : r.spans) EXPECT_TRUE(sp.k_warm_started && sp.v_warm_started);
  }
  EXPECT_EQ(snapshot(loaded, "auto_resumed"), snapshot(full, "auto_full"));
  std::filesystem::remove(path);
}

TEST(CacheFile, EmptyAndThreadIndependent) {
  const Stream s(4);
  StreamingKVCache one(small_config(), CacheOptions{1}), two(small_config(), CacheOptions{2});
  const std::string path = temp_path("empty.qvgc");
  one.save(path);
  StreamingKVCache e = StreamingKVCache::load(path);
  EXPECT_EQ(e.chunks_appended(0), 0);
  EXPECT_THROW(e.read(0), Error);
  for (int64_t c = 0; c < 4; ++c) {
    append_chunk(one, 1, s, c);
    append_chunk(two, 1, s, c);
  }
  EXPECT_EQ(snapshot(one, "t1"), snapshot(two, "t2"));
  std::filesystem::remove(path);
}

// Every save wrote path + ".tmp", so two savers of one path shared it (issue 27:
// two Python caches saving to one path for 8 s gave 1,668 failed loads of 1,950).
// Each save now writes its own temporary file and renames it over the path: while
// two threads save different caches to one path 200 times each, every load
// succeeds and equals one of the two caches bit for bit, and no temporary file is
// left.
TEST(CacheFile, ConcurrentSavesOfOnePathNeverCorrupt) {
  const Stream s(8);
  StreamingKVCache a(rich_config(), CacheOptions{1}), b(small_config("rtn"), CacheOptions{1});
  for (int64_t c = 0; c < 8; ++c) append_chunk(a, 0, s, c);
  for (int64_t c = 0; c < 3; ++c) append_chunk(b, 1, s, c);
  const std::vector<uint8_t> want_a = snapshot(a, "conc_a"), want_b = snapshot(b, "conc_b");
  ASSERT_NE(want_a.size(), want_b.size());
  const std::string path = temp_path("concurrent.qvgc");
  a.save(path);
  constexpr int kSaves = 200;
  std::atomic<int> savers_left{2};
  std::vector<std::string> save_errors(2);
  auto saver = [&](const StreamingKVCache& c, int i) {
    for (int n = 0; n < kSaves && save_errors[static_cast<size_t>(i)].empty(); ++n)
      save_errors[static_cast<size_t>(i)] = error_of([&] { c.save(path); });
    --savers_left;
  };
  int loads = 0, bad_loads = 0, bad_bytes = 0, seen_a = 0, seen_b = 0;
  std::string first_error;
  std::thread ta(saver, std::cref(a), 0), tb(saver, std::cref(b), 1);
  while (savers_left > 0 || loads < 20) {
    ++loads;
    const std::vector<uint8_t> bytes = file_bytes(path);  // one open: one whole file
    bad_bytes += bytes != want_a && bytes != want_b;
    try {
      const std::vector<uint8_t> got = snapshot(StreamingKVCache::load(path), "conc_loaded");
      seen_a += got == want_a;
      seen_b += got == want_b;
      bad_loads += got != want_a && got != want_b;
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
      ++bad_loads;
    }
  }
  ta.join();
  tb.join();
  EXPECT_EQ(save_errors[0], "");
  EXPECT_EQ(save_errors[1], "");
  EXPECT_EQ(bad_loads, 0) << "of " << loads << " loads; first error: " << first_error;
  EXPECT_EQ(bad_bytes, 0) << "of " << loads << " reads";
  EXPECT_EQ(seen_a + seen_b, loads);
  EXPECT_EQ(temp_files_of(path), 0);
  std::printf("%d loads during 2 x %d saves: %d of cache a, %d of cache b\n", loads, kSaves, seen_a, seen_b);
  std::filesystem::remove(path);
}

// A save that cannot be made (a missing directory) names the path and leaves nothing
// behind; one that succeeds replaces the old file and keeps its permissions.
TEST(CacheFile, FailedSaveLeavesNothingAndSaveKeepsPermissions) {
  StreamingKVCache cache(small_config(), CacheOptions{1});
  const std::string missing = temp_path("no_such_dir/c.qvgc");
  const std::string e = error_of([&] { cache.save(missing); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find("cannot open for writing"), std::string::npos) << e;
  const std::string path = temp_path("perm.qvgc");
  cache.save(path);
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  cache.save(path);
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(temp_files_of(path), 0);
  EXPECT_NO_THROW(StreamingKVCache::load(path));
  std::filesystem::remove(path);
}

TEST(CacheFile, LoadRejectsDamagedFiles) {
  const Stream s(8);
  StreamingKVCache cache(rich_config(), CacheOptions{1});
  for (int64_t c = 0; c < 8; ++c) append_chunk(cache, 0, s, c);
  const std::string path = temp_path("good.qvgc"), bad = temp_path("bad.qvgc");
  cache.save(path);
  const std::vector<uint8_t> good = file_bytes(path);
  ASSERT_GT(good.size(), 1000u);
  auto load_error = [&](const std::vector<uint8_t>& b) {
    write_bytes(bad, b);
    return error_of([&] { StreamingKVCache::load(bad); });
  };
  EXPECT_NE(error_of([&] { StreamingKVCache::load(temp_path("missing.qvgc")); }).find("cannot open"),
            std::string::npos);
  // Truncated anywhere.
  for (size_t cut = 0; cut < good.size(); cut += 1 + good.size() / 61) {
    const std::string e = load_error(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    EXPECT_FALSE(e.empty()) << "cut at " << cut;
  }
  EXPECT_NE(load_error(std::vector<uint8_t>(good.begin(), good.end() - 1)).find("truncated"), std::string::npos);
  // Any flipped byte: a checksum (or magic) error.
  for (size_t at = 0; at < good.size(); at += 1 + good.size() / 53) {
    std::vector<uint8_t> b = good;
    b[at] ^= 0x10;
    const std::string e = load_error(b);
    EXPECT_FALSE(e.empty()) << "flip at " << at;
    if (at >= 8) EXPECT_NE(e.find("corrupt"), std::string::npos) << e;
  }
  // Bad magic, wrong version (with a valid header checksum), trailing bytes.
  {
    std::vector<uint8_t> b = good;
    b[0] = 'X';
    EXPECT_NE(load_error(b).find("magic"), std::string::npos);
    b = good;
    b[8] = 3;  // this build writes version 2 and reads 1 and 2
    const uint32_t crc = crc32(b.data(), 16);
    for (int i = 0; i < 4; ++i) b[16 + i] = static_cast<uint8_t>(crc >> (8 * i));
    EXPECT_NE(load_error(b).find("version 3"), std::string::npos);
    b = good;
    b.push_back(0);
    EXPECT_NE(load_error(b).find("unexpected bytes"), std::string::npos);
  }
  // A consistent checksum over an inconsistent state: layer 0 claims one chunk more.
  {
    std::vector<uint8_t> b = good;
    uint64_t conf_len = 0;
    for (int i = 0; i < 8; ++i) conf_len |= static_cast<uint64_t>(b[20 + 8 + i]) << (8 * i);
    const size_t layer0 = 20 + 16 + conf_len + 4;
    ASSERT_EQ(std::memcmp(b.data() + layer0, "LAYR", 4), 0);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(b[layer0 + 8 + i]) << (8 * i);
    b[layer0 + 16 + 8] += 1;  // chunks appended (i64 at payload offset 8)
    const uint32_t crc = crc32(b.data() + layer0, 16 + len);
    for (int i = 0; i < 4; ++i) b[layer0 + 16 + len + i] = static_cast<uint8_t>(crc >> (8 * i));
    const std::string e = load_error(b);
    EXPECT_NE(e.find("layer 0"), std::string::npos) << e;
  }
  // A file of another configuration.
  CacheConfig other = rich_config();
  other.policy.quant_factor = 4;
  const std::string e = error_of([&] { StreamingKVCache::load(path, other); });
  EXPECT_NE(e.find("does not match"), std::string::npos) << e;
  EXPECT_NE(e.find("quant_factor"), std::string::npos) << e;
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

// ---- bad input -------------------------------------------------------------------------

TEST(CacheBadInput, ClearErrorsAndTheCacheIsUnchanged) {
  const Stream s(5);
  CacheConfig cfg = rich_config();
  cfg.chunk_tokens = kTpf;
  StreamingKVCache cache(cfg, CacheOptions{1});
  for (int64_t c = 0; c < 4; ++c) append_chunk(cache, 0, s, c);
  const std::vector<uint8_t> before = snapshot(cache, "before");
  const CacheRead read_before = cache.read(0);
  const HeadTensor k = slice(s.k, 4 * kTpf, kTpf), v = slice(s.v, 4 * kTpf, kTpf);
  const auto pos = wan_grid_positions(4, 1, kGridH, kGridW);
  auto expect_error = [&](const char* needle, auto&& f) {
    const std::string e = error_of(f);
    EXPECT_NE(e.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << e;
    EXPECT_EQ(snapshot(cache, "after"), before) << needle;
  };
  expect_error("layer 2 is out of range", [&] { cache.append(2, k, v, pos); });
  expect_error("layer -1 is out of range", [&] { cache.append(-1, k, v, pos); });
  expect_error("the cache needs [2", [&] { cache.append(0, HeadTensor(3, kTpf, kDim), v, pos); });
  expect_error("the cache needs [2", [&] { cache.append(0, k, HeadTensor(kHeads, kTpf, 32), pos); });
  expect_error("value chunk 47", [&] { cache.append(0, k, slice(s.v, 0, kTpf - 1), pos); });
  expect_error("takes chunks of 48", [&] { cache.append(0, slice(s.k, 0, 40), slice(s.v, 0, 40), pos); });
  expect_error("needs 3 positions per token", [&] { cache.append(0, k, v); });
  expect_error("needs 3 positions per token", [&] { cache.append(0, k, v, std::vector<int32_t>(pos.size() - 1)); });
  HeadTensor nan_k = k;
  nan_k.data[77] = std::nanf("");
  // The message names the chunk and the place in it (issue 41: the chunk was missing).
  const std::string nan_at = "append (layer 0, chunk " + std::to_string(cache.chunks_appended(0)) +
                             "): the key chunk holds a non-finite value (nan) at head 0, token " +
                             std::to_string(77 / kDim) + ", channel " + std::to_string(77 % kDim);
  expect_error(nan_at.c_str(), [&] { cache.append(0, nan_k, v, pos); });
  HeadTensor huge_v = v;
  huge_v.data[5] = 3.4e38f;  // finite, above qvg-pro's magnitude range (as BF16: test_hostile_numbers)
  expect_error("the value chunk: qvg-pro:centroids=8: the input's largest magnitude",
               [&] { cache.append(0, k, huge_v, pos); });
  HeadTensor short_data = k;
  short_data.data.pop_back();
  expect_error("values, its shape needs", [&] { cache.append(0, short_data, v, pos); });
  expect_error("layer 1 is empty", [&] { cache.read(1); });
  expect_error("layer 5 is out of range", [&] { cache.read(5); });
  const CacheRead read_after = cache.read(0);
  EXPECT_EQ(read_after.k.data, read_before.k.data);
  // And the cache still works.
  EXPECT_EQ(cache.append(0, k, v, pos).chunk, 4);

  // Invalid configurations are refused when the cache is made.
  auto bad = [](auto&& edit) {
    CacheConfig c = small_config();
    edit(c);
    return error_of([&] { StreamingKVCache x(c); });
  };
  EXPECT_NE(bad([](CacheConfig& c) { c.policy.quant_factor = 0; }).find("quant_factor"), std::string::npos);
  EXPECT_NE(bad([](CacheConfig& c) { c.policy.sink = -1; }).find("sink"), std::string::npos);
  EXPECT_NE(bad([](CacheConfig& c) { c.dim = 48; }).find("cache config"), std::string::npos);  // block 64
  EXPECT_NE(bad([](CacheConfig& c) { c.layers = 0; }).find("layers"), std::string::npos);
  EXPECT_NE(bad([](CacheConfig& c) {
              c.dim = 63;
              c.key = parse_codec_spec("bf16");
              c.value = c.key;
              c.rope = RopeConfig{RopeMode::rope_1d};
            }).find("even"),
            std::string::npos);
}

TEST(CacheBadInput, AFailingSpanEncodeLeavesTheCacheUnchanged) {
  // KIVI cannot store a group minimum beyond the FP16 range. Chunk 1 holds
  // such a key (fine in BF16); the span encode in the third append throws,
  // after every argument check has passed.
  const Stream s(3);
  StreamingKVCache cache(small_config("kivi"), CacheOptions{1});
  append_chunk(cache, 0, s, 0);
  HeadTensor bad = slice(s.k, kTpf, kTpf);
  bad.at(1, 5, 3) = -1e6f;
  cache.append(0, bad, slice(s.v, kTpf, kTpf));
  const std::vector<uint8_t> before = snapshot(cache, "kivi_before");
  const CacheRead read_before = cache.read(0);
  EXPECT_THROW(append_chunk(cache, 0, s, 2), Error);
  EXPECT_EQ(snapshot(cache, "kivi_after"), before);
  EXPECT_EQ(cache.chunks_appended(0), 2);
  EXPECT_EQ(cache.read(0).k.data, read_before.k.data);
}

TEST(CacheConfigTest, SelfForcingDefaults) {
  const CacheConfig c = CacheConfig::self_forcing("qvg", "qvg-pro");
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.heads, 12);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.chunk_tokens, 4680);
  EXPECT_EQ(c.policy.quant_factor * c.chunk_tokens, 37440);
  EXPECT_EQ(c.value.stages, 4);
  EXPECT_TRUE(c.warm_start);
  validate(c);
}

// Files with a consistent checksum over non-finite content (made by a fuzzing
// run: tests/data/cache_good.qvgc is `qvg stream --k k.npy --v v.npy --grid
// 2x2 --chunk-frames 1 --quant-factor 2 --sink 1 --keep-recent 1 --rope 3d
// --key qvg:block=16,centroids=4 --value kivi:group=16,residual=4 --layers 2
// --save`; the others change one value and recompute the layer's CRC): a NaN
// FP8 block scale in span 0's keys, a NaN BF16 value in the sink chunk (they
// loaded, and read() returned NaN keys); "spans encoded" set to 2^62 - 1 (it
// loaded, and the next save wrote a file load refused); chunk 1 evicted
// although the policy has no window (read() returned 4 tokens fewer). Now
// load refuses each.
TEST(CacheFile, LoadRejectsImpossibleContent) {
  const std::string dir = std::string(QVG_SOURCE_DIR) + "/tests/data/";
  EXPECT_NO_THROW(StreamingKVCache::load(dir + "cache_good.qvgc"));
  const std::string scale = error_of([&] { StreamingKVCache::load(dir + "cache_nan_block_scale.qvgc"); });
  EXPECT_NE(scale.find("span 0, keys: block scale 0 is NaN"), std::string::npos) << scale;
  const std::string tail = error_of([&] { StreamingKVCache::load(dir + "cache_nan_tail.qvgc"); });
  EXPECT_NE(tail.find("chunk 0: full-precision data holds a non-finite value"), std::string::npos) << tail;
  const std::string spans = error_of([&] { StreamingKVCache::load(dir + "cache_spans_encoded_huge.qvgc"); });
  EXPECT_NE(spans.find("spans encoded from 4 non-sink chunks"), std::string::npos) << spans;
  const std::string evicted = error_of([&] { StreamingKVCache::load(dir + "cache_evicted_without_window.qvgc"); });
  EXPECT_NE(evicted.find("chunk 1: evicted, but the policy has no window"), std::string::npos) << evicted;
}

// ---- the skeleton both caches share (cache_skeleton.h), over plain types ----

struct PlainChunk {
  int64_t index = 0, first_token = 0, tokens = 0;
  bool live = true;
  int64_t span = -1, span_offset = 0;
};
struct PlainSpan {
  int64_t id = 0, first_chunk = 0, chunks = 0, first_token = 0, tokens = 0;
};
struct PlainLayer {
  std::vector<PlainChunk> chunks;
  std::vector<PlainSpan> spans;
  int64_t next_chunk = 0, next_token = 0, next_span = 0;
};

// Spans of 2 after 1 sink chunk, a window of 2 live chunks, 5 chunks of 3
// tokens: chunks 1-2 form span 0, chunk 3's append evicts chunk 1, chunk 4's
// evicts chunk 2 (span 0 then goes) and forms span 1 of chunks 3-4.
TEST(CacheSkeleton, AppendsFollowThePolicyOverAnyChunkType) {
  SpanPolicy p;
  p.quant_factor = 2;
  p.sink = 1;
  p.window_chunks = 2;
  PlainLayer L;
  std::vector<std::string> hooks;  // commit's hook calls, in order
  std::vector<AppendReport> reports;
  for (int i = 0; i < 5; ++i) {
    PlainChunk nc;
    LayerAppend<PlainLayer, PlainChunk, PlainSpan> step(p, L, nc, 3);
    AppendReport rep;
    rep.chunk = nc.index;
    std::vector<PlainSpan> spans;
    for (size_t g = 0; g < step.plan().groups.size(); ++g) {
      spans.push_back(step.form_span(g));
      rep.spans.push_back(step.report(7, spans.back()));
    }
    rep.evicted = step.evicted();
    step.reserve(spans.size());
    step.commit(
        spans,
        [&](PlainChunk& ch, const PlainSpan& sp) {
          hooks.push_back("chunk " + std::to_string(ch.index) + " in span " + std::to_string(sp.id) + " at " +
                          std::to_string(ch.span_offset));
        },
        [&](const PlainSpan& sp) { hooks.push_back("span " + std::to_string(sp.id)); });
    drop_unreachable(L.chunks, L.spans);
    reports.push_back(rep);
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(reports[static_cast<size_t>(i)].chunk, i);
  ASSERT_EQ(reports[2].spans.size(), 1u);
  const SpanReport& s0 = reports[2].spans[0];
  EXPECT_EQ(s0.layer, 7);
  EXPECT_EQ(s0.span, 0);
  EXPECT_EQ(s0.first_chunk, 1);
  EXPECT_EQ(s0.chunks, 2);
  EXPECT_EQ(s0.first_token, 3);
  EXPECT_EQ(s0.tokens, 6);
  EXPECT_EQ(reports[3].evicted, std::vector<int64_t>{1});
  EXPECT_EQ(reports[4].evicted, std::vector<int64_t>{2});
  ASSERT_EQ(reports[4].spans.size(), 1u);
  EXPECT_EQ(reports[4].spans[0].span, 1);
  EXPECT_EQ(reports[4].spans[0].first_chunk, 3);
  EXPECT_EQ(reports[4].spans[0].first_token, 9);
  EXPECT_EQ(hooks, (std::vector<std::string>{"chunk 1 in span 0 at 0", "chunk 2 in span 0 at 3", "span 0",
                                             "chunk 3 in span 1 at 0", "chunk 4 in span 1 at 3", "span 1"}));
  EXPECT_EQ(L.next_chunk, 5);
  EXPECT_EQ(L.next_token, 15);
  EXPECT_EQ(L.next_span, 2);
  ASSERT_EQ(L.chunks.size(), 3u);  // sink 0, then 3 and 4 in span 1
  EXPECT_EQ(L.chunks[1].index, 3);
  ASSERT_EQ(L.spans.size(), 1u);
  EXPECT_EQ(L.spans[0].id, 1);
  EXPECT_EQ(live_token_count(L), 9);
  EXPECT_EQ(live_chunk_list(L), (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 3}, {4, 3}}));

  CacheConfig c;
  c.heads = 2;
  c.dim = 4;
  const LayerMemory m = count_layer(
      L, c, [](const PlainChunk& ch, LayerMemory& mem) { mem.k.tail += ch.span < 0 ? ch.tokens : 0; },
      [](const PlainSpan&, LayerMemory&) { return true; });
  EXPECT_EQ(m.k.tail, 3u);
  EXPECT_EQ(m.tokens_live, 9);
  EXPECT_EQ(m.tokens_held, 9);
  EXPECT_EQ(m.tokens_encoded, 6);
  EXPECT_EQ(m.spans, 1);
  EXPECT_EQ(m.bf16_bytes, 2u * 2 * 9 * 4 * 2);
  const LayerMemory pending = count_layer(
      L, c, [](const PlainChunk&, LayerMemory&) {}, [](const PlainSpan&, LayerMemory&) { return false; });
  EXPECT_EQ(pending.tokens_held, 9);  // a span not encoded yet: held, not encoded
  EXPECT_EQ(pending.tokens_encoded, 0);
  const MemoryStats all = sum_layers(3, [&](int) { return m; });
  EXPECT_EQ(all.layers.size(), 3u);
  EXPECT_EQ(all.total.tokens_live, 27);

  c.layers = 2;
  c.chunk_tokens = 3;
  EXPECT_EQ(test::error_of([&] { check_layer_index(c, 2, "read"); }),
            "read: layer 2 is out of range (the cache has 2 layers)");
  EXPECT_EQ(test::error_of([&] { check_chunk_tokens(c, 1, 3, 4); }),
            "append (layer 1): key chunk has 3 tokens, value chunk 4");
  EXPECT_EQ(test::error_of([&] { check_chunk_tokens(c, 1, 4, 4); }),
            "append (layer 1): chunk has 4 tokens, the cache takes chunks of 3");
  EXPECT_EQ(test::error_of([&] { check_chunk_tokens(c, 1, 3, 3); }), "");
}

}  // namespace
}  // namespace qvg
