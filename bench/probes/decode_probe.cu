// Decode-kernel probe: every decode kernel and variant at the LongCat shape
// [1, 32, 29640, 128] and the Self-Forcing span [1, 12, 37440, 128] (bf16
// out), next to what the device does with the same bytes and no arithmetic,
// in one process:
//   - copy: cudaMemcpy of 2 GiB (bytes read + written), the benchmark's yardstick;
//   - memset of the decode's output size (write-only rate at this size);
//   - write-only kernels: the tile kernel's geometry, stores only, with units
//     of 16 values (two 16-byte stores per lane, lanes 32 bytes apart) and of
//     8 values (one 16-byte store per lane: 512 contiguous bytes per warp
//     store instruction);
//   - read + write kernel: the tile kernel's code loads and stores, no decode.
// Checks that each variant writes the same bits as decode_kernel.
//   bench_decode_probe [--reps N] [--json FILE]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_data.h"
#include "cuda/decode_lines.cuh"
#include "cuda/dispatch.h"
#include "cuda/qvg_cuda.h"
#include "decode_rows.cuh"
#include "decode_tile.cuh"
#include "cuda_timer.h"
#include "qvg/codec.h"

using namespace qvg;
using namespace qvg::cuda;

namespace {

constexpr int kD = 128;

/// The tile kernel's stores with nothing to decode: U units of VALS values
/// per thread, 256 units apart. VALS = 16: two 16-byte stores per lane, so
/// each warp store instruction writes 16 of every 32 bytes of 1 KiB; VALS =
/// 8 (decode_tile_kernel VALS = 8): one, so a warp store instruction writes
/// 512 contiguous bytes. If the half-sector pattern is what costs, VALS = 8
/// should run near memset.
template <int VALS, int U>
__global__ void __launch_bounds__(kTileThreads) write_only_kernel(uint16_t* __restrict__ out, int64_t per_head) {
  const uint32_t units = static_cast<uint32_t>(per_head / VALS);
  const uint32_t first = blockIdx.x * (kTileThreads * U) + threadIdx.x;
  uint16_t* o = out + static_cast<int64_t>(blockIdx.y) * per_head;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kTileThreads;
    if (i >= units) break;
    uint4* q = reinterpret_cast<uint4*>(o + i * VALS);
#pragma unroll
    for (int j = 0; j < VALS / 8; ++j) q[j] = make_uint4(i, i, i, i);
  }
}

/// The tile kernel's code loads (INT2: 4 bytes per unit) and stores, with a
/// plain bit expansion instead of the decode.
template <int U>
__global__ void __launch_bounds__(kTileThreads)
    read_write_kernel(const uint32_t* __restrict__ codes, uint16_t* __restrict__ out, int64_t per_head) {
  const uint32_t units = static_cast<uint32_t>(per_head / 16);
  const uint32_t first = blockIdx.x * (kTileThreads * U) + threadIdx.x;
  const uint32_t* c = codes + static_cast<int64_t>(blockIdx.y) * units;
  uint16_t* o = out + static_cast<int64_t>(blockIdx.y) * per_head;
  uint32_t w[U];
#pragma unroll
  for (int u = 0; u < U; ++u) w[u] = __ldg(c + min(first + u * kTileThreads, units - 1));
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t i = first + u * kTileThreads;
    if (i >= units) break;
    uint32_t x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = ((w[u] >> (4 * k)) & 3u) | (((w[u] >> (4 * k + 2)) & 3u) << 16);
    uint4* q = reinterpret_cast<uint4*>(o + i * 16);
    q[0] = make_uint4(x[0], x[1], x[2], x[3]);
    q[1] = make_uint4(x[4], x[5], x[6], x[7]);
  }
}

template <int U, int VALS>
dim3 tile_grid(const QvgShape& sh) {
  const int64_t units = sh.tokens * (kD / VALS);
  return dim3(static_cast<unsigned>((units + kTileThreads * U - 1) / (kTileThreads * U)),
              static_cast<unsigned>(sh.heads));
}

