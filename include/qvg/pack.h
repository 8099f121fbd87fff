// Bit packing of unsigned b-bit codes (b = 2 or 4) into bytes.
//
// Bit order (docs/FORMAT.md): value i of a row goes into byte i*b/8, at bit
// offset (i*b) % 8, least significant bits first. INT2: byte = v0 | v1<<2 |
// v2<<4 | v3<<6. INT4: byte = v0 | v1<<4. A trailing partial byte has its
// unused high bits zero. Codes are unsigned (0 .. 2^b-1); how a code maps to
// a level is the quantizer's business (group_quant.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "qvg/common.h"

namespace qvg {

/// Bytes needed for n codes of b bits.
QVG_HD size_t packed_bytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

/// Pack n codes (each < 2^bits) into out[packed_bytes(n, bits)].
QVG_HD void pack_codes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  const size_t nbytes = packed_bytes(n, bits);
  for (size_t i = 0; i < nbytes; ++i) out[i] = 0;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1u);
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    out[bit >> 3] = static_cast<uint8_t>(out[bit >> 3] | ((codes[i] & mask) << (bit & 7)));
  }
}

/// Unpack n codes of b bits from in[packed_bytes(n, bits)] into codes[n].
QVG_HD void unpack_codes(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1u);
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    codes[i] = static_cast<uint8_t>((in[bit >> 3] >> (bit & 7)) & mask);
  }
}

}  // namespace qvg
