// Group (block) quantization: the per-value and per-block rules shared by the
// CPU reference and the CUDA kernels, so both produce the same bytes.
//
// A row of dim values is cut into blocks of B along dim. Each block gets a
// scale s = absmax / level_max. Scales are stored relative to a per-head
// FP32 "span scale" (span = largest block scale / format max), so the stored
// scale s / span lies in [0, format max] and cannot saturate; blocks whose
// s / span falls below the format's smallest subnormal store 0 and decode to
// zeros (their values are below 2^-10 * 448^-1 of the head's largest block
// scale). Values are quantized against the decoded scale.
#pragma once

#include <cstdint>

#include "qvg/common.h"
#include "qvg/config.h"
#include "qvg/fp8.h"
#include "qvg/half.h"

namespace qvg {

/// The largest level magnitude in units of the scale: symmetric 2^(b-1)-1,
/// midrise (2^b-1)/2.
QVG_HD float level_max(LevelRule r, int bits) {
  return r == LevelRule::symmetric ? static_cast<float>((1 << (bits - 1)) - 1)
                                   : 0.5f * static_cast<float>((1 << bits) - 1);
}

/// Largest finite value of the scale format (448 or 65504).
QVG_HD float scale_format_max(ScaleFormat f) { return f == ScaleFormat::fp8 ? 448.0f : 65504.0f; }
/// Bytes per stored scale.
QVG_HD int scale_bytes(ScaleFormat f) { return f == ScaleFormat::fp8 ? 1 : 2; }

/// Span scale from the head's largest block scale; 1 when it is 0.
QVG_HD float span_scale_for(float max_block_scale, ScaleFormat f) {
  return max_block_scale > 0.0f ? max_block_scale / scale_format_max(f) : 1.0f;
}

/// Stored code of a block scale (FP8 byte or FP16 bits).
QVG_HD uint16_t encode_block_scale(float scale, float span, ScaleFormat f) {
  const float r = scale / span;
  return f == ScaleFormat::fp8 ? fp8_e4m3_from_float(r) : fp16_from_float(r);
}
/// The decoded scale used by both encoder and decoder.
QVG_HD float decode_block_scale(uint16_t code, float span, ScaleFormat f) {
  const float r = f == ScaleFormat::fp8 ? fp8_e4m3_to_float(static_cast<uint8_t>(code))
                                        : fp16_to_float(code);
  return r * span;
}

/// Unsigned code of x against the decoded scale s (s >= 0).
/// symmetric: u = clamp(rint(x / s), -qmax, qmax) + 2^(b-1); s == 0 -> 0 level.
/// midrise:   u = clamp(rint(x / s + h), 0, 2^b-1), h = (2^b-1)/2.
QVG_HD uint8_t quantize_value(float x, float s, LevelRule r, int bits) {
  if (r == LevelRule::symmetric) {
    const int half = 1 << (bits - 1);
    const float qmax = static_cast<float>(half - 1);
    float q = s > 0.0f ? rintf(x / s) : 0.0f;
    q = q < -qmax ? -qmax : (q > qmax ? qmax : q);  // inputs are finite (checked)
    return static_cast<uint8_t>(static_cast<int>(q) + half);
  }
  const float h = 0.5f * static_cast<float>((1 << bits) - 1);
  float u = s > 0.0f ? rintf(x / s + h) : rintf(h);
  const float umax = static_cast<float>((1 << bits) - 1);
  u = u < 0.0f ? 0.0f : (u > umax ? umax : u);
  return static_cast<uint8_t>(u);
}

/// Value of code u at decoded scale s.
QVG_HD float dequantize_value(uint8_t u, float s, LevelRule r, int bits) {
  if (r == LevelRule::symmetric) return static_cast<float>(static_cast<int>(u) - (1 << (bits - 1))) * s;
  return (static_cast<float>(u) - 0.5f * static_cast<float>((1 << bits) - 1)) * s;
}

/// Parameters of symmetric group quantization.
struct GroupQuantParams {
  int bits = 2;
  int block = 64;
  ScaleFormat scale_format = ScaleFormat::fp8;
  LevelRule levels = LevelRule::symmetric;
};

/// Largest block scale (absmax / level_max) over rows x[n x d].
float max_block_scale_ref(const float* x, int64_t n, int64_t d, const GroupQuantParams& p);

/// Quantize one row x[d]: packed codes out[d * bits / 8], scales
/// scales_out[(d / block) * scale_bytes] (FP16 little-endian).
void group_quantize_row_ref(const float* x, int64_t d, const GroupQuantParams& p, float span,
                            uint8_t* codes_out, uint8_t* scales_out);

/// Dequantize one row into out[d].
void group_dequantize_row_ref(const uint8_t* codes, const uint8_t* scales, int64_t d,
                              const GroupQuantParams& p, float span, float* out);

}  // namespace qvg
