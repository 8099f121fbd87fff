#include "qvg/tensor.h"

#include <algorithm>
#include <cmath>

namespace qvg {

HeadTensorView::HeadTensorView(const HeadTensor& x)
    : data(x.data.data()), heads(x.heads), tokens(x.tokens), dim(x.dim), head_stride(x.tokens * x.dim),
      token_stride(x.dim) {
  QVG_CHECK(static_cast<int64_t>(x.data.size()) == x.numel(), "tensor: data holds ", x.data.size(),
            " values but the shape [", x.heads, ", ", x.tokens, ", ", x.dim, "] needs ", x.numel());
}

namespace {

/// The view of the given strides at p, checked (HeadTensorView::check) under `what`.
HeadTensorView strided_view(const float* p, int64_t heads, int64_t tokens, int64_t dim, int64_t head_stride,
                            int64_t token_stride, const char* what) {
  HeadTensorView v;
  v.data = p;
  v.heads = heads;
  v.tokens = tokens;
  v.dim = dim;
  v.head_stride = head_stride;
  v.token_stride = token_stride;
  v.check(what);
  return v;
}

}  // namespace

HeadTensorView HeadTensorView::htd(const float* p, int64_t heads, int64_t tokens, int64_t dim) {
  return rows(p, heads, tokens, dim, tokens);
}

HeadTensorView HeadTensorView::thd(const float* p, int64_t tokens, int64_t heads, int64_t dim) {
  HeadTensor::checked_numel(heads, tokens, dim);  // bounds heads * dim
  return strided_view(p, heads, tokens, dim, dim, heads * dim, "thd view");
}

HeadTensorView HeadTensorView::rows(const float* p, int64_t heads, int64_t tokens, int64_t dim, int64_t row_stride) {
  HeadTensor::checked_numel(heads, tokens, dim);
  QVG_CHECK(row_stride >= tokens, "rows view: row_stride (", row_stride, ") is below tokens (", tokens, ")");
  int64_t head_stride = 0;
  QVG_CHECK(!__builtin_mul_overflow(row_stride, dim, &head_stride), "rows view: row_stride ", row_stride, " x dim ",
            dim, " overflows 64 bits");
  return strided_view(p, heads, tokens, dim, head_stride, dim, "rows view");
}

void HeadTensorView::check(const char* what) const {
  const int64_t n = HeadTensor::checked_numel(heads, tokens, dim);
  QVG_CHECK(token_stride >= dim && head_stride >= 0, what, ": strides (head ", head_stride, ", token ", token_stride,
            ") must be >= 0 and the token stride >= dim (", dim, ")");
  if (n == 0) return;
  QVG_CHECK(data != nullptr, what, ": null data for a shape [", heads, ", ", tokens, ", ", dim, "] with values");
  // The last value's offset, in bytes, fits int64: every row(h, n) pointer is computed without overflow.
  int64_t last = 0, term = 0;
  const bool overflow = __builtin_mul_overflow(heads - 1, head_stride, &last) ||
                        __builtin_mul_overflow(tokens - 1, token_stride, &term) ||
                        __builtin_add_overflow(last, term, &last) || __builtin_add_overflow(last, dim, &last) ||
                        __builtin_mul_overflow(last, int64_t{sizeof(float)}, &last);
  QVG_CHECK(!overflow, what, ": shape [", heads, ", ", tokens, ", ", dim, "] with strides (head ", head_stride,
            ", token ", token_stride, ") reaches beyond 2^63 bytes");
}

HeadTensor HeadTensorView::to_tensor() const {
  check("view");
  HeadTensor x(heads, tokens, dim);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t n = 0; n < tokens; ++n) std::copy(row(h, n), row(h, n) + dim, x.head(h) + n * dim);
  return x;
}

float check_finite(const HeadTensor& x, const char* what) {
  QVG_CHECK(static_cast<int64_t>(x.data.size()) == x.numel(), what, ": data holds ", x.data.size(),
            " values but the shape [", x.heads, ", ", x.tokens, ", ", x.dim, "] needs ", x.numel());
  return check_finite(HeadTensorView(x), what);
}

float check_finite(const HeadTensorView& x, const char* what) {
  x.check(what);
  float largest = 0.0f;
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t n = 0; n < x.tokens; ++n) {
      const float* r = x.row(h, n);
      for (int64_t d = 0; d < x.dim; ++d) {
        largest = std::max(largest, std::fabs(r[d]));  // NaN leaves it; the test below throws for it
        if (!std::isfinite(r[d]))
          QVG_CHECK(false, what, " holds a non-finite value (", r[d], ") at head ", h, ", token ", n, ", channel ", d);
      }
    }
  return largest;
}

}  // namespace qvg
