// QVG / RTN kernels (non-template kernels are static: several files include
// this header): fused decode and group quantization (with the smoothing
// stages subtracted on the fly). Byte layouts: docs/FORMAT.md "QVG and RTN".
// Per-value rules come from include/qvg/group_quant.h, shared with the CPU
// reference; float arithmetic uses explicit round-to-nearest intrinsics
// where the compiler could otherwise fuse a multiply and an add, so results
// are bit-identical to the CPU reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/qvg_layout.h"
#include "cuda/row_slot.cuh"
#include "qvg/group_quant.h"

namespace qvg::cuda {


template <typename T>
__device__ __forceinline__ float load_as_float(const T* p);
template <>
__device__ __forceinline__ float load_as_float<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float load_as_float<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <>
__device__ __forceinline__ float load_as_float<__half>(const __half* p) { return __half2float(*p); }

/// The 16 / sizeof(T) values of one 16-byte word -> float (exact).
template <typename T>
__device__ __forceinline__ void word_as_float(const uint4& u, float* v) {
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(u.x);
    v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z);
    v[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      T lo, hi;
      *reinterpret_cast<uint16_t*>(&lo) = static_cast<uint16_t>(w[i] & 0xFFFFu);
      *reinterpret_cast<uint16_t*>(&hi) = static_cast<uint16_t>(w[i] >> 16);
      v[2 * i] = load_as_float(&lo);
      v[2 * i + 1] = load_as_float(&hi);
    }
  }
}

/// N consecutive values (N * sizeof(T) a multiple of 16, 16-byte aligned)
/// -> float, with 16-byte loads.
template <int N, typename T>
__device__ __forceinline__ void load_vals_as_float(const T* p, float* v) {
  constexpr int kPerWord = 16 / static_cast<int>(sizeof(T));
  static_assert(N % kPerWord == 0, "whole 16-byte words");
  const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int j = 0; j < N / kPerWord; ++j) word_as_float<T>(q[j], v + j * kPerWord);
}
template <typename T>
__device__ __forceinline__ void load16_as_float(const T* p, float* v) { load_vals_as_float<16>(p, v); }
template <typename T>
__device__ __forceinline__ void load8_as_float(const T* p, float* v) { load_vals_as_float<8>(p, v); }

