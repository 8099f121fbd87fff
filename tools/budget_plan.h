// The methods of `qvg compare`, `qvg demo` and `qvg eval` at budgets of bits
// per value (--bits): each method's configuration of its own family with the
// lowest expected error within each budget (qvg/budget.h: the quality model;
// qvg/budget_trial.h: trial encodes where the K/V are at hand), or the note
// that it cannot reach it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qvg/budget_trial.h"
#include "qvg/config.h"
#include "qvg/tensor.h"

namespace qvg_cli {

/// One method at one budget.
struct PlannedMethod {
  std::string label;       ///< the method as given ("qvg-pro")
  double budget = 0;       ///< bits per value; 0: none (the spec as given)
  bool reachable = true;   ///< a configuration within the budget's +3 % exists
  qvg::CodecConfig config; ///< the chosen one (not reachable: the family's cheapest)
  std::string spec;        ///< config as the label with the fields the budget changed ("qvg:centroids=30")
  std::string canonical;   ///< codec_spec(config): one text per configuration
  double span_bits = 0;    ///< config's bits per value on the spans (formula)
};

/// Parses --bits / --rd-bits items: numbers > 0, each item possibly a comma
/// list ("2,2.5"), or the single item "none" (no budget: empty). Throws
/// qvg::Error naming `option` and the bad item.
std::vector<double> parse_budget_option(const std::vector<std::string>& items, const char* option);

/// Every method (codec specs, bf16 left out) at every budget, budgets in
/// order; with no budgets, every method once with its spec as given. Specs
/// are checked (parse, dim) first; a bad one is an error naming it.
std::vector<PlannedMethod> plan_budgets(const std::vector<std::string>& methods, const std::vector<double>& budgets,
                                        int64_t span_tokens, int64_t dim);

/// plan_budgets with the K/V at hand (one span each, [heads, tokens, dim]):
/// each method's configuration chosen by trial encodes of a sample of them
/// (qvg::choose_for_budget_on_data with `trial`), its centroid count written
/// out (centroids=auto resolved for the span: the same encode).
std::vector<PlannedMethod> plan_budgets_on_data(const std::vector<std::string>& methods,
                                                const std::vector<double>& budgets, const qvg::HeadTensor& k,
                                                const qvg::HeadTensor& v, const qvg::BudgetTrialOptions& trial);

/// `label` (a codec spec) with the fields in which `config` differs from it
/// set to config's values (replacing the label's own, added otherwise): a
/// spec that parses to config. Compares the fields config's method reads.
std::string short_spec(const std::string& label, const qvg::CodecConfig& config);

/// Prints "qvg: note: " and qvg::bits_warning's line on stderr when an
/// encoding of c storing `bits` bits per value on spans of `tokens` tokens
/// is above qvg::bits_warning_limit(c); nothing otherwise.
void note_if_over_limit(const qvg::CodecConfig& c, double bits, int64_t tokens);

/// "3.00 % above" / "10.00 % below" / "at": how far bits are from budget.
std::string budget_gap(double bits, double budget);

}  // namespace qvg_cli
