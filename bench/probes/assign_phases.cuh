// assign_tc_kernel (src/cuda/assign_tc.cuh) with one phase left out, for
// timing by difference only (bench_assign_probe; the outputs are then
// wrong). The kernel below repeats the product kernel's steps, made of its
// helpers, and swaps the left-out phase for a stand-in that keeps the values
// it feeds live. PhaseOut::none is the product kernel's steps unchanged:
// bench_assign_probe checks that it gives the product's ids and distances,
// so a change to assign_tc_kernel that this copy misses shows there.
// bf16 input, float centroids in shared memory (the form Hopper runs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/assign_tc.cuh"

namespace qvg::probe {

/// The phase of the assignment a probe kernel leaves out.
enum class PhaseOut {
  none = 0,      ///< nothing: assign_tc_kernel's steps
  exact = 1,     ///< the exact phase: every row keeps the bf16 products' pick
  top_two = 2,   ///< the running top two: each product is summed into its chain's best
  products = 3,  ///< the tensor-core products: the A fragments' words summed instead
  loads = 4,     ///< the loads of x and their L2 prefetch: finite bf16 pairs made up from the row index
};

/// PhaseOut::top_two: TopTwo whose add sums the value into its chain's best
/// (no rank key, no second).
template <int kMT, int kChains>
struct SummedTopTwo : cuda::TopTwo<kMT, kChains> {
  __device__ __forceinline__ void add(int i, int q, int p, float v, uint32_t, uint32_t) {
    this->best[i][q >> 1][p % kChains] += v;
  }
};

/// PhaseOut::loads: load_unit_rows for bf16 input with each chunk's 16 bytes
/// made up from the row index and the chunk (finite bf16 pairs) instead of
/// loaded.
template <int D, int kMT>
__device__ __forceinline__ void made_up_unit_rows(int64_t n0, int g, bool want_xmax, uint32_t (&a)[kMT][D / 16][4],
                                                  float (&xn)[kMT][2], float (&xdev)[kMT][2], float& x_max) {
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t n = n0 + 16 * i + 8 * r + g;
      float s = 0.0f;
#pragma unroll
      for (int c = 0; c < D / 32; ++c) {
        const uint32_t z = (static_cast<uint32_t>(n) * 0x9E3779B1u + c) & 0x3F7F3F7Fu;
        uint32_t wd[4];
        cuda::bf16_chunk_words(make_uint4(z, z ^ 0x00010001u, z ^ 0x00020002u, z ^ 0x00030003u), wd, s, x_max,
                               want_xmax);
        cuda::set_fragment_words<D>(a[i], c, r, wd);
      }
      xn[i][r] = sqrtf(cuda::quad_sum(s));
      xdev[i][r] = 0.0f;
    }
}

