#include "qvg/group_quant.h"

#include <cmath>

#include "qvg/pack.h"

namespace qvg {

namespace {
// Inputs are finite (checked by the codecs), so a plain comparison is the
// maximum; std::fmax would be a libm call per value.
float block_absmax(const float* x, int64_t b) {
  float m = 0.0f;
  for (int64_t i = 0; i < b; ++i) {
    const float a = std::fabs(x[i]);
    m = a > m ? a : m;
  }
  return m;
}
}  // namespace

float max_block_scale_ref(const float* x, int64_t n, int64_t d, const GroupQuantParams& p) {
  const float lmax = level_max(p.levels, p.bits);
  float m = 0.0f;
  for (int64_t i = 0; i < n * d; i += p.block) {
    const float a = block_absmax(x + i, p.block);
    m = a > m ? a : m;
  }
  return m / lmax;
}

void group_quantize_row_ref(const float* x, int64_t d, const GroupQuantParams& p, float span,
                            uint8_t* codes_out, uint8_t* scales_out) {
  const float lmax = level_max(p.levels, p.bits);
  const int sb = scale_bytes(p.scale_format);
  uint8_t codes[256];  // one block of unpacked codes (block <= 128)
  for (int64_t b0 = 0, bi = 0; b0 < d; b0 += p.block, ++bi) {
    const float scale = block_absmax(x + b0, p.block) / lmax;
    const uint16_t sc = encode_block_scale(scale, span, p.scale_format);
    scales_out[bi * sb] = static_cast<uint8_t>(sc & 0xFF);
    if (sb == 2) scales_out[bi * sb + 1] = static_cast<uint8_t>(sc >> 8);
    const float s = decode_block_scale(sc, span, p.scale_format);
    for (int64_t i = 0; i < p.block; ++i) codes[i] = quantize_value(x[b0 + i], s, p.levels, p.bits);
    // block * bits is a multiple of 8 (block >= 16), so blocks start on byte boundaries.
    pack_codes(codes, static_cast<size_t>(p.block), p.bits, codes_out + b0 * p.bits / 8);
  }
}

void group_dequantize_row_ref(const uint8_t* codes, const uint8_t* scales, int64_t d,
                              const GroupQuantParams& p, float span, float* out) {
  const int sb = scale_bytes(p.scale_format);
  uint8_t u[256];
  for (int64_t b0 = 0, bi = 0; b0 < d; b0 += p.block, ++bi) {
    const uint16_t sc = sb == 2 ? static_cast<uint16_t>(scales[bi * 2] | (scales[bi * 2 + 1] << 8))
                                : scales[bi];
    const float s = decode_block_scale(sc, span, p.scale_format);
    unpack_codes(codes + b0 * p.bits / 8, static_cast<size_t>(p.block), p.bits, u);
    for (int64_t i = 0; i < p.block; ++i) out[b0 + i] = dequantize_value(u[i], s, p.levels, p.bits);
  }
}

}  // namespace qvg