template <int S, int U, int VALS, bool SPLIT = false, int MINB = 0>
void launch_tile(const QvgShape& sh, QvgParts p, __nv_bfloat16* out) {
  decode_tile_kernel<2, kD, S, U, __nv_bfloat16, VALS, SPLIT, MINB>
      <<<tile_grid<U, VALS>(sh), kTileThreads>>>(sh, p, out, DecodeRange{0, sh.tokens, sh.tokens, 0}, block_shift(sh));
  QVG_CUDA_CHECK(cudaGetLastError());
}

/// Calls f(std::integral_constant<int, S>) for the probe's codecs' stage
/// counts: 0 (RTN), 1 (QVG), 4 (QVG-Pro).
template <typename F>
void with_probe_stages(const QvgShape& sh, F&& f) {
  switch (sh.stages) {
    case 0:
      return f(std::integral_constant<int, 0>{});
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      throw Error("decode probe: stages 0, 1 or 4");
  }
}

template <int U, int VALS, bool SPLIT = false, int MINB = 0>
void launch_tile_any(const QvgShape& sh, QvgParts p, __nv_bfloat16* out) {
  with_probe_stages(sh, [&](auto st) { launch_tile<decltype(st)::value, U, VALS, SPLIT, MINB>(sh, p, out); });
}

