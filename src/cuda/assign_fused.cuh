// k-means assignment in one pass over x: bf16 tensor-core products for the
// ranking, then the exact distance of the chosen centroid (and of the
// runner-up where the bf16 ranking could be wrong), and the per-head maxima
// that the next steps need, all before the block moves on.
//
// It replaces three passes of the earlier pipeline (a tensor-core ranking
// kernel, then a separate exact-distance kernel, plus residual_absmax_kernel
// for the fixed-point exponent of the update and for the span scale of the
// quantizer), each of which read all of x again (docs/BENCHMARKS.md, "CUDA
// backend, third slice").
//
// Per block: one head, kFusedTiles tiles of 128 tokens; every centroid of the
// head is staged once in shared memory (bf16) and reused by all tiles.
// Per tile:
//   1. x rows -> bf16 in shared memory, with ||x|| per row (fixed-order sums);
//   2. products on the tensor cores (mma.sync m16n8k16, fp32 accumulation),
//      v = ||c||^2 - 2 x.c, the best two (value, index) per row in registers;
//   3. per row, 4 lanes split the dims: ||x - c||^2 in double for the best,
//      and for the runner-up when the gap is within the bf16 error bound
//      (then the exact order decides, ties to the lower index); max |x| and
//      max |x - bf16(c_pick)| when asked for.
// So ids match an exact assignment unless three or more centroids lie
// within the bound (about 2^-7 ||x|| ||c|| for bf16 x, 2^-6 otherwise), and
// dist is ||x - c||^2 of the chosen centroid in double.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kmeans_kernels.cuh"

namespace qvg::cuda {

constexpr int kTcPad = 8;  // bf16 elements of row padding (ldmatrix without bank conflicts)

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

/// Rows [0, rows) of a (., D) bf16 matrix into smem with row stride D +
/// kTcPad; rows past `valid` are zero. Loads go out 8 per thread at a time.
template <int D>
__device__ __forceinline__ void stage_rows_bf16(const __nv_bfloat16* __restrict__ src, int rows, int valid,
                                                __nv_bfloat16* dst) {
  constexpr int kChunks = D / 8;  // 8 values (16 bytes) per chunk
  constexpr int kBatch = 8;
  const int total = rows * kChunks;
  for (int base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x, r = i / kChunks;
      v[b] = (i < total && r < valid) ? *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(r) * D + (i % kChunks) * 8)
                                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x;
      if (i < total) *reinterpret_cast<uint4*>(dst + (i / kChunks) * (D + kTcPad) + (i % kChunks) * 8) = v[b];
    }
  }
}

/// A (value, centroid index < 256) pair as one integer that orders as the
/// pair does, value first: the value's bits made order-preserving (sign
/// flipped for positives, all bits for negatives), its lowest 8 bits
/// replaced by the index. Dropping those bits moves the value by less than
/// 2^-15 of itself (key_value), which the re-ranking margin covers.
__device__ __forceinline__ uint32_t rank_key(float v, int c) {
  const uint32_t u = __float_as_uint(v);
  const uint32_t o = u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
  return (o & 0xFFFFFF00u) | static_cast<uint32_t>(c);
}
constexpr uint32_t kNoKey = 0xFFFFFFFFu;  // above every key of a finite value

/// The value of a key, to 2^-15 relative.
__device__ __forceinline__ float key_value(uint32_t k) {
  const uint32_t o = k & 0xFFFFFF00u;
  return __uint_as_float((o & 0x80000000u) ? (o ^ 0x80000000u) : ~o);
}

constexpr int kFusedTokens = 128;   // tokens per tile (4 warps x 32 rows)
constexpr int kFusedThreads = 128;
constexpr int kFusedTiles = 4;      // tiles per block: the staged centroids serve 512 tokens
constexpr int kFusedCentTile = 64;  // centroids per pass of the products
constexpr int kFusedMaxCentroids = 256;

/// What one fused assignment writes. ids and dist are [H][N]; the maxima are
/// per head as float bits (atomicMax: exact, max is order-independent), null
/// when not wanted; the caller zeroes them for the heads that run.
struct AssignOutputs {
  uint8_t* ids = nullptr;
  float* dist = nullptr;
  unsigned* x_max = nullptr;      ///< max |x|
  unsigned* resid_max = nullptr;  ///< max |x - bf16(c_id)| (the quantizer's residual)
};