/// assign_tc_kernel<D, __nv_bfloat16, kWarps, kWg, true> with phase kOut
/// left out (PhaseOut). Same grid, block, shared memory and arguments.
template <int D, int kWarps, bool kWg, PhaseOut kOut>
__global__ void __launch_bounds__(kWarps * 32, 1)
    assign_phase_probe_kernel(const __nv_bfloat16* __restrict__ x, int64_t n_tokens, const float* __restrict__ cent,
                              int c_count, const int* __restrict__ active, cuda::AssignOutputs out) {
  using namespace qvg::cuda;
  using T = __nv_bfloat16;
  static_assert(D == 64 || D == 128, "tensor-core assignment: D = 64 or 128");
  static_assert(kWarps % kUnitWarps<kWg> == 0, "wgmma: whole warpgroups");
  constexpr int kMT = kUnitTiles<kWg>;
  constexpr int kChains = kRankChains<kWg>;
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  const int lane = threadIdx.x & 31, warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x >> 5), 0);
  const int g = lane >> 2, t = lane & 3;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const StagedCentroids<D, true> sc(tc_smem, cent + static_cast<int64_t>(h) * c_count * D, c_count);
  stage_centroids<kWg>(sc, out.cent_bf16, h);

  const AssignWants want(out);
  float x_max = 0.0f, r_max = 0.0f;
  const uint32_t b_base = smem_u32(sc.cs + core_chunk<D>((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1));
  const uint64_t desc0 = wgmma_desc(smem_u32(sc.cs), 128u, 128u * (D / 8));
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  constexpr int kUnitsPerBlock = kWarps / kUnitWarps<kWg>;
  const int64_t n_units = (n_tokens + kUnitRows<kWg> - 1) / kUnitRows<kWg>;
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kUnitsPerBlock + warp / kUnitWarps<kWg>; unit < n_units;
       unit += static_cast<int64_t>(gridDim.x) * kUnitsPerBlock) {
    const int64_t n0 = unit * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT;
    if constexpr (kWg && kOut != PhaseOut::loads) {
      const int64_t next = unit + static_cast<int64_t>(gridDim.x) * kUnitsPerBlock;
      prefetch_rows_l2<D, T, 16 * kMT>(xh, n_tokens, next * kUnitRows<kWg> + (warp % kUnitWarps<kWg>) * 16 * kMT,
                                       next < n_units, lane);
    }
    uint32_t a[kMT][D / 16][4];
    float xn[kMT][2], xdev[kMT][2];
    if constexpr (kOut == PhaseOut::loads)
      made_up_unit_rows<D>(n0, g, want.xmax, a, xn, xdev, x_max);
    else
      load_unit_rows<D>(xh, n_tokens, n0, g, t, want.xmax, a, xn, xdev, x_max);

    std::conditional_t<kOut == PhaseOut::top_two, SummedTopTwo<kMT, kChains>, TopTwo<kMT, kChains>> top;
    if constexpr (kWg && kHaveWgmma) {
      float acc[32];
#pragma unroll 1
      for (int k = 0; k < sc.c_pad / kWgN; ++k) {
        wgmma_init_group(acc, sc.c_init, k * kWgN, t);
        if constexpr (kOut == PhaseOut::products) {
#pragma unroll
          for (int q = 0; q < 32; ++q) acc[q] += __uint_as_float(a[0][q & (D / 16 - 1)][q >> 3]);
        } else {
          wgmma_group_products<D>(acc, a[0], desc0, k * kWgN);
        }
        wgmma_wait<0>();
        rank_wgmma_group(top, acc, k * kWgN);
      }
    } else {
      for (int cp = 0; cp < sc.c_pad; cp += kAssignPass) {
        float acc[kMT][kPassTiles][4];
        float2 ci[kPassTiles];
        mma_init_pass(ci, sc.c_init, cp, t);
        if constexpr (kOut == PhaseOut::products) {
#pragma unroll
          for (int i = 0; i < kMT; ++i)
#pragma unroll
            for (int nt = 0; nt < kPassTiles; ++nt)
#pragma unroll
              for (int q = 0; q < 4; ++q)
                acc[i][nt][q] = (q & 1 ? ci[nt].y : ci[nt].x) + __uint_as_float(a[i][q][nt]);
        } else {
          mma_pass_products<D>(acc, a, b_base, ci, cp);
        }
        rank_mma_pass(top, acc, cp);
      }
    }

#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float k1, k2;
        top.quad_best_two(i, r, t, k1, k2);
        const int64_t n = n0 + 16 * i + 8 * r + g;
        const bool live = n < n_tokens;
        const int i1 = key_index(k1) < c_count ? key_index(k1) : 0, i2 = key_index(k2);
        const bool has2 = i2 < c_count && i2 != i1;
        bool rerank = false;
        if (live && has2)
          rerank = within_error_bound(k1, k2, sc.c_len[i1], sc.c_len[i2], sc.c_dev[i1], sc.c_dev[i2], xn[i][r],
                                      xdev[i][r]);
        int pick = i1;
        if constexpr (kOut != PhaseOut::exact)
          if (__any_sync(0xFFFFFFFFu, live && (want.dist || want.resid || rerank)))
            pick = exact_phase<D>(sc, a[i], r, xh + n * D, t, live, rerank, i1, i2, want, out,
                                  static_cast<int64_t>(h) * n_tokens + n, r_max);
        if (live && t == 0) out.ids[static_cast<int64_t>(h) * n_tokens + n] = static_cast<uint8_t>(pick);
      }
  }
  flush_head_maxima(x_max, r_max, lane, out, h);
}

/// Launch assign_phase_probe_kernel<D, kWarps, kWg, kOut> as
/// launch_assign_tc_as launches assign_tc_kernel (float centroids in shared
/// memory: fails on devices without room for them).
template <int D, bool kWg, PhaseOut kOut, int kWarps = cuda::kAssignWarps>
cudaError_t launch_assign_phase_probe(const __nv_bfloat16* x, int64_t n, const float* cent, int c, int heads,
                                      const int* active, const cuda::AssignOutputs& o, cudaStream_t s) {
  return cuda::launch_assign_kernel<kWarps, kWg>(assign_phase_probe_kernel<D, kWarps, kWg, kOut>,
                                                 cuda::assign_tc_smem<D, true>(c), x, n, cent, c, heads, active, o, s);
}

}  // namespace qvg::probe
