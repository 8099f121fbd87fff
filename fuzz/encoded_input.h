// The input format of fuzz_encoded_tensor: an encoded tensor as the Python
// unpickler receives it (spec, role, shape, the seven parts), flattened:
//   u8 role (0 key, else value) | i64 heads | i64 tokens | i64 dim
//   | u32 spec length | spec | 7 x (u32 length | bytes), parts in kPartFields order.
// All integers little-endian. Written by make_seeds, read by the target.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qvg/codec.h"

namespace qvg::fuzz {

struct EncodedInput {
  std::string spec;
  bool value = false;
  int64_t heads = 0, tokens = 0, dim = 0;
  std::vector<std::vector<uint8_t>> parts = std::vector<std::vector<uint8_t>>(std::size(kPartFields));
};

inline std::vector<uint8_t> to_bytes(const EncodedInput& in) {
  std::vector<uint8_t> b;
  auto put = [&b](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(in.value ? 1 : 0, 1);
  for (const int64_t v : {in.heads, in.tokens, in.dim}) put(static_cast<uint64_t>(v), 8);
  put(in.spec.size(), 4);
  b.insert(b.end(), in.spec.begin(), in.spec.end());
  for (const auto& p : in.parts) {
    put(p.size(), 4);
    b.insert(b.end(), p.begin(), p.end());
  }
  return b;
}

/// nullopt when the bytes end before the last part does (trailing bytes are ignored).
inline std::optional<EncodedInput> from_bytes(const uint8_t* data, size_t size) {
  size_t pos = 0;
  auto get = [&](int n, uint64_t& v) {
    if (size - pos < static_cast<size_t>(n)) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(data[pos + i]) << (8 * i);
    pos += static_cast<size_t>(n);
    return true;
  };
  auto get_bytes = [&](uint64_t n, std::string& s) {
    if (size - pos < n) return false;
    s.assign(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return true;
  };
  EncodedInput in;
  uint64_t v = 0, h = 0, t = 0, d = 0, n = 0;
  if (!get(1, v) || !get(8, h) || !get(8, t) || !get(8, d) || !get(4, n) || !get_bytes(n, in.spec))
    return std::nullopt;
  in.value = v != 0;
  in.heads = static_cast<int64_t>(h);
  in.tokens = static_cast<int64_t>(t);
  in.dim = static_cast<int64_t>(d);
  for (auto& p : in.parts) {
    std::string s;
    if (!get(4, n) || !get_bytes(n, s)) return std::nullopt;
    p.assign(s.begin(), s.end());
  }
  return in;
}

}  // namespace qvg::fuzz
