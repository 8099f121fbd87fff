// Fused decode in whole lines with runs of rows: the default decode kernel
// for D = 64 / 128 and up to 4 smoothing stages (decode_kernel, one thread
// per 16 values, covers every other shape).
//   - the D/16 lanes of a row group own U consecutive rows, so every load of
//     a thread's rows sits at an immediate offset from one base (rows
//     kRowBytes apart) and every store at a multiple of the destination's
//     row stride (DecodeRange: D values head-major, H * D token-major), and
//     the ids of a run of U rows are
//     U consecutive bytes of each stage: one load a stage where aligned (a
//     uniform branch per block);
//   - the scale format is a template constant and the scales are converted
//     by the hardware (FP8 E4M3 pair -> f16x2 -> f32), exact like the
//     reference's software conversion (tests: every FP8 and FP16 code);
//   - centroid rows are addressed with a byte PRMT and one wide multiply-add
//     from the lane's base.
// A row's lanes read and write whole 128-byte lines with each 16-byte load or
// store instruction: unit c (< D/16) of a row is the two pieces of 8 values
// [8c, 8c + 8) and [D/2 + 8c, D/2 + 8c + 8). The values and their order of
// operations are decode_kernel's: the same bits. The measurements behind
// these choices (bench/probes/decode_probe.cu): docs/BENCHMARKS.md.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/qvg_kernels.cuh"
#include "qvg/cuda.h"

namespace qvg::cuda {

constexpr int kTileThreads = 256;  // threads a block of the lines decode

/// The codes of a split unit's two pieces of 8 values, the first at p (the
/// second half a row later): INT2, all 16 in w[0] (the first piece's in the
/// low half); INT4, one piece a word.
template <int BITS, int D>
__device__ __forceinline__ void load_split_codes(const uint8_t* p, uint32_t (&w)[2]) {
  uint32_t a[2], b[2];
  load_code_words<BITS, 8>(p, a);
  load_code_words<BITS, 8>(p + D * BITS / 16, b);
  if constexpr (BITS == 2) {
    w[0] = a[0] | (b[0] << 16);
    w[1] = 0u;
  } else {
    w[0] = a[0];
    w[1] = b[0];
  }
}

/// Rows a thread group owns in the default decode of `stages` stages, and
/// its launch bounds' minimum of blocks an SM (4: 64 registers a thread; 0:
/// ptxas's choice): the fastest in bench_decode_probe on the H200
/// (docs/BENCHMARKS.md).
constexpr int lines_rows(int stages) { return stages == 0 ? 1 : stages == 1 ? 2 : 4; }
constexpr int lines_min_blocks(int stages) { return stages >= 2 ? 4 : 0; }

/// The decoded scales of a unit's two pieces from their stored codes packed
/// in one word (FP8: bytes 0 and 1; FP16: halves 0 and 1, the low piece's
/// first), times the head's span scale. The hardware conversions (FP8 E4M3
/// pair to f16x2, f16 to f32) are exact for every code, as qvg/fp8.h's and
/// qvg/half.h's software ones; a NaN code gives a NaN either way, and the
/// product's NaN is the device's canonical one on both paths.
template <bool FP8>
__device__ __forceinline__ float2 decode_scale_pair(uint32_t packed, float span) {
  __half2_raw h;
  if constexpr (FP8) {
    h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(packed), __NV_E4M3);
  } else {
    h.x = static_cast<unsigned short>(packed);
    h.y = static_cast<unsigned short>(packed >> 16);
  }
  const float2 f = __half22float2(__half2(h));
  return make_float2(__fmul_rn(f.x, span), __fmul_rn(f.y, span));
}

/// The centroid ids of rows ids[0 .. U-1] in each of S stages (stage_ids
/// bytes apart): id[st] byte u = row u's. ALIGNED: the run starts at a
/// multiple of U bytes in every stage, one 16- or 32-bit load a stage.
template <int S, int U, bool ALIGNED>
__device__ __forceinline__ void load_id_runs(const uint8_t* ids, uint32_t stage_ids, uint32_t (&id)[S > 0 ? S : 1]) {
#pragma unroll
  for (int st = 0; st < S; ++st) {
    const uint8_t* q = ids + st * stage_ids;
    if constexpr (ALIGNED && U == 4) {
      id[st] = __ldg(reinterpret_cast<const unsigned int*>(q));
    } else if constexpr (ALIGNED && U == 2) {
      id[st] = __ldg(reinterpret_cast<const unsigned short*>(q));
    } else {
      id[st] = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) id[st] |= static_cast<uint32_t>(__ldg(q + u)) << (8 * u);
    }
  }
}

/// Row u's centroid of stage st at the lane's columns: cent (the head's stage
/// 0 row 0 at those columns, bytes) + (st H C + id) * 2D bytes, id being byte
/// u of ids (load_id_runs) and hc = H C. 32-bit products (S H C D < 2^31).
template <int D>
__device__ __forceinline__ const uint16_t* centroid_row(const char* cent, uint32_t ids, int u, int st, uint32_t hc) {
  const uint32_t k = __byte_perm(ids, 0u, 0x4440u + u) + st * hc;  // byte u, zero-extended
  return reinterpret_cast<const uint16_t*>(cent + static_cast<uint64_t>(k) * (2 * D));
}

