// k-means reference: against a naive implementation, determinism, rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "qvg/common.h"
#include "qvg/fixed_sum.h"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "util/rng.h"

namespace qvg {
namespace {

std::vector<float> blobs(int64_t n, int64_t d, int k, unsigned seed, float spread = 0.1f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> centers(static_cast<size_t>(k * d));
  for (auto& c : centers) c = 4.0f * nd(gen);
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = centers[(i % k) * d + j] + spread * nd(gen);
  return x;
}

TEST(KMeans, AssignMatchesNaiveArgmin) {
  const int64_t n = 97, d = 24, c = 13;
  const auto x = blobs(n, d, 5, 1, 2.0f);
  const auto cent = blobs(c, d, 13, 2, 1.0f);
  std::vector<uint8_t> ids(n);
  std::vector<float> dist(n);
  const double mse = kmeans_assign_ref(x.data(), n, d, cent.data(), c, ids.data(), dist.data());
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double best = 1e300;
    int arg = -1;
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += std::pow(double(x[i * d + k]) - cent[j * d + k], 2.0);
      if (s < best) best = s, arg = static_cast<int>(j);
    }
    EXPECT_EQ(ids[i], arg) << "point " << i;
    EXPECT_NEAR(dist[i], best, 1e-4 * best);
    total += best;
  }
  EXPECT_NEAR(mse, total / (n * d), 1e-9 * total);
}

TEST(KMeans, TiesGoToLowestIndex) {
  const int64_t d = 2;
  const std::vector<float> x = {0.0f, 0.0f};
  const std::vector<float> cent = {1.0f, 0.0f, -1.0f, 0.0f, 0.0f, 1.0f};  // all at distance 1
  uint8_t id = 9;
  kmeans_assign_ref(x.data(), 1, d, cent.data(), 3, &id);
  EXPECT_EQ(id, 0);
}

TEST(KMeans, RecoversSeparatedBlobsAndErrorNeverRises) {
  const int64_t n = 4681, d = 32;
  const int k = 16;
  const auto x = blobs(n, d, k, 4);
  for (KMeansInit init : {KMeansInit::kmeanspp, KMeansInit::d2_rounds, KMeansInit::random}) {
    KMeansParams p;
    p.centroids = k;
    p.max_iter = 50;
    p.tol = 0;
    p.init = init;
    const auto r = kmeans_ref(x.data(), n, d, p);
    ASSERT_GE(r.stats.mse.size(), 2u);
    for (size_t i = 1; i < r.stats.mse.size(); ++i) EXPECT_LE(r.stats.mse[i], r.stats.mse[i - 1] * (1 + 1e-9));
    if (init == KMeansInit::kmeanspp) {
      // Points of one blob share an id and different blobs differ. (Not a
      // property of d2_rounds: a round draws two centres from one blob
      // where that blob's share of the distances exceeds total / want.)
      EXPECT_NEAR(r.stats.mse.back(), 0.01, 0.002);  // spread^2
      for (int64_t i = k; i < n; ++i) EXPECT_EQ(r.ids[i], r.ids[i % k]);
    }
    // ids are the nearest-centroid assignment of the returned centroids.
    std::vector<uint8_t> ids(n);
    kmeans_assign_ref(x.data(), n, d, r.centroids.data(), k, ids.data());
    EXPECT_EQ(ids, r.ids);
  }
}

TEST(KMeans, DeterministicForASeedAndSeedMatters) {
  const int64_t n = 2000, d = 16;
  const auto x = blobs(n, d, 40, 8, 1.0f);
  KMeansParams p;
  p.centroids = 32;
  const auto a = kmeans_ref(x.data(), n, d, p);
  const auto b = kmeans_ref(x.data(), n, d, p);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_EQ(a.ids, b.ids);
  p.seed = 99;
  const auto c = kmeans_ref(x.data(), n, d, p);
  EXPECT_NE(a.centroids, c.centroids);
}

