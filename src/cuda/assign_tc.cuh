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
// within_error_bound and exact_phase; at the end flush_head_maxima. The
// helpers live beside it by step: assign_common.cuh (constants, rank keys,
// outputs), assign_stage.cuh (staging), assign_products.cuh (rows, products,
// ranking), assign_exact.cuh (per-row re-ranking, distances, residual).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/assign_exact.cuh"
#include "cuda/assign_products.cuh"
#include "cuda/assign_stage.cuh"

namespace qvg::cuda {

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

/// Threads of stopped_head_outputs_kernel's block.
constexpr int kStoppedThreads = 256;

/// What a head's final assignment writes besides its ids (AssignOutputs'
/// resid_max, next and cent_bf16, those not null), for the heads that
/// stopped before the encoder's last assignment (active[h] == 0: their final
/// assignment was an earlier one, which wrote only ids and distances), from
/// that assignment's ids ([H][N]) and the centroids it read (cent, [H][C][D]
/// float; an inactive head's are not updated again): the values
/// assign_tc_kernel writes (exact_phase, flush_head_maxima, stage_float_rows).
/// With r = x - bf16(c_id) (round-to-nearest subtraction):
///   for n: resid_max[h] = max(resid_max[h], max_k |r[k]|)  (NaN wins: fmax_nan)
///          next[h][n] = bf16(r)
///   cent_bf16[h] = bf16(cent[h])
/// resid_max of these heads zeroed by the caller. Heads with active[h] != 0
/// return at once. Grid (any, H): blocks stride over the head's rows, block
/// 0 writes the centroids; block kStoppedThreads, D / 8 threads a row, 8
/// values each.
template <int D, typename T>
__global__ void __launch_bounds__(kStoppedThreads)
    stopped_head_outputs_kernel(const T* __restrict__ x, int64_t n_tokens, const float* __restrict__ cent,
                                int c_count, const uint8_t* __restrict__ ids, const int* __restrict__ active,
                                AssignOutputs out) {
  static_assert(D % 8 == 0 && kStoppedThreads % (D / 8) == 0, "whole rows a block step");
  const int h = blockIdx.y;
  if (active[h]) return;
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  if (out.cent_bf16 && blockIdx.x == 0)
    for (int i = threadIdx.x; i < c_count * (D / 4); i += kStoppedThreads) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(ch) + i);
      *reinterpret_cast<uint2*>(out.cent_bf16 + static_cast<int64_t>(h) * c_count * D + 4 * i) =
          make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    }
  if (!out.resid_max && !out.next) return;  // the same for the block
  constexpr int kPerRow = D / 8;                      // threads a row
  constexpr int kRows = kStoppedThreads / kPerRow;    // rows a block step
  const int q = threadIdx.x % kPerRow;                // this thread's dims: 8 q .. 8 q + 7
  float r_max = 0.0f;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kPerRow; n < n_tokens;
       n += static_cast<int64_t>(gridDim.x) * kRows) {
    const int64_t row = static_cast<int64_t>(h) * n_tokens + n;
    float xv[8];
    load8_as_float(x + row * D + 8 * q, xv);
    float lo[4], hi[4];
    const float* cp = ch + static_cast<int64_t>(ids[row]) * D + 8 * q;
    load_float4(cp, lo);
    load_float4(cp + 4, hi);
    const float cv[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    uint32_t packed[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float d0 = __fsub_rn(xv[2 * k], round_bf16_dev(cv[2 * k]));
      const float d1 = __fsub_rn(xv[2 * k + 1], round_bf16_dev(cv[2 * k + 1]));
      r_max = fmax_nan(r_max, fmax_nan(fabsf(d0), fabsf(d1)));
      packed[k] = pack_bf16x2(d0, d1);
    }
    if (out.next)
      *reinterpret_cast<uint4*>(out.next + row * D + 8 * q) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  if (!out.resid_max) return;  // the same for the block
  for (int off = 16; off > 0; off >>= 1) r_max = fmax_nan(r_max, __shfl_xor_sync(0xFFFFFFFFu, r_max, off));
  if ((threadIdx.x & 31) == 0) atomicMax(out.resid_max + h, __float_as_uint(r_max));  // NaN (0x7FC00000 up) above inf
}

}  // namespace qvg::cuda