/// Shared memory of assign_fused_kernel for C centroids.
template <int D>
constexpr size_t assign_fused_smem(int c_count) {
  const int c_pad = (c_count + kFusedCentTile - 1) / kFusedCentTile * kFusedCentTile;
  return static_cast<size_t>(kFusedTokens + c_pad) * (D + kTcPad) * 2;
}

/// Grid (ceil(N / (128 * kFusedTiles)), H); block 128; dynamic smem
/// assign_fused_smem<D>(C). C <= 256. Heads with active[h] == 0 are skipped.
/// kProbe != 0 leaves one phase out, for timing by difference only
/// (bench_assign_probe; the outputs are then wrong): 1 = the exact
/// distances, 2 = the top-two epilogue, 3 = the tensor-core products.
template <int D, typename T, int kProbe = 0>
__global__ void __launch_bounds__(kFusedThreads) assign_fused_kernel(const T* __restrict__ x, int64_t n_tokens,
                                                                    const float* __restrict__ cent,
                                                                    const __nv_bfloat16* __restrict__ cent_b,
                                                                    const float* __restrict__ cnorm, int c_count,
                                                                    const int* __restrict__ active,
                                                                    AssignOutputs out) {
  static_assert(D == 64 || D == 128, "fused assignment: D = 64 or 128");
  constexpr int kStride = D + kTcPad;  // bf16 elements per smem row
  // Error of v = ||c||^2 - 2 x.c from the bf16 products, over ||x|| ||c||:
  // rounding to bf16 moves each operand by up to 2^-8 relative, so x.c by
  // 2^-8 ||x|| ||c|| when only c is rounded (bf16 x is exact) and 2^-7 when
  // both are, and v by twice that; the 1/64 extra covers the tensor cores'
  // fp32 accumulation (about D 2^-24 relative).
  constexpr float kRankErr = (std::is_same_v<T, __nv_bfloat16> ? 0x1p-7f : 0x1p-6f) * (1.0f + 0x1p-6f);
  constexpr int kChunks = D / 8;       // 16-byte bf16 chunks per row
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  extern __shared__ __align__(16) unsigned char fused_smem[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(fused_smem);  // (128, kStride)
  __nv_bfloat16* cs = xs + kFusedTokens * kStride;                    // (C padded to 64, kStride)
  __shared__ float xnorm[kFusedTokens];
  __shared__ float cn_s[kFusedMaxCentroids];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int c_pad = (c_count + kFusedCentTile - 1) / kFusedCentTile * kFusedCentTile;
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const float* ch = cent + static_cast<int64_t>(h) * c_count * D;

  // The head's centroids, once per block (made visible by the tile loop's barrier).
  stage_rows_bf16<D>(cent_b + static_cast<int64_t>(h) * c_count * D, c_pad, c_count, cs);
  for (int c = threadIdx.x; c < c_count; c += blockDim.x) cn_s[c] = cnorm[h * c_count + c];
  const bool want_resid = out.resid_max != nullptr;
  float x_max = 0.0f, r_max = 0.0f;

  for (int tile = 0; tile < kFusedTiles; ++tile) {
    const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kFusedTiles + tile) * kFusedTokens;
    if (n0 >= n_tokens) break;  // uniform across the block
    __syncthreads();            // the previous tile's xs / xnorm are no longer read
    // 1. x -> bf16 rows, ||x|| per row: the kChunks lanes of a row (consecutive,
    // kChunks divides 32) add their partial sums in a fixed order. Each
    // thread owns kChunks chunks; their loads go out kBatch at a time.
    constexpr int kBatch = 8;
#pragma unroll
    for (int b0 = 0; b0 < kChunks; b0 += kBatch) {
      float v[kBatch][8];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = threadIdx.x + (b0 + b) * kFusedThreads;
        const int r = i / kChunks, c8 = (i % kChunks) * 8;
#pragma unroll
        for (int k = 0; k < 8; ++k) v[b][k] = 0.0f;
        if (n0 + r < n_tokens) load8_as_float(xh + (n0 + r) * D + c8, v[b]);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = threadIdx.x + (b0 + b) * kFusedThreads;
        const int r = i / kChunks, c8 = (i % kChunks) * 8;
        float s = 0.0f;
        uint32_t packed[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          s = fmaf(v[b][2 * q], v[b][2 * q], s);
          s = fmaf(v[b][2 * q + 1], v[b][2 * q + 1], s);
          const __nv_bfloat162 h2 = __floats2bfloat162_rn(v[b][2 * q], v[b][2 * q + 1]);
          packed[q] = *reinterpret_cast<const uint32_t*>(&h2);
        }
        *reinterpret_cast<uint4*>(xs + r * kStride + c8) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
#pragma unroll
        for (int off = 1; off < kChunks; off <<= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
        if (i % kChunks == 0) xnorm[r] = sqrtf(s);
      }
    }
    __syncthreads();

    // 2. Products and the best two per row.
    // Rank keys (rank_key): the best and the runner-up of each of the
    // thread's 4 rows, kNoKey while there is none.
    uint32_t best[2][2], second[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) best[i][j] = second[i][j] = kNoKey;
    for (int c0 = 0; c0 < c_pad; c0 += kFusedCentTile) {
      float acc[2][8][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
#pragma unroll
      for (int k0 = 0; k0 < (kProbe == 3 ? 0 : D); k0 += 16) {
        uint32_t a[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = warp * 32 + i * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
          const int col = k0 + 8 * (lane >> 4);
          ldmatrix_x4(smem_u32(xs + row * kStride + col), a[i][0], a[i][1], a[i][2], a[i][3]);
        }
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          uint32_t b[4];
          const int nrow = c0 + j * 8 + (lane & 7) + 8 * (lane >> 4);
          const int col = k0 + 8 * ((lane >> 3) & 1);
          ldmatrix_x4(smem_u32(cs + nrow * kStride + col), b[0], b[1], b[2], b[3]);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            mma_bf16_16816(acc[i][j], a[i], b[0], b[1]);
            mma_bf16_16816(acc[i][j + 1], a[i], b[2], b[3]);
          }
        }
      }
      if constexpr (kProbe == 2) {  // timing only: consume acc, skip the top two
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) best[0][q & 1] ^= __float_as_uint(acc[q >> 1][j][q]);
      } else {
        // acc[i][j] holds rows (g, g+8) of m-tile i, columns 2t, 2t+1 of n-tile j.
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
                // Top two by (value, index), branch-free: the key orders as
                // the pair does (values equal to 2^-15 tie on the index).
                const uint32_t k = rank_key(cn - 2.0f * acc[i][j][2 * r + e], c);
                second[i][r] = min(second[i][r], max(best[i][r], k));
                best[i][r] = min(best[i][r], k);
              }
          }
      }
    }

    // 3. Merge over the quad, then exact distances; the 4 lanes of a quad
    // split each row's dims into chunks of 8 (chunk t, t + 4, ...). Two rows
    // at a time, all of their loads before the arithmetic. bf16 x is exact
    // in shared memory; other types are read again from global memory.
    constexpr int kQ = kChunks / 4;  // chunks per lane per row
    if constexpr (kProbe == 1) {  // timing only: the bf16 pick, no exact distances
      if (t == 0 && n0 + warp * 32 + g < n_tokens)
        out.ids[static_cast<int64_t>(h) * n_tokens + n0 + warp * 32 + g] =
            static_cast<uint8_t>(best[0][0] + best[1][1] + (best[0][1] < best[1][0]));
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v1[2], v2[2];
        int i1[2], i2[2];
        bool live[2], rerank[2];
        int row[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // Top two of the quad's four lanes (their keys are distinct: the
          // lanes hold different centroids).
          uint32_t k1 = best[i][r], k2 = second[i][r];
          for (int off = 1; off < 4; off <<= 1) {
            const uint32_t o1 = __shfl_xor_sync(0xFFFFFFFFu, k1, off), o2 = __shfl_xor_sync(0xFFFFFFFFu, k2, off);
            k2 = min(max(k1, o1), min(k2, o2));
            k1 = min(k1, o1);
          }
          i1[r] = static_cast<int>(k1 & 0xFFu), v1[r] = key_value(k1);
          const bool has2 = k2 != kNoKey;
          i2[r] = has2 ? static_cast<int>(k2 & 0xFFu) : i1[r], v2[r] = has2 ? key_value(k2) : v1[r];
          row[r] = warp * 32 + i * 16 + g + 8 * r;
          live[r] = n0 + row[r] < n_tokens;  // the same for the 4 lanes of the quad
          // Re-rank when the gap is within the sum of the two values' error
          // bounds: kRankErr ||x|| ||c|| from the bf16 operands (see
          // kRankErr), ||c||^2 rounded in float (2^-16 covers D <= 256
          // terms), and the keys' 2^-15 (2^-14 covers both keys).
          rerank[r] = live[r] && has2 &&
                      v2[r] - v1[r] <= kRankErr * xnorm[row[r]] * (sqrtf(cn_s[i1[r]]) + sqrtf(cn_s[i2[r]])) +
                                           0x1p-16f * (cn_s[i1[r]] + cn_s[i2[r]]) +
                                           0x1p-14f * (fabsf(v1[r]) + fabsf(v2[r]));
        }
        float xv[2][kQ][8];
        float ca[2][kQ][8];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int rr = live[r] ? row[r] : 0;  // dead rows read row 0 of the tile, unused
          const float* c1 = ch + static_cast<int64_t>(i1[r] < c_count ? i1[r] : 0) * D;
#pragma unroll
          for (int q = 0; q < kQ; ++q) {
            const int c8 = (t + 4 * q) * 8;
            if constexpr (std::is_same_v<T, __nv_bfloat16>) {
              word_as_float<T>(*reinterpret_cast<const uint4*>(xs + rr * kStride + c8), xv[r][q]);
            } else {
              load8_as_float(xh + (n0 + rr) * D + c8, xv[r][q]);
            }
            const float4 a0 = __ldg(reinterpret_cast<const float4*>(c1 + c8));
            const float4 a1 = __ldg(reinterpret_cast<const float4*>(c1 + c8) + 1);
            ca[r][q][0] = a0.x, ca[r][q][1] = a0.y, ca[r][q][2] = a0.z, ca[r][q][3] = a0.w;
            ca[r][q][4] = a1.x, ca[r][q][5] = a1.y, ca[r][q][6] = a1.z, ca[r][q][7] = a1.w;
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          double d1 = 0.0, d2 = 0.0;
          float rm1 = 0.0f, rm2 = 0.0f;
          if (live[r]) {
#pragma unroll
            for (int q = 0; q < kQ; ++q)
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                const double e = static_cast<double>(xv[r][q][k]) - ca[r][q][k];
                d1 += e * e;
                x_max = fmaxf(x_max, fabsf(xv[r][q][k]));
                if (want_resid)
                  rm1 = fmaxf(rm1, fabsf(__fsub_rn(xv[r][q][k], __bfloat162float(__float2bfloat16_rn(ca[r][q][k])))));
              }
          }
          if (rerank[r]) {  // rare: the runner-up's exact distance too
            const float* c2 = ch + static_cast<int64_t>(i2[r]) * D;
#pragma unroll
            for (int q = 0; q < kQ; ++q) {
              const int c8 = (t + 4 * q) * 8;
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                const float cb = c2[c8 + k];
                const double e = static_cast<double>(xv[r][q][k]) - cb;
                d2 += e * e;
                if (want_resid) rm2 = fmaxf(rm2, fabsf(__fsub_rn(xv[r][q][k], __bfloat162float(__float2bfloat16_rn(cb)))));
              }
            }
          }
          const unsigned quad = 0xFu << (lane & ~3);
          d1 += __shfl_xor_sync(quad, d1, 1);
          d2 += __shfl_xor_sync(quad, d2, 1);
          d1 += __shfl_xor_sync(quad, d1, 2);
          d2 += __shfl_xor_sync(quad, d2, 2);
          const bool second_wins = rerank[r] && (d2 < d1 || (d2 == d1 && i2[r] < i1[r]));
          r_max = fmaxf(r_max, second_wins ? rm2 : rm1);
          if (live[r] && t == 0) {
            const int64_t n = n0 + row[r];
            out.ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(second_wins ? i2[r] : i1[r]);
            out.dist[static_cast<int64_t>(h) * n_tokens + n] = static_cast<float>(second_wins ? d2 : d1);
          }
        }
      }
    }
  }
  // Per-head maxima: one atomic per warp.
  for (int off = 16; off > 0; off >>= 1) {
    x_max = fmaxf(x_max, __shfl_xor_sync(0xFFFFFFFFu, x_max, off));
    r_max = fmaxf(r_max, __shfl_xor_sync(0xFFFFFFFFu, r_max, off));
  }
  if (lane == 0) {
    if (out.x_max) atomicMax(out.x_max + h, __float_as_uint(x_max));
    if (out.resid_max) atomicMax(out.resid_max + h, __float_as_uint(r_max));
  }
}

/// Zero the per-head maxima of the heads that will run (inactive heads keep
/// the value of their last assignment). One thread per head.
static __global__ void zero_active_kernel(unsigned* __restrict__ v, const int* __restrict__ active, int heads) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < heads && (!active || active[h])) v[h] = 0u;
}

}  // namespace qvg::cuda
