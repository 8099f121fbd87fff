// Internal: the GPU decode of the KIVI, QuaRot and BF16 methods (kernels:
// baseline_kernels.cuh), bit-identical to the CPU reference's float decode.
// The Codec front (cuda_codec.cu) calls it; encode is the CPU reference.
// Host-only header (no CUDA types beyond the stream).
#pragma once

#include <cuda_runtime.h>

#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg::cuda {

/// Checks e exactly as the CPU decoder does (the same qvg::Error for the same
/// bad input), then the kernels' limits (dim a multiple of 16; quarot: dim
/// at most 512), uploads the parts and decodes into out ([heads, tokens,
/// dim] of `type` in device memory): the CPU float decode, rounded to
/// nearest even for bf16 / f16. Returns once the decode is done (the
/// uploaded parts are freed).
void baseline_decode(const EncodedTensor& e, void* out, DeviceElement type, cudaStream_t stream);

}  // namespace qvg::cuda
