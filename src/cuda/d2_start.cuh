// The `d2_rounds` k-means start on the GPU: kmeans_init_ref's rule (the CPU
// reference, src/reference/kmeans.cpp; stated in qvg/kmeans.h) for every head at
// once.
//
// One cluster of kD2Blocks thread blocks per head. Each block holds a
// contiguous slice of the head's sample in shared memory (BF16 rows, their
// |x|^2 and best distances). A round: the slice's distances to the previous
// round's centres by mma.sync (m16n8k16, bf16 operands, fp32 accumulators)
// and best brought up to date; the slice totals exchanged through distributed
// shared memory; each thread finds the positions (u + j) * total / want that
// fall in its rows' part of the running sum; the picks are counted, numbered
// in sample order and written into every block's list of new centres. Three
// cluster barriers a round, at most 2 kD2Rounds rounds.
//
// Same as the CPU: the subsample, the first centre and their draws
// (kmeans_d2_start, on the host), the BF16 sample rows, the distance formula
// with its float roundings, the clamp at 0, best = 0 at a centre, the round
// sizes, one draw a round, the positions in double, one pick per point a
// round, the stop rule and the fill with the first centre. Different: the
// dot products and norms are summed in another order (tensor cores) and the
// running sum is blocked (per thread, per block, then across blocks), so a
// pick can differ only where a position falls within that rounding of a
// boundary of the running sum (tests/test_cuda.cpp). Every sum has a fixed
// order: repeated runs give the same bits.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "cuda/arch.cuh"
#include "cuda/qvg_kernels.cuh"
#include "cuda/tensor_core.cuh"
#include "qvg/kmeans.h"
#include "util/rng.h"

namespace qvg::cuda {

constexpr int kD2Blocks = 8;                           // blocks of a head's cluster (the portable maximum)
constexpr int kD2Threads = 256;                        // threads a block: 8 warps
constexpr int kD2MaxRows = 512;                        // sample rows a block holds at most
constexpr int kD2Tile = 32;                            // centres a pass of the distance update
constexpr int kD2Pad = 8;                              // BF16 padding a row: ldmatrix reads rows without bank conflicts
constexpr int kD2MaxFresh = 256;                       // new centres a round, at most (C <= 256)
constexpr int kD2PerThread = kD2MaxRows / kD2Threads;  // rows of the running sum a thread
static_assert(kD2Blocks * kD2MaxRows >= kD2PointsPerCentroid * 256, "the largest sample fits a cluster");
static_assert(kD2MaxRows == 8 * 4 * 16, "8 warps of 4 m16 tiles cover a block's rows");

/// Sample rows a block owns, a multiple of 16 (the last block may own fewer
/// real rows; the rest are zero).
__host__ __device__ inline int d2_rows_per_block(int m) { return ((m + kD2Blocks - 1) / kD2Blocks + 15) / 16 * 16; }

/// Dynamic shared memory of d2_start_kernel.
template <int D>
inline size_t d2_smem(int m) {
  const size_t rows = static_cast<size_t>(d2_rows_per_block(m));
  return (rows + kD2Tile) * (D + kD2Pad) * sizeof(uint16_t) + (2 * rows + kD2Tile) * sizeof(float) +
         kD2MaxFresh * sizeof(int);
}

/// 8 consecutive values of T (16-byte aligned) -> 8 BF16 values, rounded to
/// nearest even (exact for BF16 input).
template <typename T>
__device__ __forceinline__ uint4 load8_bf16(const T* p) {
  float v[8];
  load8_as_float(p, v);
  return make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
}

/// BF16 bits -> float (exact).
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

/// |v|^2 of one BF16 row of D values.
template <int D>
__device__ __forceinline__ float d2_row_norm(const uint16_t* row) {
  float s = 0.0f;
  for (int k = 0; k < D; ++k) {
    const float v = bf16_bits_to_float(row[k]);
    s = fmaf(v, v, s);
  }
  return s;
}

/// best[r] = min(best[r], min over the tile's kc centres j of
/// max(0, (|x_r|^2 - 2 x_r.c_j) + |c_j|^2)) for the warp's rows r < mine:
/// 4 m16 tiles of rows a warp, the tile's 32 centres as 4 n8 tiles.
template <int D>
__device__ __forceinline__ void d2_tile_update(const uint16_t* xs, const uint16_t* ctile, const float* xnorm,
                                               const float* cnorm, float* best, int rows, int mine, int kc) {
  constexpr int kStride = D + kD2Pad;
  constexpr int kMT = 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row_base = warp * kMT * 16;
  if (row_base >= mine) return;
  const int tiles = min(kMT, (rows - row_base) / 16);
  float acc[kMT][4][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  const uint32_t xs_addr = smem_u32(xs), ct_addr = smem_u32(ctile);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    // B fragments: rows of the tile are centres (n), columns dims (k).
    uint32_t bf[4][2];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int n = p * 16 + (lane >> 4) * 8 + (lane & 7);
      const int k = ks * 16 + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(ct_addr + static_cast<uint32_t>(n * kStride + k) * 2, bf[2 * p][0], bf[2 * p][1], bf[2 * p + 1][0],
                  bf[2 * p + 1][1]);
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt >= tiles) break;  // the same for the whole warp
      uint32_t a[4];
      const int row = row_base + mt * 16 + (lane & 15);
      const int k = ks * 16 + (lane >> 4) * 8;
      ldmatrix_x4(xs_addr + static_cast<uint32_t>(row * kStride + k) * 2, a[0], a[1], a[2], a[3]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma_bf16_16816(acc[mt][nt], a, bf[nt][0], bf[nt][1]);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    if (mt >= tiles) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row_base + mt * 16 + (lane >> 2) + half * 8;
      const float xn = row < mine ? xnorm[row] : 0.0f;
      float dmin = INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = nt * 8 + 2 * (lane & 3) + e;
          if (j < kc)
            dmin = fminf(dmin,
                         fmaxf(0.0f, __fadd_rn(__fsub_rn(xn, __fmul_rn(2.0f, acc[mt][nt][2 * half + e])), cnorm[j])));
        }
      dmin = fminf(dmin, __shfl_xor_sync(0xFFFFFFFFu, dmin, 1));
      dmin = fminf(dmin, __shfl_xor_sync(0xFFFFFFFFu, dmin, 2));
      if ((lane & 3) == 0 && row < mine) best[row] = fminf(best[row], dmin);
    }
  }
}

