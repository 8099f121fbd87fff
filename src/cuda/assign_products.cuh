// Internal: the tensor-core assignment's products (assign_tc.cuh): rows of x
// into A fragments, the wgmma and mma.sync products of a group of centroids,
// and their ranking into the best two per row.
#pragma once

#include "cuda/assign_common.cuh"

namespace qvg::cuda {

// ---------------------------------------------------------------------------
// Rows of x into A fragments

/// The rows [row0, row0 + kRows) of x into L2 where has_next, a line a lane:
/// the loads at the top of the warp's next unit then wait for L2 rather than
/// DRAM (one unit ahead: the faster distance, docs/BENCHMARKS.md). All 16
/// rows of 16-bit input (2 lines a row at D = 128, 1 at D = 64); float rows
/// at D = 128 only their first 8. wgmma only: the mma.sync kernel
/// (benchmarks) spills with it.
template <int D, typename T, int kRows>
__device__ __forceinline__ void prefetch_rows_l2(const T* xh, int64_t n_tokens, int64_t row0, bool has_next,
                                                 int lane) {
  constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
  constexpr int kLinesPerRow = D / kLineElems > 0 ? D / kLineElems : 1;
  const int64_t pn = row0 + lane / kLinesPerRow;
  if (has_next && lane / kLinesPerRow < kRows && pn < n_tokens)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(xh + pn * D + (lane % kLinesPerRow) * kLineElems));
}

/// One 8-dim chunk of a bf16 row (u: its 16 bytes) as A-fragment words: the
/// values exactly. Adds the chunk's terms of ||x||^2 to s and its max |x| to
/// x_max (where want_xmax).
__device__ __forceinline__ void bf16_chunk_words(const uint4& u, uint32_t (&wd)[4], float& s, float& x_max,
                                                 bool want_xmax) {
  wd[0] = u.x, wd[1] = u.y, wd[2] = u.z, wd[3] = u.w;
  // ||x||^2 from the words read as floats: the high value with the low
  // one's bits below it, |.| >= |hi| (and < |hi| (1 + 2^-7) for normal hi),
  // so an upper bound, all the re-ranking bound needs, without masking.
  // Inputs are finite (checked by the codec).
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float hi = __uint_as_float(wd[q]), lo = __uint_as_float(wd[q] << 16);
    s = fmaf(hi, hi, fmaf(lo, lo, s));
  }
  if (want_xmax)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      x_max = fmaxf(x_max, fmaxf(fabsf(__uint_as_float(wd[q] << 16)), fabsf(__uint_as_float(wd[q] & 0xFFFF0000u))));
}

/// One 8-dim chunk of an f16 or float row (at p) rounded to bf16 A-fragment
/// words. Adds the chunk's terms of ||x||^2 to s and of ||x - bf16(x)||^2 to
/// e, and its max |x| to x_max (where want_xmax).
template <typename T>
__device__ __forceinline__ void rounded_chunk_words(const T* p, uint32_t (&wd)[4], float& s, float& e, float& x_max,
                                                    bool want_xmax) {
  float v[8];
  load8_as_float(p, v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    wd[q] = pack_bf16x2(v[2 * q], v[2 * q + 1]);
    const float d0 = v[2 * q] - __uint_as_float(wd[q] << 16);  // exact
    const float d1 = v[2 * q + 1] - __uint_as_float(wd[q] & 0xFFFF0000u);
    e = fmaf(d0, d0, fmaf(d1, d1, e));
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    s = fmaf(v[k], v[k], s);
    if (want_xmax) x_max = fmaxf(x_max, fabsf(v[k]));
  }
}

/// Chunk c's words wd of row half r into the A fragments of an m16 tile:
/// word w is k-step 2 c + w / 2, register 2 (w & 1) + r.
template <int D>
__device__ __forceinline__ void set_fragment_words(uint32_t (&a)[D / 16][4], int c, int r, const uint32_t (&wd)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) a[2 * c + (q >> 1)][2 * (q & 1) + r] = wd[q];
}