template <int S, int U, int MINB>
void launch_lines(const QvgShape& sh, QvgParts p, __nv_bfloat16* out) {
  constexpr int kRowsPerBlock = kTileThreads / (kD / 16) * U;
  const dim3 grid(static_cast<unsigned>((sh.tokens + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(sh.heads));
  decode_lines_kernel<2, kD, S, U, __nv_bfloat16, MINB>
      <<<grid, kTileThreads>>>(sh, p, out, DecodeRange{0, sh.tokens, sh.tokens, 0}, block_shift(sh));
  QVG_CUDA_CHECK(cudaGetLastError());
}

template <int U, int MINB = 0>
void launch_lines_any(const QvgShape& sh, QvgParts p, __nv_bfloat16* out) {
  with_probe_stages(sh, [&](auto st) { launch_lines<decltype(st)::value, U, MINB>(sh, p, out); });
}

/// Loads that do not allocate in the L1 (the streamed codes, scales, ids),
/// so the L1 keeps the centroid tables (the probe's VAR = 2 rows).
__device__ __forceinline__ uint32_t ld_na_u8(const uint8_t* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_na_u16(const uint8_t* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_na_u32(const uint8_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

/// Timing only (other bits by design): the lines kernel's run with the S
/// stages' centroids summed as packed BF16 pairs (one bf16x2 add a pair and
/// stage, rounded to BF16 each time, last stage first), widened once and
/// added to the dequantized residual in FP32. It would be a change of the
/// format's decode (docs/FORMAT.md specifies an FP32 running sum); the row
/// measures what it could buy: ~1.5 instead of 4 conversions and adds a
/// value and stage at four stages. FP8 scales, symmetric levels (the
/// probe's codecs). FMA: the residual's level times its scale plus the
/// widened sum in one rounding (an FFMA) instead of an FMUL and an FADD.
/// MINB: the launch bounds' minimum of blocks an SM (4: 64 registers).
/// VAR 1: no gathers (each stage's words made from the codes by one XOR:
/// the arithmetic alone); VAR 2: the streamed loads skip the L1.
template <int S, int U, bool FMA, int MINB, int VAR = 0>
__global__ void __launch_bounds__(kTileThreads, MINB)
    decode_csum_kernel(QvgShape sh, QvgParts p, __nv_bfloat16* __restrict__ out, int block_shift) {
  constexpr int BITS = 2, D = kD;
  constexpr int kRowBytes = D * BITS / 8;
  constexpr int kHalf = D / 2;
  constexpr int kGroups = kTileThreads / (D / 16);
  const uint32_t r0 = (blockIdx.x * kGroups + threadIdx.x / (D / 16)) * U;
  const uint32_t count = static_cast<uint32_t>(sh.tokens);
  if (r0 + U > count) return;  // timing only: the last partial run is left undecoded
  const int h = blockIdx.y;
  const uint32_t c = threadIdx.x % (D / 16);
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + r0;
  const uint8_t* codes = p.codes + row * kRowBytes + c * BITS;
  const int row_scales = D >> block_shift;
  const uint8_t* scales = p.scales + row * row_scales;
  const int sc0 = (8 * c) >> block_shift, sc1 = (kHalf + 8 * c) >> block_shift;
  const uint32_t stage_ids = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.tokens);
  const float span = __ldg(p.span_scales + h);
  __nv_bfloat16* o = out + (static_cast<int64_t>(h) * sh.tokens + r0) * D + 8 * c;
  const char* cent = reinterpret_cast<const char*>(p.centroids + static_cast<int64_t>(h) * sh.centroids * D + 8 * c);
  const uint32_t hc = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.centroids);
  uint32_t w[U][2], sc[U], id[S > 0 ? S : 1];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint8_t* su = scales + u * row_scales;
    if constexpr (VAR == 2) {
      const uint8_t* cu = codes + u * kRowBytes;
      w[u][0] = ld_na_u16(cu) | (ld_na_u16(cu + D * BITS / 16) << 16);
      w[u][1] = 0u;
      sc[u] = ld_na_u8(su + sc0) | (ld_na_u8(su + sc1) << 8);
    } else {
      load_split_codes<BITS, D>(codes + u * kRowBytes, w[u]);
      sc[u] = __ldg(su + sc0) | (static_cast<uint32_t>(__ldg(su + sc1)) << 8);
    }
  }
  if constexpr (VAR == 2) {
    static_assert(U == 4 || VAR != 2, "VAR 2: runs of 4 rows (one aligned word a stage)");
#pragma unroll
    for (int st = 0; st < S; ++st) id[st] = ld_na_u32(p.ids + row + st * stage_ids);
  } else {
    load_id_runs<S, U, false>(p.ids + row, stage_ids, id);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    __nv_bfloat162 cs[8];
#pragma unroll
    for (int st = S - 1; st >= 0; --st) {
      uint32_t cw[8];
      if constexpr (VAR == 1) {
#pragma unroll
        for (int i = 0; i < 8; ++i) cw[i] = w[u][0] ^ (0x3C003C00u + 0x10001u * (8 * st + i));
      } else {
        const uint16_t* crow = centroid_row<D>(cent, id[st], u, st, hc);
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(crow));
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(crow + kHalf));
        cw[0] = a.x, cw[1] = a.y, cw[2] = a.z, cw[3] = a.w, cw[4] = b.x, cw[5] = b.y, cw[6] = b.z, cw[7] = b.w;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(&cw[i]);
        cs[i] = st == S - 1 ? x : __hadd2(cs[i], x);
      }
    }
    const float2 s2 = decode_scale_pair<true>(sc[u], span);
    float v[16];
    const uint32_t w1 = w[u][0] >> 16;
    if constexpr (FMA) {  // dequantize_lean's levels, then level * scale + sum in one rounding
      dequantize_lean<BITS, 8, false>(&w[u][0], 1.0f, v);  // x * 1 is exact: the levels themselves
      dequantize_lean<BITS, 8, false>(&w1, 1.0f, v + 8);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 f = __bfloat1622float2(cs[i]);
        const float s = i < 4 ? s2.x : s2.y;
        v[2 * i] = __fmaf_rn(v[2 * i], s, f.x);
        v[2 * i + 1] = __fmaf_rn(v[2 * i + 1], s, f.y);
      }
    } else {
      dequantize_lean<BITS, 8, false>(&w[u][0], s2.x, v);
      dequantize_lean<BITS, 8, false>(&w1, s2.y, v + 8);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 f = __bfloat1622float2(cs[i]);
        v[2 * i] = __fadd_rn(v[2 * i], f.x);
        v[2 * i + 1] = __fadd_rn(v[2 * i + 1], f.y);
      }
    }
    store_vals<__nv_bfloat16, 8>(o + u * D, v);
    store_vals<__nv_bfloat16, 8>(o + u * D + kHalf, v + 8);
  }
}

