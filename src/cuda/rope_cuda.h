// RoPE on the device with a plan computed on the host (qvg::rope_plan in
// qvg/rope.h): the same float64 products and sums, explicitly rounded, so
// the rotated keys are bit-identical to apply_rope's. Plain types only (this
// header is included by C++20 host code and C++17 CUDA code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qvg::cuda {

/// The device side of a RopePlan (arrays on the device).
struct RopePlanView {
  const int32_t* a = nullptr;
  const int32_t* b = nullptr;
  const int32_t* coord = nullptr;
  const int64_t* base = nullptr;
  const double* cos = nullptr;
  const double* sin = nullptr;
  const int32_t* positions = nullptr;  ///< tokens * position_dims
  int pairs = 0;
  int position_dims = 0;
  int32_t lo[3] = {0, 0, 0};
  bool per_token = false;
};

/// Rotates rows [0, tokens) of every head of x ([heads][row_stride][dim],
/// float, on the device) by the plan. Stream-ordered.
void rope_rotate(float* x, int heads, int64_t tokens, int64_t row_stride, int dim, const RopePlanView& plan,
                 cudaStream_t stream);

/// Rows [0, tokens) of every head of x ([heads][x_stride][dim], float)
/// rotated into out ([heads][out_stride][dim]: float, or BF16 rounded to
/// nearest even when out_bf16); x is not changed (out may be x for float).
/// Every channel belongs to one pair for the 1-D and Wan 3-D modes of an even
/// dim, so out's rows are written in full. Stream-ordered.
void rope_rotate_to(const float* x, int64_t x_stride, void* out, bool out_bf16, int64_t out_stride, int heads,
                    int64_t tokens, int dim, const RopePlanView& plan, cudaStream_t stream);

}  // namespace qvg::cuda
