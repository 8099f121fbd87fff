// cache_kernels.h: one thread per element (gather) or per token (positions).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/cache_kernels.h"
#include "cuda/check.h"

namespace qvg::cuda {

namespace {

__device__ inline float widen(float x) { return x; }
__device__ inline float widen(__half x) { return __half2float(x); }

template <typename T>
__global__ void gather_kernel(const T* __restrict__ src, int64_t heads, int64_t tokens, int64_t dim,
                              int64_t head_stride, int64_t token_stride, __nv_bfloat16* __restrict__ dst,
                              int64_t dst_head_stride, int64_t dst_token_stride) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= heads * tokens * dim) return;
  const int64_t c = g % dim, ht = g / dim, t = ht % tokens, h = ht / tokens;
  const T x = src[h * head_stride + t * token_stride + c];
  const int64_t o = h * dst_head_stride + t * dst_token_stride + c;
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    dst[o] = x;  // bf16 to bf16: the bits as they are
  else
    dst[o] = __float2bfloat16_rn(widen(x));
}

__global__ void positions_kernel(int32_t* __restrict__ dst, int64_t tokens, int dims, int64_t first, int64_t height,
                                 int64_t width) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= tokens) return;
  if (dims == 1) {
    dst[n] = static_cast<int32_t>(first + n);
    return;
  }
  dst[3 * n] = static_cast<int32_t>(first + n / (height * width));
  dst[3 * n + 1] = static_cast<int32_t>((n / width) % height);
  dst[3 * n + 2] = static_cast<int32_t>(n % width);
}

constexpr int kBlock = 256;
unsigned blocks(int64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

}  // namespace

void gather_bf16(const void* src, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim, int64_t head_stride,
                 int64_t token_stride, uint16_t* dst, cudaStream_t stream) {
  gather_bf16_to(src, type, heads, tokens, dim, head_stride, token_stride, dst, tokens * dim, dim, stream);
}

void gather_bf16_to(const void* src, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                    int64_t head_stride, int64_t token_stride, uint16_t* dst, int64_t dst_head_stride,
                    int64_t dst_token_stride, cudaStream_t stream) {
  const int64_t n = heads * tokens * dim;
  if (n == 0) return;
  auto* out = reinterpret_cast<__nv_bfloat16*>(dst);
  switch (type) {
    case DeviceElement::f32:
      gather_kernel<<<blocks(n), kBlock, 0, stream>>>(static_cast<const float*>(src), heads, tokens, dim, head_stride,
                                                      token_stride, out, dst_head_stride, dst_token_stride);
      break;
    case DeviceElement::bf16:
      gather_kernel<<<blocks(n), kBlock, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), heads, tokens, dim,
                                                      head_stride, token_stride, out, dst_head_stride,
                                                      dst_token_stride);
      break;
    case DeviceElement::f16:
      gather_kernel<<<blocks(n), kBlock, 0, stream>>>(static_cast<const __half*>(src), heads, tokens, dim, head_stride,
                                                      token_stride, out, dst_head_stride, dst_token_stride);
      break;
  }
  QVG_CUDA_CHECK(cudaGetLastError());
}

void grid_positions(int32_t* dst, int64_t tokens, int dims, int64_t first, int64_t height, int64_t width,
                    cudaStream_t stream) {
  if (tokens == 0) return;
  positions_kernel<<<blocks(tokens), kBlock, 0, stream>>>(dst, tokens, dims, first, height, width);
  QVG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qvg::cuda
