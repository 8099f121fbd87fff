// Internal: the steps of the KIVI and QuaRot baselines, exposed for tests and
// for checking other backends against the reference. The byte layouts are in
// docs/FORMAT.md ("## KIVI", "## QuaRot").
//
// Both baselines use asymmetric min/max quantization of a group of values,
// all arithmetic in float32 (the order below is the specification):
//   qmax  = 2^b - 1
//   s     = fp16((mx - mn) / qmax)          stored as FP16 bits ("scale")
//   z     = fp16(mn)                        stored as FP16 bits ("zero point")
//   q     = s > 0 ? clamp(rint((x - z) / s), 0, qmax) : 0   (rint: nearest even)
//   x^    = q * s + z                       (decode; s and z the decoded FP16;
//                                            q * s is exact, so FMA or not
//                                            gives the same float)
// fp16() is round-to-nearest-even (qvg/half.h). The encoder quantizes against
// the decoded s and z, so encoder and decoder agree.
#pragma once

#include <cmath>
#include <cstdint>

#include "qvg/codec.h"
#include "qvg/half.h"

namespace qvg {

/// FP16 bits of one group's scale and zero point.
struct AsymParams {
  uint16_t scale = 0;  ///< FP16 bits of s
  uint16_t zero = 0;   ///< FP16 bits of z
};

/// Scale and zero point of a group with minimum mn and maximum mx (mn <= mx).
/// Returns false when s or z is not a finite FP16 value (|value| >= 65520),
/// i.e. the group cannot be represented; the caller reports the error.
QVG_HD bool asym_params(float mn, float mx, int bits, AsymParams* out) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  const float s = (mx - mn) / qmax;
  out->scale = fp16_from_float(s);
  out->zero = fp16_from_float(mn);
  return (out->scale & 0x7C00u) != 0x7C00u && (out->zero & 0x7C00u) != 0x7C00u;
}

/// Unsigned code of x against the decoded scale s (>= 0) and zero point z.
QVG_HD uint8_t asym_quantize_value(float x, float s, float z, int bits) {
  if (!(s > 0.0f)) return 0;
  const float qmax = static_cast<float>((1 << bits) - 1);
  const float q = fminf(fmaxf(rintf((x - z) / s), 0.0f), qmax);
  return static_cast<uint8_t>(q);
}

/// Value of code q at decoded scale s and zero point z.
QVG_HD float asym_dequantize_value(uint8_t q, float s, float z) { return static_cast<float>(q) * s + z; }

/// In-place normalized Walsh-Hadamard transform of x[d], d a power of two:
/// x <- (H_d / sqrt(d)) x with H_d in Sylvester (natural) order,
/// H_d[i][j] = (-1)^popcount(i & j). Float32 butterflies, stage by stage with
/// h = 1, 2, 4, ..., d/2: for each pair (j, j + h) with (j & h) == 0,
/// (a, b) <- (a + b, a - b); then every value is multiplied by the float32
/// constant fp32(1 / sqrt(d)). The transform is orthogonal and its own inverse.
QVG_HD void wht_normalized_ref(float* x, int64_t d) {
  for (int64_t h = 1; h < d; h *= 2) {
    for (int64_t i = 0; i < d; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float norm = static_cast<float>(1.0 / sqrt(static_cast<double>(d)));
  for (int64_t j = 0; j < d; ++j) x[j] *= norm;
}

/// KIVI: how many of the first tokens are quantized (the rest stay BF16).
/// keys: floor((N - R) / G) * G (whole groups only); values: N - R; 0 if N < R.
int64_t kivi_quantized_tokens(const CodecConfig& c, TensorRole role, int64_t tokens);

/// KIVI: the bytes every part of an encoding of this shape needs.
PartBytes kivi_expected_bytes(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens,
                              int64_t dim);

/// QuaRot: the bytes every part of an encoding of this shape needs.
PartBytes quarot_expected_bytes(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim);

}  // namespace qvg
