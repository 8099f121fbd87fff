// Error metrics between a reference tensor and its reconstruction, and the
// attention reference used to measure what errors do to attention outputs.
#pragma once

#include "qvg/tensor.h"

namespace qvg {

struct ErrorStats {
  double mse = 0;      ///< mean squared error
  double rel_l2 = 0;   ///< ||ref - rec|| / ||ref||
  double snr_db = 0;   ///< 10 log10(||ref||^2 / ||ref - rec||^2); +inf when exact
  double max_abs = 0;  ///< largest |ref - rec|
};

/// Errors of rec against ref (same shape; accumulated in double).
ErrorStats compare(const HeadTensor& ref, const HeadTensor& rec);

/// softmax(q k^T / sqrt(dim)) v per head, non-causal, in float with double
/// softmax sums. q: [q_heads, m, dim]; k, v: [kv_heads, n, dim] with q_heads
/// a multiple of kv_heads (grouped-query attention: q head h reads kv head
/// h / (q_heads / kv_heads)). Returns [q_heads, m, dim].
HeadTensor attention_ref(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, int threads = 0);

/// Rows [first, first + count) of every head, or `count` rows spread evenly
/// over the tokens when `spread` (used to pick a subset of queries).
HeadTensor select_tokens(const HeadTensor& x, int64_t count, bool spread = true);

}  // namespace qvg