template <typename T>
__device__ __forceinline__ void store_from_float(T* p, float v);
template <>
__device__ __forceinline__ void store_from_float<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store_from_float<__nv_bfloat16>(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ void store_from_float<__half>(__half* p, float v) { *p = __float2half_rn(v); }

/// VALS BF16 values (VALS * 2 bytes, 16-byte aligned) -> float.
template <int VALS>
__device__ __forceinline__ void load_bf16_vals(const uint16_t* p, float* out) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int j = 0; j < VALS / 8; ++j) {
    const uint4 a = __ldg(q + j);
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[8 * j + 2 * i] = __uint_as_float(w[i] << 16);
      out[8 * j + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
}

/// VALS FP8 centroid values (VALS bytes, a multiple of 8, 8-byte aligned)
/// -> float: code times the stage and head's power-of-two scale (the CPU
/// decode's float product; exact).
template <int VALS>
__device__ __forceinline__ void load_fp8_vals(const uint8_t* p, float scale, float* out) {
  static_assert(VALS % 8 == 0, "whole 8-byte words");
  const uint2* q = reinterpret_cast<const uint2*>(p);
#pragma unroll
  for (int j = 0; j < VALS / 8; ++j) {
    const uint2 a = __ldg(q + j);
    const uint32_t w[2] = {a.x, a.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Two codes at a time to FP16 (exact: every E4M3 value is an FP16 value; parts hold no NaN).
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(w[i / 2] >> (16 * (i % 2))), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      out[8 * j + 2 * i] = __fmul_rn(f.x, scale);
      out[8 * j + 2 * i + 1] = __fmul_rn(f.y, scale);
    }
  }
}

/// VALS values (a multiple of 8) of centroid id of stage st and head h, from
/// column col, as the decode adds them: BF16 values, or FP8 codes times the
/// stage and head's scale (sh.fp8_centroids).
template <int VALS>
__device__ __forceinline__ void load_centroid_vals(const QvgShape& sh, const QvgParts& p, int st, int h, int id,
                                                   int col, float* out) {
  const int64_t at = ((static_cast<int64_t>(st) * sh.heads + h) * sh.centroids + id) * sh.dim + col;
  if (sh.fp8_centroids)
    load_fp8_vals<VALS>(p.cent8 + at, __ldg(p.cent_scales + static_cast<int64_t>(st) * sh.heads + h), out);
  else
    load_bf16_vals<VALS>(p.centroids + at, out);
}

/// The value x takes once stored as BF16 (qvg/half.h's round_bf16, with the
/// hardware conversion: the same for every finite x).
__device__ __forceinline__ float round_bf16_dev(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/// Residual of 16 values (docs/FORMAT.md, Encode 1): x minus every stage's
/// centroid, stages in order, with round-to-nearest subtractions, the result
/// rounded to BF16 after every stage but the last (the later stages' points:
/// the CPU reference's advance_stage).
template <typename InT>
__device__ __forceinline__ void load_residual16(const InT* x, const QvgShape& sh, const QvgParts& p, int h,
                                                int64_t n, int col, float* v) {
  load16_as_float(x, v);
  for (int s = 0; s < sh.stages; ++s) {
    const uint8_t id = p.ids[(static_cast<int64_t>(s) * sh.heads + h) * sh.tokens + n];
    float c[kValsPerThread];
    load_centroid_vals<kValsPerThread>(sh, p, s, h, id, col, c);
    const bool last = s + 1 == sh.stages;
#pragma unroll
    for (int i = 0; i < kValsPerThread; ++i) {
      v[i] = __fsub_rn(v[i], c[i]);
      if (!last) v[i] = round_bf16_dev(v[i]);
    }
  }
}

/// head_max[h] = max(head_max[h], m) for each lane's head h (-1: none), m
/// >= 0 as float bits (max is order-independent, so exact). Every lane of the
/// warp calls it. Lanes of one warp may belong to two heads at a head
/// boundary: the warp reduces first only when all its lanes share the head,
/// else each lane uses its own atomic.
__device__ __forceinline__ void warp_head_max(unsigned int* head_max, int h, float m) {
  const int h0 = __shfl_sync(0xFFFFFFFFu, h, 0);
  if (__all_sync(0xFFFFFFFFu, h == h0)) {
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if ((threadIdx.x & 31) == 0 && h0 >= 0) atomicMax(head_max + h0, __float_as_uint(m));
  } else if (h >= 0) {
    atomicMax(head_max + h, __float_as_uint(m));
  }
}

/// Pass 1 of quantization: per-head max |residual| into head_max (float bits
/// as uint32, initialised to 0; max is order-independent, so exact).
/// Grid: one thread per 16 values, H*N*(D/16) threads.
template <typename InT>
__global__ void residual_absmax_kernel(const InT* __restrict__ x, QvgShape sh, QvgParts p,
                                       unsigned int* __restrict__ head_max) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float m = 0.0f;
  int h = -1;
  if (g < row_slot_count(sh.heads, sh.tokens, sh.dim, kValsPerThread)) {
    const RowSlot at = row_slot(g, sh.tokens, sh.dim, kValsPerThread);
    h = at.h;
    float v[kValsPerThread];
    load_residual16(x + (static_cast<int64_t>(h) * sh.tokens + at.n) * sh.dim + at.col, sh, p, h, at.n, at.col, v);
#pragma unroll
    for (int i = 0; i < kValsPerThread; ++i) m = fmaxf(m, fabsf(v[i]));
  }
  warp_head_max(head_max, h, m);
}

/// Pass 2: block scales, codes and span scales. Same grid as pass 1.
template <int BITS, typename InT>
__global__ void quantize_kernel(const InT* __restrict__ x, QvgShape sh, QvgParts p,
                                const unsigned int* __restrict__ head_max) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = row_slot_count(sh.heads, sh.tokens, sh.dim, kValsPerThread);
  const bool live = g < total;
  // Dead lanes mirror the last one for the shuffles.
  const auto [h, n, col] = row_slot(live ? g : total - 1, sh.tokens, sh.dim, kValsPerThread);
  const int t = col / kValsPerThread;
  const float lmax = level_max(sh.levels, BITS);
  const float span = span_scale_for(__uint_as_float(head_max[h]) / lmax, sh.scale_format);
  float v[kValsPerThread];
  load_residual16(x + (static_cast<int64_t>(h) * sh.tokens + n) * sh.dim + col, sh, p, h, n, col, v);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kValsPerThread; ++i) a = fmaxf(a, fabsf(v[i]));
  // A block of B values spans B/16 consecutive lanes (rows never straddle
  // warps' lane groups: D/16 threads per row, a power of two dividing 32 or
  // a multiple of it).
  const int group = sh.block / kValsPerThread;
  for (int off = 1; off < group; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  if (!live) return;
  const float scale = a / lmax;
  const uint16_t sc = encode_block_scale(scale, span, sh.scale_format);
  const float s = decode_block_scale(sc, span, sh.scale_format);
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + n;
  const int nblocks = sh.dim / sh.block;
  if ((t % group) == 0) {
    const int64_t bi = row * nblocks + col / sh.block;
    if (sh.scale_format == ScaleFormat::fp8) {
      p.scales[bi] = static_cast<uint8_t>(sc);
    } else {
      p.scales[2 * bi] = static_cast<uint8_t>(sc & 0xFF);
      p.scales[2 * bi + 1] = static_cast<uint8_t>(sc >> 8);
    }
  }
  uint8_t* out = p.codes + row * (sh.dim * BITS / 8) + col * BITS / 8;
  if constexpr (BITS == 2) {
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) w |= static_cast<uint32_t>(quantize_value(v[i], s, sh.levels, 2)) << (2 * i);
    *reinterpret_cast<uint32_t*>(out) = w;
  } else {
    uint2 w{0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) w.x |= static_cast<uint32_t>(quantize_value(v[i], s, sh.levels, 4)) << (4 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i) w.y |= static_cast<uint32_t>(quantize_value(v[8 + i], s, sh.levels, 4)) << (4 * i);
    *reinterpret_cast<uint2*>(out) = w;
  }
  if (n == 0 && t == 0) p.span_scales[h] = span;
}

