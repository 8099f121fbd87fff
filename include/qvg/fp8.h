// FP8 E4M3 (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits.
// No infinity; S.1111.111 is NaN; largest finite 448 (0x7E); smallest
// subnormal 2^-9. Encoding rounds to nearest, ties to even, and saturates to
// +-448: the semantics of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// __NV_E4M3). Usable from host and device code.
#pragma once

#include <cmath>
#include <cstdint>

#include "qvg/common.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace qvg {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E4M3MinSubnormal = 0.001953125f;  // 2^-9

/// float -> E4M3 byte, the rule written out (the specification; host code
/// and the GPU tests use it). Any NaN -> 0x7F (canonical, sign dropped, as
/// CUDA does); |x| > 464 (448 plus half an ulp) and +-inf -> +-448;
/// |x| <= 2^-10 -> signed zero.
QVG_HD uint8_t fp8_e4m3_from_float_rule(float x) {
  const uint8_t sign = (qvg_sign_bit(x)) ? 0x80 : 0x00;
  const float a = fabsf(x);
  if (x != x) return 0x7F;
  if (a > 464.0f) return static_cast<uint8_t>(sign | 0x7E);
  if (a < 0.015625f) {  // below 2^-6: subnormal step 2^-9; code = mantissa
    // a * 2^9 is exact; rintf rounds half to even in the default mode.
    // A result of 8 is the smallest normal (exponent field 1, mantissa 0).
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(rintf(a * 512.0f)));
  }
  int e = 0;
  const float frac = frexpf(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  // a = (1 + m/8) * 2^(e-1); m = (2*frac - 1) * 8 is exact before rounding.
  int m = static_cast<int>(rintf((2.0f * frac - 1.0f) * 8.0f));
  int exp_field = e - 1 + 7;
  if (m == 8) {
    m = 0;
    ++exp_field;
  }
  int code = (exp_field << 3) | m;
  if (code > 0x7E) code = 0x7E;  // (448, 464] rounds to 448 already; guard
  return static_cast<uint8_t>(sign | code);
}

/// float -> E4M3 byte: fp8_e4m3_from_float_rule's byte for every float. On
/// the GPU the hardware conversion (one instruction instead of frexpf, rintf
/// and branches); the GPU test
/// Cuda.Fp8HardwareEncodeEqualsRuleOnEveryFloat compares the two on all 2^32
/// bit patterns.
QVG_HD uint8_t fp8_e4m3_from_float(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
#else
  return fp8_e4m3_from_float_rule(x);
#endif
}

/// E4M3 byte -> float (exact). 0x7F / 0xFF -> NaN. Built from the bits
/// (no ldexp: the GPU decode runs this once per block of values).
QVG_HD float fp8_e4m3_to_float(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80) << 24;
  const uint32_t exp_field = (c >> 3) & 0xFu;
  const uint32_t m = c & 0x7u;
  if (exp_field == 0xF && m == 0x7) return NAN;
  uint32_t bits;
  if (exp_field == 0) {  // subnormal: m * 2^-9, exact in float
    const float mag = static_cast<float>(m) * 0.001953125f;
#if defined(__CUDA_ARCH__)
    bits = __float_as_uint(mag);
#else
    std::memcpy(&bits, &mag, sizeof bits);
#endif
  } else {  // (1 + m/8) * 2^(exp_field - 7): float exponent field exp_field + 120
    bits = ((exp_field + 120u) << 23) | (m << 20);
  }
  bits |= sign;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

/// The power-of-two scale of FP8 centroids (one per stage and head,
/// docs/FORMAT.md) whose largest magnitude is absmax: the least 2^e with
/// absmax / 2^e <= 448 (E4M3's largest value), e clamped to [-100, 127] so
/// that code * scale is a normal BF16 value or zero; 1 when absmax is not a
/// positive number. The CPU encoder and the GPU's share it.
QVG_HD float fp8_centroid_scale_for(float absmax) {
  if (!(absmax > 0)) return 1.0f;
  int e2 = 0;
  const float frac = frexpf(absmax, &e2);  // absmax = (2 frac) 2^(e2 - 1), 2 frac in [1, 2)
  // 448 2^e = 1.75 2^(e + 8) >= (2 frac) 2^(e2 - 1): e = e2 - 9 when 2 frac <= 1.75, else e2 - 8.
  int e = 2.0f * frac <= 1.75f ? e2 - 9 : e2 - 8;
  e = e < -100 ? -100 : (e > 127 ? 127 : e);
  return ldexpf(1.0f, e);
}

}  // namespace qvg
