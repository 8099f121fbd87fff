// qvg — shared basics: the error type, checks, and the host/device qualifier.
#pragma once

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#if defined(__CUDACC__)
#define QVG_HD __host__ __device__ __forceinline__
#else
#define QVG_HD inline
#endif

namespace qvg {

/// True when the sign bit of x is set (also for -0 and negative NaN).
QVG_HD bool qvg_sign_bit(float x) {
#if defined(__CUDA_ARCH__)
  return (__float_as_uint(x) >> 31) != 0;
#else
  unsigned int u;
  std::memcpy(&u, &x, sizeof u);
  return (u >> 31) != 0;
#endif
}

/// Every error the library reports. The message names the problem (the
/// argument, the file, the expected and the found value).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// s with every byte that a terminal could act on escaped as \xNN: control
/// characters (below 0x20, 0x7F), bytes of invalid UTF-8 and C1 controls. Text
/// and valid UTF-8 (U+00A0 and above) stay. Errors that quote bytes of a file
/// (malformed headers, tags, names) pass them through it.
std::string printable(std::string_view s);

namespace detail {
template <typename... Args>
[[noreturn]] void fail(const char* where, Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  (void)where;
  throw Error(os.str());
}
}  // namespace detail

}  // namespace qvg

/// QVG_CHECK(cond, "message parts", value, ...): throws qvg::Error when cond is false.
#define QVG_CHECK(cond, ...)                              \
  do {                                                    \
    if (!(cond)) ::qvg::detail::fail(#cond, __VA_ARGS__); \
  } while (0)