// ---------------------------------------------------------------------------
// Tiled encode passes: the head is blockIdx.y, in-head offsets are 32-bit
// (the host checks tokens * D < 2^30; the kernels above cover larger heads
// and more than four stages), and each thread owns U units of 16 values, 256
// units apart, with all of its loads issued before any arithmetic (the
// kernels above spend their time on 64-bit index arithmetic and one
// dependent chain of loads per thread). Unit i of a
// head is values [16 i, 16 i + 16) of its [N][D] values, so codes, scales
// and x are addressed by i alone; only the stages need the token i / (D/16),
// hence D as a template constant where S > 0 (D = 0: unused). Same values,
// same order of operations as the kernels above: the same bits (the codes
// by way of quantize16, which gives quantize_value's codes exactly).
constexpr int kEncTileThreads = 256;
constexpr int kEncTileUnits = 2;  // units of 16 values per thread

/// The residuals of a thread's U units (unit first + 256 u; dead units, past
/// `units`, repeat the head's last unit): x minus the S stages in order, BF16
/// between stages (load_residual16's rule).
/// xh: the head's first value; ids, centroids of stage 0 are those of p
/// (BF16 centroids; the encoder passes FP8 ones widened to BF16).
template <typename InT, int D, int S, int U>
__device__ __forceinline__ void load_residual_tile(const InT* xh, const QvgShape& sh, const QvgParts& p, int h,
                                                   uint32_t first, uint32_t units, float (&v)[U][16]) {
  static_assert(S == 0 || D == 64 || D == 128, "stages need D = 64 or 128 as a template constant");
  constexpr int kWords = static_cast<int>(sizeof(InT));  // 16-byte words per unit
  constexpr int kS = S > 0 ? S : 1;
  constexpr uint32_t kUnitsPerRow = D > 0 ? D / 16 : 1;
  const int64_t stage_ids = static_cast<int64_t>(sh.heads) * sh.tokens;
  const int64_t stage_cent = static_cast<int64_t>(sh.heads) * sh.centroids * D;
  const uint8_t* ids = p.ids + static_cast<int64_t>(h) * sh.tokens;
  const uint16_t* cent = p.centroids + static_cast<int64_t>(h) * sh.centroids * D;
  uint4 raw[U][kWords];
  uint32_t id[U][kS];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = min(first + u * kEncTileThreads, units - 1);
    const uint4* q = reinterpret_cast<const uint4*>(xh + i * 16);
#pragma unroll
    for (int j = 0; j < kWords; ++j) raw[u][j] = q[j];
#pragma unroll
    for (int st = 0; st < S; ++st) id[u][st] = __ldg(ids + st * stage_ids + i / kUnitsPerRow);
  }
  float c[U][kS][16];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t col = (min(first + u * kEncTileThreads, units - 1) % kUnitsPerRow) * 16;
#pragma unroll
    for (int st = 0; st < S; ++st) load_bf16_vals<16>(cent + st * stage_cent + id[u][st] * D + col, c[u][st]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int j = 0; j < kWords; ++j) word_as_float<InT>(raw[u][j], v[u] + j * (16 / kWords));
