// The budget rule (qvg/budget.h): enumerate a method's family over its budget
// fields, solving for the centroid count (bits are affine in C) instead of
// trying every C.
#include "qvg/budget.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "qvg/codec.h"
#include "qvg/common.h"
#include "qvg/methods.h"

namespace qvg {

double span_bits_per_value(const CodecConfig& c, int64_t tokens, int64_t dim) {
  QVG_CHECK(tokens >= 1, "span bits: a span needs at least one token, got ", tokens);
  validate(c, dim);
  const CodecConfig s = span_config(c, tokens);
  const size_t k = expected_part_bytes(s, TensorRole::key, 1, tokens, dim).total();
  const size_t v = expected_part_bytes(s, TensorRole::value, 1, tokens, dim).total();
  return 8.0 * static_cast<double>(k + v) / (2.0 * static_cast<double>(tokens) * static_cast<double>(dim));
}

std::vector<int> budget_field_values(const CodecConfig& c, const std::string& key, int64_t tokens, int64_t dim) {
  std::vector<int> v;
  if (key == "bits") {
    v = {2, 4};
  } else if (key == "block") {
    for (int b : {16, 32, 64, 128})
      if (dim % b == 0) v.push_back(b);
  } else if (key == "group") {
    for (int64_t g = 1; g <= std::min<int64_t>(dim, 4096); ++g)
      if (dim % g == 0) v.push_back(static_cast<int>(g));
  } else if (key == "stages") {
    for (int s = std::min(c.stages, 1); s <= c.stages; ++s) v.push_back(s);
  } else if (key == "centroids") {
    for (int64_t n = 1; n <= std::min<int64_t>(256, tokens); ++n) v.push_back(static_cast<int>(n));
  } else {
    QVG_CHECK(false, "budget: field '", key, "' is not a budget field");
  }
  return v;
}

namespace {

int get_field(const CodecConfig& c, const std::string& key) {
  if (key == "bits") return c.bits;
  if (key == "block") return c.block;
  if (key == "group") return c.group;
  if (key == "stages") return c.stages;
  return c.kmeans.centroids;  // "centroids" (budget_field_values rejects other keys)
}

void set_field(CodecConfig& c, const std::string& key, int v) {
  if (key == "bits") c.bits = v;
  else if (key == "block") c.block = v;
  else if (key == "group") c.group = v;
  else if (key == "stages") c.stages = v;
  else c.kmeans.centroids = v;
}

/// One candidate: a config with a fixed C (auto resolved) and its bits.
struct Candidate {
  CodecConfig config;
  double bits = 0;
};

/// The search over one family: the given config (C fixed: an auto spec's C
/// on this span), its budget fields and the limit.
class Search {
 public:
  Search(const CodecConfig& base, const std::vector<std::string>& fields, double budget, double limit,
         int64_t tokens, int64_t dim)
      : base_(base), fields_(fields), budget_(budget), limit_(limit), tokens_(tokens), dim_(dim) {}

  /// The best config with `stages` stages within the limit, if any; also
  /// tracks the cheapest config seen.
  std::optional<Candidate> best_with_stages(int stages) {
    best_.reset();
    CodecConfig c = base_;
    c.stages = stages;
    std::vector<std::string> grid;  // the fields enumerated (not stages, not centroids)
    for (const auto& f : fields_)
      if (f != "stages" && f != "centroids") grid.push_back(f);
    const bool solve_c = has("centroids") && smoothing_stages(c) > 0;
    enumerate(c, grid, 0, solve_c);
    return best_;
  }

  const std::optional<Candidate>& cheapest() const { return cheapest_; }

 private:
  bool has(const char* key) const { return std::find(fields_.begin(), fields_.end(), key) != fields_.end(); }

  void enumerate(CodecConfig& c, const std::vector<std::string>& grid, size_t i, bool solve_c) {
    if (i == grid.size()) {
      if (solve_c)
        solve_centroids(c);
      else
        consider(c);
      return;
    }
    for (int v : budget_field_values(base_, grid[i], tokens_, dim_)) {
      set_field(c, grid[i], v);
      enumerate(c, grid, i + 1, solve_c);
    }
    set_field(c, grid[i], get_field(base_, grid[i]));
  }

  /// bits(C) = a + b * C: the C nearest the budget, and its neighbour
  /// (the nearest may be over the limit), clamped to 1 .. min(256, N).
  void solve_centroids(CodecConfig& c) {
    const int c_max = static_cast<int>(std::min<int64_t>(256, tokens_));
    c.kmeans.centroids = 1;
    const double b1 = span_bits_per_value(c, tokens_, dim_);
    double slope = 0;
    if (c_max > 1) {
      c.kmeans.centroids = 2;
      slope = span_bits_per_value(c, tokens_, dim_) - b1;
    }
    const double x = slope > 0 ? 1.0 + (budget_ - b1) / slope : 1.0;
    const double lo = std::clamp(std::floor(x), 1.0, static_cast<double>(c_max));
    const double hi = std::clamp(std::ceil(x), 1.0, static_cast<double>(c_max));
    for (double n : {lo, hi}) {
      c.kmeans.centroids = static_cast<int>(n);
      consider(c);
    }
    c.kmeans.centroids = get_field(base_, "centroids");
  }

  void consider(const CodecConfig& c) {
    if (!valid(c)) return;
    Candidate cand{c, span_bits_per_value(c, tokens_, dim_)};
    if (!cheapest_ || cand.bits < cheapest_->bits - 1e-9) cheapest_ = cand;
    if (cand.bits > limit_) return;
    if (!best_ || better(cand, *best_)) best_ = cand;
  }

