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

/// Grid (blocks per head, H); block kWarps * 32 (one block per SM: the
/// shared memory holds a head's centroids twice); dynamic smem assign_tc_smem<D>(C). C <= 256.
/// The loop units (kUnitRows rows) go to the block's warps (warpgroups for
/// wgmma) in turn across the head's blocks.
/// Heads with active[h] == 0 are skipped. cent: float centroids [H][C][D].
/// kWg: wgmma products (else mma.sync). kFloatInSmem: the float centroids
/// staged in shared memory (else read from cent through L1: the form for
/// devices with less than assign_tc_smem<D>(C) of shared memory a block;
/// the same bits either way). kProbe != 0 leaves one phase out,
/// for timing by difference only (bench_assign_probe; the outputs are then
/// wrong): 1 = the exact phase, 2 = the top-two epilogue, 3 = the
/// tensor-core products, 4 = the loads of x (bf16 only: made-up values).
template <int D, typename T, int kWarps, int kProbe = 0, bool kWg = true, bool kFloatInSmem = true>
__global__ void __launch_bounds__(kWarps * 32, 1)
    assign_tc_kernel(const T* __restrict__ x, int64_t n_tokens, const float* __restrict__ cent, int c_count,
                     const int* __restrict__ active, AssignOutputs out) {
  static_assert(D == 64 || D == 128, "tensor-core assignment: D = 64 or 128");
  static_assert(kWarps % kUnitWarps<kWg> == 0, "wgmma: whole warpgroups");
  constexpr int kFStride = kFloatInSmem ? D + 4 : D;  // floats per float row
  constexpr int kSteps = D / 16;       // k-steps of the products
  constexpr int kLaneChunks = D / 32;  // 8-dim chunks per lane per row
  constexpr int kMT = kWg ? 1 : 2;     // m16 tiles (16 rows) per warp
  constexpr bool kExactInA = std::is_same_v<T, __nv_bfloat16>;
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const int c_pad = assign_c_pad(c_count);
  __nv_bfloat16* cs = reinterpret_cast<__nv_bfloat16*>(tc_smem);  // core matrices, logical order
  float* cf = reinterpret_cast<float*>(cs + c_pad * D);           // (c_pad, kFStride), dim order (kFloatInSmem)
  float* c_init = cf + (kFloatInSmem ? c_pad * kFStride : 0);      // (c_pad): -||c||^2 / 2; -FLT_MAX past C
  float* c_len = c_init + c_pad;                                   // (c_pad): ||c||
  float* c_dev = c_len + c_pad;                                    // (c_pad): ||c - bf16(c)||
  uint32_t* c_hash = reinterpret_cast<uint32_t*>(c_dev + c_pad);   // (c_pad): hash of the values
  float* zero_row = reinterpret_cast<float*>(c_hash + c_pad);      // (D): zeros (not kFloatInSmem)
  // The warp index through a shuffle: the compiler then knows it is the
  // same across the warp (the loop over units stays uniform for wgmma).
  const int lane = threadIdx.x & 31, warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x >> 5), 0);
  const int g = lane >> 2, t = lane & 3;
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  // Centroid c's float row (kFStride apart): in shared memory, or in cent
  // with the padded rows (c >= C) reading zeros.
  auto crow = [&](int c) -> const float* {
    if constexpr (kFloatInSmem)
      return cf + c * kFStride;
    else
      return c < c_count ? ch + static_cast<int64_t>(c) * D : zero_row;
  };

  // Stage the head's centroids: float (16-byte pieces, padded rows), then
  // bf16 in logical order from it (the pairs at logical k = 8 m + 2 i sit
  // at dims logical_dim(k), logical_dim(k) + 1), and the norms.
