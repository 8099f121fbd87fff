// Internal: the tensor-core assignment's per-row step (assign_tc.cuh):
// re-ranking where the BF16 products cannot decide, exact distances in
// double, the residual for the next stage, the per-head maxima.
#pragma once

#include "cuda/assign_stage.cuh"

namespace qvg::cuda {

// ---------------------------------------------------------------------------
// Per row: re-ranking, exact distances, residual

/// Whether the bf16 products' keys k1 >= k2 of two centroids (norms l1, l2,
/// bf16 deviations ||c - bf16(c)|| e1, e2) for a row (norm xl, deviation xe)
/// lie within their error bound, so that the exact comparison decides.
///
/// The products are x'.c' with x' = bf16(x) = x - dx, c' = bf16(c) = c - dc,
/// so w' - w = -x.dc - dx.c + dx.dc, at most ||x|| ||dc|| + ||dx|| (||c|| +
/// ||dc||) (dx = 0 for bf16 input); the norms are float sums of at most D <=
/// 128 terms (relative error under 2^-17: the factor 1 + 2^-10 covers it).
/// Then the fp32 accumulation from -||c||^2 / 2 (D / 16 mma, each at most
/// 2^-22 of its terms' magnitude: under 2^-18 (||x|| ||c|| + ||c||^2 / 2))
/// and ||c||^2 in float (2^-17 ||c||^2): 2^-14 of both, with room. And the
/// keys' 2^-15 each (rank_key).
__device__ __forceinline__ bool within_error_bound(float k1, float k2, float l1, float l2, float e1, float e2, float xl,
                                                   float xe) {
  // FLT_MIN: keys of zero or subnormal w differ by a fixed amount (the index
  // bits) and tiny norms underflow.
  const float bound = (1.0f + 0x1p-10f) * (xl * (e1 + e2) + xe * (l1 + l2 + e1 + e2)) +
                      0x1p-14f * (xl * (l1 + l2) + 0.5f * (l1 * l1 + l2 * l2)) +
                      0x1p-14f * (fabsf(k1) + fabsf(k2)) + FLT_MIN;
  return k1 - k2 <= bound;
}

/// The lane's D / 4 values of row half r in chunk order (value 8 c + k is
/// dim 8 lane_chunk(t, c) + k): for bf16 input from its A fragments a (the
/// values exactly); else read again from xrow where need_x (zeros otherwise).
template <int D, typename T>
__device__ __forceinline__ void row_values(const uint32_t (&a)[D / 16][4], int r, const T* xrow, int t, bool need_x,
                                           float (&xv)[D / 4]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int c = 0; c < D / 32; ++c)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t wd = a[2 * c + (q >> 1)][2 * (q & 1) + r];
        xv[8 * c + 2 * q] = __uint_as_float(wd << 16);
        xv[8 * c + 2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
      }
  } else {
#pragma unroll
    for (int k = 0; k < D / 4; ++k) xv[k] = 0.0f;
    if (need_x) load_lane_row<D>(xrow, t, xv);
  }
}

/// The re-ranking in float: sd = (d2 - d1) / 2 = sum (c1 - c2)(x - (c1 + c2)
/// / 2) over the quad, and mag, the sum of its terms' magnitudes. c1, c2: the
/// lane's part of the two float rows (row + 8 t); xv: the lane's values.
///
/// Each term is within 4u (u = 2^-24) of |c1 - c2| (|x| + |c1 + c2| / 2),
/// the sum of D / 4 + 2 terms within (D / 4 + 3) u of the sum of their
/// magnitudes: under 39u at D = 128, and the caller's 2^-16 mag = 256u.
/// Outside that bound the sign of sd decides; inside (near-equal distances)
/// the double distances do.
template <int D>
__device__ __forceinline__ void half_gap_fp32(const float* c1, const float* c2, const float (&xv)[D / 4], float& sd,
                                              float& mag) {
  sd = 0.0f, mag = 0.0f;
#pragma unroll
  for (int c = 0; c < D / 32; ++c)
#pragma unroll
    for (int h4 = 0; h4 < 2; ++h4) {
      float p[4], q[4];
      load_float4(c1 + 32 * c + 4 * h4, p);
      load_float4(c2 + 32 * c + 4 * h4, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float dc = p[k] - q[k], mid = 0.5f * (p[k] + q[k]), xk = xv[8 * c + 4 * h4 + k];
        sd = fmaf(dc, xk - mid, sd);
        mag = fmaf(fabsf(dc), fabsf(xk) + fabsf(mid), mag);
      }
    }
  sd = quad_sum(sd);
  mag = quad_sum(mag);
}