TEST(KMeans, WarmStartFromConvergedCentroidsStopsAtOnce) {
  const int64_t n = 3000, d = 16;
  const auto x = blobs(n, d, 8, 5);
  KMeansParams p;
  p.centroids = 8;
  p.max_iter = 30;
  const auto cold = kmeans_ref(x.data(), n, d, p);
  const auto warm = kmeans_ref(x.data(), n, d, p, cold.centroids.data());
  EXPECT_TRUE(warm.stats.warm_started);
  EXPECT_LE(warm.stats.iterations, 1);
  EXPECT_LE(warm.stats.mse.back(), cold.stats.mse.back() * (1 + 1e-6));
}

TEST(KMeans, EmptyClustersAreReseededAtFarthestPoint) {
  // Two far groups; all warm-start centroids sit on group A, so the ones that
  // lose every point must move to group B.
  const int64_t d = 2;
  std::vector<float> x;
  for (int i = 0; i < 10; ++i) x.insert(x.end(), {0.01f * i, 0.0f});
  for (int i = 0; i < 10; ++i) x.insert(x.end(), {100.0f + 0.01f * i, 0.0f});
  const std::vector<float> init = {0.0f, 0.0f, 0.0f, 0.0f};  // two identical centroids
  KMeansParams p;
  p.centroids = 2;
  p.max_iter = 5;
  p.tol = 0;
  const auto r = kmeans_ref(x.data(), 20, d, p, init.data());
  EXPECT_GE(r.stats.empty_reassigned, 1);
  EXPECT_NE(r.ids[0], r.ids[19]);
  EXPECT_LT(r.stats.mse.back(), 1e-3);
}

// Centroids are BF16 values throughout (kmeans.h): the start is the BF16
// rounding of the seeded rows, and every later centroid (mean or re-seeded
// point) is a BF16 value too, on float data that is not.
TEST(KMeans, CentroidsAreBf16Values) {
  const int64_t n = 900, d = 24;
  std::vector<float> x = blobs(n, d, 6, 17, 0.3f);
  for (int64_t i = 0; i < n * d; ++i) x[i] += 0.001f * static_cast<float>(i % 7);  // off the BF16 grid
  int off_grid = 0;
  for (float v : x) off_grid += round_bf16(v) != v;
  ASSERT_GT(off_grid, n * d / 2) << "the data must not be BF16 already";
  for (const KMeansInit init : {KMeansInit::random, KMeansInit::kmeanspp, KMeansInit::d2_rounds}) {
    KMeansParams p;
    p.centroids = 12;  // more than the blobs: some clusters empty out and are re-seeded
    p.init = init;
    p.seed = 5;
    p.max_iter = 0;
    const KMeansResult start = kmeans_ref(x.data(), n, d, p);
    const std::vector<float> rows = kmeans_init_ref(x.data(), n, d, p.centroids, init, p.seed);
    for (size_t k = 0; k < rows.size(); ++k) ASSERT_EQ(start.centroids[k], round_bf16(rows[k])) << k;
    p.max_iter = 8;
    p.tol = 0;
    const KMeansResult r = kmeans_ref(x.data(), n, d, p);
    for (float v : r.centroids) ASSERT_EQ(v, round_bf16(v));
  }
  // A re-seeded centroid is the BF16 rounding of its point.
  std::vector<float> y;
  for (int i = 0; i < 10; ++i) y.insert(y.end(), {0.0101f * i, 0.0f});
  for (int i = 0; i < 10; ++i) y.insert(y.end(), {100.0f + 0.0101f * i, 0.3333f});
  const std::vector<float> init = {0.0f, 0.0f, 0.0f, 0.0f};
  KMeansParams p;
  p.centroids = 2;
  p.max_iter = 1;
  p.tol = 0;
  const KMeansResult r = kmeans_ref(y.data(), 20, 2, p, init.data());
  ASSERT_EQ(r.stats.empty_reassigned, 1);
  EXPECT_EQ(r.centroids[2], round_bf16(y[2 * 19])) << "the farthest point, rounded";
  EXPECT_EQ(r.centroids[3], round_bf16(0.3333f));
  EXPECT_NE(r.centroids[3], 0.3333f);
}

