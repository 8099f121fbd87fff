// Fused decode of qvg's codebook residual code (code=cq; docs/FORMAT.md,
// "The codebook residual code"): per token n of head h,
//   s = fp8(scales[h][n]) * span[h]
//   x[n][j G + t] = s * w[h][j][idx_j][t]        (j < D/G, t < G)
//   then every stage's centroid added, last stage first,
// the CPU reference's float operations in its order (cq_decode_row_ref, then
// QvgCodec::decode's stage sums), each rounded to nearest: the same bits.
//
// Work: a warp owns one unit of 16 consecutive channels [16 u, 16 u + 16) of
// 32 consecutive tokens (lane = token). At each gather all 32 lanes read the
// codebook of the same channel group j (K G values: one to a few 128-byte
// lines), and each lane writes its token's 16 values as whole 32-byte
// sectors (BF16) or 64-byte pairs (FP32).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/qvg_kernels.cuh"
#include "qvg/cuda.h"

namespace qvg::cuda {

constexpr int kCqThreads = 256;              // threads a block: 8 warps
constexpr int kCqWarps = kCqThreads / 32;    // (row group, unit) items a block
constexpr int kCqUnit = 16;                  // channels a thread decodes

/// One FP8 E4M3 code as a float (the hardware conversion through FP16:
/// exact for every code, as qvg/fp8.h's fp8_e4m3_to_float).
__device__ __forceinline__ float fp8_code_value(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

/// Word i (little-endian 32 bits) of the codes part, `bytes` long from
/// `codes` (4-byte aligned): one 4-byte load where the word lies inside the
/// part, else the bytes of it that do (the others 0: never read as an index).
__device__ __forceinline__ uint32_t code_word(const uint8_t* codes, int64_t i, int64_t bytes) {
  const int64_t at = 4 * i;
  if (at + 4 <= bytes) return __ldg(reinterpret_cast<const unsigned int*>(codes) + i);
  uint32_t w = 0;
  for (int k = 0; k < 4; ++k)
    if (at + k < bytes) w |= static_cast<uint32_t>(__ldg(codes + at + k)) << (8 * k);
  return w;
}

/// The NI = 16 / G indices of B bits of one unit, index i at bits i B ..
/// i B + B - 1 of the stream starting at bit `pos` of the codes part (the
/// packing of cq_pack_indices_ref: bit t of index j at bit j B + t of the
/// token's row, LSB first). idx[i]: index i.
///   A = ceil(NI B / 32) words from bit pos: W = A + 1 aligned words
///   funnel-shifted by pos mod 32.
template <int G, int B>
__device__ __forceinline__ void load_unit_indices(const uint8_t* codes, int64_t bytes, int64_t pos,
                                                  uint32_t (&idx)[kCqUnit / G]) {
  constexpr int kIdx = kCqUnit / G;
  constexpr int kA = (kIdx * B + 31) / 32;  // words of the unit's bits
  constexpr uint32_t kMask = (1u << B) - 1u;
  const int64_t w0 = pos >> 5;
  const uint32_t shift = static_cast<uint32_t>(pos & 31);
  uint32_t raw[kA + 1];
#pragma unroll
  for (int k = 0; k <= kA; ++k) raw[k] = code_word(codes, w0 + k, bytes);
  uint32_t a[kA + 1];  // a[k]: bits 32 k .. 32 k + 31 of the unit's stream (a[kA] = 0)
#pragma unroll
  for (int k = 0; k < kA; ++k) a[k] = __funnelshift_r(raw[k], raw[k + 1], shift);
  a[kA] = 0u;
#pragma unroll
  for (int i = 0; i < kIdx; ++i) {
    const int q = i * B;  // compile-time after unrolling
    idx[i] = __funnelshift_r(a[q >> 5], a[(q >> 5) + 1], q & 31) & kMask;
  }
}

/// The G values of one BF16 codeword at p (G * 2 bytes, aligned to that) as
/// floats (exact).
template <int G>
__device__ __forceinline__ void load_codeword_bf16(const uint16_t* p, float* out) {
  if constexpr (G == 8) {
    load_bf16_vals<8>(p, out);
  } else if constexpr (G == 4) {
    const uint2 a = __ldg(reinterpret_cast<const uint2*>(p));
    out[0] = __uint_as_float(a.x << 16);
    out[1] = __uint_as_float(a.x & 0xFFFF0000u);
    out[2] = __uint_as_float(a.y << 16);
    out[3] = __uint_as_float(a.y & 0xFFFF0000u);
  } else if constexpr (G == 2) {
    const uint32_t a = __ldg(reinterpret_cast<const unsigned int*>(p));
    out[0] = __uint_as_float(a << 16);
    out[1] = __uint_as_float(a & 0xFFFF0000u);
  } else {
    out[0] = __uint_as_float(static_cast<uint32_t>(__ldg(p)) << 16);
  }
}

/// Two FP8 codes (bytes 0 and 1 of w) as floats times scale: the CPU's
/// fp8_e4m3_to_float(code) * scale (exact conversion, one rounded product).
__device__ __forceinline__ void fp8_pair_times(uint32_t w, float scale, float* out) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xFFFFu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  out[0] = __fmul_rn(f.x, scale);
  out[1] = __fmul_rn(f.y, scale);
}

/// The G values of one FP8 codeword at p (G bytes; 4-byte aligned for G >=
/// 4, 2-byte for G = 2) times the head's codebook scale.
template <int G>
__device__ __forceinline__ void load_codeword_fp8(const uint8_t* p, float scale, float* out) {
  if constexpr (G >= 4) {
#pragma unroll
    for (int k = 0; k < G / 4; ++k) {
      const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p) + k);
      fp8_pair_times(w, scale, out + 4 * k);
      fp8_pair_times(w >> 16, scale, out + 4 * k + 2);
    }
  } else if constexpr (G == 2) {
    fp8_pair_times(__ldg(reinterpret_cast<const unsigned short*>(p)), scale, out);
  } else {
    out[0] = __fmul_rn(fp8_code_value(__ldg(p)), scale);
  }
}

