// k-means assignment on the tensor cores, one pass over x: bf16 products
// rank the centroids; the exact distance (double) decides where the bf16
// ranking could be wrong, and gives each row's distance when asked for; the
// per-head maxima the next steps need come out of the same pass.
//
// The loop it replaces (kmeans_assign_ref):
//   for n: for c: w = x[n].c - ||c||^2 / 2; keep the largest (ties: lowest c)
//
// Layout. A block serves one head (blockIdx.y) and stages all of its
// centroids once, as bf16, in shared memory, in 8 x 8 core matrices of 128
// contiguous bytes (core_chunk: the no-swizzle K-major layout that wgmma
// reads, and whose rows ldmatrix reads without bank conflicts). Each warp
// then walks its own rows with no block barrier: it loads them straight from
// global memory into the A fragments of the products, which it keeps in
// registers for all C centroids (D / 2 words a lane per 16 rows). The dot
// product does not depend on the order of the dims, so the dims are
// permuted to make those loads whole 16-byte chunks: lane t of a quad owns
// chunks lane_chunk(t, c) = 4 c + t of every row (each load instruction of
// a quad reads 64 contiguous bytes: two whole sectors), and the centroids
// are staged in the matching "logical" order (logical_dim).
//
// Products, two kinds (kWg):
// - wgmma (the default): a warpgroup (4 warps, 16 rows each) multiplies its
//   64 rows by groups of 64 centroids, m64n64k16 with A from registers and B
//   read by the tensor cores from shared memory; one accumulator set of 32
//   registers, waited for and ranked group by group (the SM's other
//   warpgroups keep the tensor cores busy meanwhile).
// - mma.sync: per warp 32 rows (two m16 tiles), passes of 16 centroids, per
//   k-step one ldmatrix.x4 and four m16n8k16.
// Either way the accumulator starts at -||c||^2 / 2 (padded centroids at
// -FLT_MAX), so the product is the rank value w itself, and the best two per
// row are kept as floats whose lowest 8 mantissa bits are replaced by the
// centroid index (rank_key): one LOP3 and three FMNMX per product.
//
// After the products, per row (the quad's four lanes split the dims):
// - the best two of the quad (shuffles);
// - re-ranking: when the two values are within the error bound of the bf16
//   products (||x|| ||c - bf16(c)|| + ||x - bf16(x)|| ||c|| and rounding
//   terms), an fp32 comparison with its own error bound decides, and where
//   even that cannot, the distances ||x - c||^2 in double (ties to the
//   lower index); centroids equal to one of lower index never rank;
// - want_dist: ||x - c||^2 of the pick in double (the convergence check's
//   mean and the empty-cluster rule); want_resid: max |x - bf16(c)|, and
//   the next stage's points bf16(x - bf16(c)) (AssignOutputs::next).
// bf16 x is exact in the A fragments; f16 and float rows are read again.
// So ids equal an exact assignment (ties to the lowest index) unless three
// or more centroids of different values lie within the bound.
//
// Code. assign_tc_kernel (after its helpers, in the order it calls them):
// stage_centroids (into StagedCentroids); per unit of rows load_unit_rows,
// then per group of centroids the products (wgmma_group_products or
// mma_pass_products) ranked into a TopTwo; per row quad_best_two,
// within_error_bound and exact_phase; at the end flush_head_maxima.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "cuda/tensor_core.cuh"