/// Grid (kD2Blocks, H), clusters of kD2Blocks along x, block kD2Threads,
/// dynamic shared memory d2_smem<D>(m). x: [H][N][D]; rows: [H][m] the
/// sample (kmeans_d2_start(N, C, seed_h).rows, m <= kD2Blocks *
/// kD2MaxRows); first: [H] the first centre's sample index; seeds: [H];
/// draws: the start's draws (the same for every head); cent: [H][C][D].
template <typename T, int D>
__global__ void __cluster_dims__(kD2Blocks, 1, 1) __launch_bounds__(kD2Threads)
    d2_start_kernel(const T* __restrict__ x, int64_t n_tokens, const int* __restrict__ rows, int m, int c_count,
                    const int64_t* __restrict__ first, const uint64_t* __restrict__ seeds, uint64_t draws,
                    float* __restrict__ cent) {
  static_assert(D == 64 || D == 128, "the d2_rounds start on the GPU: D = 64 or 128");
#if QVG_HAVE_CLUSTERS
  namespace cg = cooperative_groups;
  using SumScan = cub::BlockScan<double, kD2Threads>;
  using CountScan = cub::BlockScan<int, kD2Threads>;
  constexpr int kStride = D + kD2Pad;
  constexpr int kQ = D / 8;  // 16-byte words a BF16 row
  cg::cluster_group cluster = cg::this_cluster();
  const int b = static_cast<int>(cluster.block_rank());
  const int h = blockIdx.y, tid = threadIdx.x;
  const int per_block = d2_rows_per_block(m);
  const int r0 = min(b * per_block, m), r1 = min(r0 + per_block, m), mine = r1 - r0;
  extern __shared__ __align__(16) unsigned char d2_smem_raw[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(d2_smem_raw);            // [per_block][kStride]
  uint16_t* ctile = xs + per_block * kStride;                         // [kD2Tile][kStride]
  float* best = reinterpret_cast<float*>(ctile + kD2Tile * kStride);  // [per_block]
  float* xnorm = best + per_block;                                    // [per_block]
  float* cnorm = xnorm + per_block;                                   // [kD2Tile]
  int* fresh = reinterpret_cast<int*>(cnorm + kD2Tile);               // [kD2MaxFresh]: the last round's centres
  __shared__ double part_sum[kD2Blocks];                              // slice totals, written by every block
                                                                      // of the cluster
  __shared__ int part_count[kD2Blocks];                               // picks of each slice
  __shared__ typename SumScan::TempStorage sum_tmp;
  __shared__ typename CountScan::TempStorage count_tmp;
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const int* rh = rows + static_cast<int64_t>(h) * m;
  float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  const int f = static_cast<int>(first[h]);

  for (int i = tid; i < per_block * kQ; i += kD2Threads) {
    const int r = i / kQ, q = i % kQ;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (r < mine) w = load8_bf16(xh + static_cast<int64_t>(rh[r0 + r]) * D + q * 8);
    *reinterpret_cast<uint4*>(xs + r * kStride + q * 8) = w;
  }
  __syncthreads();
  for (int r = tid; r < mine; r += kD2Threads) {
    xnorm[r] = d2_row_norm<D>(xs + r * kStride);
    best[r] = INFINITY;
  }
  if (f >= r0 && f < r1)  // centroid 0: the first centre
    for (int k = tid; k < D; k += kD2Threads) ch[k] = bf16_bits_to_float(xs[(f - r0) * kStride + k]);
  if (tid == 0) fresh[0] = f;
  // No block may write another's shared memory before that block has
  // started (compute-sanitizer racecheck): one cluster barrier first.
  cluster.sync();

  SplitMix64 rng(seeds[h]);
  rng.discard(draws);
  int picked = 1, nfresh = 1;
  for (int round = 0; picked < c_count && round < 2 * kD2Rounds; ++round) {
    // best against the last round's centres, kD2Tile at a time.
    for (int t0 = 0; t0 < nfresh; t0 += kD2Tile) {
      const int kc = min(kD2Tile, nfresh - t0);
      for (int i = tid; i < kD2Tile * kQ; i += kD2Threads) {
        const int j = i / kQ, q = i % kQ;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (j < kc) w = load8_bf16(xh + static_cast<int64_t>(rh[fresh[t0 + j]]) * D + q * 8);
        *reinterpret_cast<uint4*>(ctile + j * kStride + q * 8) = w;
      }
      __syncthreads();
      if (tid < kD2Tile) cnorm[tid] = d2_row_norm<D>(ctile + tid * kStride);
      __syncthreads();
      d2_tile_update<D>(xs, ctile, xnorm, cnorm, best, per_block, mine, kc);
      __syncthreads();
    }
    for (int j = tid; j < nfresh; j += kD2Threads) {
      const int p = fresh[j];
      if (p >= r0 && p < r1) best[p - r0] = 0.0f;
    }
    __syncthreads();
    // The slice total and this thread's offset in it (double, fixed order).
    const int per_thread = (mine + kD2Threads - 1) / kD2Threads;
    const int a0 = min(tid * per_thread, mine), a1 = min(a0 + per_thread, mine);
    double ts = 0.0;
    for (int r = a0; r < a1; ++r) ts += best[r];
    double offset = 0.0, slice = 0.0;
    SumScan(sum_tmp).ExclusiveSum(ts, offset, slice);
    if (tid == 0)
      for (int rank = 0; rank < kD2Blocks; ++rank) cluster.map_shared_rank(part_sum, rank)[b] = slice;
    cluster.sync();
    double total = 0.0, before = 0.0;
    for (int rank = 0; rank < kD2Blocks; ++rank) {
      if (rank == b) before = total;
      total += part_sum[rank];
    }
    if (!(total > 0.0)) break;  // every sample point is a centre (the same in every block)
    const int left = max(1, kD2Rounds - round);
    const int want = (c_count - picked + left - 1) / left;
    const double u = rng.uniform();
    auto pos = [&](int j) { return (u + static_cast<double>(j)) * total / static_cast<double>(want); };
    // This thread's rows: the first point whose running sum exceeds pos_j.
    double acc = before + offset;
    int j = max(0, static_cast<int>(acc / total * want - u) - 1);
    while (j > 0 && pos(j - 1) >= acc) --j;
    while (j < want && pos(j) < acc) ++j;
    int mine_picks[kD2PerThread];
    int np = 0;
    for (int r = a0; r < a1 && j < want; ++r) {
      acc += best[r];
      bool hit = false;
      for (; j < want && pos(j) < acc; ++j) hit = true;
      if (hit) mine_picks[np++] = r;
    }
    int first_slot = 0, block_count = 0;
    CountScan(count_tmp).ExclusiveSum(np, first_slot, block_count);
    if (tid == 0)
      for (int rank = 0; rank < kD2Blocks; ++rank) cluster.map_shared_rank(part_count, rank)[b] = block_count;
    cluster.sync();
    int block_first = 0, fresh_count = 0;
    for (int rank = 0; rank < kD2Blocks; ++rank) {
      if (rank == b) block_first = fresh_count;
      fresh_count += part_count[rank];
    }
    // Where the blocked running sum leaves a position to two threads (a
    // rounding of the sums), a round could take one more centre than want:
    // slots past C are dropped.
    fresh_count = min(fresh_count, c_count - picked);
    for (int k = 0; k < np; ++k) {
      const int slot = block_first + first_slot + k;  // among this round's centres, in sample order
      if (slot >= fresh_count) break;
      const int r = mine_picks[k];
      for (int rank = 0; rank < kD2Blocks; ++rank) cluster.map_shared_rank(fresh, rank)[slot] = r0 + r;
      float* out = ch + static_cast<int64_t>(picked + slot) * D;
      for (int d = 0; d < D; ++d) out[d] = bf16_bits_to_float(xs[r * kStride + d]);
    }
    cluster.sync();  // fresh is complete everywhere; part_* are read before the
                     // next round writes them
    picked += fresh_count;
    nfresh = fresh_count;
  }
  // Slots left: the first centre again.
  if (b == 0)
    for (int i = tid; i < (c_count - picked) * D; i += kD2Threads) {
      const int slot = picked + i / D, k = i % D;
      ch[static_cast<int64_t>(slot) * D + k] = round_bf16_dev(load_as_float(xh + static_cast<int64_t>(rh[f]) * D + k));
    }
#else
  __trap();  // never launched: without clusters Encoder::start_on_host takes the start instead
#endif
}

}  // namespace qvg::cuda
