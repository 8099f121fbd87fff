// k-means along tokens for one head (the CPU reference).
#pragma once

#include <cstdint>
#include <vector>

#include "qvg/config.h"

namespace qvg {

/// Statistics of one k-means run.
struct KMeansStats {
  std::vector<double> mse;  ///< mean squared distance to the assigned centroid
                            ///< after each iteration's assignment step
  int iterations = 0;       ///< Lloyd iterations run
  int empty_reassigned = 0; ///< empty clusters re-seeded (see kmeans_ref)
  bool warm_started = false;
  double seconds = 0;
};

/// Result of k-means on n points of dim d.
struct KMeansResult {
  std::vector<float> centroids;  ///< C x d, row-major
  std::vector<uint8_t> ids;      ///< n, assignment of each point
  KMeansStats stats;
};

/// Lloyd's k-means on x (n x d, row-major), C = p.centroids <= min(n, 256).
///
/// Start: `init` (C x d) when given (warm start), else p.init with p.seed.
/// Each iteration: assign every point to the nearest centroid by
/// ||c||^2 - 2 x.c (ties -> lowest index), then move every centroid to the
/// mean of its points (summed exactly in 64-bit fixed point, qvg/fixed_sum.h,
/// so the order of accumulation does not matter). Empty cluster
/// rule: an empty cluster takes the point farthest from its own centroid
/// (largest distance, lowest index on ties) that no other empty cluster took
/// in the same iteration: the centroid is placed on that point. Stops after
/// p.max_iter iterations, or when the relative drop in mean squared
/// distance is at most p.tol. stats.mse[0] is the error of the start,
/// stats.mse[i] that after iteration i. The returned ids are the final assignment to the
/// returned centroids. Deterministic for a seed.
///
/// Centroids are BF16 values throughout: the start, every mean and every
/// re-seeded point are rounded to BF16 (round to nearest even) before the
/// next assignment, so the returned centroids are exactly their BF16 bits
/// (what QVG stores) and the GPU's bf16 tensor-core products see them
/// without a rounding of their own (docs/FORMAT.md, Encode 1).
KMeansResult kmeans_ref(const float* x, int64_t n, int64_t d, const KMeansParams& p,
                        const float* init = nullptr);

/// Assignment step alone (exposed for tests and the GPU reference):
/// ids[i] = argmin_c ||x_i - c||^2 with ties to the lowest index; returns the
/// mean squared distance.
double kmeans_assign_ref(const float* x, int64_t n, int64_t d, const float* centroids, int64_t c,
                         uint8_t* ids, float* dist = nullptr);

/// The exponent of the update's fixed-point sums for points x (n x d):
/// fixed_sum_exponent(max |x|, n) (qvg/fixed_sum.h).
int kmeans_fixed_exponent(const float* x, int64_t n, int64_t d);

/// Update step alone (kmeans_ref's, and code=cq's codebooks'): centroid j
/// becomes the BF16 rounding of the exact fixed-point mean (exponent fx:
/// kmeans_fixed_exponent) of the points with ids[i] == j; an empty cluster
/// takes the point with the largest dist (lowest index on ties) that no other
/// empty cluster took. Returns the number of empty clusters re-seeded.
int kmeans_update_ref(const float* x, int64_t n, int64_t d, const uint8_t* ids, const float* dist, int64_t c, int fx,
                      float* centroids);

/// The rows the `random` start takes: C distinct indices in [0, n), the first
/// C entries of a seeded partial Fisher-Yates shuffle (SplitMix64(seed)).
std::vector<int64_t> kmeans_random_rows(int64_t n, int c, uint64_t seed);

/// Where k-means++ (kmeans_init_ref, `kmeanspp`) starts: the subsample it
/// runs on (rows, ascending: all n rows when n <= 64 * C, else a seeded
/// partial Fisher-Yates of 64 * C rows), the sample index of the first
/// centre, and how many SplitMix64(seed) draws these took (each later centre
/// draws one more, except where every point already coincides with a centre).
/// Shared by the CPU reference and the GPU k-means++.
struct KMeansPPStart {
  std::vector<int64_t> rows;
  int64_t first = 0;
  uint64_t draws = 0;
};
KMeansPPStart kmeanspp_start(int64_t n, int c, uint64_t seed);

/// The `d2_rounds` start (kmeans_init_ref): D^2 sampling in rounds on a
/// subsample of kD2PointsPerCentroid * C rows, about C / kD2Rounds centres a
/// round instead of one a step.
constexpr int kD2PointsPerCentroid = 16;
constexpr int kD2Rounds = 8;

/// Its subsample and first centre: kmeanspp_start's rule on
/// kD2PointsPerCentroid * C rows (all n rows when n is at most that).
KMeansPPStart kmeans_d2_start(int64_t n, int c, uint64_t seed);

/// Initial centroids (C x d) by the seeded rule: `random` takes C distinct
/// points (seeded partial Fisher-Yates); `kmeanspp` runs k-means++ on a seeded
/// subsample of at most 64 * C points (all points when n <= 64 * C).
///
/// `d2_rounds` (the default) on the subsample and first centre of
/// kmeans_d2_start (m rows), with the sample rows rounded to BF16:
///  - best[i] = min over centres of max(0, (|x_i|^2 - 2 x_i.c) + |c|^2), in
///    float, |c|^2 being the centre's |x|^2; a point taken as a centre has
///    best = 0.
///  - Round r = 0, 1, ... while fewer than C centres and r < 2 kD2Rounds:
///    best is brought up to date with the previous round's centres (round 0:
///    the first centre); total = sum of best in sample order (double); if
///    total is 0 the rounds stop. Otherwise want = ceil((C - picked) /
///    max(1, kD2Rounds - r)), one draw u = uniform in [0, 1), and the round
///    takes, for j = 0 .. want - 1, the first point whose running sum of best
///    (double, in sample order) exceeds pos_j = (u + j) * total / want (none
///    where no point does); a point drawn for several j is taken once. The
///    new centres follow in sample order.
///  - Slots left when the rounds stop repeat the first centre (k-means's
///    empty-cluster rule then re-seeds them).
/// Unlike k-means++, a round can put two centres into one far cluster (its
/// share of the distances above total / want) and none into a nearer one:
/// on data of exactly C well-separated clusters it may miss one. On the
/// clip and model K/V its error after the Lloyd iterations is within 1 % of
/// k-means++'s (docs/BENCHMARKS.md) at a fraction of the cost.
/// The GPU (d2_start_kernel) sums in another order: its picks equal these
/// except where a position falls within rounding of a running-sum boundary.
std::vector<float> kmeans_init_ref(const float* x, int64_t n, int64_t d, int c, KMeansInit init,
                                   uint64_t seed);

/// kmeans_init_ref's `kmeanspp` or `d2_rounds` start from its subsample
/// alone: sample holds the rows start.rows of x, in that order (m x d), and
/// start is kmeanspp_start or kmeans_d2_start of (n, c, seed). The same
/// centroids as kmeans_init_ref(x, n, d, c, init, seed). The GPU encode uses
/// it where the device has no thread-block clusters (before sm_90).
std::vector<float> kmeans_start_from_sample(const float* sample, int64_t d, int c, KMeansInit init,
                                            const KMeansPPStart& start, uint64_t seed);

}  // namespace qvg