namespace qvg::cuda {

constexpr int kPassTiles = 2;            // mma.sync: n8 tiles per pass (one ldmatrix.x4 per k-step)
constexpr int kAssignPass = 8 * kPassTiles;  // mma.sync: centroids per pass
constexpr int kWgN = 64;                 // wgmma: centroids per group (the N of m64nNk16)
constexpr int kAssignMaxCentroids = 256; // ids are one byte

/// Centroids staged for C: a multiple of both kinds' group sizes.
__host__ __device__ constexpr int assign_c_pad(int c_count) { return (c_count + kWgN - 1) / kWgN * kWgN; }
static_assert(kWgN % kAssignPass == 0, "a wgmma group is whole mma.sync passes");

/// Element offset of logical chunk m (dims 8 m .. 8 m + 7 in logical order)
/// of centroid c in the bf16 copy: core matrices (c / 8, m) of 8 rows x 16
/// bytes, row-major over m. So 16 logical dims of 8 centroids are two core
/// matrices 128 bytes apart (wgmma's leading-dimension offset) and the next
/// 8 centroids are D / 8 core matrices on (its stride-dimension offset).
template <int D>
__host__ __device__ constexpr int core_chunk(int c, int m) {
  return ((c >> 3) * (D / 8) + m) * 64 + (c & 7) * 8;
}

/// Chunk (8 dims) c of the D / 32 chunks that lane t of a quad owns in every
/// row: the quad's c-th loads are chunks 4 c .. 4 c + 3, 64 contiguous bytes.
__host__ __device__ constexpr int lane_chunk(int t, int c) { return 4 * c + t; }

/// The dim at logical position k (the k of the mma fragments): lane t's
/// u-th value (u = 4 j + 2 h + e for k-step j, fragment half h, element e).
__host__ __device__ constexpr int logical_dim(int k) {
  const int j = k >> 4, h = (k >> 3) & 1, t = (k >> 1) & 3, e = k & 1;
  const int u = 4 * j + 2 * h + e;
  return lane_chunk(t, u >> 3) * 8 + (u & 7);
}

template <int D>
constexpr bool logical_dims_are_a_permutation() {
  bool seen[D] = {};
  for (int k = 0; k < D; ++k) {
    const int p = logical_dim(k);
    if (p < 0 || p >= D || seen[p]) return false;
    if (k % 2 == 1 && p != logical_dim(k - 1) + 1) return false;  // pairs stay neighbours (float2 staging)
    seen[p] = true;
  }
  return true;
}
static_assert(logical_dims_are_a_permutation<64>() && logical_dims_are_a_permutation<128>(),
              "the logical order of the dims is a permutation of neighbouring pairs");

/// A rank value w with its lowest 8 mantissa bits replaced by the centroid
/// index group + j: float max / min then carry the index along. The value
/// moves by less than 2^-15 of itself, which the re-ranking margin covers;
/// among values that agree to that, the order is some fixed order of the
/// indices (such pairs are always re-ranked). One LOP3: the offset g sits in
/// a register as group = 0xFFFFFF00 | g (rank_group), j is a constant, and
/// g and j have no bit in common and none of bits 1, 2 (the lanes' 2t, set
/// after the products). With J = 0xFFFFFF00 | j, (w & group & J) | (group ^
/// J) keeps w where both masks are 1 (bits 8 up) and is 1 where exactly one
/// is (the bits of g and of j), 0 elsewhere. (w & mask) | (g + j) took two.
__device__ __forceinline__ float rank_key(float w, uint32_t group, uint32_t j) {
  const uint32_t jj = 0xFFFFFF00u | j;
  uint32_t k;
  asm("lop3.b32 %0, %1, %2, %3, 0xE6;\n" : "=r"(k) : "r"(__float_as_uint(w)), "r"(group), "r"(jj));
  return __uint_as_float(k);
}
__device__ __forceinline__ int key_index(float k) { return static_cast<int>(__float_as_uint(k) & 0xFFu); }
/// The group register of rank_key for offset g.
__device__ __forceinline__ uint32_t rank_group(int g) { return 0xFFFFFF00u | static_cast<uint32_t>(g); }

/// What one assignment writes. ids and dist are [H][N]; the maxima are per
/// head as float bits (atomicMax: exact, max is order-independent), null
/// when not wanted; the caller zeroes them for the heads that run.
struct AssignOutputs {
  uint8_t* ids = nullptr;
  float* dist = nullptr;          ///< ||x - c_id||^2 (double, rounded); null: not computed
  unsigned* x_max = nullptr;      ///< max |x|
  unsigned* resid_max = nullptr;  ///< max |x - bf16(c_id)| (the quantizer's residual)
  uint16_t* next = nullptr;       ///< [H][N][D] bf16(x - bf16(c_id)): the next stage's points; null: not written
  uint16_t* cent_bf16 = nullptr;  ///< [H][C][D] the centroids as BF16 bits (written by each head's block 0); null: not
};

/// One term of a squared distance in double: d += (x - c)^2. Every exact
/// distance (the assignment's, dist_for_empty_kernel's) adds its terms with
/// this, in the same order, so they agree bit for bit.
__device__ __forceinline__ void add_sq_diff(double& d, float x, float c) {
  const double e = static_cast<double>(x) - static_cast<double>(c);
  d = fma(e, e, d);
}

/// max(a, b) where a NaN wins (PTX max.NaN: one FMNMX, as fmaxf, which
/// drops NaN): max |x - c| then carries a NaN residual (inf - inf, after an
/// overflow upstream) to the span scale, whose check then rejects the encode.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/// The sum of v over the four lanes of a quad (xor 1, then xor 2: every
/// lane gets the same bits). All 32 lanes must call it.
template <typename V>
__device__ __forceinline__ V quad_sum(V v) {
  v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  return v + __shfl_xor_sync(0xFFFFFFFFu, v, 2);
}

/// Four floats of a 16-byte aligned row piece (one 16-byte load).
__device__ __forceinline__ void load_float4(const float* p, float (&v)[4]) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
}

/// The lane's D / 4 values of a row (chunks lane_chunk(t, c)) as float.
template <int D, typename T>
__device__ __forceinline__ void load_lane_row(const T* __restrict__ xrow, int t, float* xv) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) load8_as_float(xrow + lane_chunk(t, c) * 8, xv + 8 * c);
}

/// Shared memory of assign_tc_kernel for C centroids: bf16 (logical order,
/// core matrices), float (dim order, padded rows) where kFloatInSmem, and
/// per centroid -||c||^2 / 2, ||c||, ||c - bf16(c)|| and a hash of its
/// values; without the float rows, one row of D zeros (the padded rows).
template <int D, bool kFloatInSmem = true>
constexpr size_t assign_tc_smem(int c_count) {
  return static_cast<size_t>(assign_c_pad(c_count)) *
             (D * 2 + (kFloatInSmem ? (D + 4) * sizeof(float) : 0) + 4 * sizeof(float)) +
         (kFloatInSmem ? 0 : D * sizeof(float));
}

/// Rows of x one loop unit of assign_tc_kernel covers, and the warps that
/// share it: a warpgroup's 64 rows (wgmma), or a warp's 32 (mma.sync).
template <bool kWg>
constexpr int kUnitRows = kWg ? 64 : 32;
template <bool kWg>
constexpr int kUnitWarps = kWg ? 4 : 1;
/// m16 tiles (16 rows) of a unit per warp.
template <bool kWg>
constexpr int kUnitTiles = kWg ? 1 : 2;
/// Independent (best, second) chains per row while ranking the products,
/// merged after them: with two (wgmma: registers to spare), twice the
/// independent FMNMX a lane has in flight.
template <bool kWg>
constexpr int kRankChains = kWg ? 2 : 1;