/// Ablations of the lines kernel's run at S stages (timing only, other bits
/// by design; FP8 scales, symmetric levels, U rows a group). MODE 1, gathers
/// only: the same loads and stores, the arithmetic replaced by one XOR a word
/// and stage (no dequantization, conversions or adds). MODE 2, arithmetic
/// only: the same arithmetic, with each stage's centroid words made from the
/// codes by one XOR (no gathers).
template <int S, int U, int MODE, int MINB>
__global__ void __launch_bounds__(kTileThreads, MINB)
    ablate_lines_kernel(QvgShape sh, QvgParts p, __nv_bfloat16* __restrict__ out, int block_shift) {
  constexpr int BITS = 2, D = kD;
  constexpr int kRowBytes = D * BITS / 8;
  constexpr int kHalf = D / 2;
  constexpr int kGroups = kTileThreads / (D / 16);
  const uint32_t r0 = (blockIdx.x * kGroups + threadIdx.x / (D / 16)) * U;
  if (r0 + U > static_cast<uint32_t>(sh.tokens)) return;  // timing only: the last partial run is left undecoded
  const int h = blockIdx.y;
  const uint32_t c = threadIdx.x % (D / 16);
  const int64_t row = static_cast<int64_t>(h) * sh.tokens + r0;
  const uint8_t* codes = p.codes + row * kRowBytes + c * BITS;
  const int row_scales = D >> block_shift;
  const uint8_t* scales = p.scales + row * row_scales;
  const int sc0 = (8 * c) >> block_shift, sc1 = (kHalf + 8 * c) >> block_shift;
  const uint32_t stage_ids = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.tokens);
  const float span = __ldg(p.span_scales + h);
  __nv_bfloat16* o = out + (static_cast<int64_t>(h) * sh.tokens + r0) * D + 8 * c;
  const char* cent = reinterpret_cast<const char*>(p.centroids + static_cast<int64_t>(h) * sh.centroids * D + 8 * c);
  const uint32_t hc = static_cast<uint32_t>(sh.heads) * static_cast<uint32_t>(sh.centroids);
  uint32_t w[U][2], sc[U], id[S > 0 ? S : 1];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    load_split_codes<BITS, D>(codes + u * kRowBytes, w[u]);
    const uint8_t* su = scales + u * row_scales;
    sc[u] = __ldg(su + sc0) | (static_cast<uint32_t>(__ldg(su + sc1)) << 8);
  }
  load_id_runs<S, U, true>(p.ids + row, stage_ids, id);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if constexpr (MODE == 1) {
      uint32_t acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = w[u][0] + sc[u] + i;
#pragma unroll
      for (int st = S - 1; st >= 0; --st) {
        const uint16_t* crow = centroid_row<D>(cent, id[st], u, st, hc);
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(crow));
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(crow + kHalf));
        const uint32_t cw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] ^= cw[i];
      }
      *reinterpret_cast<uint4*>(o + u * D) = make_uint4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<uint4*>(o + u * D + kHalf) = make_uint4(acc[4], acc[5], acc[6], acc[7]);
    } else {
      float cen[S > 0 ? S : 1][16];
#pragma unroll
      for (int st = 0; st < S; ++st) {
        if constexpr (MODE == 2) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const uint32_t x = (w[u][0] ^ (0x3C003C00u + 0x10001u * (8 * st + i))) & 0xBFFFBFFFu;
            cen[st][2 * i] = __uint_as_float(x << 16);
            cen[st][2 * i + 1] = __uint_as_float(x & 0xFFFF0000u);
          }
        } else {
          const uint16_t* crow = centroid_row<D>(cent, id[st], u, st, hc);
          load_bf16_vals<8>(crow, cen[st]);
          load_bf16_vals<8>(crow + kHalf, cen[st] + 8);
        }
      }
      const float2 s2 = decode_scale_pair<true>(sc[u], span);
      float v[16];
      const uint32_t w1 = w[u][0] >> 16;
      dequantize_lean<BITS, 8, false>(&w[u][0], s2.x, v);
      dequantize_lean<BITS, 8, false>(&w1, s2.y, v + 8);
