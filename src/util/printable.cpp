// qvg::printable (include/qvg/common.h): text from files made safe to print.
#include <cstdint>
#include <string>
#include <string_view>

#include "qvg/common.h"

namespace qvg {

namespace {

/// Length of the valid UTF-8 sequence at s[i] encoding a code point of U+00A0 or
/// above (not a C1 control, not a surrogate, not overlong), else 0.
size_t utf8_printable_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const uint32_t least = n == 2 ? 0xA0 : n == 3 ? 0x800 : 0x10000;
  if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (const size_t n = c >= 0x80 ? utf8_printable_length(s, i) : 0; n > 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    out += "\\x";
    out.push_back(hex[c >> 4]);
    out.push_back(hex[c & 0xF]);
    ++i;
  }
  return out;
}

}  // namespace qvg
