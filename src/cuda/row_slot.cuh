// Where one thread of an elementwise grid works: kernels that give each thread
// `vals` consecutive values of one row of a [heads][tokens][dim] tensor number
// their threads g = (h * tokens + n) * (dim / vals) + col / vals.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qvg::cuda {

/// Head, token (0 .. tokens-1) and first column of thread g.
struct RowSlot {
  int h;
  int64_t n;
  int col;
};

/// Thread g's slot; g < heads * tokens * (dim / vals), dim % vals == 0.
__device__ __forceinline__ RowSlot row_slot(int64_t g, int64_t tokens, int dim, int vals) {
  const int tpr = dim / vals;
  const int64_t per_head = tokens * tpr;
  const int h = static_cast<int>(g / per_head);
  const int64_t rem = g - static_cast<int64_t>(h) * per_head;
  return {h, rem / tpr, static_cast<int>(rem % tpr) * vals};
}

/// Threads in a grid with one per `vals` values of [heads][tokens][dim].
__host__ __device__ __forceinline__ int64_t row_slot_count(int heads, int64_t tokens, int dim, int vals) {
  return static_cast<int64_t>(heads) * tokens * (dim / vals);
}

}  // namespace qvg::cuda
