// Probe only (bench_decode_probe): the fused decode tiled per head, for D =
// 64 / 128 and up to 4 smoothing stages: the default before
// src/cuda/decode_lines.cuh, which took its split units over runs of rows.
//
// Why a second kernel: decode writes ~8x the bytes it reads, so it should run
// at the device's write rate, but the one-thread-per-16-values kernel spent
// its time on index arithmetic (64-bit divisions by run-time sizes) and on
// one dependent chain of loads per thread (docs/BENCHMARKS.md). Here the head
// is blockIdx.y, D and the stage count are template constants, in-head
// offsets are 32-bit, and each thread owns U units of VALS (16 or 8) values,
// 256 units apart (so every load and store instruction of a warp stays
// coalesced). With VALS = 8 a unit is one 16-byte bf16 store and a warp's
// store instruction covers 512 contiguous bytes; with VALS = 16 each of its
// two store instructions covers every other 16 bytes of 1 KiB (half of each
// 32-byte sector); bench_decode_probe times both.
// All of a thread's codes, scales and ids are loaded before any arithmetic,
// then each unit issues its S centroid loads together. Same values and the
// same order of operations as decode_kernel: the same bits.
#pragma once

#include "cuda/decode_lines.cuh"

namespace qvg::cuda {

/// Units of 16 values per thread, by stage count: the fastest of 1, 2, 4 in
/// bench_decode_probe on the H200 (LongCat shape; docs/BENCHMARKS.md). More
/// units per thread put more centroid gathers in flight, which pays once
/// the gathers dominate (4 stages) and costs where they do not.
constexpr int tile_units(int stages) { return stages == 0 ? 1 : stages == 1 ? 2 : 4; }
/// Whether the default decode of `stages` stages takes split units
/// (decode_split_body): with stages, where they measured faster (their
/// whole-line gathers halve the L1 data-pipe wavefronts that bind the
/// contiguous units at four stages; docs/BENCHMARKS.md, tenth slice).
constexpr bool tile_split(int stages) { return stages >= 1; }
/// Launch-bounds minimum of blocks an SM for the default decode of `stages`
/// stages: at 2 or more, 4 (64 registers a thread, half the SM's warps).
/// Without it ptxas takes 72 and QVG-Pro's LongCat decode measured 59.3
/// against 62.8 % of copy; at one stage the cap costs (74.9 against 82.3 %
/// at U = 2), so there it is left to ptxas (0).
constexpr int tile_min_blocks(int stages) { return stages >= 2 ? 4 : 0; }

/// decode_tile_kernel with SPLIT: unit c (< D/16) of a row is the two pieces
/// of 8 values [8c, 8c + 8) and [D/2 + 8c, D/2 + 8c + 8), so the D/16 lanes
/// of a row read and write whole 128-byte lines with each 16-byte load or
/// store instruction (D = 128: 8 lanes x 16 bytes), where the contiguous
/// 16-value unit spreads each instruction over every other 16 bytes of 256.
/// The price: two code loads and two scale loads a unit instead of one,
/// paid back by dequantize_lean and 32-bit centroid offsets. Measured
/// (bench_decode_probe, H200, docs/BENCHMARKS.md, tenth slice): LongCat
/// QVG-Pro 60.3 -> 62.8 % of copy (U = 4, 64 registers), Self-Forcing
/// 54.4 -> 58.6 %; QVG about as fast as before or 1 % faster (U = 2). Same
/// values, same order of operations: the same bits.
template <int BITS, int D, int S, int U, typename OutT, bool MIDRISE>
__device__ __forceinline__ void decode_split_body(const QvgShape& sh, const QvgParts& p, OutT* __restrict__ out,
                                                  const DecodeRange& range, int block_shift) {
  constexpr int kUnitsPerRow = D / 16;
  constexpr int kRowBytes = D * BITS / 8;
  constexpr int kPieceBytes = BITS;  // 8 codes of BITS bits
  constexpr int kHalf = D / 2;       // the second piece's offset in values
  const int h = blockIdx.y;
  const uint32_t units = static_cast<uint32_t>(range.count) * kUnitsPerRow;
  const uint32_t first = blockIdx.x * (kTileThreads * U) + threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(h) * sh.tokens + range.begin;
  const int nblocks = D >> block_shift;
  const uint8_t* codes = p.codes + row0 * kRowBytes;
  const uint8_t* scales = p.scales + row0 * nblocks * scale_bytes(sh.scale_format);
  const uint8_t* ids = p.ids + row0;
  const int64_t stage_ids = static_cast<int64_t>(sh.heads) * sh.tokens;
  const float span = __ldg(p.span_scales + h);
  OutT* o = out + (static_cast<int64_t>(h) * range.out_tokens + range.out_offset) * D;
  const uint16_t* cent = p.centroids + static_cast<int64_t>(h) * sh.centroids * D;  // stage 0 of head h
  const uint32_t cstride = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.centroids) * D;  // < 2^31
  uint32_t w[U][2];
  uint16_t sc[U][2];
  uint32_t id[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = min(first + u * kTileThreads, units - 1);  // dead units repeat the last
    const uint32_t n = i / kUnitsPerRow, c = i % kUnitsPerRow;
    load_split_codes<BITS, D>(codes + n * kRowBytes + c * kPieceBytes, w[u]);
    sc[u][0] = load_block_scale(scales, static_cast<int64_t>(n * nblocks + ((8 * c) >> block_shift)), sh.scale_format);
    sc[u][1] = load_block_scale(scales, static_cast<int64_t>(n * nblocks + ((kHalf + 8 * c) >> block_shift)),
                                sh.scale_format);
    id[u] = 0;
#pragma unroll
    for (int st = 0; st < S; ++st) id[u] |= static_cast<uint32_t>(__ldg(ids + st * stage_ids + n)) << (8 * st);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kTileThreads;
    if (i >= units) break;
    const uint32_t n = i / kUnitsPerRow, c = i % kUnitsPerRow;
    float cen[S > 0 ? S : 1][16];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      const uint16_t* crow = cent + (st * cstride + ((id[u] >> (8 * st)) & 0xFFu) * D + 8 * c);
      load_bf16_vals<8>(crow, cen[st]);
      load_bf16_vals<8>(crow + kHalf, cen[st] + 8);
    }
    float v[16];
    const uint32_t w1 = BITS == 2 ? w[u][0] >> 16 : w[u][1];  // the second piece's codes
    dequantize_lean<BITS, 8, MIDRISE>(&w[u][0], decode_block_scale(sc[u][0], span, sh.scale_format), v);
    dequantize_lean<BITS, 8, MIDRISE>(&w1, decode_block_scale(sc[u][1], span, sh.scale_format), v + 8);
#pragma unroll
    for (int st = S - 1; st >= 0; --st)
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], cen[st][k]);
    store_vals<OutT, 8>(o + (n * D + 8 * c), v);
    store_vals<OutT, 8>(o + (n * D + kHalf + 8 * c), v + 8);
  }
}

