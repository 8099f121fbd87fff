// `qvg eval --bits` (tools/eval_sweep.h).
#include "eval_sweep.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "budget_plan.h"
#include "plot.h"
#include "qvg/methods.h"

namespace qvg_cli {

void run_eval_sweep(const qvg::EvalInput& in, const std::vector<std::string>& methods, const qvg::EvalOptions& opt,
                    const EvalSweepOptions& sweep) {
  const std::vector<PlannedMethod> plan = sweep.on_data
                                              ? plan_budgets_on_data(methods, sweep.budgets, in.k, in.v, sweep.trial)
                                              : plan_budgets(methods, sweep.budgets, in.k.tokens, in.k.dim);
  if (!sweep.plot.empty()) require_gnuplot("--rd-plot");
  std::vector<std::string> specs;  // each distinct configuration once
  std::map<std::string, size_t> index_of;  // canonical spec -> index in specs
  for (const PlannedMethod& p : plan)
    if (p.reachable && !index_of.count(p.canonical)) {
      index_of[p.canonical] = specs.size();
      specs.push_back(p.spec);
    }
  const std::vector<qvg::EvalRow> rows = specs.empty() ? std::vector<qvg::EvalRow>{}
                                                      : qvg::evaluate(in, specs, opt);  // [k, v] per spec
  auto row = [&](const PlannedMethod& p, int tensor) { return rows[2 * index_of.at(p.canonical) + tensor]; };
  if (sweep.as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const PlannedMethod& p : plan) {
      if (!p.reachable) {
        out.push_back({{"label", p.label}, {"budget", p.budget}, {"reachable", false}, {"spec", p.spec},
                       {"bits_per_value", p.span_bits}});
        continue;
      }
      for (int t = 0; t < 2; ++t) {
        nlohmann::json j = sweep.row_json(row(p, t));
        j["label"] = p.label;
        j["budget"] = p.budget;
        j["reachable"] = true;
        out.push_back(j);
      }
    }
    std::cout << out.dump(2) << std::endl;
  } else {
    std::printf("\n== %s: K/V [%" PRId64 " heads, %" PRId64 " tokens, dim %" PRId64 "], one span\n", in.name.c_str(),
                in.k.heads, in.k.tokens, in.k.dim);
    for (double b : sweep.budgets) {
      std::vector<qvg::EvalRow> at;
      std::string unreachable;
      for (const PlannedMethod& p : plan) {
        if (p.budget != b) continue;
        if (!p.reachable) {
          char line[256];
          std::snprintf(line, sizeof line, "%s cannot reach %.3g bits: its family's cheapest configuration, %s, "
                        "stores %.3f (%s)\n", p.label.c_str(), b, qvg::describe(qvg::span_config(p.config, in.k.tokens)).c_str(),
                        p.span_bits, budget_gap(p.span_bits, b).c_str());
          unreachable += line;
          continue;
        }
        for (int t = 0; t < 2; ++t) {
          at.push_back(row(p, t));
          at.back().method = p.spec;  // the method's own label (two methods may choose one configuration)
        }
      }
      std::printf("\nbudget %.3g bits per value (K and V together, at most 3 %% above): each method's configuration "
                  "of its own family with the lowest %s error\n", b,
                  sweep.on_data ? "trial-encoded" : "expected (quality model)");
      if (!at.empty()) {
        std::printf("\nkeys\n%s", qvg::format_table(at, "k").c_str());
        std::printf("\nvalues\n%s", qvg::format_table(at, "v").c_str());
      }
      std::printf("%s", unreachable.c_str());
    }
  }
  std::fflush(stdout);
  if (!sweep.csv.empty()) {
    std::ofstream f(sweep.csv);
    QVG_CHECK(f.good(), "cannot write ", sweep.csv);
    f << "budget,method,tensor,reachable,config,bits,mse,rel_l2,snr_db,spec\n";
    for (const PlannedMethod& p : plan)
      for (int t = 0; t < 2; ++t) {
        char b[256];
        if (!p.reachable) {
          std::snprintf(b, sizeof b, "%.6g,%s,%s,0,%s,%.6f,,,,", p.budget, p.label.c_str(), t ? "v" : "k",
                        qvg::describe(qvg::span_config(p.config, in.k.tokens)).c_str(), p.span_bits);
        } else {
          const qvg::EvalRow& r = row(p, t);
          std::snprintf(b, sizeof b, "%.6g,%s,%s,1,%s,%.6f,%.6e,%.6f,%.4f,", p.budget, p.label.c_str(), t ? "v" : "k",
                        qvg::describe(qvg::span_config(p.config, in.k.tokens)).c_str(), r.bits_per_value, r.error.mse,
                        r.error.rel_l2, r.error.snr_db);
        }
        f << b << '"' << p.spec << "\"\n";
      }
    f.close();
    QVG_CHECK(f.good(), "cannot write ", sweep.csv);
    if (!sweep.as_json) std::printf("wrote %s (rate-distortion: one row per budget, method and tensor)\n", sweep.csv.c_str());
  }
  if (!sweep.plot.empty()) {
    std::vector<std::string> labels;  // the methods in the order given: one colour each
    for (const PlannedMethod& p : plan)
      if (std::find(labels.begin(), labels.end(), p.label) == labels.end()) labels.push_back(p.label);
    std::vector<PlotSeries> series;  // keys solid, values dashed
    for (int t = 0; t < 2; ++t)
      for (size_t m = 0; m < labels.size(); ++m)
        series.push_back({labels[m] + (t ? " values" : " keys"), {}, static_cast<int>(m) + 1, t == 1});
    for (int t = 0; t < 2; ++t)
      for (const PlannedMethod& p : plan) {
        if (!p.reachable) continue;
        const std::string label = p.label + (t ? " values" : " keys");
        auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& s) { return s.label == label; });
        const qvg::EvalRow& r = row(p, t);
        if (r.error.mse > 0 &&
            std::none_of(it->points.begin(), it->points.end(), [&](const auto& q) { return q.first == r.bits_per_value; }))
          it->points.emplace_back(r.bits_per_value, r.error.mse);
      }
    for (PlotSeries& s : series) std::sort(s.points.begin(), s.points.end());
    char title[256];
    std::snprintf(title, sizeof title, "%s: [%" PRId64 " heads, %" PRId64 " tokens, dim %" PRId64 "], one span",
                  in.name.c_str(), in.k.heads, in.k.tokens, in.k.dim);
    write_lines_plot(sweep.plot, series,
                     {title, "stored bits per value of the tensor (every byte counted)", "MSE (keys solid, values dashed)", true});
    if (!sweep.as_json) std::printf("wrote %s (MSE against bits, keys and values, one line each per method)\n", sweep.plot.c_str());
  }
}

}  // namespace qvg_cli
