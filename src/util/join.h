// Lists in messages: items joined by ", " ("a, b, c"), or with a last
// separator of their own ("a, b and c", "2, 4 or 8").
#pragma once

#include <iterator>
#include <sstream>
#include <string>
#include <string_view>

namespace qvg {

/// The items of range r (anything an ostream prints) separated by sep, the
/// last two by last (sep where last is empty).
template <typename Range>
std::string join(const Range& r, std::string_view sep = ", ", std::string_view last = {}) {
  std::ostringstream s;
  const auto n = static_cast<size_t>(std::distance(std::begin(r), std::end(r)));
  size_t i = 0;
  for (const auto& x : r) {
    if (i > 0) s << (i + 1 == n && !last.empty() ? last : sep);
    s << x;
    ++i;
  }
  return s.str();
}

}  // namespace qvg