TEST(KMeans, IdenticalPointsAndOddSizes) {
  for (int64_t n : {1, 7, 33}) {
    std::vector<float> x(static_cast<size_t>(n * 4), 1.5f);
    KMeansParams p;
    p.centroids = static_cast<int>(std::min<int64_t>(n, 5));
    const auto r = kmeans_ref(x.data(), n, 4, p);
    for (float c : r.centroids) EXPECT_EQ(c, 1.5f);
    EXPECT_EQ(r.stats.mse.back(), 0.0);
  }
}

// The update's fixed-point sums (qvg/fixed_sum.h): exact for any order, and
// the mean within the stated quantum of the true mean.
TEST(KMeans, FixedPointSumIsOrderFreeAndAccurate) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t n = 30001;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  v[5] = 1e4f;     // an outlier sets the range
  v[6] = -1e-30f;  // far below the quantum: rounds to 0
  float absmax = 0;
  for (float x : v) absmax = std::max(absmax, std::fabs(x));
  const int e = fixed_sum_exponent(absmax, n);
  EXPECT_EQ(e, 14 + 15 - 62);  // 1e4 < 2^14, 2^15 >= 30001
  auto sum_of = [&](const std::vector<float>& a) {
    int64_t s = 0;
    for (float x : a) s += to_fixed(x, e);
    return s;
  };
  const int64_t s0 = sum_of(v);
  std::vector<float> w = v;
  std::shuffle(w.begin(), w.end(), rng);
  EXPECT_EQ(sum_of(w), s0);
  std::reverse(w.begin(), w.end());
  EXPECT_EQ(sum_of(w), s0);
  long double exact = 0;
  for (float x : v) exact += static_cast<long double>(x);
  const long double mean = exact / n;
  // each term is off by <= q/2, so the mean by <= q/2; then one float rounding
  const long double q = std::ldexp(1.0L, e);
  EXPECT_LE(std::fabs(static_cast<long double>(fixed_mean(s0, e, n)) - mean),
            q / 2 + std::fabs(mean) * std::ldexp(1.0L, -24));
  // edge cases: all zero, one point, the largest magnitude itself
  EXPECT_EQ(fixed_sum_exponent(0.0f, 5), 0);
  EXPECT_EQ(to_fixed(0.0f, 0), 0);
  const int e1 = fixed_sum_exponent(absmax, 1);
  EXPECT_EQ(fixed_mean(to_fixed(1e4f, e1), e1, 1), 1e4f);
  EXPECT_EQ(fixed_mean(to_fixed(-3.25f, e1), e1, 1), -3.25f);
}

// to_fixed_scaled (the factor 2^-e computed once) gives to_fixed's integer
// at the ends of the exponent range fixed_sum_exponent can return and for
// values from the smallest subnormal float to the head's largest, ties of
// the rounding included.
TEST(KMeans, ScaledFixedPointEqualsLdexp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> frac(-1.0f, 1.0f);
  std::uniform_int_distribution<int> down(0, 300);
  const float extremes[] = {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1.0f,
                            std::numeric_limits<float>::max()};
  const int64_t counts[] = {1, 2, 30001, int64_t{1} << 40, int64_t{1} << 62};
  int checked = 0;
  for (const float absmax : extremes)
    for (const int64_t n : counts) {
      const int e = fixed_sum_exponent(absmax, n);
      const double scale = fixed_scale(e);
      int top = 0;
      (void)std::frexp(absmax, &top);  // absmax < 2^top
      // absmax itself, half and one and a half quanta (ties), then values from 2^top down past the subnormals
      std::vector<float> xs = {0.0f, absmax, -absmax, std::ldexp(1.0f, e - 1), std::ldexp(3.0f, e - 1)};
      for (int i = 0; i < 2000; ++i) xs.push_back(std::ldexp(frac(rng), top - down(rng)));
      for (const float x : xs) {
        if (!std::isfinite(x) || std::fabs(x) > absmax) continue;
        ASSERT_EQ(to_fixed_scaled(x, scale), to_fixed(x, e)) << "x " << x << ", e " << e << ", n " << n;
        ++checked;
      }
    }
  EXPECT_GT(checked, 20000);
}

