// Fused decode with the centroid tables in shared memory, one (head, 64-dim
// slice) at a time, and the next tokens' loads in flight while the current
// ones are decoded (an experiment: bench_decode_probe's "smem" rows).
//
// Why: at four stages the tile kernel (decode_tile.cuh) is latency-bound
// (ncu: 44 % of its stall samples wait on global loads, the centroid rows
// first of all: 35 % of them miss L1, and each unit's S gathers wait for
// its ids). Gathers from shared memory take tens of cycles, not hundreds,
// so the registers no longer hold the gathers in flight and the loop can
// keep the next step's codes, scales and ids in flight instead.
//
// Layout of the work. A block (1,024 threads) takes a contiguous share of
// the H * D/64 * count (head, slice, token) rows, slice-major within a head,
// so it stages at most two slices' tables (S x C rows of 128 bytes: 128 KB
// at S = 4, C = 256). A warp step is 8 tokens; lane 4 t + q of token t
// decodes two pieces of 8 values, dims 8q and 32 + 8q of the slice, with
// the two pieces swapped for odd tokens: then each 16-byte shared load of a
// quarter warp (two tokens) reads 8 different 16-byte bank groups (no
// conflict whatever the ids), and each 16-byte store instruction writes 64
// contiguous bytes of every token (whole sectors).
// Same per-value rule and order of operations as decode_kernel: the same
// bits.
#pragma once

#include "cuda/decode_tile.cuh"

namespace qvg::cuda {

constexpr int kSmemThreads = 1024;
constexpr int kSmemSlice = 64;  // dims a staged slice: 128-byte BF16 rows

/// Dynamic shared memory of decode_smem_kernel.
constexpr size_t decode_smem_bytes(int stages, int centroids) {
  return static_cast<size_t>(stages) * centroids * kSmemSlice * 2;
}

/// One warp step's loads for one lane, packed to spare registers (two
/// steps stay in flight within 64 registers a thread): the code words of its
/// token's two pieces (INT2: both in one word, the second piece in the high
/// half), the two block scales (the second in the high half) and the S ids
/// (stage st in byte st).
template <int BITS>
struct SmemStep {
  uint32_t w[BITS == 2 ? 1 : 2];
  uint32_t sc;
  uint32_t id;
};

template <int BITS, int D, int S, typename OutT, bool MIDRISE, int STEPS>
__device__ __forceinline__ void decode_smem_body(const QvgShape& sh, const QvgParts& p, OutT* __restrict__ out,
                                                 const DecodeRange& range, int block_shift, unsigned char* smem) {
  constexpr int kParts = D / kSmemSlice;
  constexpr int kRowBytes = D * BITS / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int q = lane & 3, tk = lane >> 2, odd = tk & 1;
  const int d0 = 8 * q + 32 * odd, d1 = 8 * q + 32 * (1 - odd);  // the lane's two pieces in the slice
  const int64_t count = range.count;
  const int64_t total = static_cast<int64_t>(sh.heads) * kParts * count;
  const int64_t begin = total * blockIdx.x / gridDim.x, end = total * (blockIdx.x + 1) / gridDim.x;
  const int64_t stage_ids = static_cast<int64_t>(sh.heads) * sh.tokens;
  const int nblocks = D >> block_shift;
  const int c_count = sh.centroids;
  for (int64_t pos = begin; pos < end;) {
    const int64_t combo = pos / count;
    const int64_t seg_end = min(end, (combo + 1) * count);
    const int h = static_cast<int>(combo / kParts), part = static_cast<int>(combo % kParts);
    const uint32_t t0 = static_cast<uint32_t>(pos - combo * count), t1 = static_cast<uint32_t>(seg_end - combo * count);
    pos = seg_end;
    if constexpr (S > 0) {  // this slice of the head's S tables: row st C + c, 8 chunks of 16 bytes
      __syncthreads();      // every warp is done with the previous slice
      for (int i = threadIdx.x; i < S * c_count * 8; i += blockDim.x) {
        const int r = i >> 3, k = i & 7;
        const int st = r / c_count, c = r - st * c_count;
        const uint16_t* src =
            p.centroids + ((static_cast<int64_t>(st) * sh.heads + h) * c_count + c) * D + part * kSmemSlice + 8 * k;
        *reinterpret_cast<uint4*>(smem + r * 128 + k * 16) = __ldg(reinterpret_cast<const uint4*>(src));
      }
      __syncthreads();
    }
    const int64_t row0 = static_cast<int64_t>(h) * sh.tokens + range.begin;
    const int col0 = part * kSmemSlice + d0, col1 = part * kSmemSlice + d1;
    const uint8_t* codes0 = p.codes + row0 * kRowBytes + col0 * BITS / 8;
    const uint8_t* codes1 = p.codes + row0 * kRowBytes + col1 * BITS / 8;
    const uint8_t* ids = p.ids + row0;
    const uint32_t sb0 = static_cast<uint32_t>(col0 >> block_shift), sb1 = static_cast<uint32_t>(col1 >> block_shift);
    const uint8_t* scales = p.scales + row0 * nblocks * scale_bytes(sh.scale_format);
    const float span = __ldg(p.span_scales + h);
    OutT* o = out + (static_cast<int64_t>(h) * range.out_tokens + range.out_offset) * D;
    const unsigned char* cs0 = smem + 2 * d0;  // the pieces' bytes in a staged row
    const unsigned char* cs1 = smem + 2 * d1;

    auto load = [&](uint32_t g, SmemStep<BITS>& L) {  // group g of 8 tokens; past the end: the last token
      const uint32_t n = min(t0 + 8 * g + tk, t1 - 1);
      uint32_t a[2], b[2];
      load_code_words<BITS, 8>(codes0 + n * kRowBytes, a);
      load_code_words<BITS, 8>(codes1 + n * kRowBytes, b);
      if constexpr (BITS == 2) {
        L.w[0] = a[0] | (b[0] << 16);
      } else {
        L.w[0] = a[0];
        L.w[1] = b[0];
      }
      L.sc = load_block_scale(scales, static_cast<int64_t>(n * nblocks + sb0), sh.scale_format) |
             (static_cast<uint32_t>(load_block_scale(scales, static_cast<int64_t>(n * nblocks + sb1), sh.scale_format))
              << 16);
      L.id = 0;
#pragma unroll
      for (int st = 0; st < S; ++st) L.id |= static_cast<uint32_t>(__ldg(ids + st * stage_ids + n)) << (8 * st);
    };
    auto decode = [&](uint32_t g, const SmemStep<BITS>& L) {
      const uint32_t n = t0 + 8 * g + tk;
      if (n >= t1) return;
      float v[16];
      const uint32_t w1 = BITS == 2 ? L.w[0] >> 16 : L.w[BITS == 2 ? 0 : 1];
      dequantize_lean<BITS, 8, MIDRISE>(&L.w[0],
                                        decode_block_scale(static_cast<uint16_t>(L.sc & 0xFFFFu), span, sh.scale_format), v);
      dequantize_lean<BITS, 8, MIDRISE>(&w1, decode_block_scale(static_cast<uint16_t>(L.sc >> 16), span, sh.scale_format),
                                        v + 8);
#pragma unroll
      for (int st = S - 1; st >= 0; --st) {
        const uint32_t r = (st * c_count + ((L.id >> (8 * st)) & 0xFFu)) * 128;
        const uint4 a = *reinterpret_cast<const uint4*>(cs0 + r);
        const uint4 b = *reinterpret_cast<const uint4*>(cs1 + r);
        const uint32_t cw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          v[2 * i] = __fadd_rn(v[2 * i], __uint_as_float(cw[i] << 16));
          v[2 * i + 1] = __fadd_rn(v[2 * i + 1], __uint_as_float(cw[i] & 0xFFFF0000u));
        }
      }
      store_vals<OutT, 8>(o + n * D + col0, v);
      store_vals<OutT, 8>(o + n * D + col1, v + 8);
    };

    const uint32_t groups = (t1 - t0 + 7) / 8;
    const uint32_t stride = static_cast<uint32_t>(warps) * STEPS;
    SmemStep<BITS> cur[STEPS];
    uint32_t g = static_cast<uint32_t>(warp) * STEPS;
#pragma unroll
    for (int k = 0; k < STEPS; ++k) load(g + k, cur[k]);
    for (; g < groups; g += stride) {
      SmemStep<BITS> next[STEPS];
#pragma unroll
      for (int k = 0; k < STEPS; ++k) load(g + stride + k, next[k]);  // in flight during this step's decode
#pragma unroll
      for (int k = 0; k < STEPS; ++k) decode(g + k, cur[k]);
#pragma unroll
      for (int k = 0; k < STEPS; ++k) cur[k] = next[k];
    }
  }
}

