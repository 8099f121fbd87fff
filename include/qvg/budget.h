// Equal memory: the configuration of a method's own family with the lowest
// expected distortion within a budget of bits per value. Sizes come from the
// method table's byte formulas (MethodTraits::expected_bytes); distortion
// from a quality model of the span's shape (expected_distortion) or, where
// the data are at hand, from trial encodes of a sample of them
// (qvg/budget_trial.h). `qvg demo`, `qvg compare` and `qvg eval` take the
// budget as --bits.
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
/// budget_fields, methods.h) on this span shape, ascending: the values the
/// field table declares for it (config.h's IntValues) on its grid
/// (BudgetGrid):
///   bits       2, 4
///   block      16, 32, 64, 128 that divide dim
///   group      the divisors of dim up to 4096 (KIVI's value groups split dim)
///   stages     1 .. c.stages (0 when c.stages is 0)
///   centroids  1 .. min(256, tokens)
///   cq_dim     1, 2, 4, 8 that divide dim (qvg with code=cq)
///   cq_codewords  2, 4, 8, .. 256 (qvg with code=cq)
/// Throws qvg::Error for any other key.
std::vector<int> budget_field_values(const CodecConfig& c, const std::string& key, int64_t tokens, int64_t dim);

/// The quality model of the budget rule: the expected relative squared
/// error sum |X - X^|^2 / sum |X|^2 of config c on spans of `tokens` tokens
/// of head dim `dim`, keys and values averaged. A product of three factors:
///   Q  the error of c's group quantizer without stages (RTN for qvg) on
///      i.i.d. standard normal data: c's own codec run once on a seeded
///      [1, max(512, 2 dim), dim] sample (for each role) and cached;
///   F  1 - the fraction of values c stores in BF16 (KIVI's recent window;
///      from expected_part_bytes): those have no error;
///   R  the energy k-means smoothing leaves: R = (1 - C / N) * r1(C) *
///      r2(C)^(S - 1), r1(C) = 0.22 + 0.78 C^-0.55 for the first stage and
///      r2(C) = 0.88 + 0.12 / C for each later one (C = 1 subtracts only the
///      mean); 1 without stages. r1 and r2 are fitted to QVG's error
///      relative to RTN's on the built-in video-like and clip K/V (head 0,
///      37,440 tokens, C = 1..256, S = 1, 2, 4, INT2: within 16 % of the
///      measured ratio for C >= 2; with INT4 codes the measured ratio is
///      about half the model's for C >= 16: the model undervalues INT4 with
///      centroids; docs/BENCHMARKS.md, "The budget rule").
/// FP8 centroids count as BF16 ones (their rounding is quantized away with
/// the residual). A model, not a measurement: it ranks a family's members
/// (more centroids, smaller blocks, more code bits: less error) and is what
/// choose_for_budget uses where no data are at hand. Throws qvg::Error when
/// c is invalid for dim or tokens < 1.
double expected_distortion(const CodecConfig& c, int64_t tokens, int64_t dim);

/// One member of a family within a budget (budget_candidates).
struct BudgetCandidate {
  CodecConfig config;       ///< a fixed C (auto resolved for the span)
  double bits = 0;          ///< span_bits_per_value(config, tokens, dim)
  double distortion = 0;    ///< expected_distortion(config, tokens, dim)
};

/// The members of c's family the budget rule chooses among, lowest
/// expected distortion first. c's family: c with the fields its method's
/// budget_fields_of names set to any of budget_field_values (other fields,
/// e.g. scale format, levels, KIVI's residual window, stay c's). Listed:
/// those whose span_bits_per_value is at most budget * (1 + tolerance),
/// and of those with the same fields but C only the one with the most
/// centroids (the model's error falls with C). With any_format, methods
/// with stages and centroids among their budget fields also take FP8
/// centroids where, for the same other fields, they buy more centroids than
/// BF16 (twice the centroids for the same bytes: on three clips +0.9 dB on
/// average at 2.5 bits and +3.2 dB at 3 bits, not on every clip;
/// docs/archive/BENCHMARKS-2026-12-07-history.md); else c's format is kept. Equal
/// distortion (within 1e-12 relative): more code bits first, then fewer of
/// c's budget fields changed, then fewer bits. Empty when nothing is within
/// the limit. Throws as choose_for_budget does.
std::vector<BudgetCandidate> budget_candidates(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                               double tolerance = 0.03, bool any_format = false);

/// What choose_for_budget found for one method.
struct BudgetChoice {
  CodecConfig config;      ///< reachable: the chosen config; else the family's cheapest
  double bits = 0;         ///< span_bits_per_value(config, tokens, dim)
  bool reachable = false;  ///< bits <= budget * (1 + tolerance)
};

/// The budget rule from shapes alone, for c's centroid format: the first of
/// budget_candidates (the lowest expected distortion within budget * (1 +
/// tolerance)). centroids=auto stays auto: centroid_bits is set to (C +
/// 1/2) * cb / tokens (cb = 16 BF16, 8 FP8) so that auto_centroid_count
/// gives the chosen C on spans of `tokens` tokens. No config within the
/// limit: reachable = false and config is the family's cheapest (any stage
/// count). Methods with no budget fields (bf16) form a family of one.
/// Throws qvg::Error when budget or tolerance is not a finite number
/// (budget > 0, tolerance >= 0), tokens < 1, or c is invalid for dim.
BudgetChoice choose_for_budget(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                               double tolerance = 0.03);

/// choose_for_budget with the centroid format chosen too (budget_candidates
/// with any_format; what `qvg demo` and `compare` run). Unreachable: the
/// cheaper of the two formats' cheapest. Throws as choose_for_budget does.
BudgetChoice choose_for_budget_any_format(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                          double tolerance = 0.03);

/// The stored bits per value above which an encoding of c is flagged
/// (bits_warning): 4 for codes of up to 2 bits (the presets `qvg` and
/// `qvg-pro` stay below it on spans of 256 tokens or more), 6 up to 4 bits
/// (their metadata above 2 bits a value), code bits + 2 above;
/// infinity for bf16.
double bits_warning_limit(const CodecConfig& c);

/// "" when bits_per_value <= bits_warning_limit(c); else one line naming
/// c, the bits and the limit, and what keeps an encoding smaller (fewer
/// centroids, centroids=auto, a budget). tokens: the span's.
std::string bits_warning(const CodecConfig& c, double bits_per_value, int64_t tokens);

/// A chosen fixed-C config in the kind of `spec`: for a centroids=auto spec
/// with stages, auto with the centroid_bits that gives chosen's C on spans
/// of `tokens` tokens (see choose_for_budget); else chosen as it is. The
/// name is spec's.
CodecConfig budget_config_as_spec(const CodecConfig& spec, const CodecConfig& chosen, int64_t tokens);

}  // namespace qvg