/// The warp's rows of a unit, from row n0, into A fragments: m16 tile i, row
/// half r holds row n0 + 16 i + 8 r + g (lane t: chunks lane_chunk(t, c)).
/// Per row ||x|| (xn) and ||x - bf16(x)|| (xdev; 0 for bf16 input), quad
/// sums in a fixed order; max |x| into x_max where want_xmax. Rows past N
/// read row N - 1 (no zeroing; their results are dropped, and a copy of a
/// row leaves the maxima as they are).
template <int D, typename T, int kMT>
__device__ __forceinline__ void load_unit_rows(const T* xh, int64_t n_tokens, int64_t n0, int g, int t, bool want_xmax,
                                               uint32_t (&a)[kMT][D / 16][4], float (&xn)[kMT][2],
                                               float (&xdev)[kMT][2], float& x_max) {
  constexpr bool kExactInA = std::is_same_v<T, __nv_bfloat16>;
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t n = n0 + 16 * i + 8 * r + g;
      const T* xr = xh + (n < n_tokens ? n : n_tokens - 1) * D;
      float s = 0.0f, e = 0.0f;
#pragma unroll
      for (int c = 0; c < D / 32; ++c) {
        uint32_t wd[4];
        if constexpr (kExactInA)
          bf16_chunk_words(__ldg(reinterpret_cast<const uint4*>(xr + lane_chunk(t, c) * 8)), wd, s, x_max, want_xmax);
        else
          rounded_chunk_words(xr + lane_chunk(t, c) * 8, wd, s, e, x_max, want_xmax);
        set_fragment_words<D>(a[i], c, r, wd);
      }
      xn[i][r] = sqrtf(quad_sum(s));
      xdev[i][r] = kExactInA ? 0.0f : sqrtf(quad_sum(e));
    }
}

// ---------------------------------------------------------------------------
// The products of one group of centroids

/// wgmma: the accumulators of centroid group cp (kWgN centroids from cp)
/// start at -||c||^2 / 2 (c_init): columns 2t, 2t + 1 of n8 tile j, both
/// row halves.
__device__ __forceinline__ void wgmma_init_group(float (&acc)[32], const float* c_init, int cp, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 ci = *reinterpret_cast<const float2*>(c_init + cp + 8 * j + 2 * t);
    acc[4 * j] = acc[4 * j + 2] = ci.x;
    acc[4 * j + 1] = acc[4 * j + 3] = ci.y;
  }
}

/// wgmma: acc += the warpgroup's 64 rows (this warp's A fragments a) times
/// centroids cp .. cp + 63 (the core matrices; desc0: the descriptor of
/// centroids 0..63, k-step 0): D / 16 wgmma m64n64k16, committed as one
/// group; wgmma_wait before acc is read.
template <int D>
__device__ __forceinline__ void wgmma_group_products(float (&acc)[32], uint32_t (&a)[D / 16][4], uint64_t desc0,
                                                     int cp) {
  pin_registers(acc);
#pragma unroll
  for (int j = 0; j < D / 16; ++j) pin_registers(a[j]);
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < D / 16; ++j)
    wgmma_m64n64k16(acc, a[j], desc0 + static_cast<uint64_t>(((cp >> 3) * (D / 8) + 2 * j) * 8));
  wgmma_commit();
}

/// mma.sync: -||c||^2 / 2 of pass cp's columns 2t, 2t + 1 in each n8 tile
/// (the accumulators' start).
__device__ __forceinline__ void mma_init_pass(float2 (&ci)[kPassTiles], const float* c_init, int cp, int t) {
#pragma unroll
  for (int nt = 0; nt < kPassTiles; ++nt) ci[nt] = *reinterpret_cast<const float2*>(c_init + cp + 8 * nt + 2 * t);
}