/// Grid: any number of blocks (each takes an equal share of the rows; the
/// launcher fills the device once); block THREADS (kSmemThreads but for
/// bench_decode_probe's variants); dynamic shared
/// memory decode_smem_bytes(S, C). The host guarantees range.count * D <
/// 2^30 and sh.block >= 8 (a piece of 8 values never straddles two scale
/// blocks); block_shift = log2(sh.block).
template <int BITS, int D, int S, typename OutT, int STEPS = 2, int THREADS = kSmemThreads>
__global__ void __launch_bounds__(THREADS, 1) decode_smem_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                                      DecodeRange range, int block_shift) {
  static_assert(D == 64 || D == 128, "smem decode: D = 64 or 128");
  static_assert(S >= 0 && S <= kTileMaxStages, "smem decode: up to 4 stages");
  extern __shared__ __align__(16) unsigned char decode_smem[];
  if (sh.levels == LevelRule::midrise)
    decode_smem_body<BITS, D, S, OutT, true, STEPS>(sh, p, out, range, block_shift, decode_smem);
  else
    decode_smem_body<BITS, D, S, OutT, false, STEPS>(sh, p, out, range, block_shift, decode_smem);
}

/// Launch decode_smem_kernel over range, one wave of as many blocks as fit.
template <int BITS, int D, int S, typename OutT, int STEPS = 2, int THREADS = kSmemThreads>
cudaError_t launch_decode_smem(const QvgShape& sh, const QvgParts& p, const DecodeRange& range, OutT* out,
                               cudaStream_t s) {
  auto* kernel = decode_smem_kernel<BITS, D, S, OutT, STEPS, THREADS>;
  const size_t smem = decode_smem_bytes(S, sh.centroids);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  int dev = 0, sms = 0, per_sm = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem)) != cudaSuccess) return e;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  kernel<<<static_cast<unsigned>(sms * per_sm), THREADS, smem, s>>>(sh, p, out, range, block_shift(sh));
  return cudaGetLastError();
}

}  // namespace qvg::cuda