#pragma unroll 8
  for (int i = threadIdx.x; i < c_pad * (D / 4); i += blockDim.x) {
    const int c = i / (D / 4), q = i % (D / 4);  // q: 16-byte piece of the row
    const float4 v = c < c_count ? __ldg(reinterpret_cast<const float4*>(ch + static_cast<int64_t>(c) * D + 4 * q))
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kFloatInSmem) *reinterpret_cast<float4*>(cf + c * kFStride + 4 * q) = v;
    if (out.cent_bf16 && blockIdx.x == 0 && c < c_count)  // the stored centroids (the encoder's: BF16 values)
      *reinterpret_cast<uint2*>(out.cent_bf16 + (static_cast<int64_t>(h) * c_count + c) * D + 4 * q) =
          make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
  if constexpr (!kFloatInSmem)
    for (int i = threadIdx.x; i < D; i += blockDim.x) zero_row[i] = 0.0f;
  __syncthreads();
  for (int i = threadIdx.x; i < c_pad * (D / 8); i += blockDim.x) {
    const int c = i / (D / 8), m = i % (D / 8);
    const float* row = crow(c);
    uint32_t w[4];
#pragma unroll
    for (int tp = 0; tp < 4; ++tp) {
      const float2 f = *reinterpret_cast<const float2*>(row + logical_dim(8 * m + 2 * tp));
      w[tp] = pack_bf16x2(f.x, f.y);
    }
    *reinterpret_cast<uint4*>(cs + core_chunk<D>(c, m)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  // ||c||^2 and ||c - bf16(c)||^2 in float and a hash of the values: eight
  // lanes a centroid (D / 8 dims each, then three shuffles; a fixed order).
  for (int i = threadIdx.x; i < c_pad * 8; i += blockDim.x) {
    const int c = i >> 3, part = i & 7;  // the eight lanes of a centroid are neighbours
    float s = 0.0f, e = 0.0f;
    uint32_t hv = 0u, off_grid = 0u;
#pragma unroll
    for (int k = part; k < D; k += 8) {
      const float v = crow(c)[k], dv = v - round_bf16_dev(v);  // exact
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
      c_init[c] = c < c_count ? -0.5f * s : -FLT_MAX;
      c_len[c] = sqrtf(s);
      // 0 exactly when the row is a BF16 value (the residual path below
      // relies on it; a sum of squares of tiny deviations can underflow).
      c_dev[c] = off_grid ? fmaxf(sqrtf(e), FLT_MIN) : 0.0f;
      c_hash[c] = hv;
    }
  }
  __syncthreads();
  // A centroid equal to one of lower index is never the answer (ties go to
  // the lower index): it ranks with the padding. So exact ties of two or
  // more equal centroids need no re-ranking. Equal values hash alike; the
  // rows are then compared value by value. Two threads a centroid, each
  // half of the lower indices (the last thread's loop is the prologue's
  // longest); both may mark it.
  for (int i = threadIdx.x; i < c_count * 2; i += blockDim.x) {
    const int c = i >> 1;
    bool dup = false;
    for (int o = i & 1; o < c && !dup; o += 2) {
      if (c_hash[o] != c_hash[c]) continue;
      bool same = true;
      for (int k = 0; k < D && same; ++k) same = crow(o)[k] == crow(c)[k];
      dup = same;
    }
    if (dup) c_init[c] = -FLT_MAX;
  }
  // wgmma reads the bf16 copy through the async proxy: make the generic
  // stores above visible to it (each thread its own, then the barrier).
  if constexpr (kWg && kHaveWgmma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const bool want_dist = out.dist != nullptr, want_xmax = out.x_max != nullptr;
  const bool want_rmax = out.resid_max != nullptr, want_next = out.next != nullptr;
  const bool want_resid = want_rmax || want_next;  // x - bf16(c) of the pick
  float x_max = 0.0f, r_max = 0.0f;
  // mma.sync: this lane's ldmatrix row address for B (centroid cp + (lane &
  // 7) + 8 (lane >> 4), logical chunk 2 j + ((lane >> 3) & 1)); the rest are
  // constants. wgmma: the descriptor of centroids 0..63, k-step 0.
  const uint32_t b_base = smem_u32(cs + core_chunk<D>((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1));
  const uint64_t desc0 = wgmma_desc(smem_u32(cs), 128u, 128u * (D / 8));
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  constexpr int kUnitsPerBlock = kWarps / kUnitWarps<kWg>;
  const int64_t n_units = (n_tokens + kUnitRows<kWg> - 1) / kUnitRows<kWg>;
  // The loop bound is the same for the warps of a unit (wgmma is collective).
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kUnitsPerBlock + warp / kUnitWarps<kWg>; unit < n_units;
       unit += static_cast<int64_t>(gridDim.x) * kUnitsPerBlock) {
    const int64_t n0 = unit * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT;  // this warp's rows
    // The rows of this warp's next unit into L2 now, a line a lane, so the
    // loads at the top of that unit wait for L2 rather than DRAM (one unit
    // ahead: the faster distance, docs/BENCHMARKS.md). All 16 rows of
    // 16-bit input (2 lines a row at D = 128, 1 at D = 64); float rows at D =
    // 128 only their first 8. wgmma only: the mma.sync kernel (benchmarks)
    // spills with it.
    if constexpr (kWg && kProbe != 4) {
      constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
      constexpr int kLinesPerRow = D / kLineElems > 0 ? D / kLineElems : 1;
      const int64_t nu = unit + static_cast<int64_t>(gridDim.x) * kUnitsPerBlock;
      const int64_t pn = nu * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT + lane / kLinesPerRow;
      if (nu < n_units && lane / kLinesPerRow < 16 * kMT && pn < n_tokens)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(xh + pn * D + (lane % kLinesPerRow) * kLineElems));
    }
    // 1. Rows g, g + 8 of the warp's m16 tiles into A fragments: chunk c word
    // w of a row is k-step 2c + w/2, register 2 (w & 1) + (the row is g + 8).
    uint32_t a[kMT][kSteps][4];
    float xn[kMT][2], xdev[kMT][2];  // ||x|| and ||x - bf16(x)|| per row (quad sums in a fixed order)
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Rows past N read row N - 1 (no zeroing; their results are
        // dropped, and a copy of a row leaves the maxima as they are).
        const int64_t n = n0 + 16 * i + 8 * r + g;
        const T* xr = xh + (n < n_tokens ? n : n_tokens - 1) * D;
        float s = 0.0f, e = 0.0f;
#pragma unroll
        for (int c = 0; c < kLaneChunks; ++c) {
          uint32_t wd[4];
          if constexpr (kExactInA) {
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if constexpr (kProbe == 4) {  // timing only: no loads (finite bf16 pairs from the row index)
              const uint32_t z = (static_cast<uint32_t>(n) * 0x9E3779B1u + c) & 0x3F7F3F7Fu;
              u = make_uint4(z, z ^ 0x00010001u, z ^ 0x00020002u, z ^ 0x00030003u);
            } else {
              u = __ldg(reinterpret_cast<const uint4*>(xr + lane_chunk(t, c) * 8));
            }
            wd[0] = u.x, wd[1] = u.y, wd[2] = u.z, wd[3] = u.w;
            // ||x||^2 from the words read as floats: the high value with the
            // low one's bits below it, |.| >= |hi| (and < |hi| (1 + 2^-7) for
            // normal hi), so an upper bound, all the re-ranking bound needs,
            // without masking. Inputs are finite (checked by the codec).
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const float hi = __uint_as_float(wd[q]), lo = __uint_as_float(wd[q] << 16);
              s = fmaf(hi, hi, fmaf(lo, lo, s));
            }
            if (want_xmax)
#pragma unroll
              for (int q = 0; q < 4; ++q)
                x_max = fmaxf(x_max, fmaxf(fabsf(__uint_as_float(wd[q] << 16)),
                                           fabsf(__uint_as_float(wd[q] & 0xFFFF0000u))));
          } else {
            float v[8];
            load8_as_float(xr + lane_chunk(t, c) * 8, v);
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
#pragma unroll
          for (int q = 0; q < 4; ++q) a[i][2 * c + (q >> 1)][2 * (q & 1) + r] = wd[q];
        }
        xn[i][r] = sqrtf(quad_sum(s));
        xdev[i][r] = kExactInA ? 0.0f : sqrtf(quad_sum(e));
      }

    // 2. Products and the best two rank keys of each of the lane's rows.
    // kChains chains of (best, second) per row (chain p), merged after the
    // products: with two (wgmma: registers to spare), twice the independent
    // FMNMX a lane has in flight.
    constexpr int kChains = kWg ? 2 : 1;
    float best[kMT][2][kChains], second[kMT][2][kChains];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int p = 0; p < kChains; ++p) best[i][r][p] = second[i][r][p] = -INFINITY;
    // The top two of fragment value v (row half q >> 1) at centroid group +
    // j less this lane's 2t (added after the products), in chain p % kChains;
    // group: rank_group(offset), j a constant (rank_key).
    auto rank = [&](int i, int q, int p, float v, uint32_t group, uint32_t j) {
      float& b = best[i][q >> 1][p % kChains];
      float& sec = second[i][q >> 1][p % kChains];
      if constexpr (kProbe == 2) {  // timing only: consume the value, no top two
        b += v;
      } else {
        const float k = rank_key(v, group, j);
        sec = fmaxf(sec, fminf(b, k));
        b = fmaxf(b, k);
      }
    };
    if constexpr (kWg && kHaveWgmma) {
      // Group cp: accumulators from -||c||^2 / 2, then kSteps wgmma, committed.
      auto issue = [&](float (&acc)[32], int cp) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float2 ci = *reinterpret_cast<const float2*>(c_init + cp + 8 * j + 2 * t);
          acc[4 * j] = acc[4 * j + 2] = ci.x;
          acc[4 * j + 1] = acc[4 * j + 3] = ci.y;
        }
        if constexpr (kProbe == 3) {  // timing only: no products
#pragma unroll
          for (int k = 0; k < 32; ++k) acc[k] += __uint_as_float(a[0][k & (kSteps - 1)][k >> 3]);
        } else {
          pin_registers(acc);
#pragma unroll
          for (int j = 0; j < kSteps; ++j) pin_registers(a[0][j]);
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < kSteps; ++j)
            wgmma_m64n64k16(acc, a[0][j], desc0 + static_cast<uint64_t>(((cp >> 3) * (D / 8) + 2 * j) * 8));
          wgmma_commit();
        }
      };
      auto epilogue = [&](float (&acc)[32], int cp) {
        pin_registers(acc);
        const uint32_t group = rank_group(cp);  // cp: a multiple of 64; the constants below 64
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) rank(0, q, j & 1, acc[4 * j + q], group, static_cast<uint32_t>(8 * j + (q & 1)));
      };
      // One accumulator set: the warpgroup waits for a group's products and
      // ranks them; the other warpgroups keep the tensor cores busy
      // meanwhile (two sets: ptxas schedules the ranking of one set after
      // the wait for the next anyway, with more registers). Not unrolled:
      // ptxas then hoists the groups' loads and spills.
      float acc[32];
