// The budget rule on data (qvg/budget_trial.h) on the built-in K/V
// (video-like and, with FFmpeg, the cockatoo clip; 4 heads x 4 latent frames = 6,240
// tokens, dim 128): the pick, judged on all heads, against every candidate
// the rule could have picked and against the preset, within the sampling
// error of its 2-head sample.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "error_util.h"
#include "qvg/budget_trial.h"
#include "qvg/data.h"
#include "qvg/methods.h"

namespace qvg {
namespace {

using test::error_of;

struct Kv {
  const char* name;
  HeadTensor k, v;
};

const std::vector<Kv>& data_sets() {
  static const std::vector<Kv> sets = [] {
    VideoLikeParams vp;
    vp.heads = 4;
    vp.frames = 4;
    ClipKVParams cp;
    cp.heads = 4;
    cp.frames = 4;
    std::vector<Kv> s;
    s.push_back({"video-like", make_video_like(vp, TensorRole::key), make_video_like(vp, TensorRole::value)});
#if defined(QVG_WITH_FFMPEG) && QVG_WITH_FFMPEG  // the clip's frames are read through FFmpeg
    s.push_back({"clip", make_clip_kv(cp, TensorRole::key), make_clip_kv(cp, TensorRole::value)});
#else
    (void)cp;
#endif
    return s;
  }();
  return sets;
}

/// Keys' and values' relative squared errors on all heads, averaged.
double full_error(const CodecConfig& c, const Kv& d) {
  std::vector<int64_t> all;
  for (int64_t h = 0; h < d.k.heads; ++h) all.push_back(h);
  return 0.5 * (relative_error_on_heads(c, d.k, all, TensorRole::key) +
                relative_error_on_heads(c, d.v, all, TensorRole::value));
}

// The issue-39 test. For QVG at 2.25 / 2.5 / 3 / 4 bits, on all 4 heads:
// the pick's error is at most the best candidate's times (1 + e) / (1 - e),
// e the sampling error: the largest relative difference between a
// candidate's 2-head error and its 4-head error, itself at most 10 % (the
// bound stated for this sample; measured 1.8 % on the clip, 5.2 % on video-like). If every estimate
// is within e of the truth, the pick (the lowest estimate) is within that
// factor of the best. The same bound against the qvg preset where it fits
// the budget.
TEST(BudgetOnData, PickIsTheBestCandidateWithinTheSamplingError) {
  const CodecConfig preset = parse_codec_spec("qvg");
  for (const Kv& d : data_sets())
    for (double budget : {2.25, 2.5, 3.0, 4.0}) {
      SCOPED_TRACE(std::string(d.name) + " at " + std::to_string(budget));
      BudgetTrialOptions opt;
      opt.sample_heads = 2;
      opt.max_seconds = 1e6;  // every candidate measured
      const MeasuredBudgetChoice got = choose_for_budget_on_data(preset, budget, d.k, d.v, opt);
      ASSERT_TRUE(got.choice.reachable);
      ASSERT_EQ(got.untried, 0);
      EXPECT_EQ(got.heads, (std::vector<int64_t>{1, 3}));
      ASSERT_GE(got.trials.size(), 2u);  // a choice to make
      double best = INFINITY, pick = NAN, e = 0;
      const CodecConfig picked = span_config(got.choice.config, d.k.tokens);
      for (const BudgetTrial& t : got.trials) {
        const double truth = full_error(t.candidate.config, d);
        e = std::max(e, std::fabs(t.measured / truth - 1));
        best = std::min(best, truth);
        if (describe(t.candidate.config) == describe(picked)) pick = truth;
        EXPECT_LE(t.candidate.bits, budget * 1.03);
      }
      ASSERT_FALSE(std::isnan(pick)) << describe(picked) << " is not among the candidates";
      EXPECT_LE(e, 0.10);
      std::printf("%s at %.2f: %zu candidates, sampling error %.3f, pick %s %.4f, best %.4f\n", d.name, budget,
                  got.trials.size(), e, describe(picked).c_str(), pick, best);
      const double factor = (1 + e) / (1 - e);
      EXPECT_LE(pick, best * factor) << describe(picked) << " sampling error " << e;
      if (span_bits_per_value(preset, d.k.tokens, d.k.dim) <= budget * 1.03)
        EXPECT_LE(pick, full_error(preset, d) * factor) << describe(picked);
    }
}

// The time bound: with max_seconds = 0 only the model's first candidate is
// measured, and it is the choice.
TEST(BudgetOnData, TimeBoundStopsAfterTheFirstCandidate) {
  const Kv& d = data_sets()[0];
  BudgetTrialOptions opt;
  opt.max_seconds = 0;
  std::vector<std::string> lines;
  opt.progress = [&](const std::string& s) { lines.push_back(s); };
  const MeasuredBudgetChoice got = choose_for_budget_on_data(parse_codec_spec("qvg"), 2.5, d.k, d.v, opt);
  ASSERT_GE(got.trials.size(), 2u);
  EXPECT_EQ(got.untried, static_cast<int>(got.trials.size()) - 1);
  EXPECT_FALSE(std::isnan(got.trials[0].measured));
  EXPECT_TRUE(std::isnan(got.trials[1].measured));
  EXPECT_EQ(describe(span_config(got.choice.config, d.k.tokens)), describe(got.trials[0].candidate.config));
  ASSERT_EQ(lines.size(), 2u);  // the trial, then the note
  EXPECT_NE(lines[1].find("untried"), std::string::npos) << lines[1];
}

// Methods without centroids go through the same path; an unreachable
// budget is choose_for_budget_any_format's answer with no trials.
TEST(BudgetOnData, BaselinesAndUnreachableBudgets) {
  const Kv& d = data_sets()[0];
  const MeasuredBudgetChoice r = choose_for_budget_on_data(parse_codec_spec("rtn"), 2.5, d.k, d.v);
  EXPECT_EQ(describe(r.choice.config), "INT2 B16 fp8");  // the only lower-error RTN config within 2.575 bits
  const MeasuredBudgetChoice q = choose_for_budget_on_data(parse_codec_spec("quarot"), 2.0, d.k, d.v);
  EXPECT_FALSE(q.choice.reachable);
  EXPECT_TRUE(q.trials.empty());
  EXPECT_NEAR(q.choice.bits, 2.25, 1e-12);
}

TEST(BudgetOnData, BadArgumentsAreErrors) {
  const CodecConfig c = parse_codec_spec("qvg");
  HeadTensor a(2, 64, 128), b(2, 65, 128);
  EXPECT_NE(error_of([&] { choose_for_budget_on_data(c, 2.5, a, b); }).find("differ in shape"), std::string::npos);
  BudgetTrialOptions opt;
  opt.sample_heads = 0;
  EXPECT_NE(error_of([&] { choose_for_budget_on_data(c, 2.5, a, a, opt); }).find("sample_heads"), std::string::npos);
  opt.sample_heads = 1;
  opt.max_seconds = NAN;
  EXPECT_NE(error_of([&] { choose_for_budget_on_data(c, 2.5, a, a, opt); }).find("max_seconds"), std::string::npos);
  EXPECT_NE(error_of([&] { choose_for_budget_on_data(c, -1, a, a); }).find("> 0"), std::string::npos);
}

}  // namespace
}  // namespace qvg