/// centroid_row for FP8 centroids: cent8 + (st H C + id) * D bytes.
template <int D>
__device__ __forceinline__ const uint8_t* centroid_row8(const uint8_t* cent8, uint32_t ids, int u, int st,
                                                        uint32_t hc) {
  const uint32_t k = __byte_perm(ids, 0u, 0x4440u + u) + st * hc;
  return cent8 + static_cast<uint64_t>(k) * D;
}

/// Rows r0 .. r0 + U - 1 of the range (all of them < range.count), lane c of
/// each: dequantize, add every stage's centroid, store. ALIGNED: the ids of
/// the run start at a multiple of U bytes in every stage (one load a
/// stage). CF8: FP8 centroids (codes times the stage and head's scale).
template <int BITS, int D, int S, int U, typename OutT, bool MIDRISE, bool FP8, bool CF8, bool ALIGNED>
__device__ __forceinline__ void decode_lines_run(const QvgShape& sh, const QvgParts& p, OutT* __restrict__ out,
                                                 const DecodeRange& range, int block_shift, uint32_t r0) {
  constexpr int kLanes = D / 16;
  constexpr int kRowBytes = D * BITS / 8;
  constexpr int kHalf = D / 2;  // the second piece's offset in values
  constexpr int kScaleBytes = FP8 ? 1 : 2;
  const int h = blockIdx.y;
  const uint32_t c = threadIdx.x % kLanes;
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + range.begin + r0;  // source row of r0
  const uint8_t* codes = p.codes + row * kRowBytes + c * BITS;                  // piece 0 of row r0
  const int row_scales = (D >> block_shift) * kScaleBytes;                      // bytes a row
  const uint8_t* scales = p.scales + row * row_scales;
  const int sc0 = ((8 * c) >> block_shift) * kScaleBytes, sc1 = ((kHalf + 8 * c) >> block_shift) * kScaleBytes;
  const uint8_t* ids = p.ids + row;
  const uint32_t stage_ids = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.tokens);  // S H N < 2^31
  const float span = __ldg(p.span_scales + h);
  const int64_t rs = range.out_row_stride(D);  // elements between destination rows
  OutT* o = out + range.out_at(h, range.out_offset + r0, D) + 8 * c;
  // Stage st's centroid k of the head at the lane's columns: cent + (st H C + k) * 2D bytes.
  const char* cent =
      CF8 ? nullptr : reinterpret_cast<const char*>(p.centroids + static_cast<int64_t>(h) * sh.centroids * D + 8 * c);
  const uint32_t hc = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.centroids);
  // FP8 centroids: stage st's centroid k at cent8 + (st H C + k) * D bytes, times cscale[st].
  const uint8_t* cent8 = CF8 ? p.cent8 + static_cast<int64_t>(h) * sh.centroids * D + 8 * c : nullptr;
  float cscale[S > 0 ? S : 1];
#pragma unroll
  for (int st = 0; st < S; ++st) cscale[st] = CF8 ? __ldg(p.cent_scales + st * sh.heads + h) : 0.0f;

  // 1. Every load that does not depend on another one.
  uint32_t w[U][2];
  uint32_t sc[U];  // the two pieces' scale codes (decode_scale_pair)
  uint32_t id[S > 0 ? S : 1];  // byte u = row u's centroid index
#pragma unroll
  for (int u = 0; u < U; ++u) {
    load_split_codes<BITS, D>(codes + u * kRowBytes, w[u]);
    const uint8_t* su = scales + u * row_scales;
    if constexpr (FP8)
      sc[u] = __ldg(su + sc0) | (static_cast<uint32_t>(__ldg(su + sc1)) << 8);
    else
      sc[u] = __ldg(reinterpret_cast<const unsigned short*>(su + sc0)) |
              (static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(su + sc1))) << 16);
  }
  load_id_runs<S, U, ALIGNED>(ids, stage_ids, id);

  // 2. Per row: the centroids of every stage at once, then the arithmetic.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    float cen[S > 0 ? S : 1][16];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      if constexpr (CF8) {
        const uint8_t* crow = centroid_row8<D>(cent8, id[st], u, st, hc);
        load_fp8_vals<8>(crow, cscale[st], cen[st]);
        load_fp8_vals<8>(crow + kHalf, cscale[st], cen[st] + 8);
      } else {
        const uint16_t* crow = centroid_row<D>(cent, id[st], u, st, hc);
        load_bf16_vals<8>(crow, cen[st]);
        load_bf16_vals<8>(crow + kHalf, cen[st] + 8);
      }
    }
    const float2 s = decode_scale_pair<FP8>(sc[u], span);
    float v[16];
    const uint32_t w1 = BITS == 2 ? w[u][0] >> 16 : w[u][1];  // the second piece's codes
    dequantize_lean<BITS, 8, MIDRISE>(&w[u][0], s.x, v);
    dequantize_lean<BITS, 8, MIDRISE>(&w1, s.y, v + 8);
