// Exact, order-independent sums for the k-means centroid update, shared by
// the CPU reference and the CUDA kernels.
//
// The points of one head are summed in 64-bit fixed point: every value x is
// rounded to a multiple of the quantum q = 2^e, where e comes from the head's
// largest |x| and its point count n so that no sum of up to n terms can
// overflow:
//
//   absmax = f * 2^E with f in [0.5, 1)  (so |x| < 2^E),  2^L >= n,
//   e = E + L - 62  ->  |x / q| < 2^(62 - L),  |sum| <= n * 2^(62 - L) <= 2^62.
//
// Integer addition is associative, so the sums (hence the centroids) are the
// same bits for any order of accumulation: any thread count on the CPU,
// atomics on the GPU. Each term is off by at most q / 2 = absmax * 2^(L - 63)
// (about 2^-48 of the head's range at n = 30,000), far below the bf16 the
// centroids are stored in. The mean is float(double(sum) * q / count) with
// every step correctly rounded, on both sides.
#pragma once

#include <cmath>
#include <cstdint>

#include "qvg/common.h"

namespace qvg {

/// The exponent e of the quantum 2^e for a head with largest magnitude
/// `absmax` (finite, >= 0) and n >= 1 points. absmax = 0 gives 0 (every
/// value is then 0).
QVG_HD int fixed_sum_exponent(float absmax, int64_t n) {
  if (!(absmax > 0.0f)) return 0;
  int E = 0;
  (void)std::frexp(absmax, &E);  // absmax = f * 2^E, f in [0.5, 1)
  int L = 0;
  while ((int64_t{1} << L) < n) ++L;
  return E + L - 62;
}

/// x in units of 2^e, rounded to nearest (ties to even).
QVG_HD int64_t to_fixed(float x, int e) {
  const double v = std::ldexp(static_cast<double>(x), -e);
#if defined(__CUDA_ARCH__)
  return __double2ll_rn(v);
#else
  return std::llrint(v);  // the default rounding mode: nearest, ties to even
#endif
}

/// 2^-e, the factor of to_fixed_scaled: a normal double for every e that
/// fixed_sum_exponent returns for n <= 2^62 (e in [-210, 128]: E in
/// [-148, 128], L in [0, 62]).
QVG_HD double fixed_scale(int e) { return std::ldexp(1.0, -e); }

/// to_fixed(x, e) with scale = fixed_scale(e) computed once for many values
/// (ldexp costs several double operations a value). The same integer: x *
/// 2^-e is below 2^62 in magnitude and at least 2^-278 unless 0, a normal
/// double, so the product is exact, as ldexp's result is.
QVG_HD int64_t to_fixed_scaled(float x, double scale) {
#if defined(__CUDA_ARCH__)
  return __double2ll_rn(__dmul_rn(static_cast<double>(x), scale));
#else
  return std::llrint(static_cast<double>(x) * scale);
#endif
}

/// The mean of `count` >= 1 values whose fixed-point sum is `sum`.
QVG_HD float fixed_mean(int64_t sum, int e, int64_t count) {
#if defined(__CUDA_ARCH__)
  const double s = std::ldexp(__ll2double_rn(sum), e);
  return __double2float_rn(__ddiv_rn(s, static_cast<double>(count)));
#else
  const double s = std::ldexp(static_cast<double>(sum), e);
  return static_cast<float>(s / static_cast<double>(count));
#endif
}

}  // namespace qvg
