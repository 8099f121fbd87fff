// k-means along tokens on the GPU, all heads of a tensor in each launch.
// Assignment never writes the N x C distance matrix: each block keeps a
// running (value, index) argmin in registers (here the fp32 CUDA-core
// version; the tensor-core one is assign_tc.cuh). The update sums each
// cluster's members in exact 64-bit fixed point (qvg/fixed_sum.h): tokens
// sorted by (head, id) with a radix sort, run-length sums, integer atomics;
// integer addition is associative, so the bits equal the CPU reference's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "qvg/fixed_sum.h"
#include "util/rng.h"

namespace qvg::cuda {

constexpr int kAssignTokens = 64;     // tokens per block tile  (BLK_N)
constexpr int kAssignCentroids = 64;  // centroids per smem tile (BLK_C)
constexpr int kAssignThreads = 256;   // 16 x 16 threads, each 4 tokens x 4 centroids

/// ||c||^2 of every centroid: cnorm[h*C + c]. One warp per centroid.
static __global__ void centroid_norms_kernel(const float* __restrict__ cent, int heads, int c, int d,
                                      float* __restrict__ cnorm) {
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= heads * c) return;
  const float* p = cent + static_cast<int64_t>(w) * d;
  float s = 0.0f;
  for (int k = lane; k < d; k += 32) s = fmaf(p[k], p[k], s);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
  if (lane == 0) cnorm[w] = s;
}

/// ids[h][n] = argmin_c ||c||^2 - 2 x.c (ties -> lowest c), and dist[h][n] =
/// ||x - c||^2 of the chosen centroid (accumulated in double).
/// Grid (ceil(N/64), H); block 256; dynamic smem 2 * D * 64 floats.
/// Heads with active[h] == 0 are skipped (converged).
///
/// The loop it replaces:
///   for n: best = inf; for c: v = cnorm[c] - 2 * dot(x[n], cent[c]); if v < best: best = v, id = c
template <int D, typename T>
__global__ void __launch_bounds__(kAssignThreads) assign_kernel(const T* __restrict__ x, int64_t n_tokens,
                                                               const float* __restrict__ cent,
                                                               const float* __restrict__ cnorm, int c_count,
                                                               const int* __restrict__ active,
                                                               uint8_t* __restrict__ ids, float* __restrict__ dist) {
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  extern __shared__ float smem[];
  float* xs = smem;                          // (D, BLK_N): x tile, transposed
  float* cs = smem + D * kAssignTokens;      // (D, BLK_C): centroid tile, transposed
  const int tid = threadIdx.x;
  const int ty = tid >> 4, tx = tid & 15;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kAssignTokens;
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  for (int i = tid; i < kAssignTokens * D; i += kAssignThreads) {
    const int tok = i / D, k = i % D;
    xs[k * kAssignTokens + tok] = (n0 + tok < n_tokens) ? load_as_float(xh + (n0 + tok) * D + k) : 0.0f;
  }
  float best[4];
  int arg[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) best[i] = FLT_MAX, arg[i] = 0;
  for (int c0 = 0; c0 < c_count; c0 += kAssignCentroids) {
    __syncthreads();
    for (int i = tid; i < kAssignCentroids * D; i += kAssignThreads) {
      const int cc = i / D, k = i % D;
      cs[k * kAssignCentroids + cc] = (c0 + cc < c_count) ? ch[static_cast<int64_t>(c0 + cc) * D + k] : 0.0f;
    }
    __syncthreads();
    float acc[4][4] = {};
#pragma unroll 8
    for (int k = 0; k < D; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(xs + k * kAssignTokens + ty * 4);
      const float4 b = *reinterpret_cast<const float4*>(cs + k * kAssignCentroids + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = c0 + tx * 4 + j;
      if (c >= c_count) continue;
      const float cn = cnorm[h * c_count + c];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = cn - 2.0f * acc[i][j];
        if (v < best[i]) best[i] = v, arg[i] = c;  // c increases: strict keeps the lowest
      }
    }
  }
  // Reduce over the 16 lanes of this ty (lanes tx = 0..15 share ty).
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    for (int off = 8; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, best[i], off);
      const int oa = __shfl_xor_sync(0xFFFFFFFFu, arg[i], off);
      if (ov < best[i] || (ov == best[i] && oa < arg[i])) best[i] = ov, arg[i] = oa;
    }
  }
  // Exact squared distance to the chosen centroid, lanes split the dims.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int tok = ty * 4 + i;
    const int64_t n = n0 + tok;
    double s = 0.0;
    const float* cp = ch + static_cast<int64_t>(arg[i]) * D;
    for (int k = tx; k < D; k += 16) {
      const double e = static_cast<double>(xs[k * kAssignTokens + tok]) - cp[k];
      s += e * e;
    }
    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
    if (tx == 0 && n < n_tokens) {
      ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(arg[i]);
      dist[static_cast<int64_t>(h) * n_tokens + n] = static_cast<float>(s);
    }
  }
}

