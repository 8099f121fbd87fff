// The k-means update's empty-cluster rule on the GPU (kmeans.h): every
// empty cluster of a head re-seeded in one pass, by a radix select of the
// head's farthest rows. Called by Encoder::kmeans_update (kmeans_cuda.cu)
// after centroid_mean_kernel (kmeans_kernels.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/qvg_kernels.cuh"
#include "qvg/half.h"

namespace qvg::cuda {

/// Threads of reseed_empty_kernel's block (one block a head).
constexpr int kReseedThreads = 1024;

/// A distance as an unsigned key in the same order: distances are >= 0, and
/// the bit patterns of non-negative floats order as their values (-0 and
/// NaN, which no distance of finite points is, map to 0).
__device__ __forceinline__ unsigned reseed_key(float v) { return v > 0.0f ? __float_as_uint(v) : 0u; }

/// Empty-cluster rule (kmeans.h): each empty cluster, in index order, takes
/// the point farthest from its centroid (lowest index on ties) not taken by
/// an earlier empty cluster of this iteration. So the e empty clusters of a
/// head take its e first rows in the order (distance desc, index asc), the
/// j-th empty cluster the j-th row; with more empty clusters than rows the
/// last ones take none (and keep their centroids). One block of
/// kReseedThreads per head, in one pass over the clusters:
///   1. the clusters' counts, read and zeroed (the next update's start, as
///      centroid_mean_kernel the sums); each empty cluster's place among
///      them (a block scan); a head without one returns;
///   2. the k-th largest key (k = min(e, rows)), a radix select on the keys'
///      32 bits, 8 a pass from the top: a shared histogram of the rows
///      that match the bits found so far, then one warp finds the digit
///      whose bin holds the k-th;
///   3. the rows above it (in any order, then ranked by (key desc, index
///      asc)) and, after them, the lowest-index rows equal to it (each
///      thread scans a contiguous range; a block scan gives the ranges'
///      places);
///   4. cluster j-th empty <- bf16(row j). reseeded[h] counts them.
template <typename T>
__global__ void __launch_bounds__(kReseedThreads)
    reseed_empty_kernel(const T* __restrict__ x, int64_t n_tokens, int d, int c_count, int* __restrict__ counts,
                        const float* __restrict__ dist, const int* __restrict__ active, float* __restrict__ cent,
                        int* __restrict__ reseeded) {
  using Scan = cub::BlockScan<int, kReseedThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int cluster_of[256];  // the j-th empty cluster (c_count <= 256)
  __shared__ unsigned hist[256];
  __shared__ int64_t picked[256];  // rows: those above the k-th key, then those equal to it
  __shared__ unsigned picked_key[256];
  __shared__ int64_t ordered[256];  // the rows in the order the empty clusters take them
  __shared__ unsigned s_prefix;
  __shared__ int s_left, s_above;
  const int h = blockIdx.x, t = threadIdx.x;
  if (active && !active[h]) return;
  int is_empty = 0;
  if (t < c_count) {
    is_empty = counts[h * c_count + t] == 0;
    counts[h * c_count + t] = 0;
  }
  int place = 0, e = 0;
  Scan(scan_tmp).ExclusiveSum(is_empty, place, e);
  if (e == 0) return;  // the common case; e is the same in every thread
  if (is_empty) cluster_of[place] = t;
  const int k = static_cast<int>(e < n_tokens ? e : n_tokens);
  const float* dh = dist + static_cast<int64_t>(h) * n_tokens;

  // 2. Radix select: prefix holds the top bits of the k-th key found so far
  // (under mask), left how many of the rows matching them come before it.
  unsigned prefix = 0u, mask = 0u;
  int left = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (t < 256) hist[t] = 0u;
    __syncthreads();
    for (int64_t i = t; i < n_tokens; i += kReseedThreads) {
      const unsigned u = reseed_key(dh[i]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (t < 32) {  // lane l holds digits 255 - 8l down to 248 - 8l
      unsigned sum = 0u;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += hist[255 - 8 * t - j];
      unsigned incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned o = __shfl_up_sync(0xffffffffu, incl, off);
        if (t >= off) incl += o;
      }
      unsigned before = incl - sum;  // rows above this lane's digits
      if (before < static_cast<unsigned>(left) && static_cast<unsigned>(left) <= incl) {  // one lane
        for (int j = 0; j < 8; ++j) {
          const unsigned digit = 255u - 8u * t - j, n = hist[digit];
          if (before + n >= static_cast<unsigned>(left)) {
            s_prefix = prefix | (digit << shift);
            s_left = left - static_cast<int>(before);
            break;
          }
          before += n;
        }
      }
    }
    __syncthreads();
    prefix = s_prefix;
    left = s_left;
    mask |= 255u << shift;
  }
  // prefix is the k-th key; k - left rows lie above it, and the first
  // `left` rows (by index) equal to it complete the k.
  const int above = k - left;

  // 3. The rows, each thread over a contiguous range (index order).
  if (t == 0) s_above = 0;
  __syncthreads();
  const int64_t per = (n_tokens + kReseedThreads - 1) / kReseedThreads;
  const int64_t lo = t * per < n_tokens ? t * per : n_tokens, hi = lo + per < n_tokens ? lo + per : n_tokens;
  int ties = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const unsigned u = reseed_key(dh[i]);
    if (u > prefix) {
      const int slot = atomicAdd(&s_above, 1);
      picked[slot] = i;
      picked_key[slot] = u;
    } else if (u == prefix) {
      ++ties;
    }
  }
  int tie_place = 0;
  Scan(scan_tmp).ExclusiveSum(ties, tie_place);
  for (int64_t i = lo; i < hi && tie_place < left; ++i)
    if (reseed_key(dh[i]) == prefix) picked[above + tie_place++] = i;
  __syncthreads();
  if (t < above) {  // the rank of row t among those above: (key desc, index asc)
    const unsigned u = picked_key[t];
    const int64_t i = picked[t];
    int rank = 0;
    for (int b = 0; b < above; ++b)
      rank += picked_key[b] > u || (picked_key[b] == u && picked[b] < i);
    ordered[rank] = i;
  } else if (t < k) {
    ordered[t] = picked[t];
  }
  __syncthreads();

  // 4. The centroids.
  for (int q = t; q < k * d; q += kReseedThreads) {
    const int j = q / d, col = q - j * d;
    cent[(static_cast<int64_t>(h) * c_count + cluster_of[j]) * d + col] =
        round_bf16(load_as_float(x + (static_cast<int64_t>(h) * n_tokens + ordered[j]) * d + col));
  }
  if (t == 0) reseeded[h] += k;
}

}  // namespace qvg::cuda
