// The rows of the `random` k-means start on the device: kmeans_random_rows
// (qvg/kmeans.h), one block's threads drawing them in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "util/rng.h"

namespace qvg::cuda {

/// Row i (thread i < c) of kmeans_random_rows(n, c, seed): the partial
/// Fisher-Yates shuffle of 0..n-1 (SplitMix64), its c steps at once; -1 for
/// i >= c. Every thread of the block calls it (two __syncthreads); js and
/// prev: shared arrays of at least c entries, c <= the block's threads.
///
/// The loop it replaces (idx = 0..n-1):
///   for i < C: j[i] = i + rng.below(n - i); swap(idx[i], idx[j[i]]); rows[i] = idx[i]
/// Draw i is SplitMix64(seed).discard(i).below(...) (one draw a step), so
/// the j[i] are drawn at once. The swaps then follow from the j alone: step
/// i reads positions i and j[i] >= i, so positions below i are never read
/// again, and a position p >= i holds, before step i, p itself unless an
/// earlier step k wrote it (j[k] == p), and then what position k held before
/// step k. So rows[i] = j[i] if no k < i has j[k] == j[i]; else, with k the
/// last such step, what position k held before step k: k, unless a step k'
/// < k had j[k'] == k (the last one: prev[k]), and then what position k'
/// held before step k', and so on down the chain k, prev[k], ... to its
/// end (prev[k] < k, so the chain ends).
__device__ __forceinline__ int64_t block_random_row(int i, int64_t n, int c, uint64_t seed, int64_t* js, int* prev) {
  if (i < c) {
    SplitMix64 rng(seed);
    rng.discard(static_cast<uint64_t>(i));
    js[i] = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
  }
  __syncthreads();
  int last = -1;  // last step k < i with j[k] == j[i], or -1
  if (i < c) {
    const int64_t ji = js[i];
    int pv = -1;  // last step k < i with j[k] == i, or -1
    for (int k = 0; k < i; ++k) {
      const int64_t jk = js[k];
      if (jk == ji) last = k;
      if (jk == i) pv = k;
    }
    prev[i] = pv;
  }
  __syncthreads();
  if (i >= c) return -1;
  int64_t v = js[i];
  if (last >= 0) {
    int k = last;
    while (prev[k] >= 0) k = prev[k];
    v = k;
  }
  return v;
}

}  // namespace qvg::cuda
