// k-means along tokens for one head: the CPU reference (Eigen for the
// x.c products, everything else in plain loops with a fixed order).
#include "qvg/kmeans.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "qvg/common.h"
#include "qvg/fixed_sum.h"
#include "qvg/half.h"
#include "util/fixed_product.h"
#include "util/rng.h"

namespace qvg {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;

constexpr int64_t kRowBlock = 1024;  // rows of x per product (keeps the block in cache)
constexpr int64_t kPlusPlusPointsPerCentroid = 64;  // k-means++ subsample size per centroid

void check_args(const float* x, int64_t n, int64_t d, int64_t c) {
  QVG_CHECK(x != nullptr || n == 0, "k-means: points are null");
  QVG_CHECK(n > 0, "k-means: no points (N = 0)");
  QVG_CHECK(d > 0, "k-means: dim must be positive, got ", d);
  QVG_CHECK(c >= 1 && c <= 256, "k-means: centroids must be 1..256 (ids are uint8), got ", c);
  QVG_CHECK(c <= n, "k-means: centroids (", c, ") exceed the number of points (", n, ")");
}

}  // namespace

double kmeans_assign_ref(const float* x, int64_t n, int64_t d, const float* centroids, int64_t c,
                         uint8_t* ids, float* dist) {
  const ConstMap cm(centroids, c, d);
  const Eigen::VectorXf cnorm = cm.rowwise().squaredNorm();
  double total = 0.0;
  RowMat dots;
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, n - r0);
    const ConstMap xm(x + r0 * d, rows, d);
    fixed_product(xm, cm.transpose(), dots);  // (rows, c)
    for (int64_t i = 0; i < rows; ++i) {
      float best = std::numeric_limits<float>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < c; ++j) {
        const float v = cnorm[j] - 2.0f * dots(i, j);
        if (v < best) {  // strict: ties keep the lowest index
          best = v;
          arg = j;
        }
      }
      ids[r0 + i] = static_cast<uint8_t>(arg);
      // The exact squared distance to the chosen centroid (not the expanded form).
      double s = 0.0;
      const float* xi = x + (r0 + i) * d;
      const float* ci = centroids + arg * d;
      for (int64_t k = 0; k < d; ++k) {
        const double e = static_cast<double>(xi[k]) - ci[k];
        s += e * e;
      }
      if (dist) dist[r0 + i] = static_cast<float>(s);
      total += s;
    }
  }
  return total / static_cast<double>(n * d);
}

std::vector<int64_t> kmeans_random_rows(int64_t n, int c, uint64_t seed) {
  QVG_CHECK(c >= 1 && c <= n, "k-means: cannot draw ", c, " distinct rows from ", n);
  // The partial Fisher-Yates shuffle of 0..n-1 with only the moved entries
  // stored (O(C), not O(n); random_rows_kernel draws the same rows on the
  // GPU): entry p of the permutation is moved[p] if present, else p.
  SplitMix64 rng(seed);
  std::unordered_map<int64_t, int64_t> moved;
  moved.reserve(static_cast<size_t>(2 * c));
  auto at = [&](int64_t p) {
    const auto it = moved.find(p);
    return it == moved.end() ? p : it->second;
  };
  std::vector<int64_t> rows(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    const int64_t vi = at(i), vj = at(j);
    moved[j] = vi;  // swap(idx[i], idx[j]); idx[i] is not read again
    rows[static_cast<size_t>(i)] = vj;
  }
  return rows;
}

namespace {

/// A seeded subsample of min(n, per_centroid * C) rows, ascending, and the
/// first centre's sample index (kmeanspp_start, kmeans_d2_start).
KMeansPPStart sample_start(int64_t n, int c, uint64_t seed, int64_t per_centroid) {
  QVG_CHECK(n > 0 && c > 0, "k-means start: ", n, " points, ", c, " centroids");
  SplitMix64 rng(seed);
  KMeansPPStart s;
  const int64_t m = std::min<int64_t>(n, per_centroid * c);
  s.rows.resize(static_cast<size_t>(n));
  std::iota(s.rows.begin(), s.rows.end(), 0);
  if (m < n) {
    for (int64_t i = 0; i < m; ++i)
      std::swap(s.rows[i], s.rows[i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)))]);
    // Ascending, by marking the drawn rows (O(n), where a sort is O(m log m)).
    std::vector<uint8_t> drawn(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < m; ++i) drawn[s.rows[i]] = 1;
    s.rows.resize(static_cast<size_t>(m));
    int64_t k = 0;
    for (int64_t r = 0; r < n; ++r)
      if (drawn[r]) s.rows[k++] = r;
    s.draws = static_cast<uint64_t>(m);
  }
  s.first = static_cast<int64_t>(rng.below(static_cast<uint64_t>(m)));
  ++s.draws;
  return s;
}