// ---------------------------------------------------------------------------
// The head's centroids in shared memory

/// A head's centroids as assign_tc_kernel stages them in its dynamic shared
/// memory (assign_tc_smem; the arrays in this order), and where each
/// centroid's float row is read.
template <int D, bool kFloatInSmem>
struct StagedCentroids {
  static constexpr int kFStride = kFloatInSmem ? D + 4 : D;  ///< floats per float row
  int c_count;         ///< C
  int c_pad;           ///< assign_c_pad(C)
  const float* ch;     ///< (C, D) the head's float centroids in global memory
  __nv_bfloat16* cs;   ///< (c_pad / 8, D / 8) core matrices of bf16 values, logical order (core_chunk)
  float* cf;           ///< (c_pad, kFStride) float rows, dim order (kFloatInSmem only)
  float* c_init;       ///< (c_pad): -||c||^2 / 2; -FLT_MAX past C and for duplicates
  float* c_len;        ///< (c_pad): ||c||
  float* c_dev;        ///< (c_pad): ||c - bf16(c)||; 0 exactly for a row of BF16 values
  uint32_t* c_hash;    ///< (c_pad): a hash of the values
  float* zero_row;     ///< (D): zeros, the padded rows' float row (not kFloatInSmem)

  __device__ __forceinline__ StagedCentroids(unsigned char* smem, const float* head_cent, int c)
      : c_count(c), c_pad(assign_c_pad(c)), ch(head_cent) {
    cs = reinterpret_cast<__nv_bfloat16*>(smem);
    cf = reinterpret_cast<float*>(cs + c_pad * D);
    c_init = cf + (kFloatInSmem ? c_pad * kFStride : 0);
    c_len = c_init + c_pad;
    c_dev = c_len + c_pad;
    c_hash = reinterpret_cast<uint32_t*>(c_dev + c_pad);
    zero_row = reinterpret_cast<float*>(c_hash + c_pad);
  }

  /// Centroid c's float row (kFStride apart): in shared memory, or in global
  /// memory with the padded rows (c >= C) reading zeros.
  __device__ __forceinline__ const float* row(int c) const {
    if constexpr (kFloatInSmem)
      return cf + c * kFStride;
    else
      return c < c_count ? ch + static_cast<int64_t>(c) * D : zero_row;
  }
};

/// Staging, step 1: the float rows (16-byte pieces; padded rows zero) where
/// kFloatInSmem, else the row of zeros. Block 0 of head h also writes the
/// stored centroids (the encoder's: BF16 values) to cent_bf16 ([H][C][D];
/// null: not written).
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_float_rows(const StagedCentroids<D, kFloatInSmem>& sc, uint16_t* cent_bf16,
                                                 int h) {
#pragma unroll 8
  for (int i = threadIdx.x; i < sc.c_pad * (D / 4); i += blockDim.x) {
    const int c = i / (D / 4), q = i % (D / 4);  // q: 16-byte piece of the row
    const float4 v = c < sc.c_count
                         ? __ldg(reinterpret_cast<const float4*>(sc.ch + static_cast<int64_t>(c) * D + 4 * q))
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kFloatInSmem) *reinterpret_cast<float4*>(sc.cf + c * sc.kFStride + 4 * q) = v;
    if (cent_bf16 && blockIdx.x == 0 && c < sc.c_count)
      *reinterpret_cast<uint2*>(cent_bf16 + (static_cast<int64_t>(h) * sc.c_count + c) * D + 4 * q) =
          make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
  if constexpr (!kFloatInSmem)
    for (int i = threadIdx.x; i < D; i += blockDim.x) sc.zero_row[i] = 0.0f;
}

