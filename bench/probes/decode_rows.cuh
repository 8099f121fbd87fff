// Probe only (bench_decode_probe): the rows decode, D/8 lanes per row, 8
// values each, whole rows per warp store, R rows per thread (dim 64 and 128,
// whole tensors only). The same bits as decode_kernel.
#pragma once

#include "cuda/qvg_kernels.cuh"

namespace qvg::cuda {

/// Fused decode with whole rows per lane group: a row of D values is owned
/// by D/8 consecutive lanes, 8 values (one 16-byte bf16 store) each, so one
/// warp store instruction writes 32/(D/8) whole consecutive rows (512
/// contiguous bytes for bf16). Each thread decodes R rows, 32/(D/8) rows
/// apart, with all of its loads issued before the arithmetic; the head is
/// blockIdx.y and D a template constant, so the index arithmetic is 32-bit
/// shifts (the kernel is bound by instructions issued, not bytes: see
/// docs/BENCHMARKS.md). Same values, same order of operations as
/// decode_kernel: the same bits. D/8 must divide 32 (D = 64, 128).
/// Grid: (ceil(N / (R * 32/(D/8) * warps per block)), H).
template <int BITS, int R, int D, typename OutT>
__global__ void decode_rows_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out) {
  constexpr int kVals = 8;
  constexpr int kLanesPerRow = D / kVals;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  const int lane = threadIdx.x & 31;
  const int sub = lane / kLanesPerRow;
  const int col = (lane % kLanesPerRow) * kVals;
  const int h = blockIdx.y;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int n0 = warp * (R * kRowsPerPass) + sub;
  const int64_t rows = static_cast<int64_t>(sh.heads) * sh.tokens;
  const int64_t head_row = static_cast<int64_t>(h) * sh.tokens;
  const int nblocks = D / sh.block;
  const float span = __ldg(p.span_scales + h);
  float v[R][kVals];
  int n[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    n[r] = min(n0 + r * kRowsPerPass, static_cast<int>(sh.tokens) - 1);  // dead rows repeat the last
    const int64_t row = head_row + n[r];
    const int64_t bi = row * nblocks + col / sh.block;
    const float s = decode_block_scale(load_block_scale(p.scales, bi, sh.scale_format), span, sh.scale_format);
    load_codes<BITS, kVals>(p.codes + row * (D * BITS / 8) + col * BITS / 8, v[r]);
    dequantize_codes<BITS, kVals>(v[r], s, sh.levels);
  }
  for (int st = sh.stages - 1; st >= 0; --st) {
    const uint8_t* ids = p.ids + static_cast<int64_t>(st) * rows + head_row;
    const uint16_t* cent = p.centroids + (static_cast<int64_t>(st) * sh.heads + h) * sh.centroids * D + col;
    uint8_t id[R];
#pragma unroll
    for (int r = 0; r < R; ++r) id[r] = __ldg(ids + n[r]);
    float c[R][kVals];
#pragma unroll
    for (int r = 0; r < R; ++r) load_bf16_vals<kVals>(cent + id[r] * D, c[r]);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < kVals; ++i) v[r][i] = __fadd_rn(v[r][i], c[r][i]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (n0 + r * kRowsPerPass >= sh.tokens) continue;
    store_vals<OutT, kVals>(out + (head_row + n[r]) * D + col, v[r]);
  }
}

}  // namespace qvg::cuda