/// Grid: (ceil(range.count * D/VALS / (256 * U)), H); block 256. Units are
/// numbered row-major within the head: unit i is token i / (D/VALS), values
/// (i % (D/VALS)) * VALS on. The host guarantees range.count * D < 2^30
/// (32-bit in-head offsets) and sh.block >= 16 (a unit never straddles two
/// scale blocks); with SPLIT also S * H * C * D < 2^31 (32-bit centroid
/// offsets). block_shift = log2(sh.block). VALS comes last so launchers
/// written before it existed keep meaning 16. MINB > 0 is the launch bounds'
/// minimum of resident blocks an SM (it caps the registers a thread: 4 ->
/// 64); 0 leaves the registers to ptxas.
template <int BITS, int D, int S, int U, typename OutT, int VALS = 16, bool SPLIT = false, int MINB = 0>
__global__ void __launch_bounds__(kTileThreads, MINB) decode_tile_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                                  DecodeRange range, int block_shift) {
  static_assert(D == 64 || D == 128, "tile decode: D = 64 or 128");
  static_assert(S >= 0 && S <= kTileMaxStages, "tile decode: up to 4 stages");
  static_assert(VALS == 8 || VALS == 16, "tile decode: units of 8 or 16 values");
  static_assert(!SPLIT || VALS == 16, "tile decode: split units are two pieces of 8 values");
  if constexpr (SPLIT) {
    if (sh.levels == LevelRule::midrise)
      decode_split_body<BITS, D, S, U, OutT, true>(sh, p, out, range, block_shift);
    else
      decode_split_body<BITS, D, S, U, OutT, false>(sh, p, out, range, block_shift);
    return;
  }
  constexpr int kUnitsPerRow = D / VALS;
  constexpr int kRowBytes = D * BITS / 8;
  constexpr int kUnitBytes = VALS * BITS / 8;  // packed codes of one unit
  const int h = blockIdx.y;
  const uint32_t units = static_cast<uint32_t>(range.count) * kUnitsPerRow;
  const uint32_t first = blockIdx.x * (kTileThreads * U) + threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(h) * sh.tokens + range.begin;  // first source row of the range
  const int nblocks = D >> block_shift;
  const uint8_t* codes = p.codes + row0 * kRowBytes;
  const uint8_t* scales = p.scales + row0 * nblocks * scale_bytes(sh.scale_format);
  const uint8_t* ids = p.ids + row0;
  const int64_t stage_ids = static_cast<int64_t>(sh.heads) * sh.tokens;
  const float span = __ldg(p.span_scales + h);
  OutT* o = out + (static_cast<int64_t>(h) * range.out_tokens + range.out_offset) * D;

  // 1. Every load that does not depend on another one.
  uint32_t w[U][2];
  uint16_t sc[U];
  uint32_t id[U];  // byte st = stage st's centroid index
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = min(first + u * kTileThreads, units - 1);  // dead units repeat the last
    const uint32_t n = i / kUnitsPerRow, c = i % kUnitsPerRow;
    load_code_words<BITS, VALS>(codes + i * kUnitBytes, w[u]);  // = row n, unit c: units are row-major
    sc[u] = load_block_scale(scales, static_cast<int64_t>(n * nblocks + ((c * VALS) >> block_shift)), sh.scale_format);
    id[u] = 0;
#pragma unroll
    for (int st = 0; st < S; ++st) id[u] |= static_cast<uint32_t>(__ldg(ids + st * stage_ids + n)) << (8 * st);
  }
  // 2. Per unit: the centroids of every stage at once, then the arithmetic.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kTileThreads;
    if (i >= units) break;
    const uint32_t c = i % kUnitsPerRow;
    float cen[S > 0 ? S : 1][VALS];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      const uint32_t cid = (id[u] >> (8 * st)) & 0xFFu;
      const int64_t row = (static_cast<int64_t>(st) * sh.heads + h) * sh.centroids + cid;
      load_bf16_vals<VALS>(p.centroids + row * D + c * VALS, cen[st]);
    }
    float v[VALS];
    unpack_codes<BITS, VALS>(w[u], v);
    dequantize_codes<BITS, VALS>(v, decode_block_scale(sc[u], span, sh.scale_format), sh.levels);
#pragma unroll
    for (int st = S - 1; st >= 0; --st)
#pragma unroll
      for (int k = 0; k < VALS; ++k) v[k] = __fadd_rn(v[k], cen[st][k]);
    // o + i * VALS, not the equal o + n * D + c * VALS: from the latter nvcc
    // 13.0 splits a unit's first 16-byte store into four 4-byte stores (PTX
    // st.global.u32 / .f32), so one warp store instruction writes 4 bytes
    // in every 16 or 32.
    store_vals<OutT, VALS>(o + i * VALS, v);
  }
}

}  // namespace qvg::cuda