/// Staging, step 2 (reads the float rows): the bf16 core matrices in logical
/// order; the pairs at logical k = 8 m + 2 i sit at dims logical_dim(k),
/// logical_dim(k) + 1.
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_core_matrices(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_pad * (D / 8); i += blockDim.x) {
    const int c = i / (D / 8), m = i % (D / 8);
    const float* row = sc.row(c);
    uint32_t w[4];
#pragma unroll
    for (int tp = 0; tp < 4; ++tp) {
      const float2 f = *reinterpret_cast<const float2*>(row + logical_dim(8 * m + 2 * tp));
      w[tp] = pack_bf16x2(f.x, f.y);
    }
    *reinterpret_cast<uint4*>(sc.cs + core_chunk<D>(c, m)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// Staging, step 3 (reads the float rows): per centroid c_init, c_len, c_dev
/// and c_hash. ||c||^2 and ||c - bf16(c)||^2 in float: eight lanes a
/// centroid (D / 8 dims each, then three shuffles; a fixed order).
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_norms(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_pad * 8; i += blockDim.x) {
    const int c = i >> 3, part = i & 7;  // the eight lanes of a centroid are neighbours
    float s = 0.0f, e = 0.0f;
    uint32_t hv = 0u, off_grid = 0u;
#pragma unroll
    for (int k = part; k < D; k += 8) {
      const float v = sc.row(c)[k], dv = v - round_bf16_dev(v);  // exact
      s = fmaf(v, v, s);
      e = fmaf(dv, dv, e);
      off_grid |= dv != 0.0f;
      hv = (hv ^ __float_as_uint(v + 0.0f)) * 0x9E3779B1u;  // v + 0: -0 hashes as +0 (equal values)
    }
    for (int off = 4; off > 0; off >>= 1) {  // c_pad * 8 is a multiple of 32: whole warps
      s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
      e += __shfl_xor_sync(0xFFFFFFFFu, e, off);
      off_grid |= __shfl_xor_sync(0xFFFFFFFFu, off_grid, off);
      hv ^= __shfl_xor_sync(0xFFFFFFFFu, hv, off) * 0x85EBCA6Bu;
    }
    if (part == 0) {
      sc.c_init[c] = c < sc.c_count ? -0.5f * s : -FLT_MAX;
      sc.c_len[c] = sqrtf(s);
      // 0 exactly when the row is a BF16 value (the residual path relies on
      // it; a sum of squares of tiny deviations can underflow).
      sc.c_dev[c] = off_grid ? fmaxf(sqrtf(e), FLT_MIN) : 0.0f;
      sc.c_hash[c] = hv;
    }
  }
}

/// Staging, step 4 (reads the hashes): a centroid equal to one of lower
/// index is never the answer (ties go to the lower index), so its c_init
/// becomes -FLT_MAX and it ranks with the padding; exact ties of two or more
/// equal centroids then need no re-ranking. Equal values hash alike; the
/// rows are then compared value by value. Two threads a centroid, each half
/// of the lower indices (the last thread's loop is the prologue's longest);
/// both may mark it.
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void mark_duplicate_centroids(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_count * 2; i += blockDim.x) {
    const int c = i >> 1;
    bool dup = false;
    for (int o = i & 1; o < c && !dup; o += 2) {
      if (sc.c_hash[o] != sc.c_hash[c]) continue;
      bool same = true;
      for (int k = 0; k < D && same; ++k) same = sc.row(o)[k] == sc.row(c)[k];
      dup = same;
    }
    if (dup) sc.c_init[c] = -FLT_MAX;
  }
}

/// Stage head h's centroids (the whole block; barriers included, so every
/// thread sees the result on return): steps 1 to 4 above.
template <bool kWg, int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_centroids(const StagedCentroids<D, kFloatInSmem>& sc, uint16_t* cent_bf16,
                                                int h) {
  stage_float_rows(sc, cent_bf16, h);
  __syncthreads();
  stage_core_matrices(sc);
  stage_norms(sc);
  __syncthreads();
  mark_duplicate_centroids(sc);
  // wgmma reads the bf16 copy through the async proxy: make the generic
  // stores above visible to it (each thread its own, then the barrier).
  if constexpr (kWg && kHaveWgmma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

// ---------------------------------------------------------------------------
// Rows of x into A fragments

/// What the caller of an assignment asked for (AssignOutputs' pointers that
/// are not null).
struct AssignWants {
  bool dist, xmax, rmax, next;
  bool resid;  ///< x - bf16(c) of the pick: its max or the next points
  __device__ __forceinline__ explicit AssignWants(const AssignOutputs& out)
      : dist(out.dist != nullptr),
        xmax(out.x_max != nullptr),
        rmax(out.resid_max != nullptr),
        next(out.next != nullptr),
        resid(rmax || next) {}
};

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

// ---------------------------------------------------------------------------
// Per row: re-ranking, exact distances, residual

/// Whether the bf16 products' keys k1 >= k2 of two centroids (norms l1, l2,
/// bf16 deviations ||c - bf16(c)|| e1, e2) for a row (norm xl, deviation xe)
/// lie within their error bound, so that the exact comparison decides.
///
/// The products are x'.c' with x' = bf16(x) = x - dx, c' = bf16(c) = c - dc,
/// so w' - w = -x.dc - dx.c + dx.dc, at most ||x|| ||dc|| + ||dx|| (||c|| +
/// ||dc||) (dx = 0 for bf16 input); the norms are float sums of at most D <=
/// 128 terms (relative error under 2^-17: the factor 1 + 2^-10 covers it).
/// Then the fp32 accumulation from -||c||^2 / 2 (D / 16 mma, each at most
/// 2^-22 of its terms' magnitude: under 2^-18 (||x|| ||c|| + ||c||^2 / 2))
/// and ||c||^2 in float (2^-17 ||c||^2): 2^-14 of both, with room. And the
/// keys' 2^-15 each (rank_key).
__device__ __forceinline__ bool within_error_bound(float k1, float k2, float l1, float l2, float e1, float e2, float xl,
                                                   float xe) {
  // FLT_MIN: keys of zero or subnormal w differ by a fixed amount (the index
  // bits) and tiny norms underflow.
  const float bound = (1.0f + 0x1p-10f) * (xl * (e1 + e2) + xe * (l1 + l2 + e1 + e2)) +
                      0x1p-14f * (xl * (l1 + l2) + 0.5f * (l1 * l1 + l2 * l2)) +
                      0x1p-14f * (fabsf(k1) + fabsf(k2)) + FLT_MIN;
  return k1 - k2 <= bound;
}

/// The lane's D / 4 values of row half r in chunk order (value 8 c + k is
/// dim 8 lane_chunk(t, c) + k): for bf16 input from its A fragments a (the
/// values exactly); else read again from xrow where need_x (zeros otherwise).
template <int D, typename T>
__device__ __forceinline__ void row_values(const uint32_t (&a)[D / 16][4], int r, const T* xrow, int t, bool need_x,
                                           float (&xv)[D / 4]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int c = 0; c < D / 32; ++c)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t wd = a[2 * c + (q >> 1)][2 * (q & 1) + r];
        xv[8 * c + 2 * q] = __uint_as_float(wd << 16);
        xv[8 * c + 2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
      }
  } else {
#pragma unroll
    for (int k = 0; k < D / 4; ++k) xv[k] = 0.0f;
    if (need_x) load_lane_row<D>(xrow, t, xv);
  }
}

