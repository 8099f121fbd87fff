// Test data for the GPU codec and cache tests: K/V-like tensors whose
// k-means assignments have no near-ties, so a device encode with a fixed
// iteration count gives the CPU reference's bytes.
#pragma once

#include <random>
#include <vector>

#include "qvg/tensor.h"

namespace qvg {

// Nested blobs: each token the sum of `levels` directions, one of k per
// level, each level 6x smaller than the last, plus small noise: every
// smoothing stage has well separated clusters (no near-ties in any stage's
// assignment). The directions come from dir_seed, the draws from seed (spans
// of one video: the same directions, other tokens).
inline HeadTensor blobs(int64_t h, int64_t n, int64_t d, int levels, int k, unsigned seed, unsigned dir_seed = 0) {
  std::mt19937 dgen(dir_seed ? dir_seed : seed), gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HeadTensor x(h, n, d);
  for (int64_t hh = 0; hh < h; ++hh) {
    std::vector<float> dirs(static_cast<size_t>(levels * k * d));
    for (auto& v : dirs) v = nd(dgen);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) = 0.002f * nd(gen);
      float scale = 8.0f;
      for (int l = 0; l < levels; ++l, scale /= 6.0f) {
        const int64_t j = static_cast<int64_t>(gen() % static_cast<unsigned>(k));
        for (int64_t q = 0; q < d; ++q) x.at(hh, i, q) += scale * dirs[static_cast<size_t>((l * k + j) * d + q)];
      }
    }
  }
  return x;
}

}  // namespace qvg
