// Internal: the tensor-core assignment's first step (assign_tc.cuh): a
// head's centroids staged in shared memory (float rows, BF16 core matrices,
// norms, duplicates).
#pragma once

#include "cuda/assign_common.cuh"

namespace qvg::cuda {

// ---------------------------------------------------------------------------
// The head's centroids in shared memory

/// A head's centroids as assign_tc_kernel stages them in its dynamic shared
/// memory (assign_tc_smem; the arrays in this order), and where each
/// centroid's float row is read.
template <int D, bool kFloatInSmem>
struct StagedCentroids {
  static constexpr int kFStride = kFloatInSmem ? D + 4 : D;  ///< floats per float row
  int c_count;         ///< C
  int c_pad;           ///< assign_c_pad(C)
  const float* ch;     ///< (C, D) the head's float centroids in global memory
  __nv_bfloat16* cs;   ///< (c_pad / 8, D / 8) core matrices of bf16 values, logical order (core_chunk)
  float* cf;           ///< (c_pad, kFStride) float rows, dim order (kFloatInSmem only)
  float* c_init;       ///< (c_pad): -||c||^2 / 2; -FLT_MAX past C and for duplicates
  float* c_len;        ///< (c_pad): ||c||
  float* c_dev;        ///< (c_pad): ||c - bf16(c)||; 0 exactly for a row of BF16 values
  uint32_t* c_hash;    ///< (c_pad): a hash of the values
  float* zero_row;     ///< (D): zeros, the padded rows' float row (not kFloatInSmem)

  __device__ __forceinline__ StagedCentroids(unsigned char* smem, const float* head_cent, int c)
      : c_count(c), c_pad(assign_c_pad(c)), ch(head_cent) {
    cs = reinterpret_cast<__nv_bfloat16*>(smem);
    cf = reinterpret_cast<float*>(cs + c_pad * D);
    c_init = cf + (kFloatInSmem ? c_pad * kFStride : 0);
    c_len = c_init + c_pad;
    c_dev = c_len + c_pad;
    c_hash = reinterpret_cast<uint32_t*>(c_dev + c_pad);
    zero_row = reinterpret_cast<float*>(c_hash + c_pad);
  }

  /// Centroid c's float row (kFStride apart): in shared memory, or in global
  /// memory with the padded rows (c >= C) reading zeros.
  __device__ __forceinline__ const float* row(int c) const {
    if constexpr (kFloatInSmem)
      return cf + c * kFStride;
    else
      return c < c_count ? ch + static_cast<int64_t>(c) * D : zero_row;
  }
};

/// Staging, step 1: the float rows (16-byte pieces; padded rows zero) where
/// kFloatInSmem, else the row of zeros. Block 0 of head h also writes the
/// stored centroids (the encoder's: BF16 values) to cent_bf16 ([H][C][D];
/// null: not written).
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_float_rows(const StagedCentroids<D, kFloatInSmem>& sc, uint16_t* cent_bf16,
                                                 int h) {
#pragma unroll 8
  for (int i = threadIdx.x; i < sc.c_pad * (D / 4); i += blockDim.x) {
    const int c = i / (D / 4), q = i % (D / 4);  // q: 16-byte piece of the row
    const float4 v = c < sc.c_count
                         ? __ldg(reinterpret_cast<const float4*>(sc.ch + static_cast<int64_t>(c) * D + 4 * q))
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kFloatInSmem) *reinterpret_cast<float4*>(sc.cf + c * sc.kFStride + 4 * q) = v;
    if (cent_bf16 && blockIdx.x == 0 && c < sc.c_count)
      *reinterpret_cast<uint2*>(cent_bf16 + (static_cast<int64_t>(h) * sc.c_count + c) * D + 4 * q) =
          make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
  if constexpr (!kFloatInSmem)
    for (int i = threadIdx.x; i < D; i += blockDim.x) sc.zero_row[i] = 0.0f;
}

/// Staging, step 2 (reads the float rows): the bf16 core matrices in logical
/// order; the pairs at logical k = 8 m + 2 i sit at dims logical_dim(k),
/// logical_dim(k) + 1.
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_core_matrices(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_pad * (D / 8); i += blockDim.x) {
    const int c = i / (D / 8), m = i % (D / 8);
    const float* row = sc.row(c);
    uint32_t w[4];
#pragma unroll
    for (int tp = 0; tp < 4; ++tp) {
      const float2 f = *reinterpret_cast<const float2*>(row + logical_dim(8 * m + 2 * tp));
      w[tp] = pack_bf16x2(f.x, f.y);
    }
    *reinterpret_cast<uint4*>(sc.cs + core_chunk<D>(c, m)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// Staging, step 3 (reads the float rows): per centroid c_init, c_len, c_dev
/// and c_hash. ||c||^2 and ||c - bf16(c)||^2 in float: eight lanes a
/// centroid (D / 8 dims each, then three shuffles; a fixed order).
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_norms(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_pad * 8; i += blockDim.x) {
    const int c = i >> 3, part = i & 7;  // the eight lanes of a centroid are neighbours
    float s = 0.0f, e = 0.0f;
    uint32_t hv = 0u, off_grid = 0u;
#pragma unroll
    for (int k = part; k < D; k += 8) {
      const float v = sc.row(c)[k], dv = v - round_bf16_dev(v);  // exact
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
      sc.c_init[c] = c < sc.c_count ? -0.5f * s : -FLT_MAX;
      sc.c_len[c] = sqrtf(s);
      // 0 exactly when the row is a BF16 value (the residual path relies on
      // it; a sum of squares of tiny deviations can underflow).
      sc.c_dev[c] = off_grid ? fmaxf(sqrtf(e), FLT_MIN) : 0.0f;
      sc.c_hash[c] = hv;
    }
  }
}

/// Staging, step 4 (reads the hashes): a centroid equal to one of lower
/// index is never the answer (ties go to the lower index), so its c_init
/// becomes -FLT_MAX and it ranks with the padding; exact ties of two or more
/// equal centroids then need no re-ranking. Equal values hash alike; the
/// rows are then compared value by value. Two threads a centroid, each half
/// of the lower indices (the last thread's loop is the prologue's longest);
/// both may mark it.
template <int D, bool kFloatInSmem>
__device__ __forceinline__ void mark_duplicate_centroids(const StagedCentroids<D, kFloatInSmem>& sc) {
  for (int i = threadIdx.x; i < sc.c_count * 2; i += blockDim.x) {
    const int c = i >> 1;
    bool dup = false;
    for (int o = i & 1; o < c && !dup; o += 2) {
      if (sc.c_hash[o] != sc.c_hash[c]) continue;
      bool same = true;
      for (int k = 0; k < D && same; ++k) same = sc.row(o)[k] == sc.row(c)[k];
      dup = same;
    }
    if (dup) sc.c_init[c] = -FLT_MAX;
  }
}

/// Stage head h's centroids (the whole block; barriers included, so every
/// thread sees the result on return): steps 1 to 4 above.
template <bool kWg, int D, bool kFloatInSmem>
__device__ __forceinline__ void stage_centroids(const StagedCentroids<D, kFloatInSmem>& sc, uint16_t* cent_bf16,
                                                int h) {
  stage_float_rows(sc, cent_bf16, h);
  __syncthreads();
  stage_core_matrices(sc);
  stage_norms(sc);
  __syncthreads();
  mark_duplicate_centroids(sc);
  // wgmma reads the bf16 copy through the async proxy: make the generic
  // stores above visible to it (each thread its own, then the barrier).
  if constexpr (kWg && kHaveWgmma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

}  // namespace qvg::cuda
