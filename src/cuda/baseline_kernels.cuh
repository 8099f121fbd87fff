// KIVI, QuaRot and BF16 decode kernels (the baselines on the GPU). Byte
// layouts: docs/FORMAT.md "## KIVI", "## QuaRot", "## BF16"; the CPU
// reference they reproduce bit for bit: src/reference/kivi_codec.cpp,
// src/reference/quarot_codec.cpp, src/reference/baselines.h.
//
// Float arithmetic uses explicit round-to-nearest intrinsics (__fmul_rn,
// __fadd_rn, __fsub_rn), so nvcc cannot fuse a multiply and an add into an
// FMA; the CPU reference is compiled with -ffp-contract=off. Every step is
// then the same float32 operation on the same operands as on the CPU:
//   dequantize   x^ = float(q) * s + z      (s, z: the decoded FP16 values)
//   QuaRot       the normalized Walsh-Hadamard butterflies, stage by stage
//                (h = 1, 2, 4, ..., D/2; (a, b) <- (a + b, a - b)), then
//                every value times fp32(1 / sqrt(D)) computed on the host
//                with the reference's expression.
// FP16 -> float (__half2float) and BF16 -> float (a shift) are exact, as on
// the CPU. The 16-bit outputs are the float result rounded to nearest even.
//
// Scales and zero points must be finite with s >= 0 (the CPU decoder's
// corruption check); the launchers' callers check them on the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/row_slot.cuh"
#include "qvg/config.h"
#include "qvg/half.h"

namespace qvg::cuda {

/// Values per thread: each thread owns 16 consecutive values of one row
/// (64 bytes of float output = four 16-byte stores; 32 bytes of BF16/FP16 =
/// two). D must be a multiple of 16.
constexpr int kBaselineVals = 16;

/// Shape and format of one encoded KIVI / QuaRot / BF16 tensor.
struct BaselineShape {
  bool rotated = false;              ///< token rows rotated back (quarot_decode_kernel); else kivi_decode_kernel
  TensorRole role = TensorRole::key; ///< kivi: keys per channel, values per token
  int heads = 0;
  int64_t tokens = 0;                ///< N
  int dim = 0;                       ///< D, a multiple of 16 (quarot: a power of two, 16..512)
  int bits = 2;                      ///< b: 2 or 4 (kivi, quarot)
  int group = 32;                    ///< G (kivi)
  int64_t quantized = 0;             ///< Nq: tokens 0..Nq-1 quantized, Nq..N-1 BF16 (kivi; bf16: 0; quarot: N)
  float norm = 1.0f;                 ///< fp32(1 / sqrt(D)) (quarot)
};

/// Device pointers to the parts (docs/FORMAT.md; unused ones may be null).
struct BaselineParts {
  /// kivi key [H][Ng][D][ceil(G*b/8)], kivi value [H][Nq][D/G][ceil(G*b/8)],
  /// quarot [H][N][D*b/8]
  const uint8_t* codes = nullptr;
  /// FP16 bits: kivi key [H][Ng][D], kivi value [H][Nq][D/G], quarot [H][N]
  const uint16_t* scales = nullptr;
  const uint16_t* zero_points = nullptr;  ///< FP16 bits, same layout as scales
  const uint16_t* full_precision = nullptr;  ///< BF16 bits [H][N-Nq][D] (kivi, bf16)
};

namespace baseline_detail {

__device__ __forceinline__ float half_bits_to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }

/// 16 uint16 values from p (32-byte aligned) with two 16-byte loads.
__device__ __forceinline__ void load_u16x16(const uint16_t* p, uint16_t* out) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint4 a = __ldg(q + j);
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[8 * j + 2 * i] = static_cast<uint16_t>(w[i] & 0xFFFFu);
      out[8 * j + 2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
    }
  }
}

/// float(q) * s + z, rounded after the multiply and after the add (no FMA).
__device__ __forceinline__ float dequant(uint32_t q, float s, float z) {
  return __fadd_rn(__fmul_rn(static_cast<float>(q), s), z);
}

/// Code i of the group whose packed bytes start at g (LSB first; b divides
/// 8, so a code never straddles two bytes).
template <int BITS>
__device__ __forceinline__ uint32_t group_code(const uint8_t* g, int i) {
  const int bit = i * BITS;
  return (static_cast<uint32_t>(__ldg(g + (bit >> 3))) >> (bit & 7)) & ((1u << BITS) - 1u);
}