// Because the sums are exact, permuting the points (with the same start)
// gives bit-identical centroids.
TEST(KMeans, CentroidsDoNotDependOnPointOrder) {
  const int64_t n = 3000, d = 16;
  const int k = 8;
  const std::vector<float> x = blobs(n, d, k, 3, 0.5f);
  KMeansParams p;
  p.centroids = k;
  p.max_iter = 6;
  p.tol = 0;
  const std::vector<float> init(x.begin(), x.begin() + k * d);
  const KMeansResult a = kmeans_ref(x.data(), n, d, p, init.data());
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = (i * 1237) % n;  // 1237 coprime to 3000
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < n; ++i) std::copy_n(x.data() + perm[i] * d, d, y.data() + i * d);
  const KMeansResult b = kmeans_ref(y.data(), n, d, p, init.data());
  ASSERT_EQ(a.stats.empty_reassigned, 0);  // the reseed rule's tie order would differ
  EXPECT_EQ(a.centroids, b.centroids);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(b.ids[i], a.ids[perm[i]]);
}

// kmeans_random_rows stores only the moved entries of the shuffle; it must
// give the rows of the plain partial Fisher-Yates shuffle of 0..n-1.
TEST(KMeans, RandomRowsAreThePartialFisherYatesShuffle) {
  for (const auto& [n, c] : std::vector<std::pair<int64_t, int>>{{1, 1}, {7, 7}, {33, 5}, {300, 256}, {29640, 256}})
    for (uint64_t seed : {1ull, 42ull, 0x9E3779B97F4A7C15ull}) {
      SplitMix64 rng(seed);
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[i] = i;
      for (int64_t i = 0; i < c; ++i)
        std::swap(idx[i], idx[i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)))]);
      idx.resize(static_cast<size_t>(c));
      EXPECT_EQ(kmeans_random_rows(n, c, seed), idx) << "n=" << n << " c=" << c << " seed=" << seed;
    }
}

// The sampled starts (shared by the CPU reference and the GPU starts):
// k-means++ on 64 C rows, d2_rounds on 16 C; all rows when n is at most
// that, else the random start's rows for that many (the same shuffle) in
// ascending order; the first centre is the next draw.
TEST(KMeans, SampledStartsAreTheSortedShuffleAndTheNextDraw) {
  using Start = KMeansPPStart (*)(int64_t, int, uint64_t);
  for (const auto& [start, per] : std::vector<std::pair<Start, int64_t>>{{kmeanspp_start, 64},
                                                                         {kmeans_d2_start, kD2PointsPerCentroid}})
    for (const auto& [n, c] :
         std::vector<std::pair<int64_t, int>>{{1, 1}, {16, 1}, {17, 1}, {64, 1}, {65, 1}, {300, 4}, {29640, 256}})
      for (uint64_t seed : {3ull, 0x9E3779B97F4A7C15ull}) {
        const KMeansPPStart s = start(n, c, seed);
        const int64_t m = std::min<int64_t>(n, per * c);
        std::vector<int64_t> want(static_cast<size_t>(m));
        std::iota(want.begin(), want.end(), 0);
        uint64_t draws = 0;
        if (m < n) {
          want = kmeans_random_rows(n, static_cast<int>(m), seed);
          std::sort(want.begin(), want.end());
          draws = static_cast<uint64_t>(m);
        }
        const std::string what = "per=" + std::to_string(per) + " n=" + std::to_string(n) + " c=" + std::to_string(c);
        EXPECT_EQ(s.rows, want) << what;
        SplitMix64 rng(seed);
        rng.discard(draws);
        EXPECT_EQ(s.first, static_cast<int64_t>(rng.below(static_cast<uint64_t>(m)))) << what;
        EXPECT_EQ(s.draws, draws + 1) << what;
      }
}

