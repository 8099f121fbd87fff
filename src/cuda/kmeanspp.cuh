// k-means++ start on the GPU: kmeans_init_ref's `kmeanspp` rule (CPU
// reference, src/reference/kmeans.cpp) for every head at once.
//
// The rule is sequential: each of the C - 1 steps needs the squared distance
// of every sample point to the newest centre, the running minimum `best`,
// their total in double, one SplitMix64 draw u in [0, total) and the first
// point whose running sum of `best` exceeds u. So one cluster of kPPBlocks
// thread blocks per head walks all C steps in one launch: each block owns a
// contiguous slice of the sample (its `best` and ||x||^2 in shared memory),
// and the blocks exchange their slice totals and first candidates through
// distributed shared memory, two cluster barriers a step.
//
// Same as the CPU: the subsample and the first centre (kmeanspp_start, on
// the host), the draws (SplitMix64 advanced past the start's draws; each
// thread of a head keeps its own copy and draws the same u), the clamp at 0,
// the "every point is a centre: take the next one" rule, and the pick (the
// first point with a running sum above u and best > 0; else the last).
// Different: the float dot products and ||x||^2 are summed in another order
// than Eigen's, and the running sum of best is blocked (per block, per
// thread, then sequential). Distances differ in their last bits, so a pick
// can differ only where u falls within that much of a boundary of the
// running sum: the centroids equal the CPU's except for such near-ties
// (tests/test_cuda.cpp). Every sum has a fixed order: repeated runs give the
// same bits.
#pragma once

#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/arch.cuh"
#include "cuda/qvg_kernels.cuh"
#include "qvg/half.h"
#include "util/rng.h"