/// BF16 bits: the reference's own rounding (qvg/half.h; nearest even, NaN
/// payload kept as on the CPU). FP16 bits: the hardware conversion, nearest
/// even, overflow to +-inf (the same bits as qvg::fp16_from_float for every
/// non-NaN float).
__device__ __forceinline__ uint16_t to_bits(float v, __nv_bfloat16*) { return bf16_from_float(v); }
__device__ __forceinline__ uint16_t to_bits(float v, __half*) { return __half_as_ushort(__float2half_rn(v)); }

/// Store 16 floats at o (OutT float, __nv_bfloat16 or __half; 16-byte
/// aligned) with 16-byte stores.
template <typename OutT>
__device__ __forceinline__ void store16(OutT* o, const float* v) {
  if constexpr (sizeof(OutT) == 4) {
    float4* q = reinterpret_cast<float4*>(o);
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  } else {
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      w[i] = static_cast<uint32_t>(to_bits(v[2 * i], static_cast<OutT*>(nullptr))) |
             (static_cast<uint32_t>(to_bits(v[2 * i + 1], static_cast<OutT*>(nullptr))) << 16);
    uint4* q = reinterpret_cast<uint4*>(o);
    q[0] = make_uint4(w[0], w[1], w[2], w[3]);
    q[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

}  // namespace baseline_detail

/// KIVI (and BF16) decode. One thread per 16 consecutive values of a token
/// row: grid H*N*(D/16) threads, thread g -> head h, token t, columns
/// col .. col+15. Replaces the reference's loops
///   for each group: for i < G: out[...] = float(q_i) * s + z
///   for t >= Nq:    out[t][c] = bf16_to_float(full_precision[t - Nq][c])
/// with the same per-value arithmetic (each output value is written once).
template <int BITS, typename OutT>
__global__ void kivi_decode_kernel(BaselineShape sh, BaselineParts p, OutT* __restrict__ out) {
  using namespace baseline_detail;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= row_slot_count(sh.heads, sh.tokens, sh.dim, kBaselineVals)) return;
  const auto [h, t, col] = row_slot(g, sh.tokens, sh.dim, kBaselineVals);
  const int64_t nq = sh.quantized;
  const int gb = (sh.group * BITS + 7) / 8;  // bytes per group
  float v[kBaselineVals];
  if (t >= nq) {
    // BF16 window: row t - Nq of head h in full_precision [H][N-Nq][D].
    uint16_t b[kBaselineVals];
    load_u16x16(p.full_precision + (static_cast<int64_t>(h) * (sh.tokens - nq) + (t - nq)) * sh.dim + col, b);
#pragma unroll
    for (int i = 0; i < kBaselineVals; ++i) v[i] = __uint_as_float(static_cast<uint32_t>(b[i]) << 16);
  } else if (sh.role == TensorRole::key) {
    // Keys: group (k, c) holds channel c of tokens k*G .. k*G+G-1; token t is
    // code i = t - k*G of the groups gi = (h*Ng + k)*D + c, c = col .. col+15
    // (16 consecutive groups: their scales and zero points are contiguous).
    const int64_t ng = nq / sh.group;
    const int64_t k = t / sh.group;
    const int i = static_cast<int>(t - k * sh.group);
    const int64_t gi0 = (static_cast<int64_t>(h) * ng + k) * sh.dim + col;
    uint16_t s16[kBaselineVals], z16[kBaselineVals];
    load_u16x16(p.scales + gi0, s16);
    load_u16x16(p.zero_points + gi0, z16);
#pragma unroll
    for (int j = 0; j < kBaselineVals; ++j) {
      const uint32_t q = group_code<BITS>(p.codes + (gi0 + j) * gb, i);
      v[j] = dequant(q, half_bits_to_float(s16[j]), half_bits_to_float(z16[j]));
    }
  } else {
    // Values: group (t, j) holds channels j*G .. j*G+G-1 of token t, at
    // gi = (h*Nq + t)*(D/G) + j. Walk the 16 columns keeping (gi, position).
    int64_t gi = (static_cast<int64_t>(h) * nq + t) * (sh.dim / sh.group) + col / sh.group;
    int pos = col % sh.group;
#pragma unroll
    for (int j = 0; j < kBaselineVals; ++j) {
      const float s = half_bits_to_float(__ldg(p.scales + gi));
      const float z = half_bits_to_float(__ldg(p.zero_points + gi));
      v[j] = dequant(group_code<BITS>(p.codes + gi * gb, pos), s, z);
      if (++pos == sh.group) {
        pos = 0;
        ++gi;
      }
    }
  }
  store16(out + (static_cast<int64_t>(h) * sh.tokens + t) * sh.dim + col, v);
}

/// QuaRot decode: dequantize a token row and rotate it back with the
/// normalized Walsh-Hadamard transform. D/16 threads per row (a power of two
/// dividing 32, so a row's threads are consecutive lanes of one warp); grid
/// H*N*(D/16) threads, thread g -> row g / (D/16), columns col .. col+15.
/// The reference (wht_normalized_ref) does, on the dequantized row y:
///   for (h = 1; h < D; h *= 2)
///     for every j with (j & h) == 0: (y[j], y[j+h]) = (y[j] + y[j+h], y[j] - y[j+h])
///   for every j: y[j] *= norm
/// Stages h < 16 pair two values of one thread; stage h = 16m (m = 1, 2, ..
/// D/32) pairs value i of thread t with value i of thread t ^ m: the thread
/// with (t & m) == 0 holds a = y[j] and computes a + b, its partner holds
/// b = y[j+h] and computes a - b. Same stages in the same order, same
/// operands per operation: bit-identical.
template <int BITS, typename OutT>
__global__ void quarot_decode_kernel(BaselineShape sh, BaselineParts p, OutT* __restrict__ out) {
  using namespace baseline_detail;
  const int tpr = sh.dim / kBaselineVals;
  const int64_t total = static_cast<int64_t>(sh.heads) * sh.tokens * tpr;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Every lane takes part in the shuffles: lanes past the end redo the last
  // thread's row (whole rows, since tpr divides 32) and store nothing.
  const bool live = g < total;
  const int64_t gg = live ? g : total - 1;
  const int64_t row = gg / tpr;  // h * N + t
  const int t = static_cast<int>(gg % tpr);
  const int col = t * kBaselineVals;
  const float s = half_bits_to_float(__ldg(p.scales + row));
  const float z = half_bits_to_float(__ldg(p.zero_points + row));
  // 16 codes: 4 bytes (INT2) or 8 bytes (INT4) at row * D*b/8 + col*b/8, aligned to their size.
  const uint8_t* c = p.codes + row * (sh.dim * BITS / 8) + col * BITS / 8;
  uint32_t w[2] = {0u, 0u};
  if constexpr (BITS == 2) {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(c));
  } else {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(c));
    w[0] = u.x;
    w[1] = u.y;
  }
  constexpr int kPerWord = 32 / BITS;
  float v[kBaselineVals];