/// The d2_rounds rule of kmeans.h written out with plain loops and exact
/// (double) squared distances: on small-integer data every distance is an
/// integer below 2^24, so the reference's float formula gives the same values.
std::vector<float> d2_rounds_written_out(const std::vector<float>& x, int64_t n, int64_t d, int c, uint64_t seed) {
  const KMeansPPStart s = kmeans_d2_start(n, c, seed);
  const auto m = static_cast<int64_t>(s.rows.size());
  SplitMix64 rng(seed);
  rng.discard(s.draws);
  auto dist = [&](int64_t i, int64_t p) {
    double e = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double t = static_cast<double>(x[s.rows[i] * d + k]) - x[s.rows[p] * d + k];
      e += t * t;
    }
    return static_cast<float>(e);
  };
  std::vector<float> best(static_cast<size_t>(m), INFINITY);
  std::vector<int64_t> centres{s.first}, last{s.first};
  for (int r = 0; static_cast<int>(centres.size()) < c && r < 2 * kD2Rounds; ++r) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p : last) best[i] = std::min(best[i], dist(i, p));
    for (int64_t p : last) best[p] = 0;
    double total = 0;
    for (float b : best) total += b;
    if (total == 0) break;
    const int want = (c - static_cast<int>(centres.size()) + std::max(1, kD2Rounds - r) - 1) / std::max(1, kD2Rounds - r);
    const double u = rng.uniform();
    last.clear();
    for (int j = 0; j < want; ++j) {
      const double pos = (u + j) * total / want;
      double run = 0;
      for (int64_t i = 0; i < m; ++i) {
        run += best[i];
        if (run > pos) {
          if (std::find(last.begin(), last.end(), i) == last.end()) last.push_back(i);
          break;
        }
      }
    }
    centres.insert(centres.end(), last.begin(), last.end());
  }
  while (static_cast<int>(centres.size()) < c) centres.push_back(s.first);
  std::vector<float> out;
  for (int64_t p : centres) out.insert(out.end(), x.begin() + s.rows[p] * d, x.begin() + (s.rows[p] + 1) * d);
  return out;
}

TEST(KMeans, D2RoundsStartFollowsTheStatedRule) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> small(-6, 6);
  for (const auto& [n, c] : std::vector<std::pair<int64_t, int>>{{100, 8}, {5000, 16}, {9000, 200}, {300, 256}}) {
    const int64_t d = 16;
    std::vector<float> x(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i)  // 8 clusters of small integers
      for (int64_t k = 0; k < d; ++k) x[i * d + k] = static_cast<float>(small(gen) / 3 + 4 * ((i % 8) == k % 8));
    for (uint64_t seed : {1ull, 77ull}) {
      const std::string what = "n=" + std::to_string(n) + " c=" + std::to_string(c) + " seed=" + std::to_string(seed);
      const std::vector<float> got = kmeans_init_ref(x.data(), n, d, c, KMeansInit::d2_rounds, seed);
      EXPECT_EQ(got, d2_rounds_written_out(x, n, d, c, seed)) << what;
      // The centres are distinct sample points while distances are left.
      std::vector<std::vector<float>> rows;
      for (int k = 0; k < c; ++k) rows.emplace_back(got.begin() + k * d, got.begin() + (k + 1) * d);
      std::sort(rows.begin(), rows.end());
      const auto distinct = std::unique(rows.begin(), rows.end()) - rows.begin();
      EXPECT_EQ(distinct, c) << what;
    }
  }
}