  bool valid(const CodecConfig& c) const {
    try {
      validate(c, dim_);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  int changed(const CodecConfig& c) const {
    int n = 0;
    for (const auto& f : fields_) n += get_field(c, f) != get_field(base_, f);
    return n;
  }

  /// The tie-break order of qvg/budget.h's choose_for_budget.
  bool better(const Candidate& a, const Candidate& b) const {
    const double da = std::fabs(a.bits - budget_), db = std::fabs(b.bits - budget_);
    if (std::fabs(da - db) > 1e-9) return da < db;
    if (a.config.bits != b.config.bits) return a.config.bits > b.config.bits;
    const int ca = changed(a.config), cb = changed(b.config);
    if (ca != cb) return ca < cb;
    if (std::fabs(a.bits - b.bits) > 1e-9) return a.bits < b.bits;
    for (const auto& f : fields_) {
      const int va = get_field(a.config, f), vb = get_field(b.config, f), v0 = std::max(get_field(base_, f), 1);
      if (va == vb) continue;
      const double la = std::fabs(std::log2(std::max(va, 1) / static_cast<double>(v0)));
      const double lb = std::fabs(std::log2(std::max(vb, 1) / static_cast<double>(v0)));
      if (std::fabs(la - lb) > 1e-12) return la < lb;
      return va > vb;
    }
    return false;
  }

  CodecConfig base_;
  std::vector<std::string> fields_;
  double budget_, limit_;
  int64_t tokens_, dim_;
  std::optional<Candidate> best_, cheapest_;
};

/// chosen (a fixed C) as the given spec's kind: centroids=auto specs keep
/// auto, with the centroid_bits that gives the chosen C on spans of `tokens`.
CodecConfig as_spec_kind(const CodecConfig& spec, CodecConfig chosen, int64_t tokens) {
  if (!spec.auto_centroids || smoothing_stages(chosen) == 0) return chosen;
  const double value_bits = chosen.centroid_format == CentroidFormat::fp8 ? 8.0 : 16.0;
  chosen.centroid_bits = (chosen.kmeans.centroids + 0.5) * value_bits / static_cast<double>(tokens);
  chosen.auto_centroids = true;
  chosen.kmeans.centroids = spec.kmeans.centroids;  // auto's cap
  return chosen;
}

/// C of a chosen config on spans of `tokens` tokens (auto resolved).
int chosen_centroids(const BudgetChoice& b, int64_t tokens) { return span_config(b.config, tokens).kmeans.centroids; }

}  // namespace

BudgetChoice choose_for_budget(const CodecConfig& c, double budget, int64_t tokens, int64_t dim, double tolerance) {
  QVG_CHECK(std::isfinite(budget) && budget > 0, "budget: bits per value must be a number > 0, got ", budget);
  QVG_CHECK(std::isfinite(tolerance) && tolerance >= 0, "budget: the tolerance must be a number >= 0, got ",
            tolerance);
  QVG_CHECK(tokens >= 1, "budget: a span needs at least one token, got ", tokens);
  validate(c, dim);
  const CodecConfig base = span_config(c, tokens);  // an auto spec's C on this span; C clamped to N
  const double limit = budget * (1 + tolerance);
  Search search(base, method_traits(c.method).budget_fields, budget, limit, tokens, dim);
  const bool staged = std::find(method_traits(c.method).budget_fields.begin(),
                                method_traits(c.method).budget_fields.end(),
                                "stages") != method_traits(c.method).budget_fields.end();
  BudgetChoice out;
  for (int s = base.stages; s >= (staged ? std::min(base.stages, 1) : base.stages); --s) {
    if (const auto best = search.best_with_stages(s)) {
      out.config = as_spec_kind(c, best->config, tokens);
      out.bits = best->bits;
      out.reachable = true;
      out.config.name = c.name;
      return out;
    }
  }
  QVG_CHECK(search.cheapest().has_value(), c.name, ": budget: the family has no valid configuration for dim ", dim);
  out.config = as_spec_kind(c, search.cheapest()->config, tokens);
  out.bits = search.cheapest()->bits;
  out.config.name = c.name;
  return out;
}

BudgetChoice choose_for_budget_any_format(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                          double tolerance) {
  validate(c, dim);
  const auto& fields = method_traits(c.method).budget_fields;
  if (smoothing_stages(c) == 0 || std::find(fields.begin(), fields.end(), "centroids") == fields.end())
    return choose_for_budget(c, budget, tokens, dim, tolerance);
  // The centroid format: FP8 where it buys more centroids within the budget
  // (twice the centroids for the same bytes measured +1.4 to +4.6 dB at 2.5
  // and 3 bits, docs/BENCHMARKS.md), else BF16 (exact centroids at the same C).
  CodecConfig bf = c, f8 = c;
  bf.centroid_format = CentroidFormat::bf16;
  f8.centroid_format = CentroidFormat::fp8;
  const BudgetChoice a = choose_for_budget(bf, budget, tokens, dim, tolerance);
  const BudgetChoice b = choose_for_budget(f8, budget, tokens, dim, tolerance);
  if (a.reachable != b.reachable) return a.reachable ? a : b;
  if (!a.reachable) return b.bits < a.bits - 1e-9 ? b : a;  // neither: the cheaper
  return chosen_centroids(b, tokens) > chosen_centroids(a, tokens) ? b : a;
}

}  // namespace qvg
