// Fused decode, tiled per head: the default decode kernel for D = 64 / 128
// and up to 4 smoothing stages (decode_kernel covers every other shape).
//
// Why a second kernel: decode writes ~8x the bytes it reads, so it should run
// at the device's write rate, but the one-thread-per-16-values kernel spent
// its time on index arithmetic (64-bit divisions by run-time sizes) and on
// one dependent chain of loads per thread (docs/BENCHMARKS.md). Here the head
// is blockIdx.y, D and the stage count are template constants, in-head
// offsets are 32-bit, and each thread owns U units of 16 values, 256 units
// apart (so every load and store instruction of a warp stays coalesced).
// All of a thread's codes, scales and ids are loaded before any arithmetic,
// then each unit issues its S centroid loads together. Same values and the
// same order of operations as decode_kernel: the same bits.
#pragma once

#include "cuda/qvg_kernels.cuh"

namespace qvg::cuda {

constexpr int kTileThreads = 256;
constexpr int kTileUnits = 2;   // units of 16 values per thread (bench_cuda --decode-probe)
constexpr int kTileMaxStages = 4;

/// Grid: (ceil(range.count * D/16 / (256 * U)), H); block 256. The host
/// guarantees range.count * D < 2^30 (32-bit in-head offsets).
/// block_shift = log2(sh.block).
template <int BITS, int D, int S, int U, typename OutT>
__global__ void __launch_bounds__(kTileThreads) decode_tile_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                                  DecodeRange range, int block_shift) {
  static_assert(D == 64 || D == 128, "tile decode: D = 64 or 128");
  static_assert(S >= 0 && S <= kTileMaxStages, "tile decode: up to 4 stages");
  constexpr int kUnitsPerRow = D / 16;
  constexpr int kRowBytes = D * BITS / 8;
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
    load_code_words<BITS, 16>(codes + n * kRowBytes + c * (2 * BITS), w[u]);
    sc[u] = load_block_scale(scales, static_cast<int64_t>(n * nblocks + ((c * 16) >> block_shift)), sh.scale_format);
    id[u] = 0;
#pragma unroll
    for (int st = 0; st < S; ++st) id[u] |= static_cast<uint32_t>(__ldg(ids + st * stage_ids + n)) << (8 * st);
  }
  // 2. Per unit: the centroids of every stage at once, then the arithmetic.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kTileThreads;
    if (i >= units) break;
    const uint32_t n = i / kUnitsPerRow, c = i % kUnitsPerRow;
    float cen[S > 0 ? S : 1][16];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      const uint32_t cid = (id[u] >> (8 * st)) & 0xFFu;
      load_bf16_vals<16>(p.centroids + ((static_cast<int64_t>(st) * sh.heads + h) * sh.centroids + cid) * D + c * 16,
                         cen[st]);
    }
    float v[16];
    unpack_codes<BITS, 16>(w[u], v);
    dequantize_codes<BITS, 16>(v, decode_block_scale(sc[u], span, sh.scale_format), sh.levels);
#pragma unroll
    for (int st = S - 1; st >= 0; --st)
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], cen[st][k]);
    store_vals<OutT, 16>(o + n * D + c * 16, v);
  }
}

}  // namespace qvg::cuda
