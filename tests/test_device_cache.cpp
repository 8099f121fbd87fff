// DeviceKVCache (qvg/device_cache.h) against StreamingKVCache, the host
// reference (label "gpu"; skipped where no device is usable): the same chunks
// appended to both, read() after every append bit-identical (f32) or its
// BF16 rounding (bf16), the same live chunks, spans and bytes; k-means with a
// fixed iteration count (tol = 0) on inputs without near-ties (tests/blobs.h).
#include <gtest/gtest.h>

#include "blobs.h"
#include "gpu_util.h"

#include <cstring>

#include "qvg/cache.h"
#include "qvg/device_cache.h"
#include "qvg/half.h"
#if QVG_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace qvg {
namespace {

#if QVG_WITH_CUDA

constexpr int64_t kGridH = 4, kGridW = 8, kFramesPerChunk = 2;
constexpr int64_t kChunk = kGridH * kGridW * kFramesPerChunk;  // 64 tokens

std::shared_ptr<void> upload(const void* host, size_t bytes) {
  auto d = cuda_allocate(bytes);
  EXPECT_EQ(cudaMemcpy(d.get(), host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

/// x as [tokens, heads, dim] (Self-Forcing's layout, batch 1).
std::vector<float> token_major(const HeadTensor& x) {
  std::vector<float> t(x.data.size());
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t n = 0; n < x.tokens; ++n)
      std::memcpy(&t[static_cast<size_t>((n * x.heads + h) * x.dim)], x.head(h) + n * x.dim,
                  static_cast<size_t>(x.dim) * 4);
  return t;
}

CacheConfig small_config(const std::string& key_spec, const std::string& value_spec, RopeMode rope) {
  CacheConfig c;
  c.layers = 2;
  c.heads = 2;
  c.dim = 64;
  c.key = parse_codec_spec(key_spec);
  c.value = parse_codec_spec(value_spec);
  c.key.kmeans.tol = 0;
  c.value.kmeans.tol = 0;
  c.chunk_tokens = kChunk;
  c.policy.quant_factor = 2;
  c.policy.sink = 1;
  c.policy.window_chunks = 5;  // evicts single chunks out of 2-chunk spans
  c.rope.mode = rope;
  return c;
}

/// Appends `chunks` chunks to both caches (layer 1 only; layer 0 stays
/// empty) and compares them after every append.
void run_against_reference(const CacheConfig& c, int chunks, bool token_major_input, bool host_positions,
                           cudaStream_t s, int directions) {
  StreamingKVCache ref(c);
  DeviceKVCache dev(c);
  const int levels = std::max(1, smoothing_stages(c.key));
  const int pd = rope_position_dims(c.rope.mode);
  for (int i = 0; i < chunks; ++i) {
    const std::string what = "chunk " + std::to_string(i);
    const HeadTensor k = blobs(c.heads, kChunk, c.dim, levels, directions ? directions : c.key.kmeans.centroids,
                               static_cast<unsigned>(10 + i), 77);
    const HeadTensor v = blobs(c.heads, kChunk, c.dim, levels, directions ? directions : c.value.kmeans.centroids,
                               static_cast<unsigned>(50 + i), 78);
    std::vector<int32_t> pos;
    if (pd == 3) pos = wan_grid_positions(i * kFramesPerChunk, kFramesPerChunk, kGridH, kGridW);
    if (pd == 1) pos = positions_1d(i * kChunk + 5, kChunk);
    const AppendReport want = ref.append(1, k, v, pos);

    const std::vector<float> kh = token_major_input ? token_major(k) : k.data;
    const std::vector<float> vh = token_major_input ? token_major(v) : v.data;
    const auto kd = upload(kh.data(), kh.size() * 4), vd = upload(vh.data(), vh.size() * 4);
    DeviceChunkView kv = DeviceChunkView::head_major(kd.get(), DeviceElement::f32, c.heads, kChunk, c.dim);
    DeviceChunkView vv = DeviceChunkView::head_major(vd.get(), DeviceElement::f32, c.heads, kChunk, c.dim);
    if (token_major_input) {
      kv.head_stride = vv.head_stride = c.dim;
      kv.token_stride = vv.token_stride = c.heads * c.dim;
    }
    ChunkPositions cp;
    if (host_positions)
      cp.host = pos;
    else if (pd == 3)
      cp = ChunkPositions::wan_grid(i * kFramesPerChunk, kGridH, kGridW);
    else if (pd == 1)
      cp = ChunkPositions::sequence(i * kChunk + 5);
    const AppendReport got = dev.append(1, kv, vv, cp, s);
    ASSERT_EQ(got.spans.size(), want.spans.size()) << what;
    for (size_t j = 0; j < got.spans.size(); ++j) {
      EXPECT_EQ(got.spans[j].first_chunk, want.spans[j].first_chunk) << what;
      EXPECT_EQ(got.spans[j].tokens, want.spans[j].tokens) << what;
      EXPECT_EQ(got.spans[j].centroids, want.spans[j].centroids) << what;
      EXPECT_EQ(got.spans[j].k_warm_started, want.spans[j].k_warm_started) << what;
      EXPECT_EQ(got.spans[j].k_bytes.total(), want.spans[j].k_bytes.total()) << what;
    }
    EXPECT_EQ(got.evicted, want.evicted) << what;

    const CacheRead r = ref.read(1);
    const int64_t n = r.k.tokens;
    ASSERT_EQ(dev.live_tokens(1), n) << what;
    EXPECT_EQ(dev.live_chunks(1), ref.live_chunks(1)) << what;
    // f32 into a larger destination (row_stride n + 8), then bf16.
    const int64_t stride = n + 8;
    const size_t cells = static_cast<size_t>(c.heads * stride * c.dim);
    auto ko = cuda_allocate(cells * 4), vo = cuda_allocate(cells * 4);
    ASSERT_EQ(dev.read(1, ko.get(), vo.get(), DeviceElement::f32, stride, s), n);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto kf = download<float>(ko.get(), cells), vf = download<float>(vo.get(), cells);
    ASSERT_EQ(dev.read(1, ko.get(), vo.get(), DeviceElement::bf16, n, s), n);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto kb = download<uint16_t>(ko.get(), static_cast<size_t>(c.heads * n * c.dim));
    const auto vb = download<uint16_t>(vo.get(), static_cast<size_t>(c.heads * n * c.dim));
    int64_t bad_f32 = 0, bad_bf16 = 0;
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t q = 0; q < c.dim; ++q) {
          const float wk = r.k.at(h, t, q), wv = r.v.at(h, t, q);
          const size_t at = static_cast<size_t>((h * stride + t) * c.dim + q);
          const size_t at16 = static_cast<size_t>((h * n + t) * c.dim + q);
          bad_f32 += std::memcmp(&kf[at], &wk, 4) != 0 || std::memcmp(&vf[at], &wv, 4) != 0;
          bad_bf16 += kb[at16] != bf16_from_float(wk) || vb[at16] != bf16_from_float(wv);
        }
    EXPECT_EQ(bad_f32, 0) << what << ": f32 values differing from StreamingKVCache::read";
    EXPECT_EQ(bad_bf16, 0) << what << ": bf16 values differing from the rounded read";

    const LayerMemory a = ref.layer_memory(1), b = dev.layer_memory(1);
    EXPECT_EQ(a.k.total(), b.k.total()) << what;
    EXPECT_EQ(a.v.total(), b.v.total()) << what;
    EXPECT_EQ(a.warm_start, b.warm_start) << what;
    EXPECT_EQ(a.tokens_live, b.tokens_live) << what;
    EXPECT_EQ(a.tokens_held, b.tokens_held) << what;
    EXPECT_EQ(a.tokens_encoded, b.tokens_encoded) << what;
    EXPECT_EQ(a.spans, b.spans) << what;
    EXPECT_EQ(b.positions, static_cast<size_t>(n * pd * 4)) << what;
  }
  EXPECT_EQ(dev.spans_encoded(1), ref.spans_encoded(1));
  EXPECT_EQ(dev.chunks_appended(0), 0);
}

/// run_against_reference on a stream of its own, which outlives the cache
/// (the cache's memory is released on the streams that allocated it).
/// directions: blob directions of the data (0: the codec's C).
void run_against_reference(const CacheConfig& c, int chunks, bool token_major_input, bool host_positions,
                           int directions = 0) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  run_against_reference(c, chunks, token_major_input, host_positions, s, directions);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(DeviceKVCache, QvgWithWanRopeEqualsStreamingCacheRead) {
  REQUIRE_GPU();
  run_against_reference(small_config("qvg:centroids=8,iters=3", "qvg:centroids=8,iters=3", RopeMode::wan_3d), 9,
                        false, false);
}

TEST(DeviceKVCache, TokenMajorInputAndHostPositions) {
  REQUIRE_GPU();
  run_against_reference(small_config("qvg-pro:centroids=4,iters=2", "rtn", RopeMode::wan_3d), 7, true, true);
}

TEST(DeviceKVCache, OneDimensionalRope) {
  REQUIRE_GPU();
  run_against_reference(small_config("rtn-int4", "qvg:centroids=8,iters=2", RopeMode::rope_1d), 6, true, false);
}

// Codecs that encode on the host and decode whole tensors (bf16, kivi,
// quarot): spans partly evicted are read through the whole-span decode.
TEST(DeviceKVCache, HostEncodedCodecsWithoutRope) {
  REQUIRE_GPU();
  run_against_reference(small_config("bf16", "kivi", RopeMode::none), 7, false, false);
  run_against_reference(small_config("quarot", "bf16", RopeMode::none), 5, true, false);
}

// A span shorter than C: C clamped to its tokens, as StreamingKVCache does.
// Every token is then a cluster of its own: tokens drawn from 2^16 blob
// directions are far apart (with the codec's 256 directions, tokens of one
// blob sit within BF16 rounding of each other's centroids: near-ties).
TEST(DeviceKVCache, ShortSpansClampCentroids) {
  REQUIRE_GPU();
  CacheConfig c = small_config("qvg:centroids=256,iters=2", "rtn", RopeMode::none);  // spans of 128 tokens
  run_against_reference(c, 4, false, false, 1 << 16);
}

/// read() of layer 0 of `cache` as f32 [heads][n][dim] (synchronizes s).
std::vector<float> read_f32(const DeviceKVCache& cache, bool key, cudaStream_t s) {
  const CacheConfig& c = cache.config();
  const int64_t n = cache.live_tokens(0);
  const size_t cells = static_cast<size_t>(c.heads * n * c.dim);
  auto ko = cuda_allocate(cells * 4), vo = cuda_allocate(cells * 4);
  EXPECT_EQ(cache.read(0, ko.get(), vo.get(), DeviceElement::f32, n, s), n);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return download<float>(key ? ko.get() : vo.get(), cells);
}

// overlap_encode: after append k, read() equals the read of a cache without
// it, except the chunks of the spans append k formed, which read as a cache
// whose codec is bf16 (the chunks as appended, rotated alike) reads them;
// from the next append on, everything equals the plain cache's read. Memory
// counts the BF16 copies while they are held. Bit for bit, f32, 3-D RoPE,
// sink and window eviction, bf16 input on a token-major view.
TEST(DeviceKVCache, OverlappedEncodesReadChunksUntilTheNextAppend) {
  REQUIRE_GPU();
  const CacheConfig c = small_config("qvg:centroids=8,iters=3", "qvg-pro:centroids=4,iters=2", RopeMode::wan_3d);
  CacheConfig cb = c;
  cb.key = parse_codec_spec("bf16");
  cb.value = parse_codec_spec("bf16");
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    DeviceKVCache overlapped(c, DeviceCacheOptions{.overlap_encode = true}), plain(c), exact(cb);
    EXPECT_TRUE(overlapped.options().overlap_encode);
    EXPECT_FALSE(plain.options().overlap_encode);
    int64_t fresh_spans = 0;
    for (int i = 0; i < 9; ++i) {
      const std::string what = "chunk " + std::to_string(i);
      const HeadTensor k = blobs(c.heads, kChunk, c.dim, 2, 8, static_cast<unsigned>(10 + i), 77);
      const HeadTensor v = blobs(c.heads, kChunk, c.dim, 2, 4, static_cast<unsigned>(50 + i), 78);
      std::vector<uint16_t> kh(k.data.size()), vh(v.data.size());
      const std::vector<float> kt = token_major(k), vt = token_major(v);
      for (size_t j = 0; j < kh.size(); ++j) kh[j] = bf16_from_float(kt[j]), vh[j] = bf16_from_float(vt[j]);
      const auto kd = upload(kh.data(), kh.size() * 2), vd = upload(vh.data(), vh.size() * 2);
      DeviceChunkView kv = DeviceChunkView::head_major(kd.get(), DeviceElement::bf16, c.heads, kChunk, c.dim);
      DeviceChunkView vv = DeviceChunkView::head_major(vd.get(), DeviceElement::bf16, c.heads, kChunk, c.dim);
      kv.head_stride = vv.head_stride = c.dim;
      kv.token_stride = vv.token_stride = c.heads * c.dim;
      const ChunkPositions grid = ChunkPositions::wan_grid(i * kFramesPerChunk, kGridH, kGridW);
      const AppendReport got = overlapped.append(0, kv, vv, grid, s);
      const AppendReport want = plain.append(0, kv, vv, grid, s);
      exact.append(0, kv, vv, grid, s);
      ASSERT_EQ(got.spans.size(), want.spans.size()) << what;
      EXPECT_EQ(got.evicted, want.evicted) << what;
      fresh_spans += static_cast<int64_t>(got.spans.size());
      // Tokens of the layer's live chunks that the spans just formed cover.
      const auto live = overlapped.live_chunks(0);
      ASSERT_EQ(live, plain.live_chunks(0)) << what;
      std::vector<bool> fresh;
      for (const auto& [index, tokens] : live) {
        bool in = false;
        for (const SpanReport& sr : got.spans) in |= index >= sr.first_chunk && index < sr.first_chunk + sr.chunks;
        fresh.insert(fresh.end(), static_cast<size_t>(tokens), in);
      }
      const int64_t n = static_cast<int64_t>(fresh.size());
      for (const bool key : {true, false}) {
        const auto a = read_f32(overlapped, key, s), b = read_f32(plain, key, s), e = read_f32(exact, key, s);
        int64_t bad = 0, fresh_differing = 0;
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t t = 0; t < n; ++t)
            for (int64_t q = 0; q < c.dim; ++q) {
              const size_t at = static_cast<size_t>((h * n + t) * c.dim + q);
              const auto& want_v = fresh[static_cast<size_t>(t)] ? e : b;
              bad += std::memcmp(&a[at], &want_v[at], 4) != 0;
              fresh_differing += fresh[static_cast<size_t>(t)] && b[at] != e[at];
            }
        EXPECT_EQ(bad, 0) << what << (key ? " keys" : " values");
        // The case is not vacuous: where spans were just formed, the plain
        // cache's decoded values differ from the chunks as appended.
        if (!got.spans.empty()) EXPECT_GT(fresh_differing, 0) << what;
      }
      const LayerMemory mo = overlapped.layer_memory(0), mp = plain.layer_memory(0);
      const size_t copies = got.spans.empty() ? 0 : [&] {
        size_t tokens = 0;
        for (const SpanReport& sr : got.spans) tokens += static_cast<size_t>(sr.tokens);
        return tokens * static_cast<size_t>(c.heads * c.dim) * 2;
      }();
      EXPECT_EQ(mo.k.tail, mp.k.tail + copies) << what;
      EXPECT_EQ(mo.v.tail, mp.v.tail + copies) << what;
      EXPECT_EQ(mo.k.spans.total(), mp.k.spans.total()) << what;
      EXPECT_EQ(mo.tokens_held, mp.tokens_held) << what;
    }
    EXPECT_GE(fresh_spans, 3);
    EXPECT_EQ(overlapped.spans_encoded(0), plain.spans_encoded(0));
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

// batch_encodes: the spans an append forms wait for flush() (explicit after
// odd chunks, automatic at the next chunk's first append after even ones)
// and are then the bytes of encoding them at once: every layer's read equals
// the plain cache's bit for bit, the reports say the same bytes and warm
// starts, and while spans wait their chunks are held (and counted) in BF16.
TEST(DeviceKVCache, BatchedEncodesEqualEncodingAtOnce) {
  REQUIRE_GPU();
  CacheConfig c = small_config("qvg:centroids=8,iters=3", "qvg-pro:centroids=4,iters=2", RopeMode::wan_3d);
  c.layers = 3;
  EXPECT_THROW(DeviceKVCache(c, DeviceCacheOptions{.overlap_encode = true, .batch_encodes = true}), Error);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    DeviceKVCache batched(c, DeviceCacheOptions{.batch_encodes = true}), plain(c);
    auto read_layer = [&](const DeviceKVCache& cache, int layer) {
      const int64_t n = cache.live_tokens(layer);
      const size_t cells = static_cast<size_t>(c.heads * n * c.dim);
      auto ko = cuda_allocate(cells * 4), vo = cuda_allocate(cells * 4);
      EXPECT_EQ(cache.read(layer, ko.get(), vo.get(), DeviceElement::f32, n, s), n);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      std::vector<float> kv = download<float>(ko.get(), cells), vv = download<float>(vo.get(), cells);
      kv.insert(kv.end(), vv.begin(), vv.end());
      return kv;
    };
    int64_t waited = 0;
    for (int i = 0; i < 10; ++i) {
      int64_t formed = 0;
      for (int layer = 0; layer < c.layers; ++layer) {
        const std::string what = "chunk " + std::to_string(i) + " layer " + std::to_string(layer);
        const HeadTensor k = blobs(c.heads, kChunk, c.dim, 2, 8, static_cast<unsigned>(10 + i + 100 * layer), 77);
        const HeadTensor v = blobs(c.heads, kChunk, c.dim, 2, 4, static_cast<unsigned>(50 + i + 100 * layer), 78);
        const auto kd = upload(k.data.data(), k.data.size() * 4), vd = upload(v.data.data(), v.data.size() * 4);
        const DeviceChunkView kv = DeviceChunkView::head_major(kd.get(), DeviceElement::f32, c.heads, kChunk, c.dim);
        const DeviceChunkView vv = DeviceChunkView::head_major(vd.get(), DeviceElement::f32, c.heads, kChunk, c.dim);
        const ChunkPositions grid = ChunkPositions::wan_grid(i * kFramesPerChunk, kGridH, kGridW);
        const AppendReport got = batched.append(layer, kv, vv, grid, s);
        const AppendReport want = plain.append(layer, kv, vv, grid, s);
        if (layer == 0)  // the chunk's first append flushed the spans waiting; its own may wait
          EXPECT_EQ(batched.pending_spans(), static_cast<int64_t>(got.spans.size())) << what;
        ASSERT_EQ(got.spans.size(), want.spans.size()) << what;
        EXPECT_EQ(got.evicted, want.evicted) << what;
        for (size_t j = 0; j < got.spans.size(); ++j) {
          EXPECT_EQ(got.spans[j].k_bytes.total(), want.spans[j].k_bytes.total()) << what;
          EXPECT_EQ(got.spans[j].v_bytes.total(), want.spans[j].v_bytes.total()) << what;
          EXPECT_EQ(got.spans[j].k_warm_started, want.spans[j].k_warm_started) << what;
          EXPECT_EQ(got.spans[j].v_warm_started, want.spans[j].v_warm_started) << what;
        }
        formed += static_cast<int64_t>(got.spans.size());
      }
      EXPECT_EQ(batched.pending_spans(), formed) << "chunk " << i;
      if (formed > 0) {
        ++waited;
        const LayerMemory mb = batched.layer_memory(0), mp = plain.layer_memory(0);
        EXPECT_GT(mb.k.tail, mp.k.tail) << "chunk " << i << ": the waiting spans' chunks are held in BF16";
        EXPECT_EQ(mb.tokens_held, mp.tokens_held) << "chunk " << i;
      }
      if (i % 2 == 1 || i == 9) batched.flush(s);
      if (batched.pending_spans() > 0) continue;  // flushed by the next chunk's first append
      for (int layer = 0; layer < c.layers; ++layer) {
        EXPECT_TRUE(read_layer(batched, layer) == read_layer(plain, layer)) << "chunk " << i << " layer " << layer;
        const LayerMemory mb = batched.layer_memory(layer), mp = plain.layer_memory(layer);
        EXPECT_EQ(mb.k.tail, mp.k.tail);
        EXPECT_EQ(mb.k.spans.total(), mp.k.spans.total());
        EXPECT_EQ(mb.v.spans.total(), mp.v.spans.total());
        EXPECT_EQ(batched.spans_encoded(layer), plain.spans_encoded(layer));
      }
    }
    EXPECT_GE(waited, 3);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(DeviceKVCache, BadArgumentsLeaveTheCacheUnchanged) {
  REQUIRE_GPU();
  const CacheConfig c = small_config("qvg:centroids=8,iters=2", "qvg:centroids=8,iters=2", RopeMode::wan_3d);
  DeviceKVCache dev(c);
  const HeadTensor k = blobs(c.heads, kChunk, c.dim, 1, 8, 1);
  const auto kd = upload(k.data.data(), k.data.size() * 4);
  const DeviceChunkView ok = DeviceChunkView::head_major(kd.get(), DeviceElement::f32, c.heads, kChunk, c.dim);
  const ChunkPositions grid = ChunkPositions::wan_grid(0, kGridH, kGridW);
  DeviceChunkView wrong = ok;
  wrong.heads = 3;
  EXPECT_THROW(dev.append(0, wrong, ok, grid, nullptr), Error);
  wrong = ok;
  wrong.tokens = kChunk - 1;
  EXPECT_THROW(dev.append(0, wrong, wrong, grid, nullptr), Error);  // chunk_tokens is 64
  EXPECT_THROW(dev.append(0, ok, ok, ChunkPositions{}, nullptr), Error);  // RoPE needs positions
  EXPECT_THROW(dev.append(0, ok, ok, ChunkPositions::wan_grid(0, 5, 5), nullptr), Error);  // not whole frames
  EXPECT_THROW(dev.append(2, ok, ok, grid, nullptr), Error);
  EXPECT_EQ(dev.chunks_appended(0), 0);
  EXPECT_THROW(dev.read(0, kd.get(), kd.get(), DeviceElement::f32, 64, nullptr), Error);  // empty layer
  dev.append(0, ok, ok, grid, nullptr);
  EXPECT_EQ(dev.chunks_appended(0), 1);
  auto out = cuda_allocate(static_cast<size_t>(c.heads * kChunk * c.dim) * 4);
  EXPECT_THROW(dev.read(0, out.get(), out.get(), DeviceElement::f32, kChunk - 1, nullptr), Error);  // too few rows
  EXPECT_THROW(dev.read(0, out.get(), out.get(), DeviceElement::f16, kChunk, nullptr), Error);
  EXPECT_THROW(DeviceKVCache([&] {
                 CacheConfig f = c;
                 f.tail = TailFormat::f32;
                 return f;
               }()),
               Error);
}

// A cache's memory comes from the stream-ordered pool, which keeps what is
// freed; cuda_release_pool_memory hands it to the driver (cudaMemGetInfo's
// free memory grows by it), and a second call finds nothing left.
TEST(DeviceKVCache, ReleasePoolMemoryReturnsFreedMemory) {
  REQUIRE_GPU();
  constexpr size_t kBytes = size_t{256} << 20;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  { const auto p = cuda_allocate_async(kBytes, s); }  // back to the pool on s
  cuda_synchronize(s);
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  const size_t released = cuda_release_pool_memory();
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(released, kBytes);
  EXPECT_GE(free_after, free_before + kBytes);
  EXPECT_EQ(cuda_release_pool_memory(), 0u);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

#else

TEST(DeviceKVCache, RefusesWithoutCuda) { EXPECT_THROW(DeviceKVCache(CacheConfig{}), Error); }

TEST(DeviceKVCache, ReleasePoolMemoryIsANoOpWithoutCuda) { EXPECT_EQ(cuda_release_pool_memory(), 0u); }

#endif

}  // namespace
}  // namespace qvg
