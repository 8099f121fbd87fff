// Methods at budgets of bits per value (tools/budget_plan.h).
#include "budget_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qvg/budget.h"
#include "qvg/common.h"
#include "qvg/methods.h"

namespace qvg_cli {

std::vector<double> parse_budget_option(const std::vector<std::string>& items, const char* option) {
  if (items.size() == 1 && items[0] == "none") return {};
  std::vector<double> out;
  for (const std::string& item : items) {
    std::stringstream ss(item);
    std::string one;
    while (std::getline(ss, one, ',')) {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(one, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      QVG_CHECK(used == one.size() && !one.empty() && std::isfinite(v) && v > 0, option,
                " takes bits per value (numbers > 0, e.g. 2.5 or 2,2.5,3) or none, got '", one, "'");
      out.push_back(v);
    }
  }
  QVG_CHECK(!out.empty(), option, " needs at least one budget (or none)");
  return out;
}

std::string short_spec(const std::string& label, const qvg::CodecConfig& config) {
  const qvg::CodecConfig given = qvg::parse_codec_spec(label);
  const size_t colon = label.find(':');
  std::vector<std::pair<std::string, std::string>> items;  // the label's own key=value, in order
  if (colon != std::string::npos) {
    std::stringstream ss(label.substr(colon + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const size_t eq = item.find('=');
      items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  qvg::for_each_field(config, [&](const qvg::CodecField& f, const std::string& v) {
    if (f.get(given) == v) return;
    auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == f.key; });
    if (it != items.end())
      it->second = v;
    else
      items.emplace_back(f.key, v);
  });
  std::string s = label.substr(0, colon);
  for (size_t i = 0; i < items.size(); ++i) s += (i == 0 ? ":" : ",") + items[i].first + "=" + items[i].second;
  return s;
}

namespace {

/// The methods' configs (the uncompressed reference left out), each parsed and checked for dim.
std::vector<qvg::CodecConfig> method_configs(const std::vector<std::string>& methods, int64_t dim) {
  std::vector<qvg::CodecConfig> configs;
  for (const std::string& m : methods) {
    try {
      const qvg::CodecConfig c = qvg::parse_codec_spec(m);
      if (qvg::method_traits(c.method).uncompressed) continue;  // the reference, run anyway
      qvg::validate(c, dim);
      configs.push_back(c);
    } catch (const qvg::Error& e) {
      QVG_CHECK(false, "method '", m, "': ", e.what());
    }
  }
  return configs;
}

PlannedMethod planned(const qvg::CodecConfig& c, double budget, const qvg::BudgetChoice& choice) {
  PlannedMethod p;
  p.label = c.name;
  p.budget = budget;
  p.reachable = choice.reachable;
  p.config = choice.config;
  p.spec = short_spec(c.name, choice.config);
  p.canonical = qvg::codec_spec(choice.config);
  p.span_bits = choice.bits;
  return p;
}

}  // namespace

std::vector<PlannedMethod> plan_budgets(const std::vector<std::string>& methods, const std::vector<double>& budgets,
                                        int64_t span_tokens, int64_t dim) {
  const std::vector<qvg::CodecConfig> configs = method_configs(methods, dim);
  std::vector<PlannedMethod> out;
  if (budgets.empty()) {
    for (const qvg::CodecConfig& c : configs) {
      PlannedMethod p;
      p.label = c.name;
      p.config = c;
      p.spec = c.name;  // as given (its name is the spec)
      p.canonical = qvg::codec_spec(c);
      p.span_bits = qvg::span_bits_per_value(c, span_tokens, dim);
      out.push_back(p);
    }
    return out;
  }
  for (double b : budgets)
    for (const qvg::CodecConfig& c : configs)
      out.push_back(planned(c, b, qvg::choose_for_budget_any_format(c, b, span_tokens, dim)));
  return out;
}

std::vector<PlannedMethod> plan_budgets_on_data(const std::vector<std::string>& methods,
                                                const std::vector<double>& budgets, const qvg::HeadTensor& k,
                                                const qvg::HeadTensor& v, const qvg::BudgetTrialOptions& trial) {
  if (budgets.empty()) return plan_budgets(methods, budgets, k.tokens, k.dim);
  const std::vector<qvg::CodecConfig> configs = method_configs(methods, k.dim);
  std::vector<PlannedMethod> out;
  for (double b : budgets)
    for (const qvg::CodecConfig& c : configs) {
      qvg::BudgetChoice choice = qvg::choose_for_budget_on_data(c, b, k, v, trial).choice;
      choice.config = qvg::span_config(choice.config, k.tokens);  // one span: C written out (the same encode as auto)
      choice.config.name = c.name;
      choice.config.centroid_bits = c.centroid_bits;  // read only with centroids=auto: the label's
      out.push_back(planned(c, b, choice));
    }
  return out;
}

void note_if_over_limit(const qvg::CodecConfig& c, double bits, int64_t tokens) {
  const std::string w = qvg::bits_warning(c, bits, tokens);
  if (w.empty()) return;
  std::fprintf(stderr, "qvg: note: %s\n", w.c_str());
  std::fflush(stderr);
}

std::string budget_gap(double bits, double budget) {
  const double pct = 100.0 * (bits / budget - 1.0);
  if (std::fabs(pct) < 0.005) return "at";
  char b[48];
  std::snprintf(b, sizeof b, "%.2f %% %s", std::fabs(pct), pct > 0 ? "above" : "below");
  return b;
}

}  // namespace qvg_cli
