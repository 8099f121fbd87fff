// Internal: the GPU decode of the KIVI, QuaRot and BF16 methods (kernels:
// baseline_kernels.cuh), bit-identical to the CPU reference's float decode.
// The Codec front (cuda_codec.cu) and the device-resident tensors
// (device_codec.cu) call it; encode is the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include "cuda/baseline_kernels.cuh"
#include "cuda/check.h"
#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg::cuda {

/// A kivi / quarot / bf16 tensor's parts in device memory and its kernels'
/// shape.
struct BaselineDeviceParts {
  BaselineShape shape;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint16_t> scales, zero_points, full_precision;
  /// Allocations from the stream-ordered pool on s (DeviceBuffer::use_pool).
  void use_pool(cudaStream_t s);
  /// Checks e exactly as the CPU decoder does (the same qvg::Error for the
  /// same bad input), then the kernels' limits (dim a multiple of 16;
  /// quarot: dim at most 512), then copies its parts. Stream-ordered.
  void upload(const EncodedTensor& e, cudaStream_t s);
  /// Decode into out ([heads, tokens, dim] of `type` in device memory): the
  /// CPU float decode, rounded to nearest even for bf16 / f16. Queued on s.
  void decode(void* out, DeviceElement type, cudaStream_t s) const;
  /// Bytes of every part.
  size_t bytes() const { return codes.bytes() + scales.bytes() + zero_points.bytes() + full_precision.bytes(); }
};

/// upload + decode on `stream`, then waits for it (the parts are freed on
/// return).
void baseline_decode(const EncodedTensor& e, void* out, DeviceElement type, cudaStream_t stream);

}  // namespace qvg::cuda