// Fewer distinct points than centroids: the rounds stop when every sample
// point is a centre; the slots left repeat the first centre.
TEST(KMeans, D2RoundsStartFillsWithTheFirstCentre) {
  const int64_t n = 40, d = 4;
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) x[i * d + k] = static_cast<float>((i % 3) * 10 + k);  // 3 distinct rows
  const int c = 8;
  const std::vector<float> got = kmeans_init_ref(x.data(), n, d, c, KMeansInit::d2_rounds, 5);
  const KMeansPPStart s = kmeans_d2_start(n, c, 5);
  const std::vector<float> first(x.begin() + s.rows[s.first] * d, x.begin() + (s.rows[s.first] + 1) * d);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin()));
  std::vector<std::vector<float>> rows;
  for (int k = 0; k < 3; ++k) rows.emplace_back(got.begin() + k * d, got.begin() + (k + 1) * d);
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(std::unique(rows.begin(), rows.end()) - rows.begin(), 3) << "the three distinct rows come first";
  for (int k = 3; k < c; ++k) EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin() + k * d)) << k;
  EXPECT_EQ(got, d2_rounds_written_out(x, n, d, c, 5));
}

// The GPU's start on devices without clusters: the subsample gathered, then
// kmeans_start_from_sample: the same centroids as kmeans_init_ref.
TEST(KMeans, StartFromTheSampleEqualsTheStartFromAllRows) {
  for (const KMeansInit init : {KMeansInit::d2_rounds, KMeansInit::kmeanspp}) {
    for (const int64_t n : {int64_t{60}, int64_t{3000}, int64_t{20000}}) {
      const int64_t d = 24;
      const int c = 32;
      const std::vector<float> x = blobs(n, d, 12, 3);
      const KMeansPPStart s = init == KMeansInit::d2_rounds ? kmeans_d2_start(n, c, 9) : kmeanspp_start(n, c, 9);
      std::vector<float> sample;
      for (int64_t r : s.rows) sample.insert(sample.end(), x.begin() + r * d, x.begin() + (r + 1) * d);
      EXPECT_EQ(kmeans_start_from_sample(sample.data(), d, c, init, s, 9),
                kmeans_init_ref(x.data(), n, d, c, init, 9))
          << "init " << static_cast<int>(init) << " n=" << n;
    }
  }
  const KMeansPPStart s = kmeans_d2_start(100, 8, 1);
  const std::vector<float> sample(s.rows.size() * 4, 1.0f);
  EXPECT_THROW(kmeans_start_from_sample(sample.data(), 4, 8, KMeansInit::random, s, 1), Error);
  EXPECT_THROW(kmeans_start_from_sample(nullptr, 4, 8, KMeansInit::d2_rounds, s, 1), Error);
}

// random_rows_kernel makes the C draws of the shuffle in parallel, draw i
// from SplitMix64(seed).discard(i): the i-th draw of one generator.
TEST(KMeans, SplitMix64DiscardSkipsDraws) {
  for (uint64_t seed : {0ull, 42ull, ~0ull}) {
    SplitMix64 serial(seed);
    for (uint64_t i = 0; i < 300; ++i) {
      SplitMix64 skipped(seed);
      skipped.discard(i);
      EXPECT_EQ(skipped.next(), serial.next()) << "seed=" << seed << " draw " << i;
    }
  }
}

TEST(KMeans, RejectsBadArguments) {
  std::vector<float> x(40, 1.0f);
  KMeansParams p;
  p.centroids = 11;
  EXPECT_THROW(kmeans_ref(x.data(), 10, 4, p), Error);  // C > N
  p.centroids = 257;
  EXPECT_THROW(kmeans_ref(x.data(), 10, 4, p), Error);
  p.centroids = 2;
  EXPECT_THROW(kmeans_ref(x.data(), 0, 4, p), Error);  // N = 0
  const std::vector<float> bad = {NAN, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THROW(kmeans_ref(x.data(), 10, 4, p, bad.data()), Error);
  // Finite as a float, an infinity once rounded to BF16 (the centroids' type):
  // rejected like a NaN, not clustered with.
  const std::vector<float> huge = {3.4e38f, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_TRUE(std::isfinite(huge[0]));
  ASSERT_FALSE(std::isfinite(round_bf16(huge[0])));
  try {
    kmeans_ref(x.data(), 10, 4, p, huge.data());
    ADD_FAILURE() << "a warm start that overflows BF16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not finite in BF16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qvg
