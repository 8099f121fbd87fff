// Internal: the CUDA encode of qvg's codebook residual code (code=cq): the
// CPU reference's steps (src/reference/cq_code.cpp, cq_encode_head_ref) with
// the same float operations (src/util/cq_arith.h) and exact fixed-point
// sums, so the bytes equal the reference's. After the smoothing stages:
//   cq_rms_kernel        token RMS of the residual R (double, in channel
//                        order) and each head's largest RMS
//   cq_normalize_kernel  span scale, FP8 token scales, u = R / s as
//                        [H][D/G][N][G] floats
//   cq_train_kernel      one block per (head, group): cq_train_codebook_ref
//                        on the group's sample rows (every stride-th token)
//   cq_store_books_kernel one block per head: BF16 or FP8 codebooks, and the
//                        stored values back as floats
//   cq_assign_kernel     per (head, group, 256 tokens): the nearest stored
//                        codeword (brute force over the codebook in shared
//                        memory, ties to the lowest index)
//   cq_pack_kernel       per token: cq_pack_indices_ref's bit layout
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "cuda/qvg_kernels.cuh"
#include "cuda/random_rows.cuh"
#include "qvg/fixed_sum.h"
#include "qvg/fp8.h"
#include "qvg/half.h"
#include "util/cq_arith.h"
#include "util/rng.h"

namespace qvg::cuda {

constexpr int kCqEncThreads = 256;
constexpr int kCqMaxCodewords = 256;
constexpr int64_t kCqMaxSampleRows = 64 * kCqMaxCodewords;  // the training's sample: at most 64 K rows

/// Grid-stride thread: (head, token) pairs, H * N of them.
/// rms: [H][N]; head_max: [H] float bits, zeroed by the caller.
template <typename InT>
__global__ void __launch_bounds__(kCqEncThreads)
    cq_rms_kernel(const InT* __restrict__ x, QvgShape sh, QvgParts p, float* __restrict__ rms,
                  unsigned* __restrict__ head_max) {
  const int64_t total = static_cast<int64_t>(sh.heads) * sh.tokens;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int h = -1;
  float r = 0.0f;
  if (g < total) {
    h = static_cast<int>(g / sh.tokens);
    const int64_t n = g % sh.tokens;
    const InT* row = x + g * sh.dim;
    double sq = 0.0;
    for (int col = 0; col < sh.dim; col += kValsPerThread) {
      float v[kValsPerThread];
      load_residual16(row + col, sh, p, h, n, col, v);
#pragma unroll
      for (int k = 0; k < kValsPerThread; ++k) sq = cq_add_square(sq, v[k]);
    }
    r = cq_rms(sq, sh.dim);
    rms[g] = r;
  }
  warp_head_max(head_max, h, r);
}

/// One thread per 16 values (H * N * D / 16): span scales, token scales and
/// u[h][j][n][t] = R[h][n][j G + t] / s_n (0 where s_n = 0).
template <typename InT>
__global__ void __launch_bounds__(kCqEncThreads)
    cq_normalize_kernel(const InT* __restrict__ x, QvgShape sh, QvgParts p, const float* __restrict__ rms,
                        const unsigned* __restrict__ head_max, float* __restrict__ u) {
  const int per_row = sh.dim / kValsPerThread;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(sh.heads) * sh.tokens * per_row) return;
  const int64_t row = g / per_row;
  const int col = static_cast<int>(g % per_row) * kValsPerThread;
  const int h = static_cast<int>(row / sh.tokens);
  const int64_t n = row % sh.tokens;
  const float most = __uint_as_float(head_max[h]);
  const float span = most > 0.0f ? cq_div(most, 448.0f) : 1.0f;
  const uint8_t code = fp8_e4m3_from_float(cq_div(rms[row], span));
  const float s = cq_mul(fp8_e4m3_to_float(code), span);
  if (col == 0) {
    p.scales[row] = code;
    if (n == 0) p.span_scales[h] = span;
  }
  float v[kValsPerThread];
  load_residual16(x + row * sh.dim + col, sh, p, h, n, col, v);
  const int gsz = sh.cq_dim, groups = sh.dim / gsz;
#pragma unroll
  for (int k = 0; k < kValsPerThread; ++k) {
    const int q = col + k, j = q / gsz, t = q % gsz;
    u[((static_cast<int64_t>(h) * groups + j) * sh.tokens + n) * gsz + t] = s > 0.0f ? cq_div(v[k], s) : 0.0f;
  }
}

