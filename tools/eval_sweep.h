// `qvg eval --bits`: every method at budgets of bits per value on the data
// (the whole tensor is one span), each as the configuration of its own family
// with the lowest error within the budget: measured by trial encodes of a
// sample of the data (qvg/budget_trial.h), or the quality model's
// (qvg/budget.h); a table per budget, and the
// rate-distortion rows (key / value MSE against bits) as CSV and a plot.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qvg/budget_trial.h"
#include "qvg/eval.h"

namespace qvg_cli {

struct EvalSweepOptions {
  std::vector<double> budgets;  ///< bits per value, > 0
  std::string csv;              ///< rate-distortion rows ("" = none)
  std::string plot;             ///< PNG of MSE against bits, keys and values, one line each per method ("" = none)
  bool as_json = false;         ///< print JSON rows (row_json's, with budget, label and reachable) instead of tables
  /// One evaluation row as JSON (`qvg eval --json`'s).
  std::function<nlohmann::json(const qvg::EvalRow&)> row_json;
  bool on_data = true;            ///< choose by trial encodes of the data (else by the quality model)
  qvg::BudgetTrialOptions trial;  ///< the trial encodes' sample, time bound and progress
};

/// Evaluates every distinct configuration the budgets choose once, then
/// prints (or writes) by budget. The plot needs gnuplot (checked first).
void run_eval_sweep(const qvg::EvalInput& in, const std::vector<std::string>& methods, const qvg::EvalOptions& opt,
                    const EvalSweepOptions& sweep);

}  // namespace qvg_cli
