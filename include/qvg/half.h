// IEEE binary16 (FP16) and bfloat16 conversions, round to nearest even.
// Usable from host and device code; no dependence on compiler half types.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qvg/common.h"

namespace qvg {

QVG_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
QVG_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN.
QVG_HD uint16_t bf16_from_float(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
QVG_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
/// The value x takes once stored as bfloat16.
QVG_HD float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

/// float -> IEEE half bits, round to nearest even; overflow -> +-inf, NaN -> NaN.
QVG_HD uint16_t fp16_from_float(float x) {
  const uint16_t sign = (qvg_sign_bit(x)) ? 0x8000 : 0x0000;
  const float a = fabsf(x);
  if ((x != x)) return static_cast<uint16_t>(sign | 0x7E00);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00);  // max + half ulp
  if (a < 6.103515625e-05f) {  // below 2^-14: subnormal step 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rintf(a * 16777216.0f)));
  }
  int e = 0;
  const float frac = frexpf(a, &e);  // a = (1 + m/1024) * 2^(e-1)
  int m = static_cast<int>(rintf((2.0f * frac - 1.0f) * 1024.0f));
  int exp_field = e - 1 + 15;
  if (m == 1024) {
    m = 0;
    ++exp_field;
  }
  return static_cast<uint16_t>(sign | (exp_field << 10) | m);
}

QVG_HD float fp16_to_float(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exp_field = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  if (exp_field == 0x1F) return m ? NAN : sign * INFINITY;
  if (exp_field == 0) return sign * static_cast<float>(m) * 5.9604644775390625e-08f;
  return sign * ldexpf(1.0f + static_cast<float>(m) / 1024.0f, exp_field - 15);
}
QVG_HD float round_fp16(float x) { return fp16_to_float(fp16_from_float(x)); }

}  // namespace qvg
