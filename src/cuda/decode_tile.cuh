// Fused decode, tiled per head: the default decode kernel for D = 64 / 128
// and up to 4 smoothing stages (decode_kernel covers every other shape).
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

#include "cuda/qvg_kernels.cuh"

namespace qvg::cuda {

constexpr int kTileThreads = 256;
/// Units of 16 values per thread, by stage count: the fastest of 1, 2, 4 in
/// bench_decode_probe on the H200 (LongCat shape; docs/BENCHMARKS.md). More
/// units per thread put more centroid gathers in flight, which pays once
/// the gathers dominate (4 stages) and costs where they do not.
constexpr int tile_units(int stages) { return stages == 0 ? 1 : stages == 1 ? 2 : 4; }
constexpr int kTileMaxStages = 4;

/// Grid: (ceil(range.count * D/VALS / (256 * U)), H); block 256. Units are
/// numbered row-major within the head: unit i is token i / (D/VALS), values
/// (i % (D/VALS)) * VALS on. The host guarantees range.count * D < 2^30
/// (32-bit in-head offsets) and sh.block >= 16 (a unit never straddles two
/// scale blocks). block_shift = log2(sh.block). VALS comes last so launchers
/// written before it existed keep meaning 16.
template <int BITS, int D, int S, int U, typename OutT, int VALS = 16>
__global__ void __launch_bounds__(kTileThreads) decode_tile_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                                  DecodeRange range, int block_shift) {
  static_assert(D == 64 || D == 128, "tile decode: D = 64 or 128");
  static_assert(S >= 0 && S <= kTileMaxStages, "tile decode: up to 4 stages");
  static_assert(VALS == 8 || VALS == 16, "tile decode: units of 8 or 16 values");
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
