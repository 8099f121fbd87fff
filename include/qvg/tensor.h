// The in-memory tensor every codec takes: float32, layout [heads, tokens, dim].
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "qvg/common.h"

namespace qvg {

/// A K or V tensor of one layer: float32, row-major [heads, tokens, dim].
/// Head h is the tokens x dim matrix starting at data[h * tokens * dim].
struct HeadTensor {
  int64_t heads = 0;
  int64_t tokens = 0;
  int64_t dim = 0;
  std::vector<float> data;  ///< size heads * tokens * dim

  HeadTensor() = default;
  /// Throws qvg::Error (before allocating) on a negative dim or a shape too large to index.
  HeadTensor(int64_t h, int64_t n, int64_t d)
      : heads(h), tokens(n), dim(d), data(static_cast<size_t>(checked_numel(h, n, d)), 0.0f) {}

  int64_t numel() const { return checked_numel(heads, tokens, dim); }
  float* head(int64_t h) { return data.data() + h * tokens * dim; }
  const float* head(int64_t h) const { return data.data() + h * tokens * dim; }
  float& at(int64_t h, int64_t n, int64_t d) { return data[static_cast<size_t>((h * tokens + n) * dim + d)]; }
  float at(int64_t h, int64_t n, int64_t d) const {
    return data[static_cast<size_t>((h * tokens + n) * dim + d)];
  }
  bool same_shape(const HeadTensor& o) const {
    return heads == o.heads && tokens == o.tokens && dim == o.dim;
  }

  /// h * n * d. Throws qvg::Error on a negative dim, or when max(h,1) * max(n,1) *
  /// max(d,1) floats would overflow int64 bytes: then every index (h * tokens + n) * dim
  /// fits, also for shapes with a zero dim such as [2^63 - 1, 255, 0].
  static int64_t checked_numel(int64_t h, int64_t n, int64_t d) {
    QVG_CHECK(h >= 0 && n >= 0 && d >= 0, "tensor shape must be non-negative, got [", h, ", ", n, ", ", d, "]");
    int64_t bound = static_cast<int64_t>(sizeof(float));
    for (int64_t x : {h, n, d})
      QVG_CHECK(!__builtin_mul_overflow(bound, x > 0 ? x : 1, &bound), "tensor shape [", h, ", ", n, ", ", d,
                "] is too large (its byte count overflows 64 bits)");
    return h * n * d;
  }
};

/// Throws qvg::Error naming the first non-finite value (head, token, channel);
/// else returns the largest magnitude (one pass: the encoders' check_magnitude).
float check_finite(const HeadTensor& x, const char* what);

}  // namespace qvg