/// ||x - c||^2 in double (add_sq_diff; the quad adds xor 1, then xor 2) of
/// the float row ca into da and, where any_b, of cb into db (else 0); rows
/// and xv as half_gap_fp32's.
template <int D>
__device__ __forceinline__ void exact_sq_distances(const float* ca, const float* cb, const float (&xv)[D / 4],
                                                   bool any_b, double& da, double& db) {
  da = 0.0, db = 0.0;
#pragma unroll
  for (int c = 0; c < D / 32; ++c)
#pragma unroll
    for (int h4 = 0; h4 < 2; ++h4) {
      float p[4];
      load_float4(ca + 32 * c + 4 * h4, p);
#pragma unroll
      for (int k = 0; k < 4; ++k) add_sq_diff(da, xv[8 * c + 4 * h4 + k], p[k]);
      if (any_b) {
        float q[4];
        load_float4(cb + 32 * c + 4 * h4, q);
#pragma unroll
        for (int k = 0; k < 4; ++k) add_sq_diff(db, xv[8 * c + 4 * h4 + k], q[k]);
      }
    }
  da = quad_sum(da);
  if (any_b) db = quad_sum(db);
}

/// x - bf16(c) at the lane's chunk c, given those 8 values cv of bf16(c):
/// its max |.| into r_max (NaN wins), and bf16(x - bf16(c)) to the row's
/// next points next_row (where want_next).
template <int D>
__device__ __forceinline__ void residual_chunk(const float (&xv)[D / 4], int c, const float (&cv)[8], int t,
                                               bool want_next, uint16_t* next_row, float& r_max) {
  uint32_t packed[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float d0 = __fsub_rn(xv[8 * c + 2 * q], cv[2 * q]);
    const float d1 = __fsub_rn(xv[8 * c + 2 * q + 1], cv[2 * q + 1]);
    r_max = fmax_nan(r_max, fmax_nan(fabsf(d0), fabsf(d1)));
    packed[q] = pack_bf16x2(d0, d1);
  }
  if (want_next)
    __stwb(reinterpret_cast<uint4*>(next_row + lane_chunk(t, c) * 8),
           make_uint4(packed[0], packed[1], packed[2], packed[3]));
}

/// The residual (residual_chunk) of the lane's chunks against a float row
/// that holds BF16 values (cp: row + 8 t): one 16-byte load per 4 values, no
/// unpacking.
template <int D>
__device__ __forceinline__ void residual_from_float_row(const float* cp, const float (&xv)[D / 4], int t,
                                                        bool want_next, uint16_t* next_row, float& r_max) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    float lo[4], hi[4];
    load_float4(cp + 32 * c, lo);
    load_float4(cp + 32 * c + 4, hi);
    const float cv[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    residual_chunk<D>(xv, c, cv, t, want_next, next_row, r_max);
  }
}

/// The residual (residual_chunk) of the lane's chunks against centroid pick's
/// BF16 core matrices cs: dim 8 lane_chunk(t, c) + 2q + e sits at logical
/// position 16 (2c + q/2) + 8 (q & 1) + 2t + e (logical chunk 2 (2c + q/2) +
/// (q & 1), element 2t + e).
template <int D>
__device__ __forceinline__ void residual_from_core_matrices(const __nv_bfloat16* cs, int pick, const float (&xv)[D / 4],
                                                            int t, bool want_next, uint16_t* next_row, float& r_max) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    float cv[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t wd =
          *reinterpret_cast<const uint32_t*>(cs + core_chunk<D>(pick, 2 * (2 * c + (q >> 1)) + (q & 1)) + 2 * t);
      cv[2 * q] = __uint_as_float(wd << 16);
      cv[2 * q + 1] = __uint_as_float(wd & 0xFFFF0000u);
    }
    residual_chunk<D>(xv, c, cv, t, want_next, next_row, r_max);
  }
}

