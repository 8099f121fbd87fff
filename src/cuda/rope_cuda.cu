// RoPE on the device (rope_cuda.h): one thread per (head, token, pair).
#include "cuda/check.h"
#include "cuda/rope_cuda.h"

namespace qvg::cuda {

namespace {

__global__ void rope_rotate_kernel(float* __restrict__ x, int heads, int64_t tokens, int64_t row_stride, int dim,
                                   RopePlanView p) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * tokens * p.pairs) return;
  const int i = static_cast<int>(g % p.pairs);
  const int64_t hn = g / p.pairs;
  const int64_t n = hn % tokens;
  const int h = static_cast<int>(hn / tokens);
  const int c = p.coord[i];
  const int64_t at = p.base[i] + (p.per_token ? n : static_cast<int64_t>(p.positions[n * p.position_dims + c]) - p.lo[c]);
  const double cs = p.cos[at], sn = p.sin[at];
  float* row = x + (static_cast<int64_t>(h) * row_stride + n) * dim;
  const double a = row[p.a[i]], b = row[p.b[i]];
  // apply_rope: float(a cos - b sin), float(a sin + b cos), no fused multiply-add
  row[p.a[i]] = __double2float_rn(__dsub_rn(__dmul_rn(a, cs), __dmul_rn(b, sn)));
  row[p.b[i]] = __double2float_rn(__dadd_rn(__dmul_rn(a, sn), __dmul_rn(b, cs)));
}

}  // namespace

void rope_rotate(float* x, int heads, int64_t tokens, int64_t row_stride, int dim, const RopePlanView& plan,
                 cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(heads) * tokens * plan.pairs;
  if (threads == 0) return;
  constexpr int kBlock = 256;
  rope_rotate_kernel<<<static_cast<unsigned>((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      x, heads, tokens, row_stride, dim, plan);
  QVG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qvg::cuda
