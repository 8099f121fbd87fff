// The tensors every codec takes: float32 [heads, tokens, dim], owned
// (HeadTensor) or a view of a caller's buffer (HeadTensorView).
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

/// A caller's float32 K/V tensor of shape [heads, tokens, dim], read in
/// place: nothing is copied or owned. The caller keeps the buffer alive and
/// unchanged while a call that takes the view runs. Element (h, n, d) is
/// data[h * head_stride + n * token_stride + d]: the dim values of a token
/// are contiguous, heads and tokens are strided. The three layouts the
/// library takes have a factory each:
///  - htd(p, heads, tokens, dim): [heads][tokens][dim], HeadTensor's order
///    (also [1][heads][tokens][dim]; KvLayout::htd);
///  - thd(p, tokens, heads, dim): [tokens][heads][dim], the token-major
///    order models compute K and V in (also [1][tokens][heads][dim];
///    KvLayout::thd);
///  - rows(p, heads, tokens, dim, row_stride): rows 0 .. tokens-1 of each
///    head of a larger [heads][row_stride][dim] buffer (a model's
///    [context + chunk] K/V; StreamingKVCache::read_device writes this).
/// A HeadTensor converts to its htd view implicitly, so every call that
/// takes a view (Codec::encode, StreamingKVCache::append) takes a
/// HeadTensor as before. An encode of a view gives the same bytes as the
/// encode of the same values in a HeadTensor.
struct HeadTensorView {
  const float* data = nullptr;
  int64_t heads = 0;
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t head_stride = 0;   ///< floats from head h to head h + 1
  int64_t token_stride = 0;  ///< floats from token n to token n + 1, >= dim

  HeadTensorView() = default;
  /// x as [heads][tokens][dim]. Throws qvg::Error when x.data does not hold
  /// x.numel() values.
  HeadTensorView(const HeadTensor& x);  // NOLINT(google-explicit-constructor): a HeadTensor is a view

  /// [heads][tokens][dim] at p. Throws qvg::Error on a negative size or a
  /// shape too large to index (as HeadTensor), and a null p with values.
  static HeadTensorView htd(const float* p, int64_t heads, int64_t tokens, int64_t dim);
  /// [tokens][heads][dim] at p (note the argument order: the buffer's).
  static HeadTensorView thd(const float* p, int64_t tokens, int64_t heads, int64_t dim);
  /// Rows 0 .. tokens-1 of each head of [heads][row_stride][dim] at p;
  /// row_stride >= tokens.
  static HeadTensorView rows(const float* p, int64_t heads, int64_t tokens, int64_t dim, int64_t row_stride);

  int64_t numel() const { return HeadTensor::checked_numel(heads, tokens, dim); }
  /// The dim values of token n of head h.
  const float* row(int64_t h, int64_t n) const { return data + h * head_stride + n * token_stride; }
  float at(int64_t h, int64_t n, int64_t d) const { return row(h, n)[d]; }
  /// True when the values are one [heads][tokens][dim] block at data (the
  /// htd layout; thd with one head; rows with row_stride = tokens).
  bool contiguous() const {
    return (tokens <= 1 || token_stride == dim) && (heads <= 1 || head_stride == tokens * dim);
  }
  /// A HeadTensor holding a copy of the values.
  HeadTensor to_tensor() const;
  /// Throws qvg::Error, prefixed with `what`, unless the view is well
  /// formed: sizes >= 0, token_stride >= dim and head_stride >= 0, every
  /// offset it reaches fits int64 bytes, and data is not null when it has
  /// values. The factories and the HeadTensor conversion make well-formed
  /// views; every call that takes a view checks it.
  void check(const char* what) const;
};

/// Throws qvg::Error naming the first non-finite value (head, token, channel);
/// else returns the largest magnitude (one pass: the encoders' check_magnitude).
float check_finite(const HeadTensor& x, const char* what);
float check_finite(const HeadTensorView& x, const char* what);

}  // namespace qvg
