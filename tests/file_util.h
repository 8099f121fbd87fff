// Shared by the CPU tests: tensor files built by hand, byte for byte
// (little-endian integers, .npy and .safetensors framing).
#pragma once

#include <cstdint>
#include <string>

namespace qvg::test {

inline std::string le16(uint16_t v) { return {static_cast<char>(v & 0xFF), static_cast<char>(v >> 8)}; }
inline std::string le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}
inline std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}

/// A .npy file: magic, version, header length, dict padded like numpy does
/// (preamble + header a multiple of 64, ending in '\n'), then data.
inline std::string npy_file(int major, const std::string& dict, const std::string& data) {
  const size_t pre = major == 1 ? 10 : 12;
  const size_t total = (pre + dict.size() + 1 + 63) / 64 * 64;
  std::string header = dict + std::string(total - pre - dict.size() - 1, ' ') + "\n";
  std::string s = "\x93NUMPY";
  s.push_back(static_cast<char>(major));
  s.push_back('\0');
  s += major == 1 ? le16(static_cast<uint16_t>(header.size())) : le32(static_cast<uint32_t>(header.size()));
  return s + header + data;
}

/// A .safetensors file: u64 length, JSON padded to 8 bytes, data.
inline std::string st_file(std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  return le64(json.size()) + json + data;
}

}  // namespace qvg::test