/// What cq_train_kernel needs besides u.
struct CqTrainArgs {
  int64_t tokens = 0;  ///< N
  int64_t rows = 0;    ///< sample rows: tokens 0, stride, 2 stride, ...
  int64_t stride = 1;
  int c = 0;           ///< codewords trained: min(K, rows)
  int k = 0;           ///< codewords stored (K)
  int max_iter = 0;
  double tol = 0;
  uint64_t seed = 0;   ///< kmeans.seed (cq_kmeans_seed adds the group's and head's part)
  int seed_period = 0; ///< > 0: head h seeds as head h % seed_period (encode_batch's tensors)
};

/// One block per (group j = blockIdx.x, head h = blockIdx.y):
/// cq_train_codebook_ref on the rows x_p = u[h][j][p stride] (p < rows),
/// into books[h][j][K][G] (codewords c .. K - 1 copy codeword 0).
/// dist, ids: scratch [H][D/G][rows].
template <int G>
__global__ void __launch_bounds__(kCqEncThreads)
    cq_train_kernel(const float* __restrict__ u, CqTrainArgs a, float* __restrict__ dist_all,
                    uint8_t* __restrict__ ids_all, float* __restrict__ books) {
  __shared__ float book[kCqMaxCodewords * G];
  __shared__ unsigned long long sum[kCqMaxCodewords * G];
  __shared__ int count[kCqMaxCodewords];
  __shared__ int64_t js[kCqMaxCodewords];
  __shared__ int prev[kCqMaxCodewords];
  __shared__ unsigned taken[kCqMaxSampleRows / 32];
  __shared__ unsigned red_max;
  __shared__ unsigned long long red_sum, red_key;
  const int j = blockIdx.x, h = blockIdx.y, groups = gridDim.x, tid = threadIdx.x;
  const int64_t gi = static_cast<int64_t>(h) * groups + j;
  const float* x = u + gi * a.tokens * G;
  const int64_t step = a.stride * G;  // floats from one sample row to the next
  float* dist = dist_all + gi * a.rows;
  uint8_t* ids = ids_all + gi * a.rows;
  const int c = a.c;
  const int hs = a.seed_period > 0 ? h % a.seed_period : h;
  const uint64_t seed = a.seed + 1000003ull * static_cast<uint64_t>(9 + j) + static_cast<uint64_t>(hs);

  // Start: kmeans_random_rows(rows, c, seed).
  if (tid == 0) red_max = 0;
  const int64_t v = block_random_row(tid, a.rows, c, seed, js, prev);  // synchronizes the block
  // max |x| of the sample (the update's fixed-point exponent).
  float amax = 0.0f;
  for (int64_t r = tid; r < a.rows; r += kCqEncThreads)
#pragma unroll
    for (int t = 0; t < G; ++t) amax = fmaxf(amax, fabsf(x[r * step + t]));
  atomicMax(&red_max, __float_as_uint(amax));
  if (tid < c)
#pragma unroll
    for (int t = 0; t < G; ++t) book[tid * G + t] = round_bf16(x[v * step + t]);
  __syncthreads();
  const int fx = fixed_sum_exponent(__uint_as_float(red_max), a.rows);
  __syncthreads();

  // The assignment (cq_assign_ref) and the exact total of its distances.
  auto assign = [&]() -> double {
    if (tid == 0) red_max = 0, red_sum = 0;
    __syncthreads();
    float most = 0.0f;
    for (int64_t r = tid; r < a.rows; r += kCqEncThreads) {
      float xv[G];
#pragma unroll
      for (int t = 0; t < G; ++t) xv[t] = x[r * step + t];
      float best = cq_sq_dist(xv, book, G);
      int arg = 0;
      for (int w = 1; w < c; ++w) {
        const float d = cq_sq_dist(xv, book + w * G, G);
        if (d < best) best = d, arg = w;
      }
      ids[r] = static_cast<uint8_t>(arg);
      dist[r] = best;
      most = fmaxf(most, best);
    }
    atomicMax(&red_max, __float_as_uint(most));
    __syncthreads();
    const int e = fixed_sum_exponent(__uint_as_float(red_max), a.rows);
    int64_t acc = 0;
    for (int64_t r = tid; r < a.rows; r += kCqEncThreads) acc += to_fixed(dist[r], e);  // this thread's own rows
    atomicAdd(&red_sum, static_cast<unsigned long long>(acc));
    __syncthreads();
    const double total = cq_total(static_cast<int64_t>(red_sum), e);
    __syncthreads();  // red_* are read before the next use resets them
    return total;
  };

  double total = assign();
  for (int it = 1; it <= a.max_iter; ++it) {
    for (int q = tid; q < c * G; q += kCqEncThreads) sum[q] = 0;
    for (int q = tid; q < c; q += kCqEncThreads) count[q] = 0;
    for (int q = tid; q < (a.rows + 31) / 32; q += kCqEncThreads) taken[q] = 0;
    __syncthreads();
    for (int64_t r = tid; r < a.rows; r += kCqEncThreads) {
      const int w = ids[r];
      atomicAdd(&count[w], 1);
#pragma unroll
      for (int t = 0; t < G; ++t)
        atomicAdd(&sum[w * G + t], static_cast<unsigned long long>(to_fixed(x[r * step + t], fx)));
    }
    __syncthreads();
    for (int w = tid; w < c; w += kCqEncThreads)
      if (count[w] > 0)
#pragma unroll
        for (int t = 0; t < G; ++t)
          book[w * G + t] = round_bf16(fixed_mean(static_cast<int64_t>(sum[w * G + t]), fx, count[w]));
    __syncthreads();
    // Empty clusters in index order: the farthest point not taken (largest
    // distance, lowest index: the key's low half is ~index).
    for (int w = 0; w < c; ++w) {
      if (count[w] > 0) continue;  // uniform: count is shared
      if (tid == 0) red_key = 0;
      __syncthreads();
      unsigned long long key = 0;
      for (int64_t r = tid; r < a.rows; r += kCqEncThreads)
        if (!((taken[r >> 5] >> (r & 31)) & 1u)) {
          const unsigned long long kr = (static_cast<unsigned long long>(__float_as_uint(dist[r])) << 32) |
                                        (0xFFFFFFFFu - static_cast<unsigned>(r));
          key = kr > key ? kr : key;
        }
      atomicMax(&red_key, key);
      __syncthreads();
      if (tid == 0) {
        const int64_t far = 0xFFFFFFFFu - static_cast<unsigned>(red_key & 0xFFFFFFFFull);
        taken[far >> 5] |= 1u << (far & 31);
#pragma unroll
        for (int t = 0; t < G; ++t) book[w * G + t] = round_bf16(x[far * step + t]);
      }
      __syncthreads();
    }
    const double before = total;
    total = assign();
    if (cq_converged(before, total, a.tol)) break;  // every thread decides alike
  }
  float* out = books + gi * a.k * G;
  for (int q = tid; q < a.k * G; q += kCqEncThreads) out[q] = q < c * G ? book[q] : book[q % G];
}

