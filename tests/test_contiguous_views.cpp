// DeviceKVCache's contiguous views (DeviceCacheOptions::contiguous_views) and
// the split ranges under them (src/cuda/view_memory.h) (label "gpu"; skipped
// where no device is usable): after every append, view() of every layer is
// read() of a cache without the option, given the same chunks, transposed
// to token-major, bit for bit, across the span policies, codecs, overlapped
// and batched encodes, odd chunk lengths, chunks appended from the view's
// slot (append_extra; a read() and other layers' views between the view and
// its append) and ranges that outgrow their first reservation.
#include <gtest/gtest.h>

#include "blobs.h"
#include "gpu_util.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "qvg/cache.h"
#include "qvg/device_cache.h"
#include "qvg/half.h"
#if QVG_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/view_memory.h"
#endif

namespace qvg {
namespace {

#if QVG_WITH_CUDA

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

std::vector<uint16_t> download16(const void* d, size_t n) {
  std::vector<uint16_t> h(n);
  cuda_copy_to_host(h.data(), d, n * 2);
  return h;
}

struct Case {
  std::string name;
  std::string key = "qvg:centroids=8,iters=2,init=random", value = "qvg:centroids=8,iters=2,init=random";
  int layers = 2, heads = 2, dim = 64;
  std::vector<int64_t> tokens = {64};  // chunk lengths, cycled (chunk_tokens 0 when they differ)
  int chunks = 9;
  SpanPolicy policy;
  DeviceCacheOptions options;
  int slot_every = 0;  // > 0: every slot_every-th chunk goes in through the view's slot (append_extra)
};

CacheConfig config_of(const Case& k) {
  CacheConfig c;
  c.layers = k.layers;
  c.heads = k.heads;
  c.dim = k.dim;
  c.key = parse_codec_spec(k.key);
  c.value = parse_codec_spec(k.value);
  c.key.kmeans.tol = 0;
  c.value.kmeans.tol = 0;
  c.chunk_tokens = k.tokens.size() == 1 ? k.tokens[0] : 0;
  c.policy = k.policy;
  return c;
}

/// A chunk of BF16 values, token-major [tokens, heads, dim], on the device.
std::shared_ptr<void> chunk(const Case& k, int64_t t, unsigned seed, std::vector<uint16_t>* host = nullptr) {
  const HeadTensor x = blobs(k.heads, t, k.dim, 1, 8, seed, 91);
  std::vector<uint16_t> b(x.data.size());
  for (int64_t h = 0; h < k.heads; ++h)
    for (int64_t n = 0; n < t; ++n)
      for (int64_t j = 0; j < k.dim; ++j)
        b[static_cast<size_t>((n * k.heads + h) * k.dim + j)] = bf16_from_float(x.at(h, n, j));
  auto d = cuda_allocate(b.size() * 2);
  EXPECT_EQ(cudaMemcpy(d.get(), b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  if (host) *host = b;
  return d;
}

DeviceChunkView token_major_view(const void* d, const Case& k, int64_t t) {
  return DeviceChunkView{d, DeviceElement::bf16, k.heads, t, k.dim, k.dim, int64_t{k.heads} * k.dim};
}

/// view(layer) of `got` equals read(layer) of `want` transposed, bit for bit;
/// read() of `got` equals it too; the slot follows the history.
void expect_view_equals_read(const DeviceKVCache& want, DeviceKVCache& got, const Case& k, int layer, int64_t extra,
                             const std::string& what) {
  const int64_t n = want.live_tokens(layer);
  ASSERT_EQ(got.live_tokens(layer), n) << what;
  const DeviceKVView w = got.view(layer, extra, nullptr);
  ASSERT_EQ(w.rows, n) << what;
  ASSERT_EQ(w.extra, extra) << what;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.k) % 16, 0u) << what;
  if (n == 0) return;
  const size_t hd = static_cast<size_t>(k.heads) * k.dim, values = static_cast<size_t>(n) * hd;
  auto rk = cuda_allocate(values * 2), rv = cuda_allocate(values * 2);
  want.read(layer, rk.get(), rv.get(), DeviceElement::bf16, n, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  for (int role = 0; role < 2; ++role) {
    const std::vector<uint16_t> ref = download16(role == 0 ? rk.get() : rv.get(), values);
    const std::vector<uint16_t> tm = download16(role == 0 ? w.k : w.v, values);
    size_t wrong = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < k.heads; ++h)
        wrong += std::memcmp(&tm[static_cast<size_t>((r * k.heads + h) * k.dim)],
                             &ref[static_cast<size_t>((h * n + r) * k.dim)], static_cast<size_t>(k.dim) * 2) != 0;
    EXPECT_EQ(wrong, 0u) << what << (role == 0 ? " K" : " V") << ": rows of heads differing from read()";
  }
  // read() of the cache with views: read()'s bytes too.
  auto gk = cuda_allocate(values * 2), gv = cuda_allocate(values * 2);
  got.read(layer, gk.get(), gv.get(), DeviceElement::bf16, n, nullptr);
  EXPECT_EQ(download16(gk.get(), values), download16(rk.get(), values)) << what << ": read() K";
  EXPECT_EQ(download16(gv.get(), values), download16(rv.get(), values)) << what << ": read() V";
}

void run_case(const Case& k) {
  const CacheConfig c = config_of(k);
  DeviceCacheOptions with = k.options;
  with.contiguous_views = true;
  DeviceKVCache want(c, k.options), got(c, with);
  for (int i = 0; i < k.chunks; ++i) {
    const int64_t t = k.tokens[static_cast<size_t>(i) % k.tokens.size()];
    for (int layer = 0; layer < k.layers; ++layer) {
      const std::string what = k.name + ": chunk " + std::to_string(i) + " layer " + std::to_string(layer);
      std::vector<uint16_t> hk, hv;
      const auto dk = chunk(k, t, 100u + 2u * i + 7u * layer, &hk), dv = chunk(k, t, 101u + 2u * i + 7u * layer, &hv);
      want.append(layer, token_major_view(dk.get(), k, t), token_major_view(dv.get(), k, t), {}, nullptr);
      if (k.slot_every > 0 && i % k.slot_every == 0) {
        // The chunk written into the slot of a view, as the attention's caller does, then appended from there.
        const DeviceKVView w = got.view(layer, t + 3, nullptr);
        const size_t at = static_cast<size_t>(w.rows) * k.heads * k.dim * 2;
        CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(w.k) + at, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(w.v) + at, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
        // Between the view and its append, as a model's other blocks and a caller's checks do: a read() of
        // this layer and views of the others (which rewrite the shared rows); the slot stays as written.
        if (got.chunks_appended(layer) > 0) {
          const size_t values = static_cast<size_t>(got.live_tokens(layer)) * k.heads * k.dim;
          auto rk = cuda_allocate(values * 2), rv = cuda_allocate(values * 2);
          got.read(layer, rk.get(), rv.get(), DeviceElement::bf16, got.live_tokens(layer), nullptr);
        }
        for (int l = 0; l < k.layers; ++l)
          if (l != layer) got.view(l, 0, nullptr);
        got.append_extra(layer, t, nullptr);
      } else {
        got.append(layer, token_major_view(dk.get(), k, t), token_major_view(dv.get(), k, t), {}, nullptr);
      }
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(got.live_chunks(layer), want.live_chunks(layer)) << what;
      ASSERT_EQ(got.spans_encoded(layer), want.spans_encoded(layer)) << what;
      EXPECT_EQ(got.layer_memory(layer).k.tail, want.layer_memory(layer).k.tail) << what << ": BF16 bytes held";
      // Every layer after every append: the shared rows are rewritten by each view.
      for (int l = 0; l <= layer; ++l) expect_view_equals_read(want, got, k, l, l == layer ? t : 0, what);
      if (::testing::Test::HasFailure()) return;
    }
  }
  const ViewMemory m = got.view_memory();
  EXPECT_GT(m.own_bytes, 0);
  EXPECT_GE(m.reservations, 2 * k.layers);
}

TEST(ContiguousViews, ViewEqualsReadAcrossPolicies) {
  REQUIRE_GPU();
  std::vector<Case> cases;
  {
    Case k;
    k.name = "spans of 1";
    k.policy.quant_factor = 1;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "spans of 2, sink 1, window of 5 chunks";
    k.policy.quant_factor = 2;
    k.policy.sink = 1;
    k.policy.window_chunks = 5;
    k.chunks = 12;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "spans of 8, keep_recent 1";
    k.policy.quant_factor = 8;
    k.policy.keep_recent = 1;
    k.chunks = 19;
    k.layers = 1;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "rtn, spans of 2, sink 2, window_tokens 300";
    k.key = "rtn";
    k.value = "rtn-int4:block=16";
    k.policy.quant_factor = 2;
    k.policy.sink = 2;
    k.policy.window_tokens = 300;
    k.chunks = 11;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "bf16 codec, spans of 3";
    k.key = "bf16";
    k.value = "bf16";
    k.policy.quant_factor = 3;
    k.policy.sink = 1;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "odd chunk lengths, spans of 2, sink 1";
    k.heads = 3;
    k.tokens = {37, 50, 23, 61};
    k.policy.quant_factor = 2;
    k.policy.sink = 1;
    k.chunks = 10;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "overlap_encode, spans of 2, sink 1";
    k.options.overlap_encode = true;
    k.policy.quant_factor = 2;
    k.policy.sink = 1;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "batch_encodes, spans of 2, sink 1, window of 6";
    k.options.batch_encodes = true;
    k.policy.quant_factor = 2;
    k.policy.sink = 1;
    k.policy.window_chunks = 6;
    k.layers = 3;
    k.chunks = 11;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "chunks from the slot, spans of 4, sink 1";
    k.policy.quant_factor = 4;
    k.policy.sink = 1;
    k.slot_every = 1;
    k.chunks = 10;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "chunks from the slot, batch_encodes, spans of 2";
    k.options.batch_encodes = true;
    k.policy.quant_factor = 2;
    k.slot_every = 2;
    k.layers = 3;
    cases.push_back(k);
  }
  {
    Case k;
    k.name = "chunks from the slot, overlap_encode, odd lengths";
    k.options.overlap_encode = true;
    k.tokens = {45, 64, 19};
    k.policy.quant_factor = 2;
    k.slot_every = 1;
    cases.push_back(k);
  }
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    run_case(k);
  }
}

// Rows of 2 KiB (8 heads x 128) in chunks of 300 tokens: the own pages and
// the shared ones outgrow the first reservation of every range (remapped into
// larger ones), and the views stay equal to read().
TEST(ContiguousViews, RangesThatOutgrowTheirReservation) {
  REQUIRE_GPU();
  Case k;
  k.name = "growth";
  k.heads = 8;
  k.dim = 128;
  k.tokens = {300};
  k.layers = 2;
  k.chunks = 20;
  k.policy.quant_factor = 4;
  k.policy.sink = 1;
  run_case(k);
  const CacheConfig c = config_of(k);
  DeviceCacheOptions o;
  o.contiguous_views = true;
  DeviceKVCache cache(c, o);
  for (int i = 0; i < k.chunks; ++i) {
    const auto d = chunk(k, 300, 5u + i);
    for (int l = 0; l < k.layers; ++l) {
      cache.append(l, token_major_view(d.get(), k, 300), token_major_view(d.get(), k, 300), {}, nullptr);
      cache.view(l, 300, nullptr);
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_GT(cache.view_memory().reservations, 2 * k.layers) << "no range outgrew its first reservation";
}

// A new cache after one is destroyed (what qvg.torch's reset() does): the
// same views.
TEST(ContiguousViews, ACacheMadeAgainGivesTheSameViews) {
  REQUIRE_GPU();
  Case k;
  k.name = "reset";
  k.policy.quant_factor = 2;
  k.chunks = 5;
  for (int round = 0; round < 2; ++round) run_case(k);
}

TEST(ContiguousViews, MisuseIsAnError) {
  REQUIRE_GPU();
  Case k;
  k.policy.quant_factor = 2;
  const CacheConfig c = config_of(k);
  DeviceKVCache plain(c);
  EXPECT_THROW(plain.view(0, 0, nullptr), Error) << "view without contiguous_views";
  EXPECT_THROW(plain.append_extra(0, 64, nullptr), Error) << "append_extra without contiguous_views";
  DeviceCacheOptions o;
  o.contiguous_views = true;
  CacheConfig roped = c;
  roped.rope.mode = RopeMode::wan_3d;
  EXPECT_THROW(DeviceKVCache(roped, o), Error) << "RoPE on read with contiguous_views";
  DeviceKVCache cache(c, o);
  EXPECT_THROW(cache.append_extra(0, 64, nullptr), Error) << "append_extra without a view";
  EXPECT_THROW(cache.view(2, 0, nullptr), Error) << "layer out of range";
  EXPECT_THROW(cache.view(0, -1, nullptr), Error) << "negative extra";
  const DeviceKVView w = cache.view(0, 64, nullptr);
  EXPECT_EQ(w.rows, 0);
  EXPECT_THROW(cache.append_extra(0, 65, nullptr), Error) << "more tokens than the slot";
  EXPECT_THROW(cache.append_extra(0, 32, nullptr), Error) << "tokens the config refuses (chunk_tokens 64)";
  cache.view(0, 0, nullptr);
  EXPECT_THROW(cache.append_extra(0, 64, nullptr), Error) << "the last view had no slot";
  EXPECT_EQ(cache.chunks_appended(0), 0);
  const auto d = chunk(k, 64, 3);
  cache.append(0, token_major_view(d.get(), k, 64), token_major_view(d.get(), k, 64), {}, nullptr);
  auto out = cuda_allocate(static_cast<size_t>(64 * 2 * 64) * 4);
  EXPECT_THROW(cache.read(0, out.get(), out.get(), DeviceElement::f32, 64, nullptr), Error) << "f32 read";
}

// The memory under the views: rows written below the boundary of one range
// read back below the boundary of another range that maps the same shared
// pages; the own pages are each range's; a range remapped into a larger
// reservation keeps its old addresses, over the same memory.
TEST(ContiguousViews, SplitRangesShareTheirLowerPages) {
  REQUIRE_GPU();
  std::string why;
  if (!cuda::view_memory_supported(0, &why)) GTEST_SKIP() << why;
  CUDA_OK(cudaSetDevice(0));
  const size_t page = cuda::view_page_bytes(0);
  cuda::PageList shared{std::make_shared<cuda::PhysicalPages>(0, page)};
  cuda::PageList own_a{std::make_shared<cuda::PhysicalPages>(0, page)}, own_b{std::make_shared<cuda::PhysicalPages>(0, page)};
  cuda::SplitRange a(0), b(0);
  a.map(shared, own_a);
  b.map(shared, own_b);
  ASSERT_NE(a.boundary(), b.boundary());
  std::vector<uint8_t> pattern(4096), back(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);
  CUDA_OK(cudaMemcpy(a.boundary() - pattern.size(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(back.data(), b.boundary() - back.size(), back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, pattern) << "shared rows through the other range";
  // Own pages: distinct.
  CUDA_OK(cudaMemset(b.boundary(), 0, 4096));
  CUDA_OK(cudaMemcpy(a.boundary(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(back.data(), b.boundary(), back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0)) << "own rows of one range seen through another";
  // A view across the boundary is contiguous: the last shared bytes, then the own.
  std::vector<uint8_t> across(8192);
  CUDA_OK(cudaMemcpy(across.data(), a.boundary() - 4096, across.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), across.begin()));
  EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), across.begin() + 4096));
  // Growth: more pages on both sides than the room reserved (2 pages a side).
  uint8_t* old_boundary = a.boundary();
  for (int i = 0; i < 3; ++i) {
    shared.push_back(std::make_shared<cuda::PhysicalPages>(0, page));
    own_a.push_back(std::make_shared<cuda::PhysicalPages>(0, page));
  }
  a.map(shared, own_a);
  EXPECT_EQ(a.reservations(), 2);
  EXPECT_EQ(a.below_bytes(), 4 * page);
  EXPECT_EQ(a.above_bytes(), 4 * page);
  CUDA_OK(cudaMemcpy(back.data(), a.boundary() - back.size(), back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, pattern) << "shared rows after the remap";
  CUDA_OK(cudaMemcpy(back.data(), old_boundary, back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, pattern) << "own rows through the retired range";
  // The whole span of new pages is writable and contiguous.
  CUDA_OK(cudaMemset(a.boundary() - 4 * page, 0x5A, 8 * page));
  CUDA_OK(cudaMemcpy(back.data(), b.boundary() - back.size(), back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x5A)) << "the other range sees the write to the shared pages";
  CUDA_OK(cudaDeviceSynchronize());
}

#else

TEST(ContiguousViews, RefusesWithoutCuda) {
  CacheConfig c;
  DeviceCacheOptions o;
  o.contiguous_views = true;
  EXPECT_THROW(DeviceKVCache(c, o), Error);
}

#endif

}  // namespace
}  // namespace qvg
