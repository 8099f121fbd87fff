// The budget rule on data (qvg/budget_trial.h): trial encodes of sampled
// heads, candidates in the quality model's order, bounded in time.
#include "qvg/budget_trial.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "qvg/codec.h"
#include "qvg/common.h"
#include "qvg/methods.h"

namespace qvg {

double relative_error_on_heads(const CodecConfig& c, const HeadTensor& x, const std::vector<int64_t>& heads,
                               TensorRole role, int threads) {
  double err = 0, energy = 0;
  for (int64_t h : heads) {
    QVG_CHECK(h >= 0 && h < x.heads, "relative error: head ", h, " is outside 0..", x.heads - 1);
    HeadTensor one(1, x.tokens, x.dim);
    std::copy(x.head(h), x.head(h) + x.tokens * x.dim, one.data.begin());
    // The config that encodes head h alone as it is encoded within x (its k-means seed).
    const auto codec = make_codec(config_for_heads(c, h));
    EncodeOptions opt;
    opt.role = role;
    opt.threads = threads;
    HeadTensor y;
    codec->decode(codec->encode(one, opt), y, threads);
    for (size_t i = 0; i < one.data.size(); ++i) {
      const double d = static_cast<double>(y.data[i]) - one.data[i];
      err += d * d;
      energy += static_cast<double>(one.data[i]) * one.data[i];
    }
  }
  return energy > 0 ? err / energy : 0.0;
}

MeasuredBudgetChoice choose_for_budget_on_data(const CodecConfig& c, double budget, const HeadTensor& k,
                                               const HeadTensor& v, const BudgetTrialOptions& opt,
                                               double tolerance) {
  QVG_CHECK(k.same_shape(v), "budget on data: keys [", k.heads, ", ", k.tokens, ", ", k.dim, "] and values [",
            v.heads, ", ", v.tokens, ", ", v.dim, "] differ in shape");
  QVG_CHECK(k.heads >= 1 && k.tokens >= 1 && k.dim >= 1, "budget on data: the keys are empty [", k.heads, ", ",
            k.tokens, ", ", k.dim, "]");
  QVG_CHECK(opt.sample_heads >= 1, "budget on data: sample_heads must be >= 1, got ", opt.sample_heads);
  QVG_CHECK(std::isfinite(opt.max_seconds) && opt.max_seconds >= 0,
            "budget on data: max_seconds must be a number >= 0, got ", opt.max_seconds);
  MeasuredBudgetChoice out;
  const std::vector<BudgetCandidate> ranked = budget_candidates(c, budget, k.tokens, k.dim, tolerance, true);
  if (ranked.empty()) {
    out.choice = choose_for_budget_any_format(c, budget, k.tokens, k.dim, tolerance);
    return out;
  }
  const int64_t m = std::min<int64_t>(opt.sample_heads, k.heads);
  for (int64_t i = 0; i < m; ++i) out.heads.push_back((2 * i + 1) * k.heads / (2 * m));
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  size_t best = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    BudgetTrial t;
    t.candidate = ranked[i];
    if (i > 0 && since(t0) >= opt.max_seconds) {
      out.trials.push_back(t);
      ++out.untried;
      continue;
    }
    const auto t1 = std::chrono::steady_clock::now();
    t.key_error = relative_error_on_heads(t.candidate.config, k, out.heads, TensorRole::key, opt.threads);
    t.value_error = relative_error_on_heads(t.candidate.config, v, out.heads, TensorRole::value, opt.threads);
    t.measured = 0.5 * (t.key_error + t.value_error);
    t.seconds = since(t1);
    if (opt.progress) {
      char line[256];
      std::snprintf(line, sizeof line, "%s at %.3g bits: trial %zu/%zu %s (%.3f bits): error %.4g (%.1f s)",
                    c.name.c_str(), budget, i + 1, ranked.size(), describe(t.candidate.config).c_str(),
                    t.candidate.bits, t.measured, t.seconds);
      opt.progress(line);
    }
    if (i == 0 || t.measured < out.trials[best].measured) best = i;
    out.trials.push_back(t);
  }
  if (out.untried > 0 && opt.progress)
    opt.progress(c.name + ": " + std::to_string(out.untried) + " of " + std::to_string(ranked.size()) +
                 " candidates untried (max_seconds reached); the choice is among the rest");
  const BudgetCandidate& pick = out.trials[best].candidate;
  out.choice.config = budget_config_as_spec(c, pick.config, k.tokens);
  out.choice.bits = pick.bits;
  out.choice.reachable = true;
  return out;
}

}  // namespace qvg