/// Sort keys: key = h * 256 + id, value = token index n, for the stable radix sort.
static __global__ void make_sort_keys_kernel(const uint8_t* __restrict__ ids, int heads, int64_t n_tokens,
                                      uint32_t* __restrict__ keys, int32_t* __restrict__ vals) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= heads * n_tokens) return;
  keys[g] = static_cast<uint32_t>(g / n_tokens) * 256u + ids[g];
  vals[g] = static_cast<int32_t>(g % n_tokens);
}

/// Cluster sums in exact fixed point (qvg/fixed_sum.h): integer addition is
/// associative, so the atomics below give the same bits as the CPU's loop.
/// The sorted (key = h * 256 + id, token) pairs are cut into pieces of
/// kSumPiece, each walked in order by a group of D / V lanes: a lane owns V
/// = 16 / sizeof(T) consecutive dimensions (one 16-byte load per row), so
/// the group reads whole rows, kSumInFlight rows at a time (loads before
/// arithmetic). Each run of equal keys is accumulated in registers and
/// added to the global sum with one atomic per dimension (runs continue
/// across pieces: the atomics of the pieces add up). Entries of inactive
/// heads are neither read nor summed. A block stages the keys and tokens of
/// its 256 / (D / V) pieces in shared memory. Grid: ceil(H * N /
/// kSumChunk<T, D>); block kSumThreads.
constexpr int kSumThreads = 256;
constexpr int kSumPiece = 64;     // sorted entries per lane group
constexpr int kSumInFlight = 4;   // rows loaded before any is accumulated

/// Sorted entries per block of centroid_sum_kernel<T, D>.
template <typename T, int D>
constexpr int kSumChunk = kSumThreads / (D * static_cast<int>(sizeof(T)) / 16) * kSumPiece;

/// to_fixed(x, e) with scale = 2^-e computed once per head (ldexp costs four
/// double multiplies a value). The same integer: e = E + L - 62 lies in
/// [-210, 97] (E in [-148, 128], L in [0, 31]), so 2^-e is a normal double,
/// and x * 2^-e (below 2^62 in magnitude, at least 2^-246 unless 0) is one
/// too: the product is exact, as ldexp's result is.
__device__ __forceinline__ int64_t to_fixed_scaled(float x, double scale) {
  return __double2ll_rn(__dmul_rn(static_cast<double>(x), scale));
}

