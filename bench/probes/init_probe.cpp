// Probe (CPU): which k-means start gives k-means++ quality at a fraction of
// its cost? Every candidate produces starting centroids for one head; the
// reference's Lloyd iterations (kmeans_ref with them as a warm start) then
// run with each iteration setting, and the probe prints the mean squared
// error of the start and after the iterations, relative to today's
// k-means++ (a seeded subsample of 64 * C rows, C - 1 sequential D^2 draws).
//
// Candidates (m = sample rows, drawn by kmeans_random_rows):
//   pp64        kmeans_init_ref(kmeanspp): today's start
//   ppK         k-means++ on a sample of K * C rows (C - 1 sequential draws)
//   rand        kmeans_init_ref(random)
//   d2          kmeans_init_ref(d2_rounds): the start this probe chose
//   parK.R      D^2 sampling in R rounds on K * C rows: the first centre
//               uniform, then each round takes the next centres at once by
//               systematic sampling of the running sum of the squared
//               distances to the centres so far (points drawn twice: the next
//               point with a positive distance), distances updated per round
//   mbK.I       random start on K * C rows, I Lloyd iterations on the sample
//
//   bench_init_probe [--data clip|video|FILE.safetensors] [--tensor NAME] [--heads H] [--centroids C]
//                    [--tokens N] [--candidates a,b,...]
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "probe_kv.h"
#include "qvg/kmeans.h"
#include "util/rng.h"

using namespace qvg;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

RowMat sample_rows(const float* x, int64_t n, int64_t d, int64_t m, uint64_t seed) {
  m = std::min(m, n);
  // A seeded partial Fisher-Yates (all rows when m = n).
  SplitMix64 rng(seed);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  if (m < n)
    for (int64_t i = 0; i < m; ++i) std::swap(idx[i], idx[i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)))]);
  RowMat s(m, d);
  for (int64_t i = 0; i < m; ++i) std::copy_n(x + idx[i] * d, d, s.row(i).data());
  return s;
}

/// Squared distances of the sample's rows to centre c (clamped at 0), min'ed into best.
void update_best(const RowMat& s, const Eigen::VectorXf& snorm, const float* c, std::vector<float>& best) {
  const Eigen::Map<const Eigen::VectorXf> cv(c, s.cols());
  const Eigen::VectorXf dots = s * cv;
  const float cn = cv.squaredNorm();
  for (int64_t i = 0; i < s.rows(); ++i) best[i] = std::min(best[i], std::max(0.0f, snorm[i] - 2.0f * dots[i] + cn));
}

std::vector<float> kmeanspp_on(const RowMat& s, int c, uint64_t seed) {
  const int64_t m = s.rows(), d = s.cols();
  SplitMix64 rng(seed ^ 0x5bd1e995u);
  const Eigen::VectorXf snorm = s.rowwise().squaredNorm();
  std::vector<float> best(static_cast<size_t>(m), std::numeric_limits<float>::infinity());
  std::vector<float> cent(static_cast<size_t>(c * d));
  int64_t pick = static_cast<int64_t>(rng.below(static_cast<uint64_t>(m)));
  for (int k = 0; k < c; ++k) {
    std::copy_n(s.row(pick).data(), d, cent.data() + k * d);
    if (k + 1 == c) break;
    update_best(s, snorm, cent.data() + k * d, best);
    double total = 0;
    for (float b : best) total += b;
    if (!(total > 0)) {
      pick = (pick + 1) % m;
      continue;
    }
    const double u = rng.uniform() * total;
    double acc = 0;
    pick = m - 1;
    for (int64_t i = 0; i < m; ++i) {
      acc += best[i];
      if (acc > u && best[i] > 0) {
        pick = i;
        break;
      }
    }
  }
  return cent;
}

std::vector<float> parallel_rounds(const RowMat& s, int c, int rounds, uint64_t seed) {
  const int64_t m = s.rows(), d = s.cols();
  SplitMix64 rng(seed ^ 0x27d4eb2fu);
  const Eigen::VectorXf snorm = s.rowwise().squaredNorm();
  std::vector<float> best(static_cast<size_t>(m), std::numeric_limits<float>::infinity());
  std::vector<float> cent;
  std::vector<int64_t> fresh{static_cast<int64_t>(rng.below(static_cast<uint64_t>(m)))};
  int picked = 0;
  for (int r = 0; r <= rounds && picked < c; ++r) {
    for (int64_t p : fresh) {
      cent.insert(cent.end(), s.row(p).data(), s.row(p).data() + d);
      ++picked;
    }
    for (size_t j = 0; j < fresh.size(); ++j)
      update_best(s, snorm, cent.data() + (picked - static_cast<int>(fresh.size()) + static_cast<int>(j)) * d, best);
    fresh.clear();
    if (picked == c) break;
    const int left = rounds - r;
    const int want = left <= 1 ? c - picked : (c - picked + left - 1) / left;
    // Systematic sampling of the running sum of best: positions (u + j) * total / want.
    std::vector<double> run(static_cast<size_t>(m));
    double total = 0;
    for (int64_t i = 0; i < m; ++i) run[i] = (total += best[i]);
    if (!(total > 0)) break;
    const double u = rng.uniform();
    std::vector<char> taken(static_cast<size_t>(m), 0);
    for (int j = 0; j < want; ++j) {
      const double pos = (u + j) * total / want;
      int64_t i = std::upper_bound(run.begin(), run.end(), pos) - run.begin();
      i = std::min(i, m - 1);
      while (i < m && (taken[i] || best[i] <= 0)) ++i;  // drawn twice: the next point with a distance
      if (i >= m) continue;
      taken[i] = 1;
      fresh.push_back(i);
    }
  }
  // Fewer than c (every point a centre): repeat the last.
  while (static_cast<int>(cent.size() / d) < c) cent.insert(cent.end(), cent.end() - d, cent.end());
  return cent;
}

