// k-means along tokens on the GPU, all heads of a tensor in each launch.
// Assignment never writes the N x C distance matrix: each block keeps a
// running (value, index) argmin in registers. The update is a deterministic
// segmented reduction: tokens sorted by (head, id) with a stable radix sort,
// then each centroid sums its members in token order in double, exactly as
// the CPU reference does (same bits for the same ids).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "qvg/fixed_sum.h"

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

// ---------------------------------------------------------------------------
// Tensor-core assignment: the x.c products in bf16 on the matrix units
// (mma.sync m16n8k16, fp32 accumulation), the best two candidates per token
// in registers. Rounding x and c to bf16 moves each value ||c||^2 - 2 x.c by
// at most about 2^-7 ||x|| ||c||; when the runner-up is within the two bounds
// of the best, both are re-ranked by their exact distance in double (ties to
// the lower index). So ids match an exact assignment unless three or more
// centroids are within the margin. The chosen centroid's distance is then
// recomputed exactly by exact_dist_kernel.
constexpr int kTcTokens = 128;     // BLK_M: tokens per block (4 warps x 32)
constexpr int kTcCentroids = 64;   // BLK_N: centroids per smem tile
constexpr int kTcThreads = 128;
constexpr int kTcPad = 8;          // bf16 elements of row padding (ldmatrix without bank conflicts)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Stage rows [row0, row0 + rows) of a (., D) matrix (float or bf16) into smem as
/// bf16 with row stride D + kTcPad; rows past `valid` are zero.
template <int D, typename T>
__device__ __forceinline__ void stage_rows_bf16(const T* __restrict__ src, int64_t row0, int rows, int64_t valid,
                                                __nv_bfloat16* dst) {
  constexpr int kChunks = D / 8;  // 8 values (16 bytes of bf16) per chunk
  for (int i = threadIdx.x; i < rows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c8 = (i % kChunks) * 8;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (row0 + r < valid) {
      const T* p = src + (row0 + r) * D + c8;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        packed = *reinterpret_cast<const uint4*>(p);
      } else if constexpr (std::is_same_v<T, __half>) {  // f16 -> float (exact) -> bf16
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        uint32_t o[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[q]));
          const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
          o[q] = *reinterpret_cast<const uint32_t*>(&b);
        }
        packed = make_uint4(o[0], o[1], o[2], o[3]);
      } else {
        const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
        const __nv_bfloat162 h0 = __floats2bfloat162_rn(a.x, a.y), h1 = __floats2bfloat162_rn(a.z, a.w);
        const __nv_bfloat162 h2 = __floats2bfloat162_rn(b.x, b.y), h3 = __floats2bfloat162_rn(b.z, b.w);
        packed = make_uint4(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1),
                            *reinterpret_cast<const uint32_t*>(&h2), *reinterpret_cast<const uint32_t*>(&h3));
      }
    }
    *reinterpret_cast<uint4*>(dst + r * (D + kTcPad) + c8) = packed;
  }
}

/// ids[h][n] = argmin_c ||c||^2 - 2 x.c with bf16 tensor-core products.
/// Grid (ceil(N/128), H); block 128; dynamic smem (128 + 64) * (D + 8) bf16.
/// The loop it replaces: for n: for c: v = cnorm[c] - 2 dot(x[n], c); keep the lowest (v, c).
/// (value, index) pairs ordered by value, then index.
__device__ __forceinline__ bool before(float v, int i, float w, int j) { return v < w || (v == w && i < j); }