#pragma unroll
    for (int st = S - 1; st >= 0; --st)
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], cen[st][k]);
    store_vals<OutT, 8>(o + u * rs, v);
    store_vals<OutT, 8>(o + u * rs + kHalf, v + 8);
  }
}

template <int BITS, int D, int S, int U, typename OutT, bool MIDRISE, bool FP8, bool CF8>
__device__ __forceinline__ void decode_lines_body(const QvgShape& sh, const QvgParts& p, OutT* __restrict__ out,
                                                  const DecodeRange& range, int block_shift) {
  constexpr int kGroups = kTileThreads / (D / 16);  // row groups a block
  const uint32_t r0 = (blockIdx.x * kGroups + threadIdx.x / (D / 16)) * U;
  const uint32_t count = static_cast<uint32_t>(range.count);
  if (r0 + U <= count) {
    // The same for every thread of the block (r0 is a multiple of U): a
    // uniform branch, not two predicated paths.
    const uintptr_t first = reinterpret_cast<uintptr_t>(p.ids) + static_cast<uintptr_t>(blockIdx.y) * sh.tokens +
                            range.begin + r0;
    const uint32_t stage_ids = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.tokens);
    if constexpr (U > 1) {
      if (((first | stage_ids) & (U - 1)) == 0) {
        decode_lines_run<BITS, D, S, U, OutT, MIDRISE, FP8, CF8, true>(sh, p, out, range, block_shift, r0);
        return;
      }
    }
    decode_lines_run<BITS, D, S, U, OutT, MIDRISE, FP8, CF8, false>(sh, p, out, range, block_shift, r0);
  } else {  // the range's last, short run: a row at a time
    for (uint32_t r = r0; r < count; ++r)
      decode_lines_run<BITS, D, S, 1, OutT, MIDRISE, FP8, CF8, false>(sh, p, out, range, block_shift, r);
  }
}

/// Grid: (ceil(range.count / (256 / (D/16) * U)), H); block 256. The group of
/// D/16 lanes g of block x owns rows (x * 256 / (D/16) + g) * U .. + U - 1 of
/// the range. The host guarantees what decode_tile_kernel's split units need
/// (range.count * D < 2^30, S * H * C * D < 2^31, sh.block >= 16) and
/// S * H * N < 2^31 (32-bit stage offsets of the ids). block_shift =
/// log2(sh.block). MINB > 0 is the launch bounds' minimum of resident blocks
/// an SM (4 -> 64 registers a thread); 0 leaves the registers to ptxas.
/// CF8: FP8 centroids (sh.fp8_centroids; with stages only).
template <int BITS, int D, int S, int U, typename OutT, int MINB = 0, bool CF8 = false>
__global__ void __launch_bounds__(kTileThreads, MINB) decode_lines_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                                   DecodeRange range, int block_shift) {
  static_assert(!CF8 || S > 0, "FP8 centroids need a stage");
  static_assert(D == 64 || D == 128, "lines decode: D = 64 or 128");
  static_assert(S >= 0 && S <= kTileMaxStages, "lines decode: up to 4 stages");
  static_assert(U == 1 || U == 2 || U == 4, "lines decode: runs of 1, 2 or 4 rows");
  const bool midrise = sh.levels == LevelRule::midrise, fp8 = sh.scale_format == ScaleFormat::fp8;
  if (midrise && fp8)
    decode_lines_body<BITS, D, S, U, OutT, true, true, CF8>(sh, p, out, range, block_shift);
  else if (midrise)
    decode_lines_body<BITS, D, S, U, OutT, true, false, CF8>(sh, p, out, range, block_shift);
  else if (fp8)
    decode_lines_body<BITS, D, S, U, OutT, false, true, CF8>(sh, p, out, range, block_shift);
  else
    decode_lines_body<BITS, D, S, U, OutT, false, false, CF8>(sh, p, out, range, block_shift);
}

/// Launches decode_lines_kernel for a range (the launch shape of
/// lines_rows(S) rows a group). CF8: sh has FP8 centroids.
template <int BITS, int D, int S, bool CF8, typename OutT>
cudaError_t launch_decode_lines(const QvgShape& sh, QvgParts p, const DecodeRange& range, OutT* out, cudaStream_t s,
                                int block_shift) {
  constexpr int U = lines_rows(S);
  constexpr int kRowsPerBlock = kTileThreads / (D / 16) * U;
  const dim3 grid(static_cast<unsigned>((range.count + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(sh.heads));
  decode_lines_kernel<BITS, D, S, U, OutT, lines_min_blocks(S), CF8>
      <<<grid, kTileThreads, 0, s>>>(sh, p, out, range, block_shift);
  return cudaGetLastError();
}

/// The lines decode of a tensor with FP8 centroids (decode_lines_fp8c.cu: its
/// own translation unit, compiled beside qvg_cuda.cu's BF16 kernels).
void decode_lines_fp8c(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
                       cudaStream_t s, int block_shift);

}  // namespace qvg::cuda