/// The exact phase of one row (row half r of an m16 tile with A fragments a;
/// row index `row` = h N + n, x's row xrow), which the four lanes of the quad
/// share; all 32 lanes must call it. Where `rerank`, the fp32 comparison of
/// candidates i1, i2 decides, or where it cannot, their distances in double
/// (ties to the lower index); the pick's distance ||x - c||^2 in double to
/// out.dist where wanted; x - bf16(c) of the pick where wanted: its max into
/// r_max, the next points to out.next. Returns the pick.
template <int D, typename T, bool kFloatInSmem>
__device__ __forceinline__ int exact_phase(const StagedCentroids<D, kFloatInSmem>& sc, const uint32_t (&a)[D / 16][4],
                                           int r, const T* xrow, int t, bool live, bool rerank, int i1, int i2,
                                           const AssignWants& want, const AssignOutputs& out, int64_t row,
                                           float& r_max) {
  float xv[D / 4];  // the lane's values of the row, chunk order
  row_values<D>(a, r, xrow, t, live && (want.dist || want.resid || rerank), xv);
  // The float centroids, dim order: lane t's chunk c at lane_chunk(t, c) * 8
  // = (4 c + t) * 8.
  const float* c1 = sc.row(i1) + 8 * t;
  const float* c2 = sc.row(i2) + 8 * t;  // i2 < c_pad: a padded row reads zeros
  bool second_wins = false, exact_cmp = false;
  if (__any_sync(0xFFFFFFFFu, rerank)) {
    float sd, mag;
    half_gap_fp32<D>(c1, c2, xv, sd, mag);
    const bool clear = fabsf(sd) > 0x1p-16f * mag + 0x1p-100f;  // false for NaN: the exact path
    second_wins = rerank && clear && sd < 0.0f;
    exact_cmp = rerank && !clear;
  }
  // ||x - c||^2 in double: of the pick when the distances are wanted, of
  // both candidates where the fp32 comparison could not tell them apart.
  const bool need_a = live && (want.dist || exact_cmp), need_b = exact_cmp;
  if (__any_sync(0xFFFFFFFFu, need_a)) {
    const float* ca = second_wins ? c2 : c1;
    const bool any_b = __any_sync(0xFFFFFFFFu, need_b);
    double da, db;
    exact_sq_distances<D>(ca, c2, xv, any_b, da, db);
    if (exact_cmp) second_wins = db < da || (db == da && i2 < i1);  // da is d1 here
    if (live && want.dist && t == 0) out.dist[row] = static_cast<float>(exact_cmp && second_wins ? db : da);
  }
  const int pick = second_wins ? i2 : i1;
  // Where the pick's float centroid is a BF16 value (||c - bf16(c)|| = 0:
  // every centroid the encoder's k-means makes, kmeans.h), the float rows
  // hold bf16(c) itself; otherwise the BF16 core matrices.
  const bool need_r = live && want.resid;
  const bool from_float = __all_sync(0xFFFFFFFFu, !need_r || sc.c_dev[pick] == 0.0f);
  if (need_r) {
    uint16_t* next_row = want.next ? out.next + row * D : nullptr;
    if (from_float)
      residual_from_float_row<D>(sc.row(pick) + 8 * t, xv, t, want.next, next_row, r_max);
    else
      residual_from_core_matrices<D>(sc.cs, pick, xv, t, want.next, next_row, r_max);
  }
  return pick;
}

/// The per-head maxima: the warp's max |x| and max |x - bf16(c)| (NaN wins)
/// over its lanes, one atomicMax each per warp (float bits: exact, max is
/// order-independent).
__device__ __forceinline__ void flush_head_maxima(float x_max, float r_max, int lane, const AssignOutputs& out, int h) {
  for (int off = 16; off > 0; off >>= 1) {
    x_max = fmaxf(x_max, __shfl_xor_sync(0xFFFFFFFFu, x_max, off));
    r_max = fmax_nan(r_max, __shfl_xor_sync(0xFFFFFFFFu, r_max, off));
  }
  if (lane == 0) {
    if (out.x_max) atomicMax(out.x_max + h, __float_as_uint(x_max));
    if (out.resid_max) atomicMax(out.resid_max + h, __float_as_uint(r_max));  // NaN (0x7FC00000 up) above inf
  }
}

}  // namespace qvg::cuda