/// One block per head: the head's D K codeword values (books[h], floats)
/// stored as BF16 or as FP8 against fp8_centroid_scale_for(absmax); books[h]
/// then holds the stored values (what the indices are chosen against).
__global__ void __launch_bounds__(kCqEncThreads)
    cq_store_books_kernel(QvgShape sh, QvgParts p, float* __restrict__ books) {
  __shared__ unsigned red_max;
  const int h = blockIdx.x, tid = threadIdx.x;
  const int64_t values = static_cast<int64_t>(sh.dim) << sh.cq_bits;
  float* b = books + h * values;
  if (!sh.fp8_books) {
    uint8_t* out = p.books + h * values * 2;
    for (int64_t q = tid; q < values; q += kCqEncThreads) {
      const uint16_t v = bf16_from_float(b[q]);
      out[2 * q] = static_cast<uint8_t>(v & 0xFF);
      out[2 * q + 1] = static_cast<uint8_t>(v >> 8);
      b[q] = bf16_to_float(v);
    }
    return;
  }
  if (tid == 0) red_max = 0;
  __syncthreads();
  float m = 0.0f;
  for (int64_t q = tid; q < values; q += kCqEncThreads) m = fmaxf(m, fabsf(b[q]));
  atomicMax(&red_max, __float_as_uint(m));
  __syncthreads();
  const float scale = fp8_centroid_scale_for(__uint_as_float(red_max));
  if (tid == 0) p.book_scales[h] = scale;
  uint8_t* out = p.books + h * values;
  for (int64_t q = tid; q < values; q += kCqEncThreads) {
    const uint8_t code = fp8_e4m3_from_float(cq_div(b[q], scale));
    out[q] = code;
    b[q] = cq_mul(fp8_e4m3_to_float(code), scale);
  }
}