#pragma unroll
    for (int st = 0; st < S; ++st)
#pragma unroll
      for (int k = 0; k < 16; ++k) {  // BF16 points between stages, as load_residual16
        v[u][k] = __fsub_rn(v[u][k], c[u][st][k]);
        if (st + 1 < S) v[u][k] = round_bf16_dev(v[u][k]);
      }
  }
}

/// Pass 1 (tiled): per-head max |residual| into head_max, as
/// residual_absmax_kernel. Grid: (ceil(N * D/16 / (256 U)), H); block 256.
template <typename InT, int D, int S, int U>
__global__ void __launch_bounds__(kEncTileThreads) residual_absmax_tile_kernel(const InT* __restrict__ x, QvgShape sh,
                                                                              QvgParts p,
                                                                              unsigned int* __restrict__ head_max) {
  const int h = blockIdx.y;
  const uint32_t units = static_cast<uint32_t>(sh.tokens) * static_cast<uint32_t>(sh.dim / 16);
  const uint32_t first = blockIdx.x * (kEncTileThreads * U) + threadIdx.x;
  float v[U][16];
  load_residual_tile<InT, D, S, U>(x + static_cast<int64_t>(h) * sh.tokens * sh.dim, sh, p, h, first, units, v);
  // Dead units repeat a unit of this head: they cannot change its max.
  float m = 0.0f;
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int k = 0; k < 16; ++k) m = fmaxf(m, fabsf(v[u][k]));
  // The whole block shares the head: one atomic per block.
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  __shared__ float warp_max[kEncTileThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kEncTileThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    atomicMax(head_max + h, __float_as_uint(m));
  }
}

/// The 16 codes of a unit at the decoded scale s, value k in bits [BITS k,
/// BITS k + BITS) of w (w[1] for k >= 32 / BITS): quantize_value of each
/// value, the same codes, mostly without its IEEE division (the division,
/// rint and float -> int made the pass instruction-bound).
///
/// With r = RN(1/s) and s in [2^-100, 2^100], x r is within |x/s| 2^-24 of
/// x/s: below 2^-19 for |x/s| <= 32 (every value that matters: the codes
/// span at most [-8, 15]); quantize_value's y = RN(RN(x/s) + h) is within
/// 2^-18 of x/s + h. Here, with M = 1.5 * 2^23 (one ulp = 1 in [2^23,
/// 2^24)), t = RN(p + M) = M + rint(p) for |p| < 2^22, and d = p - rint(p)
/// (exact: p + (M - t)), where p = y' is
///   symmetric (h = 0): x r itself, with t = fma(x, r, M) and d = fma(x, r,
///     M - t) (within 2^-25);
///   midrise (h = (2^b - 1) / 2, a half-integer, not representable next to
///     M): RN(x r + h) (one FMA, within 2^-20).
/// So p is within 2^-17 of y. Where |d| < 1/2 - 2^-14 for all 16 values no
/// half-integer lies between them, rint(y) = rint(p), and t clamped to [M +
/// lo, M + hi] is the code plus M - bias. Beyond the bounds (|x/s| > 32,
/// |p| >= 2^22, infinity) the clamp gives the bound's code, as quantize_value's
/// clamp does, whatever d is (NaN is ignored by the max). Otherwise (or s
/// outside the range, s = 0 included) the unit is redone with quantize_value
/// itself. A host emulation of this rule agreed with quantize_value on 51.9 M
/// of 77.6 M values drawn at half-integers, nearby and far out, and sent the
/// other 25.7 M to the exact rule (none wrong).
///
/// v finite (the encoders reject non-finite input; for a NaN the codes are
/// unspecified, as quantize_value's). amax >= every |v[k]| (the block's max). Where RN(amax r) <= m + 1/4, m =
/// hi (symmetric, lo = -hi) or h (midrise), every exact v r lies within m +
/// 1/2 of the centre, so every t is already within [M + lo, M + hi] and the
/// clamp (two min/max a value on the busiest pipe) is skipped: the same
/// codes. That is every block of INT2 symmetric but those whose FP8 scale is
/// subnormal (a stored scale rounds by at most 2^-4 of itself above that).
template <int BITS>
__device__ __forceinline__ void quantize16(const float (&v)[16], float amax, float s, LevelRule levels,
                                           uint32_t (&w)[2]) {
  constexpr int kPerWord = 32 / BITS;
  constexpr float kMagic = 12582912.0f;  // M
  const bool sym = levels == LevelRule::symmetric;
  const int lo = sym ? 1 - (1 << (BITS - 1)) : 0;
  const int hi = sym ? (1 << (BITS - 1)) - 1 : (1 << BITS) - 1;
  const int bias = sym ? 1 << (BITS - 1) : 0;
  const float h = 0.5f * static_cast<float>((1 << BITS) - 1);  // midrise only
  const float r = __frcp_rn(s);
  const float t_lo = kMagic + static_cast<float>(lo), t_hi = kMagic + static_cast<float>(hi);  // exact
  float t[16], dmax = 0.0f;
  if (sym) {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      t[k] = __fmaf_rn(v[k], r, kMagic);
      dmax = fmaxf(dmax, fabsf(__fmaf_rn(v[k], r, __fsub_rn(kMagic, t[k]))));
    }
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float p = __fmaf_rn(v[k], r, h);
      t[k] = __fadd_rn(p, kMagic);
      dmax = fmaxf(dmax, fabsf(__fadd_rn(p, __fsub_rn(kMagic, t[k]))));
    }
  }
  // The code is t's bits minus (M's bits - bias); the sum of those
  // constants over a word's fields is taken off once (mod 2^32: exact).
  const uint32_t code_base = static_cast<uint32_t>(__float_as_int(kMagic) - bias);
  uint32_t base = 0u;