std::vector<float> minibatch(const RowMat& s, int c, int iters, uint64_t seed) {
  const int64_t m = s.rows(), d = s.cols();
  std::vector<float> init(static_cast<size_t>(c * d));
  const std::vector<int64_t> rows = kmeans_random_rows(m, c, seed);
  for (int k = 0; k < c; ++k) std::copy_n(s.row(rows[k]).data(), d, init.data() + k * d);
  KMeansParams p;
  p.centroids = c;
  p.max_iter = iters;
  p.tol = 0;
  return kmeans_ref(s.data(), m, d, p, init.data()).centroids;
}

struct Setting {
  const char* name;
  int max_iter;
  double tol;
};

}  // namespace

int main(int argc, char** argv) {
  probe::Args args;
  args.candidates = "pp64,pp16,pp8,pp4,pp3,pp2,rand,par8.8,par8.16,par4.8,par4.16,mb4.3,mb8.3";
  if (!probe::parse(argc, argv, args, true)) return 2;
  const std::string& data = args.data;
  const std::string& tensor = args.tensor;
  const std::string& cands = args.candidates;
  const int heads = args.heads, c = args.centroids;
  const int64_t tokens = args.tokens;
  auto xs = probe::load(data, tensor);
  const std::vector<std::string> names = probe::split(cands, ',');
  const Setting settings[] = {{"start", 0, 0}, {"it2", 2, 0}, {"it3", 3, 0}, {"it10", 10, 1e-4}};
  for (auto& [label, x] : xs) {
    const int64_t n = tokens > 0 ? std::min(tokens, x.tokens) : x.tokens, d = x.dim;
    const int H = static_cast<int>(std::min<int64_t>(heads, x.heads));
    std::printf("== %s: %d heads x %lld tokens x %lld, C = %d\n", label.c_str(), H, static_cast<long long>(n),
                static_cast<long long>(d), c);
    std::printf("%-10s %10s %10s %10s %10s   (mean over heads of MSE / pp64's; ms a head for the start)\n", "start",
                "start", "it2", "it3", "it10");
    std::map<std::string, std::vector<double>> mse;  // name -> per setting, summed ratio
    std::vector<std::vector<double>> ref(static_cast<size_t>(H));
    for (const std::string& nm : names) {
      std::vector<double> ratio(4, 0.0);
      double ms = 0;
      for (int h = 0; h < H; ++h) {
        // Rows [0, n) of head h, contiguous.
        std::vector<float> xh(x.head(h), x.head(h) + n * d);
        const uint64_t seed = 1234 + static_cast<uint64_t>(h);
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<float> init;
        int K = 0, R = 0;
        if (nm == "pp64") init = kmeans_init_ref(xh.data(), n, d, c, KMeansInit::kmeanspp, seed);
        else if (nm == "d2") init = kmeans_init_ref(xh.data(), n, d, c, KMeansInit::d2_rounds, seed);
        else if (nm == "rand") init = kmeans_init_ref(xh.data(), n, d, c, KMeansInit::random, seed);
        else if (std::sscanf(nm.c_str(), "pp%d", &K) == 1) init = kmeanspp_on(sample_rows(xh.data(), n, d, int64_t{K} * c, seed), c, seed);
        else if (std::sscanf(nm.c_str(), "par%d.%d", &K, &R) == 2) init = parallel_rounds(sample_rows(xh.data(), n, d, int64_t{K} * c, seed), c, R, seed);
        else if (std::sscanf(nm.c_str(), "mb%d.%d", &K, &R) == 2) init = minibatch(sample_rows(xh.data(), n, d, int64_t{K} * c, seed), c, R, seed);
        else { std::fprintf(stderr, "unknown candidate %s\n", nm.c_str()); return 2; }
        ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        for (int si = 0; si < 4; ++si) {
          KMeansParams p;
          p.centroids = c;
          p.max_iter = settings[si].max_iter;
          p.tol = settings[si].tol;
          const KMeansResult r = kmeans_ref(xh.data(), n, d, p, init.data());
          const double e = r.stats.mse.back();
          if (nm == "pp64") ref[h].push_back(e);
          ratio[si] += e / ref[h][si];
        }
      }
      std::printf("%-10s %10.4f %10.4f %10.4f %10.4f   %.1f ms\n", nm.c_str(), ratio[0] / H, ratio[1] / H, ratio[2] / H,
                  ratio[3] / H, ms / H);
      std::fflush(stdout);
    }
  }
  return 0;
}