/// The `d2_rounds` start (kmeans.h states the rule) on the m sample rows.
std::vector<float> d2_rounds_init(const float* sample, int64_t d, int c, const KMeansPPStart& start, uint64_t seed) {
  const auto m = static_cast<int64_t>(start.rows.size());
  SplitMix64 rng(seed);
  rng.discard(start.draws);
  RowMat xs(m, d);
  for (int64_t i = 0; i < m; ++i) std::transform(sample + i * d, sample + i * d + d, xs.row(i).data(), round_bf16);
  const Eigen::VectorXf xnorm = xs.rowwise().squaredNorm();
  std::vector<float> best(static_cast<size_t>(m), std::numeric_limits<float>::infinity());
  std::vector<int64_t> centres{start.first}, fresh{start.first};
  RowMat fresh_rows, dots;
  for (int r = 0; static_cast<int>(centres.size()) < c && r < 2 * kD2Rounds; ++r) {
    const auto k = static_cast<int64_t>(fresh.size());
    fresh_rows.resize(k, d);
    for (int64_t j = 0; j < k; ++j) fresh_rows.row(j) = xs.row(fresh[j]);
    fixed_product(xs, fresh_rows.transpose(), dots);  // (m, k)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)
        best[i] = std::min(best[i], std::max(0.0f, xnorm[i] - 2.0f * dots(i, j) + xnorm[fresh[j]]));
    for (int64_t p : fresh) best[p] = 0.0f;
    double total = 0.0;
    for (int64_t i = 0; i < m; ++i) total += best[i];
    if (!(total > 0.0)) break;
    const int picked = static_cast<int>(centres.size());
    const int left = std::max(1, kD2Rounds - r);
    const int want = (c - picked + left - 1) / left;
    const double u = rng.uniform();
    fresh.clear();
    double run = 0.0;
    int j = 0;
    for (int64_t i = 0; i < m && j < want; ++i) {
      run += best[i];
      for (; j < want && (u + j) * total / want < run; ++j)
        if (fresh.empty() || fresh.back() != i) fresh.push_back(i);
    }
    centres.insert(centres.end(), fresh.begin(), fresh.end());
  }
  std::vector<float> cent(static_cast<size_t>(c * d));
  for (int64_t k = 0; k < c; ++k) {
    const int64_t p = k < static_cast<int64_t>(centres.size()) ? centres[k] : start.first;
    std::copy_n(xs.row(p).data(), d, cent.data() + k * d);
  }
  return cent;
}

}  // namespace

KMeansPPStart kmeanspp_start(int64_t n, int c, uint64_t seed) {
  return sample_start(n, c, seed, kPlusPlusPointsPerCentroid);
}

KMeansPPStart kmeans_d2_start(int64_t n, int c, uint64_t seed) { return sample_start(n, c, seed, kD2PointsPerCentroid); }

std::vector<float> kmeans_init_ref(const float* x, int64_t n, int64_t d, int c, KMeansInit init,
                                   uint64_t seed) {
  check_args(x, n, d, c);
  if (init == KMeansInit::random) {
    std::vector<float> cent(static_cast<size_t>(c * d));
    const std::vector<int64_t> rows = kmeans_random_rows(n, c, seed);
    for (int64_t i = 0; i < c; ++i) std::copy_n(x + rows[i] * d, d, cent.data() + i * d);
    return cent;
  }
  const KMeansPPStart start = init == KMeansInit::d2_rounds ? kmeans_d2_start(n, c, seed) : kmeanspp_start(n, c, seed);
  std::vector<float> sample(start.rows.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < start.rows.size(); ++i) std::copy_n(x + start.rows[i] * d, d, sample.data() + i * d);
  return kmeans_start_from_sample(sample.data(), d, c, init, start, seed);
}

