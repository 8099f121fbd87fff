// RoPE on the device (rope_cuda.h): one thread per (head, token, pair).
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/rope_cuda.h"

namespace qvg::cuda {

namespace {

__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename OutT>
__global__ void rope_rotate_kernel(const float* x, int64_t x_stride, OutT* out, int64_t out_stride, int heads,
                                   int64_t tokens, int dim, RopePlanView p) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * tokens * p.pairs) return;
  const int i = static_cast<int>(g % p.pairs);
  const int64_t hn = g / p.pairs;
  const int64_t n = hn % tokens;
  const int h = static_cast<int>(hn / tokens);
  const int c = p.coord[i];
  const int64_t at = p.base[i] + (p.per_token ? n : static_cast<int64_t>(p.positions[n * p.position_dims + c]) - p.lo[c]);
  const double cs = p.cos[at], sn = p.sin[at];
  const float* row = x + (static_cast<int64_t>(h) * x_stride + n) * dim;
  OutT* orow = out + (static_cast<int64_t>(h) * out_stride + n) * dim;
  const double a = row[p.a[i]], b = row[p.b[i]];
  // apply_rope: float(a cos - b sin), float(a sin + b cos), no fused multiply-add
  store(orow + p.a[i], __double2float_rn(__dsub_rn(__dmul_rn(a, cs), __dmul_rn(b, sn))));
  store(orow + p.b[i], __double2float_rn(__dadd_rn(__dmul_rn(a, sn), __dmul_rn(b, cs))));
}

}  // namespace

void rope_rotate_to(const float* x, int64_t x_stride, void* out, bool out_bf16, int64_t out_stride, int heads,
                    int64_t tokens, int dim, const RopePlanView& plan, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(heads) * tokens * plan.pairs;
  if (threads == 0) return;
  constexpr int kBlock = 256;
  const auto blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  if (out_bf16)
    rope_rotate_kernel<<<blocks, kBlock, 0, stream>>>(x, x_stride, static_cast<__nv_bfloat16*>(out), out_stride, heads,
                                                      tokens, dim, plan);
  else
    rope_rotate_kernel<<<blocks, kBlock, 0, stream>>>(x, x_stride, static_cast<float*>(out), out_stride, heads, tokens,
                                                      dim, plan);
  QVG_CUDA_CHECK(cudaGetLastError());
}

void rope_rotate(float* x, int heads, int64_t tokens, int64_t row_stride, int dim, const RopePlanView& plan,
                 cudaStream_t stream) {
  rope_rotate_to(x, row_stride, x, false, row_stride, heads, tokens, dim, plan, stream);
}

}  // namespace qvg::cuda