template <int D, typename T>
__global__ void __launch_bounds__(kTcThreads) assign_tc_kernel(const T* __restrict__ x, int64_t n_tokens,
                                                              const float* __restrict__ cent,
                                                              const __nv_bfloat16* __restrict__ cent_b,
                                                              const float* __restrict__ cnorm, int c_count,
                                                              const int* __restrict__ active,
                                                              uint8_t* __restrict__ ids) {
  static_assert(D % 16 == 0, "D must be a multiple of 16");
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  extern __shared__ __align__(16) unsigned char tc_smem[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(tc_smem);  // (BLK_M, D + pad)
  __nv_bfloat16* cs = xs + kTcTokens * (D + kTcPad);                // (BLK_N, D + pad)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTcTokens;
  __shared__ float xnorm[kTcTokens];
  __shared__ float cmax_sq;
  __shared__ float cn_s[256];  // ||c||^2 of the head's centroids (C <= 256)
  for (int c = threadIdx.x; c < c_count; c += blockDim.x) cn_s[c] = cnorm[h * c_count + c];
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  stage_rows_bf16<D>(xh, n0, kTcTokens, n_tokens, xs);
  if (threadIdx.x == 0) cmax_sq = 0.0f;
  __syncthreads();
  {  // ||x|| of each staged row, and max ||c||^2 of the head (for the margin)
    float s = 0.0f;
    for (int k = 0; k < D; ++k) {
      const float v = __bfloat162float(xs[threadIdx.x * (D + kTcPad) + k]);
      s = fmaf(v, v, s);
    }
    xnorm[threadIdx.x] = sqrtf(s);
    float m = 0.0f;
    for (int c = threadIdx.x; c < c_count; c += blockDim.x) m = fmaxf(m, cnorm[h * c_count + c]);
    atomicMax(reinterpret_cast<unsigned int*>(&cmax_sq), __float_as_uint(m));  // m >= 0
  }
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;
  float best[2][2], second[2][2];
  int arg[2][2], arg2[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) best[i][j] = second[i][j] = FLT_MAX, arg[i][j] = arg2[i][j] = 0x7FFFFFFF;
  const int g = lane >> 2, t = lane & 3;
  for (int c0 = 0; c0 < c_count; c0 += kTcCentroids) {
    __syncthreads();
    stage_rows_bf16<D>(cent_b + static_cast<int64_t>(h) * c_count * D, c0, kTcCentroids, c_count, cs);
    __syncthreads();
    float acc[2][8][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = warp * 32 + i * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
        const int col = k0 + 8 * (lane >> 4);
        ldmatrix_x4(smem_u32(xs + row * (D + kTcPad) + col), a[i][0], a[i][1], a[i][2], a[i][3]);
      }
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        uint32_t b[4];
        const int nrow = j * 8 + (lane & 7) + 8 * (lane >> 4);
        const int col = k0 + 8 * ((lane >> 3) & 1);
        ldmatrix_x4(smem_u32(cs + nrow * (D + kTcPad) + col), b[0], b[1], b[2], b[3]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16_16816(acc[i][j], a[i], b[0], b[1]);
          mma_bf16_16816(acc[i][j + 1], a[i], b[2], b[3]);
        }
      }
    }
    // Epilogue: acc[i][j] holds rows (g, g+8) of m-tile i, columns 2t, 2t+1 of n-tile j.
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = c0 + j * 8 + 2 * t + e;
        if (c >= c_count) continue;
        const float cn = cn_s[c];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float v = cn - 2.0f * acc[i][j][2 * r + e];
            if (v < best[i][r]) {  // c increases: strict keeps the lowest index first
              second[i][r] = best[i][r], arg2[i][r] = arg[i][r];
              best[i][r] = v, arg[i][r] = c;
            } else if (v < second[i][r]) {
              second[i][r] = v, arg2[i][r] = c;
            }
          }
      }
  }
  // Merge the top two over the 4 lanes of a quad (same rows).
  const float cmax = sqrtf(cmax_sq);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v1 = best[i][r], v2 = second[i][r];
      int i1 = arg[i][r], i2 = arg2[i][r];
      for (int off = 1; off < 4; off <<= 1) {
        const float w1 = __shfl_xor_sync(0xFFFFFFFFu, v1, off), w2 = __shfl_xor_sync(0xFFFFFFFFu, v2, off);
        const int j1 = __shfl_xor_sync(0xFFFFFFFFu, i1, off), j2 = __shfl_xor_sync(0xFFFFFFFFu, i2, off);
        if (before(w1, j1, v1, i1)) {  // other's best wins; runner-up: min(own best, other's second)
          const bool own = before(v1, i1, w2, j2);
          v2 = own ? v1 : w2, i2 = own ? i1 : j2;
          v1 = w1, i1 = j1;
        } else if (before(w1, j1, v2, i2)) {
          v2 = w1, i2 = j1;
        }
      }
      const int row = warp * 32 + i * 16 + g + 8 * r;
      const int64_t n = n0 + row;
      if (n >= n_tokens) continue;  // the same for the 4 lanes of the quad
      int pick = i1;
      if (i2 < c_count) {
        // Each value's bf16 error is at most 2^-7 ||x|| ||c||: re-rank when the
        // gap is within the sum of the two bounds.
        const float margin = 0.0078125f * xnorm[row] *
                                 (sqrtf(cnorm[h * c_count + i1]) + sqrtf(cnorm[h * c_count + i2])) +
                             1e-6f * fabsf(v1);
        if (v2 - v1 <= margin) {  // the same for the 4 lanes: they split the dims
          const unsigned quad = 0xFu << (lane & ~3);
          const T* xr = xh + n * D;
          const float* c1 = ch + static_cast<int64_t>(i1) * D;
          const float* c2 = ch + static_cast<int64_t>(i2) * D;
          double d1 = 0.0, d2 = 0.0;
          for (int k = t; k < D; k += 4) {
            const double xv = load_as_float(xr + k);
            const double a = xv - c1[k], b = xv - c2[k];
            d1 += a * a;
            d2 += b * b;
          }
          d1 += __shfl_xor_sync(quad, d1, 1);
          d2 += __shfl_xor_sync(quad, d2, 1);
          d1 += __shfl_xor_sync(quad, d1, 2);
          d2 += __shfl_xor_sync(quad, d2, 2);
          if (d2 < d1 || (d2 == d1 && i2 < i1)) pick = i2;
        }
      }
      if (t != 0) continue;
      ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(pick);
    }
}