#pragma unroll
  for (int k = 0; k < kPerWord; ++k) base += code_base << (BITS * k);
  w[0] = w[1] = 0u;
  const float centre = sym ? static_cast<float>(hi) : h;
  if (__fmul_rn(amax, r) <= centre + 0.25f) {  // false for NaN (s = 0): the clamp, then the exact rule
#pragma unroll
    for (int k = 0; k < 16; ++k)
      w[k / kPerWord] += static_cast<uint32_t>(__float_as_int(t[k])) << (BITS * (k % kPerWord));
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k)
      w[k / kPerWord] += static_cast<uint32_t>(__float_as_int(fminf(fmaxf(t[k], t_lo), t_hi))) << (BITS * (k % kPerWord));
  }
  w[0] -= base;
  if constexpr (16 > kPerWord) w[1] -= base;
  const bool redo = !(s >= 0x1p-100f && s <= 0x1p100f) || dmax >= 0.5f - 0x1p-14f;
  if (redo) {  // rare: the exact rule
    w[0] = w[1] = 0u;
#pragma unroll
    for (int k = 0; k < 16; ++k)
      w[k / kPerWord] |= static_cast<uint32_t>(quantize_value(v[k], s, levels, BITS)) << (BITS * (k % kPerWord));
  }
}

/// Pass 2 (tiled): block scales, codes and span scales, as quantize_kernel.
/// A block of B values is B/16 consecutive units, hence B/16 consecutive
/// lanes (a warp's units are 32 consecutive ones starting at a multiple of
/// 32, and a row's D/16 units a multiple of B/16), all live or all dead.
/// Same grid as pass 1; block_shift = log2(sh.block).
template <int BITS, typename InT, int D, int S, int U>
__global__ void __launch_bounds__(kEncTileThreads) quantize_tile_kernel(const InT* __restrict__ x, QvgShape sh,
                                                                       QvgParts p,
                                                                       const unsigned int* __restrict__ head_max,
                                                                       int block_shift) {
  const int h = blockIdx.y;
  const uint32_t units = static_cast<uint32_t>(sh.tokens) * static_cast<uint32_t>(sh.dim / 16);
  const uint32_t first = blockIdx.x * (kEncTileThreads * U) + threadIdx.x;
  const int64_t head_vals = static_cast<int64_t>(h) * sh.tokens * sh.dim;
  const float lmax = level_max(sh.levels, BITS);
  const float span = span_scale_for(__uint_as_float(head_max[h]) / lmax, sh.scale_format);
  float v[U][16];
  load_residual_tile<InT, D, S, U>(x + head_vals, sh, p, h, first, units, v);
  // Block maxima first: every lane takes part in every shuffle.
  const int group_shift = block_shift - 4;  // log2(B/16)
  float a[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    a[u] = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k) a[u] = fmaxf(a[u], fabsf(v[u][k]));
  }
  for (int off = 1; off < (1 << group_shift); off <<= 1)
