// Internal: the CUDA backend of the KIVI, QuaRot and BF16 codecs. Decode runs
// on the GPU (src/cuda/baseline_kernels.cuh), bit-identical to the CPU
// reference; encode runs the CPU reference. make_cuda_codec and
// cuda_decode_bf16 (cuda_codec.cu) dispatch here for these methods.
// Host-only header (no CUDA types), so tests can include it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg {

/// True for the methods served here: kivi, quarot, bf16.
bool is_cuda_baseline_method(Method m);

/// The CUDA codec of a kivi, quarot or bf16 config: encode = the CPU
/// reference (same bytes), decode = GPU kernels (same float bits as the CPU
/// decode). Throws qvg::Error for other methods or when no device is usable.
/// Decode needs D a multiple of 16 (quarot: a power of two, 16..512) and
/// throws qvg::Error otherwise, and for every input the CPU decoder refuses.
std::unique_ptr<Codec> make_cuda_baseline_codec(const CodecConfig& config);

/// GPU decode of a kivi / quarot / bf16 tensor into out ([heads, tokens,
/// dim] of `type` in device memory): the CPU float decode, rounded to
/// nearest even for bf16 / f16. Synchronizes the default stream.
void cuda_baseline_decode_device(const EncodedTensor& e, void* out, DeviceElement type);

/// 16-bit output types of cuda_baseline_decode_16.
enum class Half16 { bf16, fp16 };

/// GPU decode of a kivi / quarot / bf16 tensor to BF16 or FP16 bits,
/// [heads, tokens, dim]: the CPU float decode rounded to nearest even.
std::vector<uint16_t> cuda_baseline_decode_16(const EncodedTensor& e, Half16 type);

}  // namespace qvg