#pragma unroll 1
      for (int k = 0; k < c_pad / kWgN; ++k) {
        issue(acc, k * kWgN);
        wgmma_wait<0>();
        epilogue(acc, k * kWgN);
      }
    } else {
      for (int cp = 0; cp < c_pad; cp += kAssignPass) {
        float acc[kMT][kPassTiles][4];  // (m-tile, n-tile, fragment): rows g, g+8; columns 2t, 2t+1
        float2 ci[kPassTiles];
#pragma unroll
        for (int nt = 0; nt < kPassTiles; ++nt) ci[nt] = *reinterpret_cast<const float2*>(c_init + cp + 8 * nt + 2 * t);
        if constexpr (kProbe == 3) {  // timing only: no products
#pragma unroll
          for (int i = 0; i < kMT; ++i)
#pragma unroll
            for (int nt = 0; nt < kPassTiles; ++nt)
#pragma unroll
              for (int q = 0; q < 4; ++q) acc[i][nt][q] = (q & 1 ? ci[nt].y : ci[nt].x) + __uint_as_float(a[i][q][nt]);
        } else {
#pragma unroll
          for (int j = 0; j < kSteps; ++j) {
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
#pragma unroll
        for (int i = 0; i < kMT; ++i)
#pragma unroll
          for (int nt = 0; nt < kPassTiles; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              rank(i, q, nt & 1, acc[i][nt][q], rank_group(cp), static_cast<uint32_t>(8 * nt + (q & 1)));
      }
    }

    // 3. Per row: the quad's best two, re-ranking, exact distances, maxima.
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // This lane's columns: index bits 1, 2 (free in every key's index).
        // -inf is no key (nothing but NaN seen) and stays -inf.
        auto lane_key = [&](float k) { return k == -INFINITY ? k : __uint_as_float(__float_as_uint(k) | (2u * t)); };
        float b = best[i][r][0], sc = second[i][r][0];
#pragma unroll
        for (int p = 1; p < kChains; ++p) {  // merge the chains: distinct keys (distinct indices)
          sc = fmaxf(fmaxf(sc, second[i][r][p]), fminf(b, best[i][r][p]));
          b = fmaxf(b, best[i][r][p]);
        }
        float k1 = lane_key(b), k2 = lane_key(sc);
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {  // the quad's lanes hold different centroids: distinct keys
          const float o1 = __shfl_xor_sync(0xFFFFFFFFu, k1, off), o2 = __shfl_xor_sync(0xFFFFFFFFu, k2, off);
          k2 = fmaxf(fminf(k1, o1), fmaxf(k2, o2));
          k1 = fmaxf(k1, o1);
        }
        const int64_t n = n0 + 16 * i + 8 * r + g;
        const bool live = n < n_tokens;  // the same for the quad
        // Padded (and duplicate) centroids rank below every real one; a
        // pick past C is only possible when every real product overflowed
        // (NaN keys are dropped): then centroid 0, as an argmin over NaN
        // values gives.
        const int i1 = key_index(k1) < c_count ? key_index(k1) : 0, i2 = key_index(k2);
        const bool has2 = i2 < c_count && i2 != i1;
        bool rerank = false;
        if (live && has2) {
          // Re-rank when the gap is within the two values' error bounds. The
          // products are x'.c' with x' = bf16(x) = x - dx, c' = bf16(c) = c -
          // dc, so w' - w = -x.dc - dx.c + dx.dc, at most ||x|| ||dc|| +
          // ||dx|| (||c|| + ||dc||) (dx = 0 for bf16 input); the norms are
          // float sums of at most D <= 128 terms (relative error under
          // 2^-17: the factor 1 + 2^-10 covers it). Then the fp32
          // accumulation from -||c||^2 / 2 (D / 16 mma, each at most 2^-22 of
          // its terms' magnitude: under 2^-18 (||x|| ||c|| + ||c||^2 / 2)) and
          // ||c||^2 in float (2^-17 ||c||^2): 2^-14 of both, with room. And
          // the keys' 2^-15 each (rank_key).
          const float l1 = c_len[i1], l2 = c_len[i2], e1 = c_dev[i1], e2 = c_dev[i2];
          const float xl = xn[i][r], xe = xdev[i][r];
          // FLT_MIN: keys of zero or subnormal w differ by a fixed amount
          // (the index bits) and tiny norms underflow.
          const float bound = (1.0f + 0x1p-10f) * (xl * (e1 + e2) + xe * (l1 + l2 + e1 + e2)) +
                              0x1p-14f * (xl * (l1 + l2) + 0.5f * (l1 * l1 + l2 * l2)) +
                              0x1p-14f * (fabsf(k1) + fabsf(k2)) + FLT_MIN;
          rerank = k1 - k2 <= bound;
        }
        if constexpr (kProbe == 1) rerank = false;
        const bool need_r = live && want_resid;  // x - bf16(c): its max, the next points
        int pick = i1;
        if (kProbe != 1 && __any_sync(0xFFFFFFFFu, live && (want_dist || want_resid || rerank))) {
          float xv[D / 4];  // the lane's values of the row, chunk order
          if constexpr (kExactInA) {
#pragma unroll
            for (int c = 0; c < kLaneChunks; ++c)
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                const uint32_t wd = a[i][2 * c + (q >> 1)][2 * (q & 1) + r];
                xv[8 * c + 2 * q] = __uint_as_float(wd << 16);
                xv[8 * c + 2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
              }
          } else {
#pragma unroll
            for (int k = 0; k < D / 4; ++k) xv[k] = 0.0f;
            if (live && (want_dist || want_resid || rerank)) load_lane_row<D>(xh + n * D, t, xv);
          }
          // The float centroids, dim order: lane t's chunk c at
          // lane_chunk(t, c) * 8 = (4 c + t) * 8.
          const float* c1 = crow(i1) + 8 * t;
          const float* c2 = crow(i2) + 8 * t;  // i2 < c_pad: a padded row reads zeros
          bool second_wins = false, exact_cmp = false;
          if (__any_sync(0xFFFFFFFFu, rerank)) {
            // (d2 - d1) / 2 = sum (c1 - c2)(x - (c1 + c2) / 2) in fp32 with
            // its error bound: each term is within 4u (u = 2^-24) of |c1 -
            // c2| (|x| + |c1 + c2| / 2), the sum of D / 4 + 2 terms within
            // (D / 4 + 3) u of the sum of their magnitudes: under 39u at D =
            // 128, and 2^-16 = 256u. Outside the bound its sign decides;
            // inside (near-equal distances) the double distances below do.
            float sd = 0.0f, mag = 0.0f;
#pragma unroll
            for (int c = 0; c < kLaneChunks; ++c)
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
            const bool clear = fabsf(sd) > 0x1p-16f * mag + 0x1p-100f;  // false for NaN: the exact path
            second_wins = rerank && clear && sd < 0.0f;
            exact_cmp = rerank && !clear;
          }
          // ||x - c||^2 in double (add_sq_diff, the quad adds xor 1, 2): of
          // the pick when the distances are wanted, of both candidates where
          // the fp32 comparison could not tell them apart.
          const bool need_a = live && (want_dist || exact_cmp), need_b = exact_cmp;
          if (__any_sync(0xFFFFFFFFu, need_a)) {
            const float* ca = second_wins ? c2 : c1;
            const bool any_b = __any_sync(0xFFFFFFFFu, need_b);
            double da = 0.0, db = 0.0;
#pragma unroll
            for (int c = 0; c < kLaneChunks; ++c)
#pragma unroll
              for (int h4 = 0; h4 < 2; ++h4) {
                float p[4];
                load_float4(ca + 32 * c + 4 * h4, p);
#pragma unroll
                for (int k = 0; k < 4; ++k) add_sq_diff(da, xv[8 * c + 4 * h4 + k], p[k]);
                if (any_b) {
                  float q[4];
                  load_float4(c2 + 32 * c + 4 * h4, q);
#pragma unroll
                  for (int k = 0; k < 4; ++k) add_sq_diff(db, xv[8 * c + 4 * h4 + k], q[k]);
                }
              }
            da = quad_sum(da);
            if (any_b) db = quad_sum(db);
            if (exact_cmp) second_wins = db < da || (db == da && i2 < i1);  // da is d1 here
            if (live && want_dist && t == 0)
              out.dist[static_cast<int64_t>(h) * n_tokens + n] = static_cast<float>(exact_cmp && second_wins ? db : da);
          }
          pick = second_wins ? i2 : i1;
          // Where the pick's float centroid is a BF16 value (||c - bf16(c)|| =
          // 0: every centroid the encoder's k-means makes, kmeans.h), the
          // float rows (one 16-byte load per 4 values, no unpacking) hold
          // bf16(c) itself; otherwise the BF16 core matrices below.
          const bool from_float = __all_sync(0xFFFFFFFFu, !need_r || c_dev[pick] == 0.0f);
          if (need_r) {
            uint16_t* next_row = want_next ? out.next + (static_cast<int64_t>(h) * n_tokens + n) * D : nullptr;
            // x - bf16(c) at the lane's chunk c (dims 8 lane_chunk(t, c) ..),
            // given those 8 values of bf16(c): its max, the next points.
            auto resid_chunk = [&](int c, const float (&cv)[8]) {
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
            };
            if (from_float) {
              const float* cp = crow(pick) + 8 * t;
#pragma unroll
              for (int c = 0; c < kLaneChunks; ++c) {
                float lo[4], hi[4];
                load_float4(cp + 32 * c, lo);
                load_float4(cp + 32 * c + 4, hi);
                const float cv[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
                resid_chunk(c, cv);
              }
            } else {
              // From the core matrices: dim 8 lane_chunk(t, c) + 2q + e sits at
              // logical position 16 (2c + q/2) + 8 (q & 1) + 2t + e (logical
              // chunk 2 (2c + q/2) + (q & 1), element 2t + e).
#pragma unroll
              for (int c = 0; c < kLaneChunks; ++c) {
                float cv[8];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                  const uint32_t wd = *reinterpret_cast<const uint32_t*>(
                      cs + core_chunk<D>(pick, 2 * (2 * c + (q >> 1)) + (q & 1)) + 2 * t);
                  cv[2 * q] = __uint_as_float(wd << 16);
                  cv[2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
                }
                resid_chunk(c, cv);
              }
            }
          }
        }
        if (live && t == 0) out.ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(pick);
      }
  }
  // Per-head maxima: one atomic per warp.
  for (int off = 16; off > 0; off >>= 1) {
    x_max = fmaxf(x_max, __shfl_xor_sync(0xFFFFFFFFu, x_max, off));
    r_max = fmax_nan(r_max, __shfl_xor_sync(0xFFFFFFFFu, r_max, off));
  }
  if (lane == 0) {
    if (out.x_max) atomicMax(out.x_max + h, __float_as_uint(x_max));
    if (out.resid_max) atomicMax(out.resid_max + h, __float_as_uint(r_max));  // NaN (0x7FC00000 up) above inf
  }
}

/// Warps per block of the assignment (16 caps the registers at 128; each
/// lane holds its rows' A fragments: D / 2 registers per 16 rows).
constexpr int kAssignWarps = 16;

/// Launch assign_tc_kernel (the given form) over heads [0, heads) of x
/// ([H][N][D] of T on the device) with centroids cent ([H][C][D] float).
/// Blocks per head: as many as fill the device once, at least one. The
/// maxima in `o` must have been zeroed for the active heads. Returns the
/// first CUDA error.
template <int D, typename T, int kWarps = kAssignWarps, int kProbe = 0, bool kWg = true, bool kFloatInSmem = true>
cudaError_t launch_assign_tc_as(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                                const AssignOutputs& o, cudaStream_t s) {
  if (c < 1 || c > kAssignMaxCentroids || heads < 1 || heads > 65535 || n < 1) return cudaErrorInvalidValue;
  const size_t smem = assign_tc_smem<D, kFloatInSmem>(c);
  auto* kernel = assign_tc_kernel<D, T, kWarps, kProbe, kWg, kFloatInSmem>;
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

/// launch_assign_tc_as with the float centroids in shared memory where the
/// device has room for them (a block of Hopper: 227 KB; Ampere A100: 163 KB;
/// other Ampere, Ada and Blackwell cards: 99 KB), else read through L1.
template <int D, typename T, int kWarps = kAssignWarps, int kProbe = 0, bool kWg = true>
cudaError_t launch_assign_tc(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                             const AssignOutputs& o, cudaStream_t s) {
  int dev = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) return e;
  if (assign_tc_smem<D>(c) <= static_cast<size_t>(optin))
    return launch_assign_tc_as<D, T, kWarps, kProbe, kWg, true>(x, n, cent, c, heads, active, o, s);
  return launch_assign_tc_as<D, T, kWarps, kProbe, kWg, false>(x, n, cent, c, heads, active, o, s);
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