#pragma unroll
    for (int u = 0; u < U; ++u) a[u] = fmaxf(a[u], __shfl_xor_sync(0xFFFFFFFFu, a[u], off));
  uint8_t* codes = p.codes + head_vals * BITS / 8;
  uint8_t* scales = p.scales + (head_vals >> block_shift) * scale_bytes(sh.scale_format);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kEncTileThreads;
    if (i >= units) break;
    const float scale = lmax == 1.0f ? a[u] : a[u] / lmax;  // (x / 1 = x: no division for INT2 symmetric)
    const uint16_t sc = encode_block_scale(scale, span, sh.scale_format);
    const float s = decode_block_scale(sc, span, sh.scale_format);
    if ((i & ((1u << group_shift) - 1u)) == 0) {  // the block's first lane stores its scale
      const uint32_t bi = i >> group_shift;         // = token * D/B + column / B
      if (sh.scale_format == ScaleFormat::fp8) {
        scales[bi] = static_cast<uint8_t>(sc);
      } else {
        scales[2 * bi] = static_cast<uint8_t>(sc & 0xFF);
        scales[2 * bi + 1] = static_cast<uint8_t>(sc >> 8);
      }
    }
    uint32_t w[2];
    quantize16<BITS>(v[u], a[u], s, sh.levels, w);
    uint8_t* out = codes + i * (2 * BITS);  // 16 codes of BITS bits
    if constexpr (BITS == 2)
      *reinterpret_cast<uint32_t*>(out) = w[0];
    else
      *reinterpret_cast<uint2*>(out) = make_uint2(w[0], w[1]);
    if (i == 0) p.span_scales[h] = span;
  }
}

/// Packed codes of VALS values (VALS * BITS / 8 bytes: 2, 4 or 8, aligned to
/// that size) as words: w[0] holds the first 32 / BITS codes, w[1] the rest.
template <int BITS, int VALS>
__device__ __forceinline__ void load_code_words(const uint8_t* p, uint32_t* w) {
  constexpr int kBytes = VALS * BITS / 8;
  w[0] = 0u;
  w[1] = 0u;
  if constexpr (kBytes == 2) {
    w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else if constexpr (kBytes == 4) {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = u.x;
    w[1] = u.y;
  }
}

/// Code words -> float codes, without the quarter-rate I2F: 2^23 + u is
/// exact, minus 2^23.
template <int BITS, int VALS>
__device__ __forceinline__ void unpack_codes(const uint32_t* w, float* v) {
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  constexpr int kPerWord = 32 / BITS;
#pragma unroll
  for (int i = 0; i < VALS; ++i) {
    const uint32_t u = (w[i / kPerWord] >> (BITS * (i % kPerWord))) & kMask;
    v[i] = __fsub_rn(__uint_as_float(0x4B000000u | u), 8388608.0f);
  }
}

/// VALS packed codes of BITS bits -> float codes.
template <int BITS, int VALS>
__device__ __forceinline__ void load_codes(const uint8_t* p, float* v) {
  uint32_t w[2];
  load_code_words<BITS, VALS>(p, w);
  unpack_codes<BITS, VALS>(w, v);
}

/// Codes -> dequantized values: symmetric float(u - 2^(b-1)) * s (u - 2^(b-1)
/// is an exact small integer); midrise (float(u) - (2^b-1)/2) * s. The
/// per-value rule of qvg/group_quant.h dequantize_value, same bits.
template <int BITS, int VALS>
__device__ __forceinline__ void dequantize_codes(float* v, float s, LevelRule levels) {
  const float offset = levels == LevelRule::symmetric ? static_cast<float>(1 << (BITS - 1))
                                                      : 0.5f * static_cast<float>((1 << BITS) - 1);
#pragma unroll
  for (int i = 0; i < VALS; ++i) v[i] = __fmul_rn(__fsub_rn(v[i], offset), s);
}

/// Codes -> dequantized values in four SASS instructions a value (two LOP3,
/// since an instruction takes one immediate and the mask and exponent word
/// are two; FADD; FMUL) instead of five: the same bits as unpack_codes +
/// dequantize_codes (the split units of decode_lines.cuh use it; the level
/// rule a template constant).
/// The code u of bit position pos (>= 1) of a word, OR-ed into the float
/// M = 2^(23 - pos), whose mantissa bit pos is worth 1, reads M + u; minus
/// the immediate M + off (exact: off is a multiple of 1/2, M's ulp 2^-pos)
/// it is u - off exactly (Sterbenz: both operands lie within a factor 2 of
/// M >= 256), the value the reference's float(u) - off has. Each word is
/// read as w << 1 (its low half's codes at bits 1, 1 + BITS, ...) and w >> 15
/// (its high half's), so pos stays in 1..16 and no code needs its own shift.
template <int BITS, int VALS, bool MIDRISE>
__device__ __forceinline__ void dequantize_lean(const uint32_t* w, float s, float* v) {
  constexpr int kPerWord = 32 / BITS;
  constexpr int kPerHalf = kPerWord / 2;
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  constexpr float kOff = MIDRISE ? 0.5f * static_cast<float>((1 << BITS) - 1) : static_cast<float>(1 << (BITS - 1));
#pragma unroll
  for (int i = 0; i < VALS; ++i) {
    const int q = i % kPerWord;
    const uint32_t src = q < kPerHalf ? w[i / kPerWord] << 1 : w[i / kPerWord] >> 15;
    const int pos = BITS * (q % kPerHalf) + 1;
    const uint32_t magic = static_cast<uint32_t>(127 + 23 - pos) << 23;  // the float 2^(23 - pos)
    const float m_off = static_cast<float>(1u << (23 - pos)) + kOff;     // exact: see above
    v[i] = __fmul_rn(__fsub_rn(__uint_as_float((src & (kMask << pos)) | magic), m_off), s);
  }
}

/// The stored block scale of block bi (FP8 byte or FP16 bits, little-endian).
__device__ __forceinline__ uint16_t load_block_scale(const uint8_t* scales, int64_t bi, ScaleFormat f) {
  return f == ScaleFormat::fp8 ? __ldg(scales + bi)
                               : static_cast<uint16_t>(__ldg(scales + 2 * bi) | (__ldg(scales + 2 * bi + 1) << 8));
}

/// Two floats -> BF16 bits (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h2 = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h2);
}