#pragma unroll
      for (int st = S - 1; st >= 0; --st)
#pragma unroll
        for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], cen[st][k]);
      store_vals<__nv_bfloat16, 8>(o + u * D, v);
      store_vals<__nv_bfloat16, 8>(o + u * D + kHalf, v + 8);
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_decode_probe [--reps N] [--json FILE]\n");
      return 2;
    }
  }
  try {
    bench::Timer timer;
    const size_t copy_bytes = size_t(2) << 30;
    double copy_gbs = 0;
    {
      DeviceBuffer<uint8_t> c0(copy_bytes), c1(copy_bytes);
      QVG_CUDA_CHECK(cudaMemset(c0.get(), 1, copy_bytes));
      const double ms = timer.median_ms(
          reps, [&] { QVG_CUDA_CHECK(cudaMemcpyAsync(c1.get(), c0.get(), copy_bytes, cudaMemcpyDeviceToDevice)); });
      copy_gbs = 2.0 * copy_bytes / (ms * 1e6);
    }
    std::string json = "[\n";
    int failures = 0;
    constexpr int kBatch = 10;  // back-to-back launches in the batch rows
    struct ProbeShape {
      const char* name;
      int heads;
      int64_t tokens;
    };
    for (const ProbeShape shape : {ProbeShape{"LongCat", 32, 29640}, ProbeShape{"Self-Forcing", 12, 37440}}) {
      const HeadTensor x = bench::random_normal(shape.heads, shape.tokens, kD, 42);
      const std::vector<uint16_t> xb = bench::to_bf16(x);
      DeviceBuffer<uint16_t> xd, out(xb.size()), ref(xb.size());
      xd.upload(xb.data(), xb.size());
      const double out_bytes = static_cast<double>(out.bytes());
      std::printf("\ncopy %.0f GB/s; %s [1,%d,%lld,128] bf16 out, %.1f MB written\n\n", copy_gbs, shape.name,
                  shape.heads, static_cast<long long>(shape.tokens), out_bytes / 1e6);
      std::printf("%-12s %-28s %9s %9s %8s\n", "method", "kernel", "ms", "GB/s", "%copy");
      auto row = [&](const std::string& method, const std::string& kernel, double ms, double bytes) {
        const double gbs = bytes / (ms * 1e6);
        std::printf("%-12s %-28s %9.4f %9.0f %7.1f%%\n", method.c_str(), kernel.c_str(), ms, gbs,
                    100.0 * gbs / copy_gbs);
        std::fflush(stdout);
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "  {\"shape\": \"%s\", \"method\": \"%s\", \"kernel\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, "
                      "\"gbs\": %.1f, \"copy_gbs\": %.1f},\n",
                      shape.name, method.c_str(), kernel.c_str(), ms, bytes, gbs, copy_gbs);
        json += buf;
      };
      // Reference points with the decode's output size.
      auto set = [&] { QVG_CUDA_CHECK(cudaMemsetAsync(out.get(), 0, out.bytes())); };
      auto copy = [&] { QVG_CUDA_CHECK(cudaMemcpyAsync(ref.get(), out.get(), out.bytes(), cudaMemcpyDeviceToDevice)); };
      row("-", "memset (write only)", timer.median_ms(reps, set), out_bytes);
      row("-", "memcpy of the output size", timer.median_ms(reps, copy), 2 * out_bytes);
      row("-", "memset, back-to-back x10", timer.batch_median_ms(reps, kBatch, set), out_bytes);
      row("-", "memcpy out size, b2b x10", timer.batch_median_ms(reps, kBatch, copy), 2 * out_bytes);
      const int64_t per_head = x.tokens * kD;
      // Blocks for units of `vals` values, U per thread.
      auto wgrid = [&](int vals, int u) {
        const unsigned per_block = kTileThreads * u;
        return dim3((static_cast<unsigned>(per_head / vals) + per_block - 1) / per_block, shape.heads);
      };
      const dim3 g2 = wgrid(16, 2);
      row("-", "write-only v16 U=1",
          timer.median_ms(reps, [&] { write_only_kernel<16, 1><<<wgrid(16, 1), kTileThreads>>>(out.get(), per_head); }),
          out_bytes);
      row("-", "write-only v16 U=2",
          timer.median_ms(reps, [&] { write_only_kernel<16, 2><<<g2, kTileThreads>>>(out.get(), per_head); }),
          out_bytes);
      row("-", "write-only v8 U=1",
          timer.median_ms(reps, [&] { write_only_kernel<8, 1><<<wgrid(8, 1), kTileThreads>>>(out.get(), per_head); }),
          out_bytes);
      row("-", "write-only v8 U=2",
          timer.median_ms(reps, [&] { write_only_kernel<8, 2><<<wgrid(8, 2), kTileThreads>>>(out.get(), per_head); }),
          out_bytes);
      DeviceBuffer<uint32_t> codes(static_cast<size_t>(shape.heads * per_head / 16));
      QVG_CUDA_CHECK(cudaMemset(codes.get(), 0x5A, codes.bytes()));
      row("-", "read+write kernel U=2",
          timer.median_ms(reps, [&] { read_write_kernel<2><<<g2, kTileThreads>>>(codes.get(), out.get(), per_head); }),
          out_bytes + codes.bytes());
      for (const std::string spec : {"rtn", "qvg:iters=2,init=random", "qvg-pro:iters=5,init=random"}) {
        const CodecConfig c = parse_codec_spec(spec);
        const QvgShape sh = make_shape(c, x.heads, x.tokens, x.dim);
        const GpuKMeansOptions km = GpuKMeansOptions::fixed_iterations(c.kmeans);
        Encoder enc;
        DeviceParts parts;
        enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr);
        const double bytes = out_bytes + double(parts.bytes());
        const QvgParts p = parts.view();
        const std::string m = spec.substr(0, spec.find(':'));
        auto* o = reinterpret_cast<__nv_bfloat16*>(out.get());
        decode(sh, p, ref.get(), DeviceElement::bf16, nullptr, DecodeKernel::vals16);
        std::vector<uint16_t> want(xb.size()), got(xb.size());
        ref.download(want.data(), want.size());
        auto check = [&](const char* name) {
          out.download(got.data(), got.size());
          QVG_CUDA_CHECK(cudaDeviceSynchronize());
          if (std::memcmp(want.data(), got.data(), want.size() * 2) != 0) {
            std::printf("MISMATCH: %s %s differs from decode_kernel\n", m.c_str(), name);
            ++failures;
          }
          QVG_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // poison for the next variant
        };
        for (const auto& [name, k] : {std::pair{"vals16", DecodeKernel::vals16}, std::pair{"lines", DecodeKernel::lines},
                                      std::pair{"automatic (default)", DecodeKernel::automatic}}) {
          const DecodeKernel kernel = k;  // a lambda may not capture a structured binding in C++17
          row(m, name, timer.median_ms(reps, [&] { decode(sh, p, out.get(), DeviceElement::bf16, nullptr, kernel); }),
              bytes);
          check(name);
        }
        // The kernels the library dropped (this folder): one thread per 8
        // values, whole rows per warp store, the tiled predecessor of lines.
        const DecodeRange whole{0, sh.tokens, sh.tokens, 0};
        row(m, "vals8", timer.median_ms(reps, [&] {
          decode_kernel<2, 8, __nv_bfloat16>
              <<<blocks_for(int64_t{sh.heads} * sh.tokens * (kD / 8)), 256>>>(sh, p, o, whole);
        }), bytes);
        check("vals8");
        {
          constexpr int kRows = 4;  // rows per thread
          const int64_t rows_per_block = int64_t{kRows} * (32 / (kD / 8)) * (256 / 32);
          const dim3 grid(static_cast<unsigned>((sh.tokens + rows_per_block - 1) / rows_per_block),
                          static_cast<unsigned>(sh.heads));
          row(m, "rows", timer.median_ms(reps, [&] { decode_rows_kernel<2, kRows, kD, __nv_bfloat16><<<grid, 256>>>(sh, p, o); }),
              bytes);
          check("rows");
        }
        row(m, "tile", timer.median_ms(reps, [&] {
          with_probe_stages(sh, [&](auto st) {
            constexpr int S = decltype(st)::value;
            launch_tile<S, tile_units(S), 16, tile_split(S), tile_min_blocks(S)>(sh, p, o);
          });
        }), bytes);
        check("tile");
        auto tile = [&](const char* name, auto launch) {
          row(m, name, timer.median_ms(reps, launch), bytes);
          check(name);
        };
        tile("tile v16 U=1", [&] { launch_tile_any<1, 16>(sh, p, o); });
        tile("tile v16 U=2", [&] { launch_tile_any<2, 16>(sh, p, o); });
        tile("tile v16 U=4", [&] { launch_tile_any<4, 16>(sh, p, o); });
        tile("tile v8 U=2", [&] { launch_tile_any<2, 8>(sh, p, o); });
        tile("tile v8 U=4", [&] { launch_tile_any<4, 8>(sh, p, o); });
        tile("tile split U=2", [&] { launch_tile_any<2, 16, true>(sh, p, o); });
        tile("tile split U=4", [&] { launch_tile_any<4, 16, true>(sh, p, o); });
        tile("tile split U=2 64 regs", [&] { launch_tile_any<2, 16, true, 4>(sh, p, o); });
        tile("tile split U=4 64 regs", [&] { launch_tile_any<4, 16, true, 4>(sh, p, o); });
        tile("tile v16 U=4 64 regs", [&] { launch_tile_any<4, 16, false, 4>(sh, p, o); });
        tile("lines U=1", [&] { launch_lines_any<1>(sh, p, o); });
        tile("lines U=2", [&] { launch_lines_any<2>(sh, p, o); });
        tile("lines U=4", [&] { launch_lines_any<4>(sh, p, o); });
        tile("lines U=2 64 regs", [&] { launch_lines_any<2, 4>(sh, p, o); });
        tile("lines U=4 64 regs", [&] { launch_lines_any<4, 4>(sh, p, o); });
        row(m, "default, back-to-back x10",
            timer.batch_median_ms(
                reps, kBatch, [&] { decode(sh, p, out.get(), DeviceElement::bf16, nullptr, DecodeKernel::automatic); }),
            bytes);
        check("default, back-to-back x10");
        // Timing-only rows (other bits by design): one launch and back-to-back x10.
        auto bound = [&](const std::string& name, auto launch) {
          row(m, name + " (bound)", timer.median_ms(reps, launch), bytes);
          row(m, name + ", b2b x10", timer.batch_median_ms(reps, kBatch, launch), bytes);
        };
        // The same for a probe kernel (sh, parts, out, block_shift) over runs of u rows a lane group.
        auto kernel_rows = [&](const std::string& name, auto kernel, int u, const QvgParts& parts) {
          const int rows = kTileThreads / (kD / 16) * u;
          const dim3 grid(static_cast<unsigned>((sh.tokens + rows - 1) / rows), static_cast<unsigned>(sh.heads));
          bound(name, [&] {
            kernel<<<grid, kTileThreads>>>(sh, parts, o, block_shift(sh));
            QVG_CUDA_CHECK(cudaGetLastError());
          });
        };
        if (sh.stages == 4 && sh.levels == LevelRule::symmetric && sh.scale_format == ScaleFormat::fp8) {
          auto csum_rows = [&](const std::string& name, auto kernel, int u) {
            kernel_rows("BF16 sums " + name, kernel, u, p);
          };
          csum_rows("U=4 64 regs", decode_csum_kernel<4, 4, false, 4>, 4);
          csum_rows("U=4 FMA 64 regs", decode_csum_kernel<4, 4, true, 4>, 4);
          csum_rows("U=4", decode_csum_kernel<4, 4, false, 0>, 4);
          csum_rows("U=2 64 regs", decode_csum_kernel<4, 2, false, 4>, 2);
          csum_rows("U=2 FMA 64 regs", decode_csum_kernel<4, 2, true, 4>, 2);
          csum_rows("U=4 FMA 64 regs no gathers", decode_csum_kernel<4, 4, true, 4, 1>, 4);
          csum_rows("U=4 FMA 64 regs L1 no-alloc", decode_csum_kernel<4, 4, true, 4, 2>, 4);
          QVG_CUDA_CHECK(cudaFuncSetAttribute(decode_csum_kernel<4, 4, true, 4, 2>,
                                              cudaFuncAttributePreferredSharedMemoryCarveout, 0));
          csum_rows("U=4 FMA 64 regs L1 no-alloc max L1", decode_csum_kernel<4, 4, true, 4, 2>, 4);
          // What the four-stage run's time is made of (timing only).
          for (const int s : {0, 1, 2, 3})  // the library's lines kernel with the first s stages
            bound("lines S=" + std::to_string(s) + " of 4", [&] {
              switch (s) {
                case 0:
                  launch_lines<0, 4, 4>(sh, p, o);
                  break;
                case 1:
                  launch_lines<1, 4, 4>(sh, p, o);
                  break;
                case 2:
                  launch_lines<2, 4, 4>(sh, p, o);
                  break;
                default:
                  launch_lines<3, 4, 4>(sh, p, o);
                  break;
              }
            });
          auto ablate = [&](const std::string& name, auto kernel) { kernel_rows(name, kernel, 4, p); };
          ablate("ablate gathers only", ablate_lines_kernel<4, 4, 1, 4>);
          ablate("ablate arithmetic only", ablate_lines_kernel<4, 4, 2, 4>);
          ablate("ablate gathers only, no cap", ablate_lines_kernel<4, 4, 1, 0>);
          ablate("ablate arithmetic only, no cap", ablate_lines_kernel<4, 4, 2, 0>);
        }
        if (sh.stages > 1) {  // bounds, timing only (other bits): the gathers' locality
          std::vector<uint8_t> all_ids(static_cast<size_t>(sh.stages) * sh.heads * sh.tokens);
          QVG_CUDA_CHECK(cudaMemcpy(all_ids.data(), p.ids, all_ids.size(), cudaMemcpyDeviceToHost));
          for (const int keep : {32, 4}) {  // ids < keep: each head's tables in keep rows a stage (L1-resident)
            std::vector<uint8_t> ids(all_ids);
            for (uint8_t& v : ids) v = static_cast<uint8_t>(v % keep);
            DeviceBuffer<uint8_t> few;
            few.upload(ids.data(), ids.size());
            QvgParts pf = p;
            pf.ids = few.get();
            row(m, "lines, ids < " + std::to_string(keep) + " (bound)",
                timer.median_ms(reps,
                                [&] { decode(sh, pf, out.get(), DeviceElement::bf16, nullptr, DecodeKernel::lines); }),
                bytes);
            if (sh.stages == 4 && sh.scale_format == ScaleFormat::fp8) {  // the two limits together
              const std::string k = std::to_string(keep);
              auto rows_of = [&](const std::string& name, auto kernel, int u) {
                kernel_rows(name + ", ids < " + k, kernel, u, pf);
              };
              rows_of("BF16 sums U=2 FMA 64 regs", decode_csum_kernel<4, 2, true, 4>, 2);
              rows_of("BF16 sums U=4 FMA 64 regs", decode_csum_kernel<4, 4, true, 4>, 4);
              rows_of("ablate gathers only", ablate_lines_kernel<4, 4, 1, 4>, 4);
            }
          }
        }
      }
    }
    if (json.size() > 2) json.erase(json.size() - 2, 1);
    json += "]\n";
    if (!json_path.empty()) std::ofstream(json_path) << json;
    if (failures) {
      std::fprintf(stderr, "bench_decode_probe: %d variants wrote other bits\n", failures);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
