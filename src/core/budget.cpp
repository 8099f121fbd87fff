// The budget rule (qvg/budget.h): enumerate a method's family over its budget
// fields, solving for the most centroids within the limit (bits are affine
// in C) instead of trying every C, and rank by the quality model
// (budget_model.cpp).
#include "qvg/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
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

namespace {

/// The values of field `key` (codec_fields) if the budget rule searches it,
/// or an error naming it.
const IntValues& budget_ints(const std::string& key) {
  for (const CodecField& f : codec_fields())
    if (key == f.key && f.ints && f.ints->budget != BudgetGrid::none) return *f.ints;
  QVG_CHECK(false, "budget: field '", key, "' is not a budget field");
  std::abort();  // not reached: QVG_CHECK threw
}

}  // namespace

std::vector<int> budget_field_values(const CodecConfig& c, const std::string& key, int64_t tokens, int64_t dim) {
  const IntValues& v = budget_ints(key);
  std::vector<int> out;
  for (int x : accepted_values(v, dim)) {
    if (v.budget == BudgetGrid::up_to_config && (x > v.get(c) || x < std::min(v.get(c), 1))) continue;
    if (v.budget == BudgetGrid::up_to_tokens && x > tokens) continue;
    out.push_back(x);
  }
  return out;
}

namespace {

int get_field(const CodecConfig& c, const std::string& key) { return budget_ints(key).get(c); }
void set_field(CodecConfig& c, const std::string& key, int v) { budget_ints(key).set(c, v); }

/// The family within a budget (qvg/budget.h's budget_candidates): every
/// combination of the budget fields but centroids, and for each the most
/// centroids within the limit (bits are affine in C: solved, not tried).
class Search {
 public:
  Search(const CodecConfig& base, const std::vector<std::string>& fields, double limit, int64_t tokens, int64_t dim)
      : base_(base), fields_(fields), limit_(limit), tokens_(tokens), dim_(dim) {}

  /// Every combination for c's centroid format (c: base with that format).
  void run(const CodecConfig& c) {
    std::vector<std::string> grid;  // the fields enumerated (not centroids)
    for (const auto& f : fields_)
      if (f != "centroids") grid.push_back(f);
    CodecConfig x = c;
    enumerate(x, grid, 0);
  }

  std::vector<BudgetCandidate>& found() { return found_; }
  const std::optional<BudgetCandidate>& cheapest() const { return cheapest_; }

  int changed(const CodecConfig& c) const {
    int n = 0;
    for (const auto& f : fields_) n += get_field(c, f) != get_field(base_, f);
    return n;
  }

 private:
  bool has(const char* key) const { return std::find(fields_.begin(), fields_.end(), key) != fields_.end(); }

  void enumerate(CodecConfig& c, const std::vector<std::string>& grid, size_t i) {
    if (i == grid.size()) {
      if (has("centroids") && smoothing_stages(c) > 0)
        most_centroids(c);
      else
        consider(c);
      return;
    }
    const CodecConfig before = c;
    for (int v : budget_field_values(base_, grid[i], tokens_, dim_)) {
      set_field(c, grid[i], v);
      enumerate(c, grid, i + 1);
    }
    c = before;
  }

  /// bits(C) = a + b * C: the most centroids within the limit, clamped to
  /// 1 .. min(256, N); C = 1 is still counted for the cheapest.
  void most_centroids(CodecConfig& c) {
    const int c_max = static_cast<int>(std::min<int64_t>(256, tokens_));
    c.kmeans.centroids = 1;
    const double b1 = span_bits_per_value(c, tokens_, dim_);
    double slope = 0;
    if (c_max > 1) {
      c.kmeans.centroids = 2;
      slope = span_bits_per_value(c, tokens_, dim_) - b1;
    }
    double x = slope > 0 ? 1.0 + std::floor((limit_ - b1) / slope + 1e-9) : static_cast<double>(c_max);
    int n = static_cast<int>(std::clamp(x, 1.0, static_cast<double>(c_max)));
    c.kmeans.centroids = n;
    while (n > 1 && span_bits_per_value(c, tokens_, dim_) > limit_) c.kmeans.centroids = --n;  // rounding
    consider(c);
    if (n != 1) {
      c.kmeans.centroids = 1;
      track_cheapest(c);
    }
    c.kmeans.centroids = get_field(base_, "centroids");
  }

  void track_cheapest(const CodecConfig& c) {
    if (!valid(c)) return;
    const double bits = span_bits_per_value(c, tokens_, dim_);
    if (!cheapest_ || bits < cheapest_->bits - 1e-9) cheapest_ = BudgetCandidate{c, bits, 0};
  }

  void consider(const CodecConfig& c) {
    if (!valid(c)) return;
    track_cheapest(c);
    const double bits = span_bits_per_value(c, tokens_, dim_);
    if (bits > limit_) return;
    found_.push_back({c, bits, expected_distortion(c, tokens_, dim_)});
  }

