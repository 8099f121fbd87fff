// The empty-cluster reseed kernel called directly (label gpu), against the
// CPU reference's rule written out here as kmeans.cpp runs it: each empty
// cluster, in index order, takes the row farthest from its centroid (lowest
// index on ties) that no earlier empty cluster took. Through the codecs the
// rule only runs where the data leave clusters empty, and ties of distances
// are rare there; here distances with many ties, heads with no, one, some
// and all clusters empty, more empty clusters than rows, and inactive heads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/kmeans_reseed.cuh"
#include "gpu_util.h"
#include "qvg/half.h"

namespace {

using namespace qvg;
using namespace qvg::cuda;

struct Case {
  int64_t n;                  // rows a head
  std::vector<int> empties;   // empty clusters a head (-1: inactive head)
  std::string dist_kind;      // "ties" (16 values), "distinct", "equal", "zeros"
};

void run_case(const Case& cs, unsigned seed) {
  constexpr int kC = 256, kD = 128;
  const int H = static_cast<int>(cs.empties.size());
  const int64_t N = cs.n;
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(H * N * kD));
  for (float& v : x) v = nd(gen);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_from_float(x[i]);
  std::vector<float> dist(static_cast<size_t>(H * N));
  for (float& v : dist) {
    if (cs.dist_kind == "ties") v = static_cast<float>(gen() % 16) * 0.25f;
    else if (cs.dist_kind == "distinct") v = std::fabs(nd(gen)) * 100.0f;
    else if (cs.dist_kind == "equal") v = 3.5f;
    else v = 0.0f;
  }
  std::vector<int> counts(static_cast<size_t>(H) * kC), active(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) {
    active[h] = cs.empties[h] >= 0;
    std::vector<int> order(kC);
    for (int c = 0; c < kC; ++c) order[c] = c;
    std::shuffle(order.begin(), order.end(), gen);
    for (int c = 0; c < kC; ++c) counts[h * kC + c] = 1 + static_cast<int>(gen() % 50);
    for (int j = 0; j < cs.empties[h]; ++j) counts[h * kC + order[j]] = 0;
  }
  std::vector<float> cent(static_cast<size_t>(H) * kC * kD);
  for (float& v : cent) v = round_bf16(nd(gen));

  // The reference: kmeans.cpp's loop over the clusters.
  std::vector<float> want = cent;
  std::vector<int> want_counts = counts, want_reseeded(static_cast<size_t>(H), 7);
  for (int h = 0; h < H; ++h) {
    if (!active[h]) continue;
    std::vector<char> taken(static_cast<size_t>(N));
    const float* dh = &dist[static_cast<size_t>(h * N)];
    for (int c = 0; c < kC; ++c) {
      if (want_counts[h * kC + c] != 0) continue;
      int64_t far = -1;
      for (int64_t i = 0; i < N; ++i)
        if (!taken[i] && (far < 0 || dh[i] > dh[far])) far = i;
      if (far < 0) continue;  // every row taken: the cluster keeps its centroid
      taken[far] = 1;
      for (int k = 0; k < kD; ++k)
        want[(static_cast<size_t>(h) * kC + c) * kD + k] = round_bf16(x[static_cast<size_t>((h * N + far) * kD + k)]);
      ++want_reseeded[h];
    }
    for (int c = 0; c < kC; ++c) want_counts[h * kC + c] = 0;
  }

  DeviceBuffer<uint16_t> xd;
  DeviceBuffer<float> dd, cd;
  DeviceBuffer<int> countd, actd, red;
  xd.upload(xb.data(), xb.size());
  dd.upload(dist.data(), dist.size());
  cd.upload(cent.data(), cent.size());
  countd.upload(counts.data(), counts.size());
  actd.upload(active.data(), active.size());
  std::vector<int> seven(static_cast<size_t>(H), 7);
  red.upload(seven.data(), seven.size());
  reseed_empty_kernel<__nv_bfloat16><<<H, kReseedThreads>>>(reinterpret_cast<const __nv_bfloat16*>(xd.get()), N, kD,
                                                            kC, countd.get(), dd.get(), actd.get(), cd.get(), red.get());
  QVG_CUDA_CHECK(cudaGetLastError());
  std::vector<float> got(cent.size());
  std::vector<int> got_counts(counts.size()), got_reseeded(static_cast<size_t>(H));
  cd.download(got.data(), got.size());
  countd.download(got_counts.data(), got_counts.size());
  red.download(got_reseeded.data(), got_reseeded.size());
  QVG_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string what = cs.dist_kind + " distances, " + std::to_string(N) + " rows";
  for (int h = 0; h < H; ++h) {
    size_t differ = 0;
    for (size_t i = 0; i < static_cast<size_t>(kC) * kD; ++i)
      differ += std::memcmp(&got[h * kC * kD + i], &want[h * kC * kD + i], 4) != 0;
    EXPECT_EQ(differ, 0u) << what << ", head " << h << " (" << cs.empties[h] << " empty): centroid values";
    EXPECT_EQ(got_reseeded[h], want_reseeded[h]) << what << ", head " << h;
    for (int c = 0; c < kC; ++c)
      ASSERT_EQ(got_counts[h * kC + c], want_counts[h * kC + c]) << what << ", head " << h << ", cluster " << c;
  }
}

TEST(ReseedKernel, EmptyClustersTakeTheFarthestRowsInTheCpuOrder) {
  REQUIRE_GPU();
  unsigned seed = 1;
  for (const std::string kind : {"ties", "distinct", "equal", "zeros"})
    for (int64_t n : {int64_t{300}, int64_t{9360}, int64_t{37440}})
      run_case({n, {0, 1, 17, 256, -1, 200}, kind}, seed++);
}

TEST(ReseedKernel, MoreEmptyClustersThanRows) {
  REQUIRE_GPU();
  // 100 rows, up to 256 empty clusters: the first 100 take a row each, the
  // rest keep their centroids.
  run_case({100, {256, 150, 100, 99, 3}, "ties"}, 77);
  run_case({1, {256, 1, 0}, "distinct"}, 78);
}

}  // namespace