std::vector<float> kmeans_start_from_sample(const float* sample, int64_t d, int c, KMeansInit init,
                                            const KMeansPPStart& start, uint64_t seed) {
  const auto m = static_cast<int64_t>(start.rows.size());
  QVG_CHECK(init != KMeansInit::random, "kmeans_start_from_sample: the random start takes no sample");
  QVG_CHECK(sample != nullptr && d > 0 && c >= 1 && c <= 256 && c <= m && start.first >= 0 && start.first < m,
            "kmeans_start_from_sample: ", m, " sample rows of dim ", d, ", ", c, " centroids, first ", start.first);
  if (init == KMeansInit::d2_rounds) return d2_rounds_init(sample, d, c, start, seed);
  // k-means++ on the seeded subsample: the first centre uniform, each next
  // one with probability proportional to the squared distance to the nearest
  // chosen centre.
  std::vector<float> cent(static_cast<size_t>(c * d));
  SplitMix64 rng(seed);
  rng.discard(start.draws);
  // Sampled points as one matrix; squared distances to a new centre come from
  // one matrix-vector product: ||x||^2 - 2 x.c + ||c||^2 (clamped at 0).
  const RowMat xs = ConstMap(sample, m, d);
  const Eigen::VectorXf xnorm = xs.rowwise().squaredNorm();
  std::vector<float> best(static_cast<size_t>(m), std::numeric_limits<float>::infinity());
  Eigen::VectorXf dots(m);
  int64_t pick = start.first;
  for (int64_t k = 0; k < c; ++k) {
    std::copy_n(xs.row(pick).data(), d, cent.data() + k * d);
    if (k + 1 == c) break;
    const Eigen::Map<const Eigen::VectorXf> ck(cent.data() + k * d, d);
    dots.noalias() = xs * ck;
    const float cnorm = ck.squaredNorm();
    double total = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      const float dist = std::max(0.0f, xnorm[i] - 2.0f * dots[i] + cnorm);
      best[i] = std::min(best[i], dist);
      total += best[i];
    }
    if (!(total > 0.0)) {  // every point coincides with a centre: take the next one
      pick = (pick + 1) % m;
      continue;
    }
    const double u = rng.uniform() * total;
    double acc = 0.0;
    pick = m - 1;
    for (int64_t i = 0; i < m; ++i) {
      acc += best[i];
      if (acc > u && best[i] > 0.0f) {
        pick = i;
        break;
      }
    }
  }
  return cent;
}

int kmeans_fixed_exponent(const float* x, int64_t n, int64_t d) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n * d; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  return fixed_sum_exponent(absmax, n);
}

int kmeans_update_ref(const float* x, int64_t n, int64_t d, const uint8_t* ids, const float* dist, int64_t c, int fx,
                      float* centroids) {
  std::vector<int64_t> sum(static_cast<size_t>(c * d));
  std::vector<int64_t> count(static_cast<size_t>(c));
  const double scale = fixed_scale(fx);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = ids[i];
    ++count[j];
    const float* xi = x + i * d;
    int64_t* sj = sum.data() + j * d;
    for (int64_t k = 0; k < d; ++k) sj[k] += to_fixed_scaled(xi[k], scale);
  }
  std::vector<char> taken(static_cast<size_t>(n));
  int reseeded = 0;
  for (int64_t j = 0; j < c; ++j) {
    float* cj = centroids + j * d;
    if (count[j] > 0) {
      for (int64_t k = 0; k < d; ++k) cj[k] = round_bf16(fixed_mean(sum[j * d + k], fx, count[j]));
      continue;
    }
    // Empty cluster: re-seed at the farthest point not taken yet.
    int64_t far = -1;
    for (int64_t i = 0; i < n; ++i)
      if (!taken[i] && (far < 0 || dist[i] > dist[far])) far = i;
    taken[far] = 1;
    std::transform(x + far * d, x + far * d + d, cj, round_bf16);
    ++reseeded;
  }
  return reseeded;
}

KMeansResult kmeans_ref(const float* x, int64_t n, int64_t d, const KMeansParams& p,
                        const float* init) {
  const int64_t c = p.centroids;
  check_args(x, n, d, c);
  QVG_CHECK(p.max_iter >= 0, "k-means: max_iter must be >= 0, got ", p.max_iter);
  const auto t0 = std::chrono::steady_clock::now();
  KMeansResult r;
  r.stats.warm_started = init != nullptr;
  if (init) {
    r.centroids.assign(init, init + c * d);
  } else {
    r.centroids = kmeans_init_ref(x, n, d, static_cast<int>(c), p.init, p.seed);
  }
  std::transform(r.centroids.begin(), r.centroids.end(), r.centroids.begin(), round_bf16);  // BF16 values
  if (init)  // after the rounding: a finite float beyond BF16's range rounds to an infinity
    for (size_t i = 0; i < r.centroids.size(); ++i)
      QVG_CHECK(std::isfinite(r.centroids[i]), "k-means: warm-start centroid value ", i, " is not finite in BF16");
  r.ids.resize(static_cast<size_t>(n));
  std::vector<float> dist(static_cast<size_t>(n));
  double mse = kmeans_assign_ref(x, n, d, r.centroids.data(), c, r.ids.data(), dist.data());
  r.stats.mse.push_back(mse);

  // Update sums in exact fixed point (qvg/fixed_sum.h): the same bits for
  // any order of accumulation, so the GPU's atomics reproduce them.
  const int fx = kmeans_fixed_exponent(x, n, d);
  for (int it = 1; it <= p.max_iter; ++it) {
    r.stats.empty_reassigned += kmeans_update_ref(x, n, d, r.ids.data(), dist.data(), c, fx, r.centroids.data());
    const double prev = mse;
    mse = kmeans_assign_ref(x, n, d, r.centroids.data(), c, r.ids.data(), dist.data());
    r.stats.mse.push_back(mse);
    r.stats.iterations = it;
    if (prev - mse <= p.tol * prev) break;
  }
  r.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace qvg