  bool valid(const CodecConfig& c) const {
    try {
      validate(c, dim_);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  CodecConfig base_;
  std::vector<std::string> fields_;
  double limit_;
  int64_t tokens_, dim_;
  std::vector<BudgetCandidate> found_;
  std::optional<BudgetCandidate> cheapest_;
};

void check_budget_args(const CodecConfig& c, double budget, int64_t tokens, int64_t dim, double tolerance) {
  QVG_CHECK(std::isfinite(budget) && budget > 0, "budget: bits per value must be a number > 0, got ", budget);
  QVG_CHECK(std::isfinite(tolerance) && tolerance >= 0, "budget: the tolerance must be a number >= 0, got ",
            tolerance);
  QVG_CHECK(tokens >= 1, "budget: a span needs at least one token, got ", tokens);
  validate(c, dim);
}

/// a and b agree on every field the budget rule searches but centroids (the
/// fields it does not search are those of the config searched from).
bool same_but_centroids(const CodecConfig& a, const CodecConfig& b) {
  for (const CodecField& f : codec_fields())
    if (f.ints && f.ints->budget != BudgetGrid::none && std::string(f.key) != "centroids" &&
        f.ints->get(a) != f.ints->get(b))
      return false;
  return true;
}

/// The family within the limit, ranked, and its cheapest member.
struct Family {
  std::vector<BudgetCandidate> ranked;
  std::optional<BudgetCandidate> cheapest;
};

Family search_family(const CodecConfig& c, double budget, int64_t tokens, int64_t dim, double tolerance,
                     bool any_format) {
  check_budget_args(c, budget, tokens, dim, tolerance);
  const CodecConfig base = span_config(c, tokens);  // an auto spec's C on this span; C clamped to N
  const std::vector<std::string> fields = budget_fields_of(c);  // those c reads (qvg's code=cq: not bits, block)
  Search search(base, fields, budget * (1 + tolerance), tokens, dim);
  const bool formats = any_format && smoothing_stages(c) > 0 &&
                       std::find(fields.begin(), fields.end(), "centroids") != fields.end();
  Family out;
  if (!formats) {
    search.run(base);
    out.ranked = std::move(search.found());
  } else {
    // FP8 where, for the same other fields, it buys more centroids than BF16; else BF16.
    CodecConfig bf = base, f8 = base;
    bf.centroid_format = CentroidFormat::bf16;
    f8.centroid_format = CentroidFormat::fp8;
    search.run(bf);
    std::vector<BudgetCandidate> a = std::move(search.found());
    search.found().clear();
    search.run(f8);
    const std::vector<BudgetCandidate>& b = search.found();
    for (const BudgetCandidate& x : b) {
      auto it = std::find_if(a.begin(), a.end(), [&](const BudgetCandidate& y) { return same_but_centroids(x.config, y.config); });
      if (it == a.end())
        a.push_back(x);
      else if (x.config.kmeans.centroids > it->config.kmeans.centroids)
        *it = x;
    }
    out.ranked = std::move(a);
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [&](const BudgetCandidate& x, const BudgetCandidate& y) {
    const double scale = std::max({x.distortion, y.distortion, 1e-300});
    if (std::fabs(x.distortion - y.distortion) > 1e-12 * scale) return x.distortion < y.distortion;
    if (code_bits(x.config) != code_bits(y.config)) return code_bits(x.config) > code_bits(y.config);
    const int cx = search.changed(x.config), cy = search.changed(y.config);
    if (cx != cy) return cx < cy;
    return x.bits < y.bits - 1e-12;
  });
  out.cheapest = search.cheapest();
  QVG_CHECK(out.cheapest.has_value(), c.name, ": budget: the family has no valid configuration for dim ", dim);
  return out;
}

BudgetChoice choose(const CodecConfig& c, double budget, int64_t tokens, int64_t dim, double tolerance,
                    bool any_format) {
  const Family f = search_family(c, budget, tokens, dim, tolerance, any_format);
  const BudgetCandidate& pick = f.ranked.empty() ? *f.cheapest : f.ranked.front();
  BudgetChoice out;
  out.config = budget_config_as_spec(c, pick.config, tokens);
  out.bits = pick.bits;
  out.reachable = !f.ranked.empty();
  return out;
}

}  // namespace

CodecConfig budget_config_as_spec(const CodecConfig& spec, const CodecConfig& chosen, int64_t tokens) {
  CodecConfig out = chosen;
  out.name = spec.name;
  if (!spec.auto_centroids || smoothing_stages(chosen) == 0) return out;
  const double value_bits = chosen.centroid_format == CentroidFormat::fp8 ? 8.0 : 16.0;
  out.centroid_bits = (chosen.kmeans.centroids + 0.5) * value_bits / static_cast<double>(tokens);
  out.auto_centroids = true;
  out.kmeans.centroids = spec.kmeans.centroids;  // auto's cap
  return out;
}

double bits_warning_limit(const CodecConfig& c) {
  if (method_traits(c.method).uncompressed) return std::numeric_limits<double>::infinity();
  const double b = code_bits(c);
  return b <= 2 ? 4.0 : b <= 4 ? 6.0 : b + 2.0;
}

std::string bits_warning(const CodecConfig& c, double bits_per_value, int64_t tokens) {
  const double limit = bits_warning_limit(c);
  if (!(bits_per_value > limit)) return "";
  char b[512];
  std::snprintf(b, sizeof b,
                "%s stores %.2f bits per value on spans of %lld tokens, more than %g: its metadata (%s) outweighs "
                "its %g-bit codes; fewer centroids (centroids=auto), larger blocks or a budget of bits (bits=) keep "
                "it smaller",
                c.name.c_str(), bits_per_value, static_cast<long long>(tokens), limit,
                describe(span_config(c, std::max<int64_t>(tokens, 1))).c_str(), code_bits(c));
  return b;
}

std::vector<BudgetCandidate> budget_candidates(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                               double tolerance, bool any_format) {
  return search_family(c, budget, tokens, dim, tolerance, any_format).ranked;
}

BudgetChoice choose_for_budget(const CodecConfig& c, double budget, int64_t tokens, int64_t dim, double tolerance) {
  return choose(c, budget, tokens, dim, tolerance, false);
}

BudgetChoice choose_for_budget_any_format(const CodecConfig& c, double budget, int64_t tokens, int64_t dim,
                                          double tolerance) {
  return choose(c, budget, tokens, dim, tolerance, true);
}

}  // namespace qvg
