// CRC-32 (IEEE 802.3 / zlib / PNG: reflected polynomial 0xEDB88320, initial
// value and final XOR 0xFFFFFFFF), the checksum of every section of a
// streaming cache file. Check value: crc32("123456789") = 0xCBF43926.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace qvg {

namespace detail {
constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
inline constexpr std::array<uint32_t, 256> kCrc32Table = make_crc32_table();
}  // namespace detail

/// Continues a CRC-32: crc32_update(crc32_update(0, a), b) == crc32(a + b).
/// Start with 0 (the finished CRC of no bytes).
inline uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = detail::kCrc32Table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/// CRC-32 of n bytes.
inline uint32_t crc32(const void* data, size_t n) { return crc32_update(0, data, n); }

}  // namespace qvg