template <typename T, int D>
__global__ void __launch_bounds__(kSumThreads) centroid_sum_kernel(
    const T* __restrict__ x, int64_t n_tokens, int c_count, const uint32_t* __restrict__ keys,
    const int32_t* __restrict__ tokens, int64_t count, const unsigned int* __restrict__ head_max,
    const int* __restrict__ active, unsigned long long* __restrict__ sums, int* __restrict__ counts) {
  constexpr int kVals = 16 / static_cast<int>(sizeof(T));  // dimensions per lane
  constexpr int kLanes = D / kVals;                         // lanes per row: 8, 16 or 32
  static_assert(D % kVals == 0 && 32 % kLanes == 0, "a row spans a power-of-two part of a warp");
  constexpr int kChunk = kSumChunk<T, D>;
  __shared__ uint32_t sk[kChunk];
  __shared__ int32_t st[kChunk];  // token, or -1 for an inactive head
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int len = count - i0 < kChunk ? static_cast<int>(count - i0) : kChunk;
  for (int i = threadIdx.x; i < len; i += kSumThreads) {
    const uint32_t key = keys[i0 + i];
    sk[i] = key;
    st[i] = (!active || active[key >> 8]) ? tokens[i0 + i] : -1;
  }
  __syncthreads();
  const int k0 = (threadIdx.x % kLanes) * kVals;
  const int begin = (threadIdx.x / kLanes) * kSumPiece;
  const int end = min(begin + kSumPiece, len);
  int64_t acc[kVals];
#pragma unroll
  for (int k = 0; k < kVals; ++k) acc[k] = 0;
  int run = 0;
  uint32_t cur = 0xFFFFFFFFu;  // key of the run being accumulated (none yet: no valid key)
  double scale = 1.0;  // 2^-e of the head of `cur` (fixed_sum_exponent)
  auto flush = [&] {
    const int64_t slot = static_cast<int64_t>(cur >> 8) * c_count + static_cast<int>(cur & 255u);
#pragma unroll
    for (int k = 0; k < kVals; ++k) {
      atomicAdd(sums + slot * D + k0 + k, static_cast<unsigned long long>(acc[k]));
      acc[k] = 0;
    }
    if (k0 == 0) atomicAdd(counts + slot, run);
    run = 0;
  };
  for (int j = begin; j < end; j += kSumInFlight) {
    uint4 raw[kSumInFlight];
#pragma unroll
    for (int r = 0; r < kSumInFlight; ++r) {
      raw[r] = make_uint4(0u, 0u, 0u, 0u);
      const int tok = j + r < end ? st[j + r] : -1;
      if (tok >= 0)
        raw[r] = __ldg(reinterpret_cast<const uint4*>(
            x + (static_cast<int64_t>(sk[j + r] >> 8) * n_tokens + tok) * D + k0));
    }
#pragma unroll
    for (int r = 0; r < kSumInFlight; ++r) {
      if (j + r >= end) break;
      const uint32_t key = sk[j + r];
      if (key != cur) {
        if (run > 0) flush();
        if ((key >> 8) != (cur >> 8))
          scale = ldexp(1.0, -fixed_sum_exponent(__uint_as_float(head_max[key >> 8]), n_tokens));
        cur = key;
      }
      if (st[j + r] < 0) continue;  // inactive head: run stays 0, nothing is added
      float v[kVals];
      word_as_float<T>(raw[r], v);
#pragma unroll
      for (int k = 0; k < kVals; ++k) acc[k] += to_fixed_scaled(v[k], scale);
      ++run;
    }
  }
  if (run > 0) flush();
}

/// New centroid = fixed-point sum / count (empty clusters are left for the
/// reseed kernel). One thread per (head, cluster, dimension).
static __global__ void centroid_mean_kernel(const unsigned long long* __restrict__ sums, const int* __restrict__ counts,
                                     int heads, int64_t n_tokens, int d, int c_count,
                                     const unsigned int* __restrict__ head_max, const int* __restrict__ active,
                                     float* __restrict__ cent) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * c_count * d) return;
  const int64_t slot = g / d;
  const int h = static_cast<int>(slot / c_count);
  if ((active && !active[h]) || counts[slot] == 0) return;
  const int e = fixed_sum_exponent(__uint_as_float(head_max[h]), n_tokens);
  cent[g] = fixed_mean(static_cast<int64_t>(sums[g]), e, counts[slot]);
}