/// VALS floats (VALS a multiple of 4) -> OutT at o (16-byte aligned), rounded
/// to nearest, with 16-byte stores.
template <typename OutT, int VALS>
__device__ __forceinline__ void store_vals(OutT* o, const float* v) {
  if constexpr (sizeof(OutT) == 2) {
    static_assert(VALS % 8 == 0, "16-bit stores go 8 values at a time");
    uint32_t w[VALS / 2];
#pragma unroll
    for (int i = 0; i < VALS / 2; ++i) {
      OutT lo, hi;
      store_from_float(&lo, v[2 * i]);
      store_from_float(&hi, v[2 * i + 1]);
      w[i] = static_cast<uint32_t>(*reinterpret_cast<uint16_t*>(&lo)) |
             (static_cast<uint32_t>(*reinterpret_cast<uint16_t*>(&hi)) << 16);
    }
    // __stwb (a plain write-back store of a uint4) rather than q[j] = ...:
    // from the assignment nvcc 13.0 sometimes emits four st.global.u32 (when
    // it cannot prove the address 16-byte aligned after splitting the
    // struct), so one warp store instruction writes 4 bytes in every 16.
    uint4* q = reinterpret_cast<uint4*>(o);
#pragma unroll
    for (int j = 0; j < VALS / 8; ++j) __stwb(q + j, make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]));
  } else {
    float4* q = reinterpret_cast<float4*>(o);
#pragma unroll
    for (int i = 0; i < VALS / 4; ++i) __stwb(q + i, make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]));
  }
}

/// Fused decode: dequantize and add every stage's centroid (last stage
/// first), one store per value. Each thread owns VALS (8 or 16) consecutive
/// values of a row. Tokens and destination rows per `range`.
/// Grid: H*range.count*(D/VALS) threads.
template <int BITS, int VALS, typename OutT>
__global__ void decode_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out, DecodeRange range) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= row_slot_count(sh.heads, range.count, sh.dim, VALS)) return;
  const RowSlot at = row_slot(g, range.count, sh.dim, VALS);
  const int h = at.h, col = at.col;
  const int64_t n = range.begin + at.n;
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + n;
  const int64_t bi = row * (sh.dim / sh.block) + col / sh.block;
  const float s = decode_block_scale(load_block_scale(p.scales, bi, sh.scale_format), __ldg(p.span_scales + h),
                                     sh.scale_format);
  float v[VALS];
  load_codes<BITS, VALS>(p.codes + row * (sh.dim * BITS / 8) + col * BITS / 8, v);
  dequantize_codes<BITS, VALS>(v, s, sh.levels);
  for (int st = sh.stages - 1; st >= 0; --st) {
    const uint8_t id = __ldg(p.ids + (static_cast<int64_t>(st) * sh.heads + h) * sh.tokens + n);
    float c[VALS];
    load_centroid_vals<VALS>(sh, p, st, h, id, col, c);
#pragma unroll
    for (int i = 0; i < VALS; ++i) v[i] = __fadd_rn(v[i], c[i]);
  }
  store_vals<OutT, VALS>(out + range.out_at(h, range.out_offset + (n - range.begin), sh.dim) + col, v);
}


