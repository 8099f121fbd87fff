// Equal memory: the configuration of a method's own family closest to a budget
// of bits per value, computed from the method table's byte formulas
// (MethodTraits::expected_bytes), not from trial encodes. `qvg demo`,
// `qvg compare` and `qvg eval` take the budget as --bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qvg/config.h"

namespace qvg {

/// Stored bits per K/V value of config c on spans of `tokens` tokens of head
/// dim `dim`: keys and values together (KIVI stores them differently), every
/// byte counted (expected_part_bytes of span_config(c, tokens)), any number
/// of heads (every part is per head). Throws qvg::Error when c is invalid for
/// dim or tokens < 1.
double span_bits_per_value(const CodecConfig& c, int64_t tokens, int64_t dim);

/// The values a budget may give field `key` (one of c's method's
/// budget_fields, methods.h) on this span shape, ascending:
///   bits       2, 4
///   block      16, 32, 64, 128 that divide dim
///   group      the divisors of dim up to 4096 (KIVI's value groups split dim)
///   stages     1 .. c.stages (0 when c.stages is 0)
///   centroids  1 .. min(256, tokens)
/// Throws qvg::Error for any other key.
std::vector<int> budget_field_values(const CodecConfig& c, const std::string& key, int64_t tokens, int64_t dim);

/// What choose_for_budget found for one method.
struct BudgetChoice {
  CodecConfig config;      ///< reachable: the chosen config; else the family's cheapest
  double bits = 0;         ///< span_bits_per_value(config, tokens, dim)
  bool reachable = false;  ///< bits <= budget * (1 + tolerance)
};

/// The budget rule for c's centroid format (choose_for_budget_any_format
/// also picks the format). c's family: c with the fields its method's
/// budget_fields names set to any of budget_field_values (other fields, e.g.
/// scale format, levels, KIVI's residual window, stay c's). Among the
/// family's configs whose span_bits_per_value is at most budget * (1 +
/// tolerance), the one whose bits are closest to budget (above or below).
/// Stages: c's count; fewer only when no config with c's count is within the
/// limit, then the most stages that are. Ties (bits per value equally close
/// within 1e-9) go to the config with more code bits (INT4 before INT2: at
/// equal size INT4 with fewer centroids measured better than INT2 with more,
/// docs/BENCHMARKS.md), then the one that changes fewer of c's budget fields,
/// then the lower bits per value, then field by field (budget_fields order)
/// to the value nearest c's on a log scale, then the larger value.
/// centroids=auto stays auto: centroid_bits is set to (C + 1/2) * cb / tokens
/// (cb = 16 BF16, 8 FP8) so that auto_centroid_count gives the chosen C on
/// spans of `tokens` tokens.
/// No config within the limit: reachable = false and config is the family's
/// cheapest. Methods with no budget fields (bf16) form a family of one.
/// Throws qvg::Error when budget or tolerance is not a finite number (budget
/// > 0, tolerance >= 0), tokens < 1, or c is invalid for dim.
BudgetChoice choose_for_budget(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                               double tolerance = 0.03);

/// The budget rule with the centroid format chosen too (what `qvg demo`,
/// `compare` and `eval --bits` run): for methods with centroids among their
/// budget fields and at least one stage, choose_for_budget for BF16 and for
/// FP8 centroids, then FP8's choice when it has more centroids (C on spans of
/// `tokens`) than BF16's (twice the centroids for the same bytes measured
/// +1.4 to +4.6 dB at 2.5 and 3 bits: docs/BENCHMARKS.md), else BF16's (where
/// C is capped at 256 or N, FP8 buys nothing); when only one reaches the
/// budget, that one; when neither does, the cheaper. Other methods:
/// choose_for_budget. Throws as it does.
BudgetChoice choose_for_budget_any_format(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                          double tolerance = 0.03);

}  // namespace qvg
