// k-means along tokens on the GPU, all heads of a tensor in each launch.
// Assignment never writes the N x C distance matrix: each block keeps a
// running (value, index) argmin in registers. The update is a deterministic
// segmented reduction: tokens sorted by (head, id) with a stable radix sort,
// then each centroid sums its members in token order in double, exactly as
// the CPU reference does (same bits for the same ids).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace qvg::cuda {

constexpr int kAssignTokens = 64;     // tokens per block tile  (BLK_N)
constexpr int kAssignCentroids = 64;  // centroids per smem tile (BLK_C)
constexpr int kAssignThreads = 256;   // 16 x 16 threads, each 4 tokens x 4 centroids

/// ||c||^2 of every centroid: cnorm[h*C + c]. One warp per centroid.
__global__ void centroid_norms_kernel(const float* __restrict__ cent, int heads, int c, int d,
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
template <int D>
__global__ void __launch_bounds__(kAssignThreads) assign_kernel(const float* __restrict__ x, int64_t n_tokens,
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
  const float* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  for (int i = tid; i < kAssignTokens * D; i += kAssignThreads) {
    const int tok = i / D, k = i % D;
    xs[k * kAssignTokens + tok] = (n0 + tok < n_tokens) ? xh[(n0 + tok) * D + k] : 0.0f;
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
__global__ void make_sort_keys_kernel(const uint8_t* __restrict__ ids, int heads, int64_t n_tokens,
                                      uint32_t* __restrict__ keys, int32_t* __restrict__ vals) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= heads * n_tokens) return;
  keys[g] = static_cast<uint32_t>(g / n_tokens) * 256u + ids[g];
  vals[g] = static_cast<int32_t>(g % n_tokens);
}

/// begin/end of each key's run in the sorted keys (begin = end = 0 when absent;
/// arrays cleared before the launch).
__global__ void segment_bounds_kernel(const uint32_t* __restrict__ keys, int64_t count, int c_count,
                                      int* __restrict__ begin, int* __restrict__ end) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= count) return;
  const uint32_t k = keys[g];
  const int slot = static_cast<int>(k >> 8) * c_count + static_cast<int>(k & 255u);
  if (g == 0 || keys[g - 1] != k) begin[slot] = static_cast<int>(g);
  if (g == count - 1 || keys[g + 1] != k) end[slot] = static_cast<int>(g + 1);
}

/// New centroid = mean of its members, summed in token order in double.
/// Grid (C, H); block D threads. Empty clusters are left for the next kernel.
__global__ void centroid_mean_kernel(const float* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                     const int32_t* __restrict__ sorted_tokens, const int* __restrict__ begin,
                                     const int* __restrict__ end, const int* __restrict__ active,
                                     float* __restrict__ cent) {
  const int c = blockIdx.x, h = blockIdx.y, k = threadIdx.x;
  if (active && !active[h]) return;
  const int slot = h * c_count + c;
  const int b = begin[slot], e = end[slot];
  if (e <= b || k >= d) return;
  const float* xh = x + static_cast<int64_t>(h) * n_tokens * d;
  double s = 0.0;
  for (int i = b; i < e; ++i) s += static_cast<double>(xh[static_cast<int64_t>(sorted_tokens[i]) * d + k]);
  const double inv = 1.0 / static_cast<double>(e - b);
  cent[static_cast<int64_t>(slot) * d + k] = static_cast<float>(s * inv);
}

/// Empty-cluster rule (kmeans.h): each empty cluster, in index order, takes
/// the point farthest from its centroid (lowest index on ties) not taken by
/// an earlier empty cluster of this iteration. One block of 1024 per head.
/// taken: [H][N] bytes, cleared before the launch. reseeded[h] counts them.
__global__ void reseed_empty_kernel(const float* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                    const int* __restrict__ begin, const int* __restrict__ end,
                                    const float* __restrict__ dist, const int* __restrict__ active,
                                    uint8_t* __restrict__ taken, float* __restrict__ cent,
                                    int* __restrict__ reseeded) {
  const int h = blockIdx.x;
  if (active && !active[h]) return;
  __shared__ float sv[1024];
  __shared__ int64_t si[1024];
  const float* dh = dist + static_cast<int64_t>(h) * n_tokens;
  uint8_t* th = taken + static_cast<int64_t>(h) * n_tokens;
  for (int c = 0; c < c_count; ++c) {
    const int slot = h * c_count + c;
    if (end[slot] > begin[slot]) continue;  // uniform across the block
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
      cent[static_cast<int64_t>(slot) * d + k] = x[(static_cast<int64_t>(h) * n_tokens + far) * d + k];
    if (threadIdx.x == 0) {
      th[far] = 1;
      ++reseeded[h];
    }
    __syncthreads();
  }
}

/// Mean squared distance per head, fixed-order reduction (same bits every run).
/// One block of 1024 per head.
__global__ void head_mse_kernel(const float* __restrict__ dist, int64_t n_tokens, int d, double* __restrict__ mse) {
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

/// Gather rows of x as initial centroids: cent[h][c] = x[h][rows[h*C + c]].
__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                   const int64_t* __restrict__ rows, int heads, float* __restrict__ cent) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * c_count * d) return;
  const int64_t hc = g / d;
  const int k = static_cast<int>(g % d);
  const int h = static_cast<int>(hc / c_count);
  cent[g] = x[(static_cast<int64_t>(h) * n_tokens + rows[hc]) * d + k];
}

/// float -> BF16 bits (round to nearest even), for storing centroids.
__global__ void to_bf16_kernel(const float* __restrict__ in, int64_t n, uint16_t* __restrict__ out) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < n) {
    const __nv_bfloat16 b = __float2bfloat16_rn(in[g]);
    out[g] = *reinterpret_cast<const uint16_t*>(&b);
  }
}

}  // namespace qvg::cuda