/// Empty-cluster rule (kmeans.h): each empty cluster, in index order, takes
/// the point farthest from its centroid (lowest index on ties) not taken by
/// an earlier empty cluster of this iteration. One block of 1024 per head.
/// taken: [H][N] bytes, cleared before the launch. reseeded[h] counts them.
template <typename T>
__global__ void reseed_empty_kernel(const T* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                    const int* __restrict__ counts, const float* __restrict__ dist, const int* __restrict__ active,
                                    uint8_t* __restrict__ taken, float* __restrict__ cent,
                                    int* __restrict__ reseeded) {
  const int h = blockIdx.x;
  if (active && !active[h]) return;
  __shared__ float sv[1024];
  __shared__ int64_t si[1024];
  __shared__ int empty[256];  // c_count <= 256
  for (int c = threadIdx.x; c < c_count; c += blockDim.x) empty[c] = counts[h * c_count + c] == 0;
  if (!__syncthreads_or(threadIdx.x < c_count && empty[threadIdx.x])) return;  // the common case
  const float* dh = dist + static_cast<int64_t>(h) * n_tokens;
  uint8_t* th = taken + static_cast<int64_t>(h) * n_tokens;
  for (int c = 0; c < c_count; ++c) {
    const int slot = h * c_count + c;
    if (!empty[c]) continue;  // uniform across the block
    float bv = -1.0f;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < n_tokens; i += blockDim.x)
      if (!th[i] && dh[i] > bv) bv = dh[i], bi = i;  // i increases: strict keeps the lowest
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if (threadIdx.x < w) {
        const float ov = sv[threadIdx.x + w];
        const int64_t oi = si[threadIdx.x + w];
        if (oi >= 0 && (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && (si[threadIdx.x] < 0 || oi < si[threadIdx.x]))))
          sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
      }
      __syncthreads();
    }
    const int64_t far = si[0];
    __syncthreads();
    if (far < 0) continue;
    for (int k = threadIdx.x; k < d; k += blockDim.x)
      cent[static_cast<int64_t>(slot) * d + k] = load_as_float(x + (static_cast<int64_t>(h) * n_tokens + far) * d + k);
    if (threadIdx.x == 0) {
      th[far] = 1;
      ++reseeded[h];
    }
    __syncthreads();
  }
}

/// Mean squared distance per head, fixed-order reduction (same bits every run).
/// One block of 1024 per head.
static __global__ void head_mse_kernel(const float* __restrict__ dist, int64_t n_tokens, int d, double* __restrict__ mse) {
  __shared__ double s[1024];
  const int h = blockIdx.x;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n_tokens; i += blockDim.x) acc += dist[static_cast<int64_t>(h) * n_tokens + i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) mse[h] = s[0] / static_cast<double>(n_tokens * d);
}

/// The rows kmeans_random_rows(n, C, seed_base + h) draws, for every head h:
/// the same partial Fisher-Yates shuffle of 0..n-1 (SplitMix64), its moved
/// entries in a shared-memory hash table. rows: [H][C]. One block per head;
/// one thread draws (each draw depends on the last). C <= 256.
static __global__ void random_rows_kernel(int64_t n, int c, uint64_t seed_base, int64_t* __restrict__ rows) {
  constexpr int kSlots = 1024;  // > 2 C: at most C entries move
  __shared__ int64_t key[kSlots], val[kSlots];
  for (int i = threadIdx.x; i < kSlots; i += blockDim.x) key[i] = -1;
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int h = blockIdx.x;
  SplitMix64 rng(seed_base + static_cast<uint64_t>(h));
  auto slot = [&](int64_t p) {  // p's slot, or the empty one where it would go
    uint32_t s = static_cast<uint32_t>((static_cast<uint64_t>(p) * 0x9E3779B97F4A7C15ull) >> 54);
    while (key[s] != -1 && key[s] != p) s = (s + 1) & (kSlots - 1);
    return s;
  };
  for (int64_t i = 0; i < c; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    const uint32_t si = slot(i), sj = slot(j);
    const int64_t vi = key[si] == i ? val[si] : i, vj = key[sj] == j ? val[sj] : j;
    key[sj] = j;  // swap(idx[i], idx[j]); idx[i] is not read again
    val[sj] = vi;
    rows[static_cast<int64_t>(h) * c + i] = vj;
  }
}

/// Gather rows of x as initial centroids: cent[h][c] = x[h][rows[h*C + c]].
template <typename T>
__global__ void gather_rows_kernel(const T* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                   const int64_t* __restrict__ rows, int heads, float* __restrict__ cent) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * c_count * d) return;
  const int64_t hc = g / d;
  const int k = static_cast<int>(g % d);
  const int h = static_cast<int>(hc / c_count);
  cent[g] = load_as_float(x + (static_cast<int64_t>(h) * n_tokens + rows[hc]) * d + k);
}

/// float -> BF16 bits (round to nearest even), for storing centroids.
static __global__ void to_bf16_kernel(const float* __restrict__ in, int64_t n, uint16_t* __restrict__ out) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < n) {
    const __nv_bfloat16 b = __float2bfloat16_rn(in[g]);
    out[g] = *reinterpret_cast<const uint16_t*>(&b);
  }
}

}  // namespace qvg::cuda