/// The re-ranking in float: sd = (d2 - d1) / 2 = sum (c1 - c2)(x - (c1 + c2)
/// / 2) over the quad, and mag, the sum of its terms' magnitudes. c1, c2: the
/// lane's part of the two float rows (row + 8 t); xv: the lane's values.
///
/// Each term is within 4u (u = 2^-24) of |c1 - c2| (|x| + |c1 + c2| / 2),
/// the sum of D / 4 + 2 terms within (D / 4 + 3) u of the sum of their
/// magnitudes: under 39u at D = 128, and the caller's 2^-16 mag = 256u.
/// Outside that bound the sign of sd decides; inside (near-equal distances)
/// the double distances do.
template <int D>
__device__ __forceinline__ void half_gap_fp32(const float* c1, const float* c2, const float (&xv)[D / 4], float& sd,
                                              float& mag) {
  sd = 0.0f, mag = 0.0f;
#pragma unroll
  for (int c = 0; c < D / 32; ++c)
#pragma unroll
    for (int h4 = 0; h4 < 2; ++h4) {
      float p[4], q[4];
      load_float4(c1 + 32 * c + 4 * h4, p);
      load_float4(c2 + 32 * c + 4 * h4, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float dc = p[k] - q[k], mid = 0.5f * (p[k] + q[k]), xk = xv[8 * c + 4 * h4 + k];
        sd = fmaf(dc, xk - mid, sd);
        mag = fmaf(fabsf(dc), fabsf(xk) + fabsf(mid), mag);
      }
    }
  sd = quad_sum(sd);
  mag = quad_sum(mag);
}

/// ||x - c||^2 in double (add_sq_diff; the quad adds xor 1, then xor 2) of
/// the float row ca into da and, where any_b, of cb into db (else 0); rows
/// and xv as half_gap_fp32's.
template <int D>
__device__ __forceinline__ void exact_sq_distances(const float* ca, const float* cb, const float (&xv)[D / 4],
                                                   bool any_b, double& da, double& db) {
  da = 0.0, db = 0.0;
#pragma unroll
  for (int c = 0; c < D / 32; ++c)
#pragma unroll
    for (int h4 = 0; h4 < 2; ++h4) {
      float p[4];
      load_float4(ca + 32 * c + 4 * h4, p);
#pragma unroll
      for (int k = 0; k < 4; ++k) add_sq_diff(da, xv[8 * c + 4 * h4 + k], p[k]);
      if (any_b) {
        float q[4];
        load_float4(cb + 32 * c + 4 * h4, q);
#pragma unroll
        for (int k = 0; k < 4; ++k) add_sq_diff(db, xv[8 * c + 4 * h4 + k], q[k]);
      }
    }
  da = quad_sum(da);
  if (any_b) db = quad_sum(db);
}

/// x - bf16(c) at the lane's chunk c, given those 8 values cv of bf16(c):
/// its max |.| into r_max (NaN wins), and bf16(x - bf16(c)) to the row's
/// next points next_row (where want_next).
template <int D>
__device__ __forceinline__ void residual_chunk(const float (&xv)[D / 4], int c, const float (&cv)[8], int t,
                                               bool want_next, uint16_t* next_row, float& r_max) {
  uint32_t packed[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float d0 = __fsub_rn(xv[8 * c + 2 * q], cv[2 * q]);
    const float d1 = __fsub_rn(xv[8 * c + 2 * q + 1], cv[2 * q + 1]);
    r_max = fmax_nan(r_max, fmax_nan(fabsf(d0), fabsf(d1)));
    packed[q] = pack_bf16x2(d0, d1);
  }
  if (want_next)
    __stwb(reinterpret_cast<uint4*>(next_row + lane_chunk(t, c) * 8),
           make_uint4(packed[0], packed[1], packed[2], packed[3]));
}

/// The residual (residual_chunk) of the lane's chunks against a float row
/// that holds BF16 values (cp: row + 8 t): one 16-byte load per 4 values, no
/// unpacking.
template <int D>
__device__ __forceinline__ void residual_from_float_row(const float* cp, const float (&xv)[D / 4], int t,
                                                        bool want_next, uint16_t* next_row, float& r_max) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    float lo[4], hi[4];
    load_float4(cp + 32 * c, lo);
    load_float4(cp + 32 * c + 4, hi);
    const float cv[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    residual_chunk<D>(xv, c, cv, t, want_next, next_row, r_max);
  }
}

/// The residual (residual_chunk) of the lane's chunks against centroid pick's
/// BF16 core matrices cs: dim 8 lane_chunk(t, c) + 2q + e sits at logical
/// position 16 (2c + q/2) + 8 (q & 1) + 2t + e (logical chunk 2 (2c + q/2) +
/// (q & 1), element 2t + e).
template <int D>
__device__ __forceinline__ void residual_from_core_matrices(const __nv_bfloat16* cs, int pick, const float (&xv)[D / 4],
                                                            int t, bool want_next, uint16_t* next_row, float& r_max) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    float cv[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t wd =
          *reinterpret_cast<const uint32_t*>(cs + core_chunk<D>(pick, 2 * (2 * c + (q >> 1)) + (q & 1)) + 2 * t);
      cv[2 * q] = __uint_as_float(wd << 16);
      cv[2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
    }
    residual_chunk<D>(xv, c, cv, t, want_next, next_row, r_max);
  }
}