/// Grid: (ceil(ceil(range.count / 32) * D/16 / 8), H); block 256. Warp w of
/// block x takes item x * 8 + w = (row group r, unit u), r = item / (D/16),
/// u = item % (D/16); lane l decodes source token range.begin + 32 r + l
/// (when below range.count), channels [16 u, 16 u + 16), into row
/// range.out_offset + 32 r + l of out (range.out_tokens rows per DecodeRange's strides).
/// G = sh.cq_dim, B = sh.cq_bits, F8 = sh.fp8_books (the stages' centroids
/// are FP8 too where there are stages: one centroid_format).
/// Preconditions (the launcher's): D % 16 == 0; H <= 65535; the parts of
/// DeviceParts::view() (codes 4-byte aligned, BF16 codebooks 16-byte
/// aligned, FP8 ones 4-byte); out 16-byte aligned.
template <int G, int B, bool F8, typename OutT>
__global__ void __launch_bounds__(kCqThreads) decode_cq_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                              DecodeRange range) {
  static_assert(G == 1 || G == 2 || G == 4 || G == 8, "cq_dim: 1, 2, 4 or 8");
  static_assert(B >= 1 && B <= 8, "codeword index: 1 to 8 bits");
  constexpr int kIdx = kCqUnit / G;  // sub-vectors a unit
  constexpr int kK = 1 << B;         // codewords a book
  const int h = blockIdx.y;
  const int units = sh.dim / kCqUnit;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kCqWarps + threadIdx.x / 32;
  const int64_t r = (item / units) * 32 + threadIdx.x % 32;  // token of the range
  const int u = static_cast<int>(item % units);
  if (r >= range.count) return;
  const int64_t n = range.begin + r;
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + n;
  const int64_t row_bytes = (static_cast<int64_t>(sh.dim / G) * B + 7) / 8;  // codebook_row_bytes(sh)

  // 1. The token's scale and the unit's indices.
  const float s = __fmul_rn(fp8_code_value(__ldg(p.scales + row)), __ldg(p.span_scales + h));
  const int64_t code_bytes = static_cast<int64_t>(sh.heads) * sh.tokens * row_bytes;
  uint32_t idx[kIdx];
  load_unit_indices<G, B>(p.codes, code_bytes, row * row_bytes * 8 + static_cast<int64_t>(u) * kIdx * B, idx);

  // 2. The codewords of the unit's sub-vectors, times s.
  const int64_t groups = sh.dim / G;
  const int64_t book0 = (static_cast<int64_t>(h) * groups + static_cast<int64_t>(u) * kIdx) * kK;  // codeword index
  float v[kCqUnit];
  const float book_scale = F8 ? __ldg(p.book_scales + h) : 0.0f;
#pragma unroll
  for (int i = 0; i < kIdx; ++i) {
    const int64_t at = (book0 + static_cast<int64_t>(i) * kK + idx[i]) * G;  // value offset in the books
    if constexpr (F8)
      load_codeword_fp8<G>(p.books + at, book_scale, v + i * G);
    else
      load_codeword_bf16<G>(reinterpret_cast<const uint16_t*>(p.books) + at, v + i * G);
  }
#pragma unroll
  for (int k = 0; k < kCqUnit; ++k) v[k] = __fmul_rn(s, v[k]);

  // 3. The stages' centroids, last stage first (the reference's order).
  const int col = u * kCqUnit;
  for (int st = sh.stages - 1; st >= 0; --st) {
    const uint8_t id = __ldg(p.ids + (static_cast<int64_t>(st) * sh.heads + h) * sh.tokens + n);
    float c[kCqUnit];
    load_centroid_vals<kCqUnit>(sh, p, st, h, id, col, c);
#pragma unroll
    for (int k = 0; k < kCqUnit; ++k) v[k] = __fadd_rn(v[k], c[k]);
  }
  store_vals<OutT, kCqUnit>(out + range.out_at(h, range.out_offset + r, sh.dim) + col, v);
}

/// The code=cq decode of a token range (decode_cq.cu): decode_cq_kernel for
/// sh's G, b, codebook format and the output type. Throws qvg::Error for a
/// shape it does not take (checked by make_shape and decode_range first).
void decode_cq(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
               cudaStream_t s);

}  // namespace qvg::cuda