/// mma.sync: acc = ci + the warp's rows (kMT m16 tiles of A fragments) times
/// centroids cp .. cp + 15: per k-step one ldmatrix.x4 of the core matrices
/// (b_base: this lane's row address for centroids 0..15, k-step 0) and
/// kMT * kPassTiles m16n8k16. acc: (m16 tile, n8 tile, fragment), rows g,
/// g + 8, columns 2t, 2t + 1.
template <int D, int kMT>
__device__ __forceinline__ void mma_pass_products(float (&acc)[kMT][kPassTiles][4], const uint32_t (&a)[kMT][D / 16][4],
                                                  uint32_t b_base, const float2 (&ci)[kPassTiles], int cp) {
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
    uint32_t b[kPassTiles][2];
#pragma unroll
    for (int nt = 0; nt < kPassTiles; nt += 2)
      ldmatrix_x4(b_base + static_cast<uint32_t>(core_chunk<D>(cp + 8 * nt, 2 * j) * 2), b[nt][0], b[nt][1],
                  b[nt + 1][0], b[nt + 1][1]);
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int nt = 0; nt < kPassTiles; ++nt) {
        if (j == 0)
          mma_bf16_16816(acc[i][nt], a[i][0], b[nt][0], b[nt][1], ci[nt].x, ci[nt].y, ci[nt].x, ci[nt].y);
        else
          mma_bf16_16816(acc[i][nt], a[i][j], b[nt][0], b[nt][1]);
      }
  }
}

// ---------------------------------------------------------------------------
// The running top two

/// The best two rank keys (rank_key) so far of each of a lane's rows (m16
/// tile i, row half r), in kChains independent chains.
template <int kMT, int kChains>
struct TopTwo {
  float best[kMT][2][kChains], second[kMT][2][kChains];

  __device__ __forceinline__ TopTwo() {
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int p = 0; p < kChains; ++p) best[i][r][p] = second[i][r][p] = -INFINITY;
  }

  /// Fragment value v (row half q >> 1 of m16 tile i) at centroid group + j
  /// less this lane's 2t (set by quad_best_two), into chain p % kChains;
  /// group: rank_group(offset), j a constant (rank_key). One LOP3 and three
  /// FMNMX.
  __device__ __forceinline__ void add(int i, int q, int p, float v, uint32_t group, uint32_t j) {
    float& b = best[i][q >> 1][p % kChains];
    float& sec = second[i][q >> 1][p % kChains];
    const float k = rank_key(v, group, j);
    sec = fmaxf(sec, fminf(b, k));
    b = fmaxf(b, k);
  }

  /// The best two keys k1 > k2 of row half r of m16 tile i over the quad: the
  /// chains merged, each lane's keys given its columns (index bits 1, 2:
  /// 2t), then the quad's. -inf where there is none. All 32 lanes must call it.
  __device__ __forceinline__ void quad_best_two(int i, int r, int t, float& k1, float& k2) const {
    // -inf is no key (nothing but NaN seen) and stays -inf.
    auto lane_key = [&](float k) { return k == -INFINITY ? k : __uint_as_float(__float_as_uint(k) | (2u * t)); };
    float b = best[i][r][0], sc = second[i][r][0];
#pragma unroll
    for (int p = 1; p < kChains; ++p) {  // merge the chains: distinct keys (distinct indices)
      sc = fmaxf(fmaxf(sc, second[i][r][p]), fminf(b, best[i][r][p]));
      b = fmaxf(b, best[i][r][p]);
    }
    k1 = lane_key(b), k2 = lane_key(sc);
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {  // the quad's lanes hold different centroids: distinct keys
      const float o1 = __shfl_xor_sync(0xFFFFFFFFu, k1, off), o2 = __shfl_xor_sync(0xFFFFFFFFu, k2, off);
      k2 = fmaxf(fminf(k1, o1), fmaxf(k2, o2));
      k1 = fmaxf(k1, o1);
    }
  }
};

/// wgmma: centroid group cp's products (acc, waited for) into the top two
/// (any type with TopTwo's add); cp a multiple of 64, the constants below 64.
template <typename Top>
__device__ __forceinline__ void rank_wgmma_group(Top& top, float (&acc)[32], int cp) {
  pin_registers(acc);
  const uint32_t group = rank_group(cp);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) top.add(0, q, j & 1, acc[4 * j + q], group, static_cast<uint32_t>(8 * j + (q & 1)));
}

/// mma.sync: pass cp's products into the top two (any type with TopTwo's add).
template <typename Top, int kMT>
__device__ __forceinline__ void rank_mma_pass(Top& top, const float (&acc)[kMT][kPassTiles][4], int cp) {
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int nt = 0; nt < kPassTiles; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        top.add(i, q, nt & 1, acc[i][nt][q], rank_group(cp), static_cast<uint32_t>(8 * nt + (q & 1)));
}

}  // namespace qvg::cuda