/// The exact phase of one row (row half r of an m16 tile with A fragments a;
/// row index `row` = h N + n, x's row xrow), which the four lanes of the quad
/// share; all 32 lanes must call it. Where `rerank`, the fp32 comparison of
/// candidates i1, i2 decides, or where it cannot, their distances in double
/// (ties to the lower index); the pick's distance ||x - c||^2 in double to
/// out.dist where wanted; x - bf16(c) of the pick where wanted: its max into
/// r_max, the next points to out.next. Returns the pick.
template <int D, typename T, bool kFloatInSmem>
__device__ __forceinline__ int exact_phase(const StagedCentroids<D, kFloatInSmem>& sc, const uint32_t (&a)[D / 16][4],
                                           int r, const T* xrow, int t, bool live, bool rerank, int i1, int i2,
                                           const AssignWants& want, const AssignOutputs& out, int64_t row,
                                           float& r_max) {
  float xv[D / 4];  // the lane's values of the row, chunk order
  row_values<D>(a, r, xrow, t, live && (want.dist || want.resid || rerank), xv);
  // The float centroids, dim order: lane t's chunk c at lane_chunk(t, c) * 8
  // = (4 c + t) * 8.
  const float* c1 = sc.row(i1) + 8 * t;
  const float* c2 = sc.row(i2) + 8 * t;  // i2 < c_pad: a padded row reads zeros
  bool second_wins = false, exact_cmp = false;
  if (__any_sync(0xFFFFFFFFu, rerank)) {
    float sd, mag;
    half_gap_fp32<D>(c1, c2, xv, sd, mag);
    const bool clear = fabsf(sd) > 0x1p-16f * mag + 0x1p-100f;  // false for NaN: the exact path
    second_wins = rerank && clear && sd < 0.0f;
    exact_cmp = rerank && !clear;
  }
  // ||x - c||^2 in double: of the pick when the distances are wanted, of
  // both candidates where the fp32 comparison could not tell them apart.
  const bool need_a = live && (want.dist || exact_cmp), need_b = exact_cmp;
  if (__any_sync(0xFFFFFFFFu, need_a)) {
    const float* ca = second_wins ? c2 : c1;
    const bool any_b = __any_sync(0xFFFFFFFFu, need_b);
    double da, db;
    exact_sq_distances<D>(ca, c2, xv, any_b, da, db);
    if (exact_cmp) second_wins = db < da || (db == da && i2 < i1);  // da is d1 here
    if (live && want.dist && t == 0) out.dist[row] = static_cast<float>(exact_cmp && second_wins ? db : da);
  }
  const int pick = second_wins ? i2 : i1;
  // Where the pick's float centroid is a BF16 value (||c - bf16(c)|| = 0:
  // every centroid the encoder's k-means makes, kmeans.h), the float rows
  // hold bf16(c) itself; otherwise the BF16 core matrices.
  const bool need_r = live && want.resid;
  const bool from_float = __all_sync(0xFFFFFFFFu, !need_r || sc.c_dev[pick] == 0.0f);
  if (need_r) {
    uint16_t* next_row = want.next ? out.next + row * D : nullptr;
    if (from_float)
      residual_from_float_row<D>(sc.row(pick) + 8 * t, xv, t, want.next, next_row, r_max);
    else
      residual_from_core_matrices<D>(sc.cs, pick, xv, t, want.next, next_row, r_max);
  }
  return pick;
}

/// The per-head maxima: the warp's max |x| and max |x - bf16(c)| (NaN wins)
/// over its lanes, one atomicMax each per warp (float bits: exact, max is
/// order-independent).
__device__ __forceinline__ void flush_head_maxima(float x_max, float r_max, int lane, const AssignOutputs& out, int h) {
  for (int off = 16; off > 0; off >>= 1) {
    x_max = fmaxf(x_max, __shfl_xor_sync(0xFFFFFFFFu, x_max, off));
    r_max = fmax_nan(r_max, __shfl_xor_sync(0xFFFFFFFFu, r_max, off));
  }
  if (lane == 0) {
    if (out.x_max) atomicMax(out.x_max + h, __float_as_uint(x_max));
    if (out.resid_max) atomicMax(out.resid_max + h, __float_as_uint(r_max));  // NaN (0x7FC00000 up) above inf
  }
}

// ---------------------------------------------------------------------------
// The kernel