/// Grid (token tiles of kCqEncThreads, D/G groups, H): idx[h][n][j] = the
/// nearest stored codeword of u[h][j][n] (cq_assign_ref).
template <int G>
__global__ void __launch_bounds__(kCqEncThreads)
    cq_assign_kernel(const float* __restrict__ u, const float* __restrict__ books, int64_t tokens, int k,
                     uint8_t* __restrict__ idx) {
  __shared__ float book[kCqMaxCodewords * G];
  const int j = blockIdx.y, h = blockIdx.z, groups = gridDim.y;
  const int64_t gi = static_cast<int64_t>(h) * groups + j;
  for (int q = threadIdx.x; q < k * G; q += kCqEncThreads) book[q] = books[gi * k * G + q];
  __syncthreads();
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kCqEncThreads + threadIdx.x;
  if (n >= tokens) return;
  float xv[G];
#pragma unroll
  for (int t = 0; t < G; ++t) xv[t] = u[(gi * tokens + n) * G + t];
  float best = cq_sq_dist(xv, book, G);
  int arg = 0;
  for (int w = 1; w < k; ++w) {
    const float d = cq_sq_dist(xv, book + w * G, G);
    if (d < best) best = d, arg = w;
  }
  idx[(static_cast<int64_t>(h) * tokens + n) * groups + j] = static_cast<uint8_t>(arg);
}

/// One thread per token (H * N): its D/G indices packed into its code row
/// (index j at bits j b .. j b + b - 1, LSB first; cq_pack_indices_ref).
__global__ void __launch_bounds__(kCqEncThreads)
    cq_pack_kernel(QvgShape sh, const uint8_t* __restrict__ idx, uint8_t* __restrict__ codes) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(sh.heads) * sh.tokens) return;
  const int groups = sh.dim / sh.cq_dim, b = sh.cq_bits;
  const int64_t row_bytes = (static_cast<int64_t>(groups) * b + 7) / 8;  // codebook_row_bytes
  const uint8_t* in = idx + g * groups;
  uint8_t* out = codes + g * row_bytes;
  unsigned acc = 0;  // bits not yet written, LSB first
  int have = 0;
  int64_t o = 0;
  for (int j = 0; j < groups; ++j) {
    acc |= static_cast<unsigned>(in[j]) << have;
    have += b;
    while (have >= 8) {
      out[o++] = static_cast<uint8_t>(acc & 0xFF);
      acc >>= 8;
      have -= 8;
    }
  }
  if (have > 0) out[o] = static_cast<uint8_t>(acc & 0xFF);
}

}  // namespace qvg::cuda
