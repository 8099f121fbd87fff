// Internal: the float steps of the code=cq encoder (docs/FORMAT.md, "code=cq",
// Encode) written once for the CPU reference (src/reference/cq_code.cpp) and
// the CUDA encoder (src/cuda/encode_cq.cuh), so both round the same way: every
// operation is one IEEE operation rounded to nearest, none fused (the CPU
// files build with -ffp-contract=off; the device side names the rounding).
#pragma once

#include <cmath>
#include <cstdint>

#include "qvg/common.h"

namespace qvg {

/// Squared distance of the g values u to the codeword w: d = 0, then for t =
/// 0 .. g - 1 in order, e = u[t] - w[t] and d = d + e * e (float, unfused).
QVG_HD float cq_sq_dist(const float* u, const float* w, int g) {
  float d = 0.0f;
  for (int t = 0; t < g; ++t) {
#if defined(__CUDA_ARCH__)
    const float e = __fsub_rn(u[t], w[t]);
    d = __fadd_rn(d, __fmul_rn(e, e));
#else
    const float e = u[t] - w[t];
    d = d + e * e;
#endif
  }
  return d;
}

/// One term of a token's sum of squares (double, unfused): sq + x * x.
QVG_HD double cq_add_square(double sq, float x) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(sq, __dmul_rn(static_cast<double>(x), static_cast<double>(x)));
#else
  return sq + static_cast<double>(x) * static_cast<double>(x);
#endif
}

/// A token's RMS from its sum of squares over d values: float(sqrt(sq / d)).
QVG_HD float cq_rms(double sq, int64_t d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(__dsqrt_rn(__ddiv_rn(sq, static_cast<double>(d))));
#else
  return static_cast<float>(std::sqrt(sq / static_cast<double>(d)));
#endif
}

/// a / b and a * b in float, correctly rounded on both sides.
QVG_HD float cq_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
QVG_HD float cq_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// The span's total squared distance (the exact fixed-point sum of the rows'
/// distances, in units of 2^e) as a double: sum * 2^e.
QVG_HD double cq_total(int64_t sum, int e) {
#if defined(__CUDA_ARCH__)
  return ldexp(__ll2double_rn(sum), e);
#else
  return std::ldexp(static_cast<double>(sum), e);
#endif
}

/// The codebook k-means' stop rule after an iteration: the relative drop of
/// the total squared distance is at most tol (prev - now <= tol * prev).
QVG_HD bool cq_converged(double prev, double now, double tol) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(prev, now) <= __dmul_rn(tol, prev);
#else
  return prev - now <= tol * prev;
#endif
}

}  // namespace qvg