namespace qvg::cuda {

constexpr int kPPBlocks = 8;     // blocks of a head's cluster (the portable maximum)
constexpr int kPPThreads = 512;  // threads a block

/// Sample points a block owns (the last block may own fewer).
__host__ __device__ inline int kmeanspp_rows_per_block(int m) { return (m + kPPBlocks - 1) / kPPBlocks; }

/// Dynamic shared memory of kmeanspp_kernel: best, ||x||^2 and the row index
/// of the block's points.
inline size_t kmeanspp_smem(int m) {
  return static_cast<size_t>(kmeanspp_rows_per_block(m)) * (2 * sizeof(float) + sizeof(int));
}

/// Sum over each group of L consecutive lanes in a fixed order (xor tree):
/// the same bits in every lane of the group.
template <int L>
__device__ __forceinline__ float kmeanspp_group_sum(float s) {
#pragma unroll
  for (int off = L / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
  return s;
}

/// fn(r, v) for rows r < mine of the block's slice, v = the lane's values of
/// row r (kPer of them, 16 bytes of x at kPer * q); rows are spread over
/// the warps, kR a warp step, kU steps' loads in flight. Lanes past the
/// slice's end repeat its last row (fn must ignore r >= mine; every lane
/// takes part in fn's shuffles).
template <typename T, int D, int kWarps, typename F>
__device__ __forceinline__ void kmeanspp_rows(const T* __restrict__ xh, const int* __restrict__ rows, int mine, F&& fn) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  constexpr int kL = D / kPer, kR = 32 / kL, kU = 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / kL, q = lane % kL;
  for (int base = warp * kR; base < mine; base += kWarps * kR * kU) {
    uint4 raw[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int r = min(base + u * kWarps * kR + sub, mine - 1);
      raw[u] = __ldg(reinterpret_cast<const uint4*>(xh + static_cast<int64_t>(rows[r]) * D) + q);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (base + u * kWarps * kR >= mine) break;  // the same for the whole warp
      float v[kPer];
      word_as_float<T>(raw[u], v);
      fn(base + u * kWarps * kR + sub, v);
    }
  }
}

/// Grid (kPPBlocks, H), clusters of kPPBlocks along x, block kPPThreads,
/// dynamic shared memory kmeanspp_smem(m). x: [H][N][D]; rows: [H][m] the
/// sample (kmeanspp_start(N, C, seed_h).rows); first: [H] the first centre's
/// sample index; seeds: [H]; draws: the start's draws (the same for every
/// head: they depend on N and C only); cent: [H][C][D].
template <typename T, int D>
__global__ void __cluster_dims__(kPPBlocks, 1, 1) __launch_bounds__(kPPThreads)
    kmeanspp_kernel(const T* __restrict__ x, int64_t n_tokens, const int* __restrict__ rows, int m, int c_count,
                    const int64_t* __restrict__ first, const uint64_t* __restrict__ seeds,
                    uint64_t draws, float* __restrict__ cent) {
  static_assert(D == 64 || D == 128, "k-means++ on the GPU: D = 64 or 128");
#if QVG_HAVE_CLUSTERS
  namespace cg = cooperative_groups;
  constexpr int kWarps = kPPThreads / 32;
  using Scan = cub::BlockScan<double, kPPThreads>;
  cg::cluster_group cluster = cg::this_cluster();
  const int b = static_cast<int>(cluster.block_rank());
  const int h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31;
  const int per_block = kmeanspp_rows_per_block(m);
  const int r0 = min(b * per_block, m), r1 = min(r0 + per_block, m), mine = r1 - r0;
  extern __shared__ float pp_smem[];
  float* best = pp_smem;               // [per_block]
  float* xnorm = pp_smem + per_block;  // [per_block]
  int* rb = reinterpret_cast<int*>(pp_smem + 2 * per_block);  // [per_block]: x rows of the block's points
  __shared__ float centre[D];
  __shared__ double part_sum[kPPBlocks];  // slice totals, written by every block of the cluster
  __shared__ int part_pick[kPPBlocks];    // first candidate of each slice (m: none)
  __shared__ int block_pick;
  __shared__ typename Scan::TempStorage scan_tmp;
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const int* rh = rows + static_cast<int64_t>(h) * m;
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));  // values a lane loads from a row
  constexpr int kL = D / kPer;                             // lanes a row
  const int q = lane % kL;
  // The points' rows (read every step: from shared memory, not a second
  // dependent global load before each row's), ||x||^2, best = +inf.
  for (int r = tid; r < mine; r += kPPThreads) rb[r] = rh[r0 + r];
  __syncthreads();
  kmeanspp_rows<T, D, kWarps>(xh, rb, mine, [&](int r, const float (&v)[kPer]) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) s = fmaf(v[i], v[i], s);
    s = kmeanspp_group_sum<kL>(s);
    if (q == 0 && r < mine) xnorm[r] = s, best[r] = INFINITY;
  });
  // No block may write another's shared memory before that block has
  // started (compute-sanitizer racecheck): one cluster barrier first.
  cluster.sync();
  // The thread's points for the running sum: a contiguous range of the slice.
  const int per_thread = (mine + kPPThreads - 1) / kPPThreads;
  const int t0 = min(tid * per_thread, mine), t1 = min(t0 + per_thread, mine);
  SplitMix64 rng(seeds[h]);
  rng.discard(draws);
  int pick = static_cast<int>(first[h]);
  float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  for (int k = 0; k < c_count; ++k) {
    // Centre k = sample point `pick`.
    const T* crow = xh + static_cast<int64_t>(rh[pick]) * D;
    for (int i = tid; i < D; i += kPPThreads) {
      const float v = load_as_float(crow + i);
      centre[i] = v;
      if (b == 0) ch[static_cast<int64_t>(k) * D + i] = round_bf16(v);  // centroids are BF16 values (kmeans.h)
    }
    if (k + 1 == c_count) break;
    __syncthreads();
    float cv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) cv[i] = centre[q * kPer + i];
    // ||c||^2 in ||x||^2's order (the lane's values, then the group's tree):
    // a point equal to the centre has dot == ||x||^2 == ||c||^2 bit for bit
    // and so a distance of exactly 0 (never picked again, and the "every
    // point is a centre" rule sees exact zeros).
    float cn = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) cn = fmaf(cv[i], cv[i], cn);
    cn = kmeanspp_group_sum<kL>(cn);
    // best = min(best, max(0, (||x||^2 - 2 x.c) + ||c||^2)), rounded as the CPU's.
    kmeanspp_rows<T, D, kWarps>(xh, rb, mine, [&](int r, const float (&v)[kPer]) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) dot = fmaf(v[i], cv[i], dot);
      dot = kmeanspp_group_sum<kL>(dot);
      if (q == 0 && r < mine)
        best[r] = fminf(best[r], fmaxf(0.0f, __fadd_rn(__fsub_rn(xnorm[r], __fmul_rn(2.0f, dot)), cn)));
    });
    __syncthreads();
    // Slice total and the thread's offset in it (double, fixed order).
    double ts = 0.0;
    for (int r = t0; r < t1; ++r) ts += best[r];
    double offset = 0.0, slice = 0.0;
    Scan(scan_tmp).ExclusiveSum(ts, offset, slice);
    if (tid == 0) {
      for (int rank = 0; rank < kPPBlocks; ++rank) cluster.map_shared_rank(part_sum, rank)[b] = slice;
      block_pick = m;
    }
    cluster.sync();
    double total = 0.0, before = 0.0;
    for (int rank = 0; rank < kPPBlocks; ++rank) {
      if (rank == b) before = total;
      total += part_sum[rank];
    }
    if (!(total > 0.0)) {  // every point coincides with a centre: take the next one (no draw)
      pick = (pick + 1) % m;
      cluster.sync();  // part_sum is read before anyone writes the next step's
      continue;
    }
    const double u = rng.uniform() * total;
    // The first point of the slice whose running sum exceeds u (with best > 0).
    double acc = before + offset;
    for (int r = t0; r < t1; ++r) {
      acc += best[r];
      if (acc > u && best[r] > 0.0f) {
        atomicMin(&block_pick, r0 + r);
        break;
      }
    }
    __syncthreads();
    if (tid == 0)
      for (int rank = 0; rank < kPPBlocks; ++rank) cluster.map_shared_rank(part_pick, rank)[b] = block_pick;
    cluster.sync();
    int p = m;
    for (int rank = 0; rank < kPPBlocks; ++rank) p = min(p, part_pick[rank]);
    pick = p < m ? p : m - 1;
  }
#else
  __trap();  // never launched: without clusters Encoder::start_on_host takes the start instead
#endif
}

}  // namespace qvg::cuda