/// dist[h][n] = ||x - c_id||^2 in double (one warp per token).
template <typename T>
__global__ void exact_dist_kernel(const T* __restrict__ x, int64_t n_tokens, int d, const float* __restrict__ cent,
                                  int c_count, int heads, const int* __restrict__ active,
                                  const uint8_t* __restrict__ ids, float* __restrict__ dist) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= heads * n_tokens) return;
  const int h = static_cast<int>(w / n_tokens);
  if (active && !active[h]) return;
  const T* xp = x + w * d;
  const float* cp = cent + (static_cast<int64_t>(h) * c_count + ids[w]) * d;
  double s = 0.0;
  for (int k = lane; k < d; k += 32) {
    const double e = static_cast<double>(load_as_float(xp + k)) - cp[k];
    s += e * e;
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
  if (lane == 0) dist[w] = static_cast<float>(s);
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
/// The sorted (key = h * 256 + id, token) pairs are cut into chunks of
/// kSumChunk; a block of D threads (one per dimension) walks its chunk,
/// accumulates each run of equal keys in a register and adds the run to the
/// global sum with one atomic per dimension (runs continue across chunks:
/// the atomics of the pieces add up). Grid: ceil(H * N / kSumChunk).
constexpr int kSumChunk = 64;

template <typename T>
__global__ void centroid_sum_kernel(const T* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                    const uint32_t* __restrict__ keys, const int32_t* __restrict__ tokens,
                                    int64_t count, const unsigned int* __restrict__ head_max,
                                    const int* __restrict__ active, unsigned long long* __restrict__ sums,
                                    int* __restrict__ counts) {
  __shared__ uint32_t sk[kSumChunk];
  __shared__ int32_t st[kSumChunk];
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kSumChunk;
  const int len = count - i0 < kSumChunk ? static_cast<int>(count - i0) : kSumChunk;
  for (int i = threadIdx.x; i < len; i += blockDim.x) sk[i] = keys[i0 + i], st[i] = tokens[i0 + i];
  __syncthreads();
  const int k = threadIdx.x;
  if (k >= d) return;
  int64_t acc = 0;
  int run = 0;
  int h = -1, e = 0;
#pragma unroll 4
  for (int i = 0; i < len; ++i) {
    const uint32_t key = sk[i];
    const int kh = static_cast<int>(key >> 8);
    if (kh != h) h = kh, e = fixed_sum_exponent(__uint_as_float(head_max[h]), n_tokens);
    acc += to_fixed(load_as_float(x + (static_cast<int64_t>(h) * n_tokens + st[i]) * d + k), e);
    ++run;
    if (i + 1 == len || sk[i + 1] != key) {
      if (!active || active[h]) {
        const int64_t slot = static_cast<int64_t>(h) * c_count + static_cast<int>(key & 255u);
        atomicAdd(sums + slot * d + k, static_cast<unsigned long long>(acc));
        if (k == 0) atomicAdd(counts + slot, run);
      }
      acc = 0;
      run = 0;
    }
  }
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
  const float* dh = dist + static_cast<int64_t>(h) * n_tokens;
  uint8_t* th = taken + static_cast<int64_t>(h) * n_tokens;
  for (int c = 0; c < c_count; ++c) {
    const int slot = h * c_count + c;
    if (counts[slot] > 0) continue;  // uniform across the block
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
