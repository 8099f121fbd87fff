// Internal: the GPU decode of the methods outside the group-quantized format:
// KIVI, QuaRot and BF16 (kernels: baseline_kernels.cuh) and those with their
// own hook (MethodTraits::decode_on_device), bit-identical to the CPU
// reference's float decode.
// The Codec front (cuda_codec.cu) and the device-resident tensors
// (device_codec.cu) call it; encode is the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <iterator>

#include "cuda/baseline_kernels.cuh"
#include "cuda/check.h"
#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg::cuda {

/// The parts in device memory of a tensor decoded on the GPU outside the
/// group-quantized format (kivi, quarot, bf16, and the methods with their
/// own MethodTraits::decode_on_device), and its kernels' shape.
struct BaselineDeviceParts {
  BaselineShape shape;
  CodecConfig config;
  TensorRole role = TensorRole::key;
  /// Every part's bytes, in kPartFields' order (empty where the method
  /// stores none).
  std::array<DeviceBuffer<uint8_t>, std::size(kPartFields)> parts;
  /// Allocations from the stream-ordered pool on s (DeviceBuffer::use_pool).
  void use_pool(cudaStream_t s);
  /// Checks e exactly as the CPU decoder does (the same qvg::Error for the
  /// same bad input), then the kernels' limits (dim a multiple of 16;
  /// quarot: dim at most 512), then copies its parts. Stream-ordered.
  void upload(const EncodedTensor& e, cudaStream_t s);
  /// Every part into e's byte vectors; returns once they are on the host
  /// (synchronises s).
  void download(EncodedTensor& e, cudaStream_t s) const;
  /// Decode into out ([heads, tokens, dim] of `type` in device memory): the
  /// CPU float decode, rounded to nearest even for bf16 / f16. Queued on s.
  void decode(void* out, DeviceElement type, cudaStream_t s) const;
  /// Bytes of every part.
  size_t bytes() const {
    size_t n = 0;
    for (const auto& p : parts) n += p.bytes();
    return n;
  }
};

/// upload + decode on `stream`, then waits for it (the parts are freed on
/// return).
void baseline_decode(const EncodedTensor& e, void* out, DeviceElement type, cudaStream_t stream);

}  // namespace qvg::cuda