/// Grid (blocks per head, H); block kWarps * 32 (one block per SM: the
/// shared memory holds a head's centroids twice); dynamic smem assign_tc_smem<D>(C). C <= 256.
/// The loop units (kUnitRows rows) go to the block's warps (warpgroups for
/// wgmma) in turn across the head's blocks.
/// Heads with active[h] == 0 are skipped. cent: float centroids [H][C][D].
/// kWg: wgmma products (else mma.sync). kFloatInSmem: the float centroids
/// staged in shared memory (else read from cent through L1: the form for
/// devices with less than assign_tc_smem<D>(C) of shared memory a block;
/// the same bits either way). Variants with a phase left out, for timing:
/// bench/probes/assign_phases.cuh.
template <int D, typename T, int kWarps, bool kWg = true, bool kFloatInSmem = true>
__global__ void __launch_bounds__(kWarps * 32, 1)
    assign_tc_kernel(const T* __restrict__ x, int64_t n_tokens, const float* __restrict__ cent, int c_count,
                     const int* __restrict__ active, AssignOutputs out) {
  static_assert(D == 64 || D == 128, "tensor-core assignment: D = 64 or 128");
  static_assert(kWarps % kUnitWarps<kWg> == 0, "wgmma: whole warpgroups");
  constexpr int kMT = kUnitTiles<kWg>;
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  // The warp index through a shuffle: the compiler then knows it is the
  // same across the warp (the loop over units stays uniform for wgmma).
  const int lane = threadIdx.x & 31, warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x >> 5), 0);
  const int g = lane >> 2, t = lane & 3;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const StagedCentroids<D, kFloatInSmem> sc(tc_smem, cent + static_cast<int64_t>(h) * c_count * D, c_count);
  stage_centroids<kWg>(sc, out.cent_bf16, h);

  const AssignWants want(out);
  float x_max = 0.0f, r_max = 0.0f;
  // mma.sync: this lane's ldmatrix row address for B (centroid cp + (lane &
  // 7) + 8 (lane >> 4), logical chunk 2 j + ((lane >> 3) & 1)); the rest are
  // constants. wgmma: the descriptor of centroids 0..63, k-step 0.
  const uint32_t b_base = smem_u32(sc.cs + core_chunk<D>((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1));
  const uint64_t desc0 = wgmma_desc(smem_u32(sc.cs), 128u, 128u * (D / 8));
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  constexpr int kUnitsPerBlock = kWarps / kUnitWarps<kWg>;
  const int64_t n_units = (n_tokens + kUnitRows<kWg> - 1) / kUnitRows<kWg>;
  // The loop bound is the same for the warps of a unit (wgmma is collective).
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kUnitsPerBlock + warp / kUnitWarps<kWg>; unit < n_units;
       unit += static_cast<int64_t>(gridDim.x) * kUnitsPerBlock) {
    const int64_t n0 = unit * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT;  // this warp's rows
    if constexpr (kWg) {
      const int64_t next = unit + static_cast<int64_t>(gridDim.x) * kUnitsPerBlock;
      prefetch_rows_l2<D, T, 16 * kMT>(xh, n_tokens, next * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT,
                                       next < n_units, lane);
    }
    // 1. The rows into A fragments.
    uint32_t a[kMT][D / 16][4];
    float xn[kMT][2], xdev[kMT][2];
    load_unit_rows<D>(xh, n_tokens, n0, g, t, want.xmax, a, xn, xdev, x_max);

    // 2. Products and the best two rank keys of each of the lane's rows.
    TopTwo<kMT, kRankChains<kWg>> top;
    if constexpr (kWg && kHaveWgmma) {
      // One accumulator set: the warpgroup waits for a group's products and
      // ranks them; the other warpgroups keep the tensor cores busy
      // meanwhile (two sets: ptxas schedules the ranking of one set after
      // the wait for the next anyway, with more registers). Not unrolled:
      // ptxas then hoists the groups' loads and spills.
      float acc[32];
#pragma unroll 1
      for (int k = 0; k < sc.c_pad / kWgN; ++k) {
        wgmma_init_group(acc, sc.c_init, k * kWgN, t);
        wgmma_group_products<D>(acc, a[0], desc0, k * kWgN);
        wgmma_wait<0>();
        rank_wgmma_group(top, acc, k * kWgN);
      }
    } else {
      for (int cp = 0; cp < sc.c_pad; cp += kAssignPass) {
        float acc[kMT][kPassTiles][4];
        float2 ci[kPassTiles];
        mma_init_pass(ci, sc.c_init, cp, t);
        mma_pass_products<D>(acc, a, b_base, ci, cp);
        rank_mma_pass(top, acc, cp);
      }
    }

    // 3. Per row: the quad's best two, re-ranking, the exact phase, the id.
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float k1, k2;
        top.quad_best_two(i, r, t, k1, k2);
        const int64_t n = n0 + 16 * i + 8 * r + g;
        const bool live = n < n_tokens;  // the same for the quad
        // Padded (and duplicate) centroids rank below every real one; a
        // pick past C is only possible when every real product overflowed
        // (NaN keys are dropped): then centroid 0, as an argmin over NaN
        // values gives.
        const int i1 = key_index(k1) < c_count ? key_index(k1) : 0, i2 = key_index(k2);
        const bool has2 = i2 < c_count && i2 != i1;
        bool rerank = false;
        if (live && has2)
          rerank = within_error_bound(k1, k2, sc.c_len[i1], sc.c_len[i2], sc.c_dev[i1], sc.c_dev[i2], xn[i][r],
                                      xdev[i][r]);
        int pick = i1;
        if (__any_sync(0xFFFFFFFFu, live && (want.dist || want.resid || rerank)))
          pick = exact_phase<D>(sc, a[i], r, xh + n * D, t, live, rerank, i1, i2, want, out,
                                static_cast<int64_t>(h) * n_tokens + n, r_max);
        if (live && t == 0) out.ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(pick);
      }
  }
  flush_head_maxima(x_max, r_max, lane, out, h);
}

/// Warps per block of the assignment (16 caps the registers at 128; each
/// lane holds its rows' A fragments: D / 2 registers per 16 rows).
constexpr int kAssignWarps = 16;

