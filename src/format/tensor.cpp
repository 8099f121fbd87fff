#include <algorithm>
#include <cmath>

#include "qvg/tensor.h"

namespace qvg {

float check_finite(const HeadTensor& x, const char* what) {
  QVG_CHECK(static_cast<int64_t>(x.data.size()) == x.numel(), what, ": data holds ", x.data.size(),
            " values but the shape [", x.heads, ", ", x.tokens, ", ", x.dim, "] needs ", x.numel());
  float largest = 0.0f;
  for (size_t i = 0; i < x.data.size(); ++i) {
    largest = std::max(largest, std::fabs(x.data[i]));  // NaN leaves it; the test below throws for it
    if (!std::isfinite(x.data[i])) {
      const int64_t per_head = x.tokens * x.dim;
      const int64_t h = static_cast<int64_t>(i) / per_head;
      const int64_t n = (static_cast<int64_t>(i) % per_head) / x.dim;
      const int64_t d = static_cast<int64_t>(i) % x.dim;
      QVG_CHECK(false, what, " holds a non-finite value (", x.data[i], ") at head ", h, ", token ", n,
                ", channel ", d);
    }
  }
  return largest;
}

}  // namespace qvg