#pragma unroll
  for (int i = 0; i < kBaselineVals; ++i)
    v[i] = dequant((w[i / kPerWord] >> (BITS * (i % kPerWord))) & ((1u << BITS) - 1u), s, z);
  // Butterfly stages h = 1, 2, 4, 8 inside the thread.
#pragma unroll
  for (int hs = 1; hs < kBaselineVals; hs *= 2) {
#pragma unroll
    for (int i = 0; i < kBaselineVals; ++i) {
      if ((i & hs) == 0) {
        const float a = v[i], b = v[i + hs];
        v[i] = __fadd_rn(a, b);
        v[i + hs] = __fsub_rn(a, b);
      }
    }
  }
  // Stages h = 16m across the row's threads (partner lane = lane ^ m).
  for (int m = 1; m < tpr; m *= 2) {
    const bool upper = (t & m) != 0;
#pragma unroll
    for (int i = 0; i < kBaselineVals; ++i) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, v[i], m);
      v[i] = upper ? __fsub_rn(other, v[i]) : __fadd_rn(v[i], other);
    }
  }
#pragma unroll
  for (int i = 0; i < kBaselineVals; ++i) v[i] = __fmul_rn(v[i], sh.norm);
  if (!live) return;
  store16(out + row * sh.dim + col, v);
}

/// Queue the decode of sh on stream into out ([H][N][D] of OutT on the
/// device: float, __nv_bfloat16 or __half). Returns the launch error.
template <typename OutT>
cudaError_t launch_baseline_decode(const BaselineShape& sh, const BaselineParts& p, OutT* out, cudaStream_t stream) {
  constexpr int kThreads = 256;  // a multiple of 32: warps never straddle blocks
  const int64_t threads = static_cast<int64_t>(sh.heads) * sh.tokens * (sh.dim / kBaselineVals);
  if (threads == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  if (sh.rotated) {
    if (sh.bits == 2)
      quarot_decode_kernel<2, OutT><<<blocks, kThreads, 0, stream>>>(sh, p, out);
    else
      quarot_decode_kernel<4, OutT><<<blocks, kThreads, 0, stream>>>(sh, p, out);
  } else if (sh.bits == 4) {
    kivi_decode_kernel<4, OutT><<<blocks, kThreads, 0, stream>>>(sh, p, out);
  } else {
    // INT2, or bf16 (Nq = 0: the codes are never read, BITS is moot)
    kivi_decode_kernel<2, OutT><<<blocks, kThreads, 0, stream>>>(sh, p, out);
  }
  return cudaGetLastError();
}

}  // namespace qvg::cuda
