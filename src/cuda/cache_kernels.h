// Element-wise kernels of DeviceKVCache (include/qvg/device_cache.h): a
// strided chunk into BF16 rows, and RoPE positions of a grid.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "qvg/cuda.h"

namespace qvg::cuda {

/// dst[h][t][c] (BF16, [heads][tokens][dim]) = src[h * head_stride + t *
/// token_stride + c] (f32, bf16 or f16), rounded to nearest even.
void gather_bf16(const void* src, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim, int64_t head_stride,
                 int64_t token_stride, uint16_t* dst, cudaStream_t stream);

/// gather_bf16 into strided rows: dst[h * dst_head_stride + t *
/// dst_token_stride + c] (elements; token-major [tokens][heads][dim]:
/// dst_head_stride dim, dst_token_stride heads * dim). BF16 input is copied
/// bit for bit.
void gather_bf16_to(const void* src, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                    int64_t head_stride, int64_t token_stride, uint16_t* dst, int64_t dst_head_stride,
                    int64_t dst_token_stride, cudaStream_t stream);

/// Positions of `tokens` tokens: dims 3 -> (first + n / (height * width),
/// (n / width) % height, n % width); dims 1 -> first + n. int32, token-major.
void grid_positions(int32_t* dst, int64_t tokens, int dims, int64_t first, int64_t height, int64_t width,
                    cudaStream_t stream);

}  // namespace qvg::cuda