/// BF16 rows -> float: tokens [range.begin, +range.count) of every head of
/// src ([H][tokens][D] BF16 bits) to rows range.out_offset.. of out (rows of
/// range.out_tokens per DecodeRange's strides). One thread per 8 values (D % 8 == 0).
static __global__ void widen_bf16_kernel(const uint16_t* __restrict__ src, int heads, int64_t tokens, int dim,
                                  DecodeRange range, float* __restrict__ out) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= row_slot_count(heads, range.count, dim, 8)) return;
  const auto [h, n, col] = row_slot(g, range.count, dim, 8);
  float v[8];
  load_bf16_vals<8>(src + (static_cast<int64_t>(h) * tokens + range.begin + n) * dim + col, v);
  float4* o = reinterpret_cast<float4*>(out + range.out_at(h, range.out_offset + n, dim) + col);
  o[0] = make_float4(v[0], v[1], v[2], v[3]);
  o[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/// FP8 centroids of one stage (docs/FORMAT.md): head blockIdx.x's C * D
/// BF16 centroids (cent: [H][C][D] bits) -> their scale
/// (fp8_centroid_scale_for their largest magnitude) into scales[h] and the
/// codes fp8(c / scale) into codes ([H][C][D]): put_stage_centroids' rule.
/// Block: 256 threads.
static __global__ void __launch_bounds__(256) pack_fp8_centroids_kernel(const uint16_t* __restrict__ cent,
                                                                         int64_t per_head, uint8_t* __restrict__ codes,
                                                                         float* __restrict__ scales) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * per_head;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < per_head; i += blockDim.x)
    m = fmaxf(m, fabsf(__uint_as_float(static_cast<uint32_t>(cent[base + i]) << 16)));
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  __shared__ float warp_max[8];
  __shared__ float scale;
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < 8; ++w) m = fmaxf(m, warp_max[w]);
    scale = fp8_centroid_scale_for(m);
    scales[blockIdx.x] = scale;
  }
  __syncthreads();
  const float sc = scale;
  for (int64_t i = threadIdx.x; i < per_head; i += blockDim.x)
    codes[base + i] = fp8_e4m3_from_float(__fdiv_rn(__uint_as_float(static_cast<uint32_t>(cent[base + i]) << 16), sc));
}

/// A centroids part's FP8 centroids (codes [S][H][C][D], scales [S][H]) ->
/// BF16 bits: code times scale, a BF16 value (exact). per_head = C * D; one
/// thread per 8 values.
static __global__ void widen_fp8_centroids_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                                  int64_t values, int64_t per_head, uint16_t* __restrict__ out) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= values) return;
  float v[8];
  load_fp8_vals<8>(codes + i, __ldg(scales + i / per_head), v);
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = (__float_as_uint(v[2 * k]) >> 16) | (__float_as_uint(v[2 * k + 1]) & 0xFFFF0000u);
  *reinterpret_cast<uint4*>(out + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

/// The next stage's points with stored (FP8) centroids: next = bf16(x -
/// c[ids]) for the one stage that one (a one-stage shape) and p (that
/// stage's view, stage_parts) describe; x [H][N][D] of InT. One thread per
/// 16 values: load_residual16's rule, then BF16 (advance_stage's).
template <typename InT>
__global__ void stage_points_kernel(const InT* __restrict__ x, QvgShape one, QvgParts p,
                                    uint16_t* __restrict__ next) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= row_slot_count(one.heads, one.tokens, one.dim, kValsPerThread)) return;
  const auto [h, n, col] = row_slot(g, one.tokens, one.dim, kValsPerThread);
  const int64_t at = (static_cast<int64_t>(h) * one.tokens + n) * one.dim + col;
  float v[kValsPerThread];
  load_residual16(x + at, one, p, h, n, col, v);
  uint32_t w[kValsPerThread / 2];
#pragma unroll
  for (int k = 0; k < kValsPerThread / 2; ++k)
    w[k] = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k]))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1]))) << 16);
  uint4* o = reinterpret_cast<uint4*>(next + at);
  o[0] = make_uint4(w[0], w[1], w[2], w[3]);
  o[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

}  // namespace qvg::cuda