/// Launch `kernel`, assign_tc_kernel<D, T, kWarps, kWg, ...> or a kernel of
/// its form (its grid, block and arguments; smem: its dynamic shared memory),
/// over heads [0, heads) of x ([H][N][D] of T on the device) with centroids
/// cent ([H][C][D] float). Blocks per head: as many as fill the device once,
/// at least one. The maxima in `o` must have been zeroed for the active
/// heads. Returns the first CUDA error.
template <int kWarps, bool kWg, typename T>
cudaError_t launch_assign_kernel(void (*kernel)(const T*, int64_t, const float*, int, const int*, AssignOutputs),
                                 size_t smem, const T* x, int64_t n, const float* cent, int c, int heads,
                                 const int* active, const AssignOutputs& o, cudaStream_t s) {
  if (c < 1 || c > kAssignMaxCentroids || heads < 1 || heads > 65535 || n < 1) return cudaErrorInvalidValue;
  // Every launch: the attribute belongs to the current device's context.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  int dev = 0, sms = 0, per_sm = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem)) != cudaSuccess) return e;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t units = (n + kUnitRows<kWg> - 1) / kUnitRows<kWg>;
  constexpr int kUnitsPerBlock = kWarps / kUnitWarps<kWg>;
  int64_t per_head = static_cast<int64_t>(sms) * per_sm / heads;
  per_head = per_head < 1 ? 1 : per_head;
  const int64_t useful = (units + kUnitsPerBlock - 1) / kUnitsPerBlock;  // more blocks than this would idle
  per_head = per_head > useful ? useful : per_head;
  kernel<<<dim3(static_cast<unsigned>(per_head), static_cast<unsigned>(heads)), kWarps * 32, smem, s>>>(x, n, cent, c,
                                                                                                      active, o);
  return cudaGetLastError();
}

/// Launch assign_tc_kernel (the given form): launch_assign_kernel.
template <int D, typename T, int kWarps = kAssignWarps, bool kWg = true, bool kFloatInSmem = true>
cudaError_t launch_assign_tc_as(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                                const AssignOutputs& o, cudaStream_t s) {
  return launch_assign_kernel<kWarps, kWg>(assign_tc_kernel<D, T, kWarps, kWg, kFloatInSmem>,
                                           assign_tc_smem<D, kFloatInSmem>(c), x, n, cent, c, heads, active, o, s);
}

/// launch_assign_tc_as with the float centroids in shared memory where the
/// device has room for them (a block of Hopper: 227 KB; Ampere A100: 163 KB;
/// other Ampere, Ada and Blackwell cards: 99 KB), else read through L1.
template <int D, typename T, int kWarps = kAssignWarps, bool kWg = true>
cudaError_t launch_assign_tc(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                             const AssignOutputs& o, cudaStream_t s) {
  int dev = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) return e;
  if (assign_tc_smem<D>(c) <= static_cast<size_t>(optin))
    return launch_assign_tc_as<D, T, kWarps, kWg, true>(x, n, cent, c, heads, active, o, s);
  return launch_assign_tc_as<D, T, kWarps, kWg, false>(x, n, cent, c, heads, active, o, s);
}

/// dist[h][n] = ||x - cent[ids[h][n]]||^2 (the assignment's sums, term by
/// term: add_sq_diff in the same order, the quad adding xor 1 then xor 2)
/// for the active heads with an empty cluster (counts[h][c] == 0 for some
/// c < C: the empty-cluster rule needs the distances); other heads return at
/// once. Grid (any, H): blocks stride over the head's rows; block 256 (a
/// quad per row).
template <int D, typename T>
__global__ void __launch_bounds__(256) dist_for_empty_kernel(const T* __restrict__ x, int64_t n_tokens,
                                                             const float* __restrict__ cent, int c_count,
                                                             const uint8_t* __restrict__ ids,
                                                             const int* __restrict__ counts,
                                                             const int* __restrict__ active, float* __restrict__ dist) {
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  int empty = 0;
  for (int c = threadIdx.x; c < c_count; c += blockDim.x) empty |= counts[h * c_count + c] == 0;
  if (!__syncthreads_or(empty)) return;
  const int t = threadIdx.x & 3;
  for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 4); n0 < n_tokens;
       n0 += static_cast<int64_t>(gridDim.x) * (blockDim.x / 4)) {  // uniform across the block
    const int64_t n = n0 + (threadIdx.x >> 2);
    const bool live = n < n_tokens;
    const int64_t row = static_cast<int64_t>(h) * n_tokens + (live ? n : 0);
    float xv[D / 4];
    load_lane_row<D>(x + row * D, t, xv);
    const float* crow = cent + (static_cast<int64_t>(h) * c_count + ids[row]) * D;
    double d = 0.0;
#pragma unroll
    for (int c = 0; c < D / 32; ++c) {
      const float4* p = reinterpret_cast<const float4*>(crow + lane_chunk(t, c) * 8);
      const float4 u0 = __ldg(p), u1 = __ldg(p + 1);
      const float cv[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
      for (int k = 0; k < 8; ++k) add_sq_diff(d, xv[8 * c + k], cv[k]);
    }
    d = quad_sum(d);
    if (live && t == 0) dist[row] = static_cast<float>(d);
  }
}

/// Zero the per-head maxima of the heads that will run (inactive heads keep
/// the value of their last assignment). One thread per head.
static __global__ void zero_active_kernel(unsigned* __restrict__ v, const int* __restrict__ active, int heads) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < heads && (!active || active[h])) v[h] = 0u;
}

}  // namespace qvg::cuda
