// The in-memory tensor every codec takes: float32, layout [heads, tokens, dim].
#pragma once

#include <cstdint>
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
  HeadTensor(int64_t h, int64_t n, int64_t d)
      : heads(h), tokens(n), dim(d), data(static_cast<size_t>(h * n * d), 0.0f) {
    QVG_CHECK(h >= 0 && n >= 0 && d >= 0, "tensor shape must be non-negative, got [", h, ", ", n,
              ", ", d, "]");
  }

  int64_t numel() const { return heads * tokens * dim; }
  float* head(int64_t h) { return data.data() + h * tokens * dim; }
  const float* head(int64_t h) const { return data.data() + h * tokens * dim; }
  float& at(int64_t h, int64_t n, int64_t d) { return data[static_cast<size_t>((h * tokens + n) * dim + d)]; }
  float at(int64_t h, int64_t n, int64_t d) const {
    return data[static_cast<size_t>((h * tokens + n) * dim + d)];
  }
  bool same_shape(const HeadTensor& o) const {
    return heads == o.heads && tokens == o.tokens && dim == o.dim;
  }
};

/// Throws qvg::Error naming the first non-finite value (head, token, channel).
void check_finite(const HeadTensor& x, const char* what);

}  // namespace qvg
