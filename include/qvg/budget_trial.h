// The budget rule on data: among a family's members within a budget
// (budget_candidates, qvg/budget.h), the one whose trial encodes of a sample
// of the caller's K and V have the lowest error. What `qvg eval --bits` runs.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qvg/budget.h"
#include "qvg/config.h"
#include "qvg/tensor.h"

namespace qvg {

/// How the trial encodes sample and stop. Defaults in the comments.
struct BudgetTrialOptions {
  /// Heads of K and of V encoded per candidate, spread evenly over the heads
  /// (head floor((i + 1/2) H / m) for i < m); every token of each (k-means'
  /// fit depends on the tokens per centroid, so the span is not cut).
  int sample_heads = 2;
  /// Trial encodes stop starting new candidates once this many seconds have
  /// gone by (the first candidate is always measured); the rest stay
  /// untried and cannot be chosen.
  double max_seconds = 120;
  int threads = 0;  ///< worker threads of each encode (0 = all cores)
  /// Called with one line per candidate measured (may be empty).
  std::function<void(const std::string&)> progress;
};

/// One candidate of the rule on data.
struct BudgetTrial {
  BudgetCandidate candidate;  ///< config (fixed C), bits, model distortion
  /// Measured: keys' and values' relative squared errors sum |X - X^|^2 /
  /// sum |X|^2 over the sampled heads, averaged; NaN when untried.
  double measured = std::numeric_limits<double>::quiet_NaN();
  double key_error = std::numeric_limits<double>::quiet_NaN();    ///< keys' alone
  double value_error = std::numeric_limits<double>::quiet_NaN();  ///< values' alone
  double seconds = 0;  ///< its trial encodes and decodes
};

/// What choose_for_budget_on_data found.
struct MeasuredBudgetChoice {
  BudgetChoice choice;              ///< as choose_for_budget's (auto kept as auto)
  std::vector<BudgetTrial> trials;  ///< every candidate, the model's order (empty: unreachable)
  std::vector<int64_t> heads;       ///< the heads sampled
  int untried = 0;                  ///< candidates left out by max_seconds
};

/// The budget rule on data: budget_candidates(c, budget, k.tokens, k.dim,
/// tolerance, any_format = true) trial-encoded on the sampled heads of k
/// (as keys) and v (as values) in the model's order; the one with the
/// lowest measured error is chosen (equal errors: the model's order).
/// Nothing within the limit: choose_for_budget_any_format's unreachable
/// answer, no trials. k and v: [heads, tokens, dim], the same shape, one
/// span. Throws qvg::Error for mismatched or empty tensors, sample_heads <
/// 1, max_seconds not >= 0, and as choose_for_budget does.
MeasuredBudgetChoice choose_for_budget_on_data(const CodecConfig& c, double budget, const HeadTensor& k,
                                               const HeadTensor& v, const BudgetTrialOptions& opt = {},
                                               double tolerance = 0.03);

/// The relative squared error of config c on the given heads of x encoded
/// as `role`: sum |X - X^|^2 / sum |X|^2 (0 for an all-zero x). For the
/// rule's trials and its tests. Throws as the codec does.
double relative_error_on_heads(const CodecConfig& c, const HeadTensor& x, const std::vector<int64_t>& heads,
                               TensorRole role, int threads = 0);

}  // namespace qvg
