// The CUDA backend behind the Codec interface. In builds without CUDA the
// functions exist and report that (cuda_available() == false; the factories
// throw qvg::Error).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qvg/codec.h"

namespace qvg {

/// True when the library was built with CUDA and a device is usable; else
/// false with the reason in *why.
bool cuda_available(std::string* why = nullptr);

/// A codec that runs on the current CUDA device, for every method (host
/// tensors in and out; device buffers inside). Decodes are bit-identical to
/// the CPU reference's float decode.
/// - qvg (code=int and code=cq), rtn: encode and decode on the device.
///   Encodes are byte-identical to the CPU reference given the same k-means
///   ids. Random and warm starts (the CPU's rows / centroids) run on the
///   device; the subsample of a d2-rounds (the default) or k-means++ start
///   is drawn on the host once per shape and stage, and before sm_90 (or
///   where shared memory is too small) the whole start runs on the host
///   (the CPU's rule; its centres equal the CPU's except where a pick is a
///   near-tie of the running distance sums).
/// - kivi, quarot, fp8, bf16: encode runs the CPU reference (the same
///   bytes by definition); decode runs on the device and needs dim a
///   multiple of 16 (quarot: a power of two up to 512), else it throws
///   qvg::Error.
std::unique_ptr<Codec> make_cuda_codec(const CodecConfig& config);

/// qvg_encode_given_centroids_ref on the GPU (same bytes expected).
EncodedTensor cuda_qvg_encode_given_centroids(const HeadTensor& x, const CodecConfig& c,
                                              const std::vector<uint8_t>& centroids, const std::vector<uint8_t>& ids,
                                              TensorRole role = TensorRole::key);

/// Fused GPU decode to BF16 bits ([heads, tokens, dim]): the float decode
/// rounded to nearest even. Every method (kivi, quarot, bf16: see above).
std::vector<uint16_t> cuda_decode_bf16(const EncodedTensor& e);

/// Element types of tensors in device memory.
enum class DeviceElement { f32, bf16, f16 };

/// Bytes an element of type t.
constexpr size_t element_bytes(DeviceElement t) { return t == DeviceElement::f32 ? 4 : 2; }

/// The current CUDA device (cudaGetDevice): the one the functions below use.
int cuda_current_device();

/// cudaMalloc'd memory of the current device, freed when the last copy of
/// the pointer is destroyed (bytes > 0).
std::shared_ptr<void> cuda_allocate(size_t bytes);

/// Memory of the current device from its stream-ordered pool, allocated on
/// `stream` (a cudaStream_t; null: the legacy default stream) and returned
/// there when the last copy of the pointer is destroyed (bytes > 0): no
/// device-wide synchronization either way. The stream must outlive it.
std::shared_ptr<void> cuda_allocate_async(size_t bytes, void* stream);

/// Returns the unused memory of the current device's stream-ordered pool to
/// the driver, so that other allocators (PyTorch's caching allocator) can
/// have it; what the caches and encodings hold stays. qvg keeps freed pool
/// memory for its next allocations (cudaMemPoolAttrReleaseThreshold at its
/// maximum), so after a large cache is destroyed the device's free memory
/// does not grow until this is called; memory whose free is still queued on a
/// running stream is released only once that stream reaches it (synchronize
/// first). Returns the bytes released; 0 without CUDA or a device.
size_t cuda_release_pool_memory();

/// Waits until the work queued on `stream` (a cudaStream_t; null: the legacy
/// default stream) is done.
void cuda_synchronize(void* stream);

/// Copies `bytes` of device memory to the host (synchronous).
void cuda_copy_to_host(void* host, const void* device, size_t bytes);

/// Encode a tensor in the current device's memory: x is [heads, tokens,
/// dim] row-major of `type`. The same bytes as make_cuda_codec(config)'s
/// encode of the same values as a host tensor: qvg and rtn encode on the
/// device; kivi, quarot, fp8 and bf16 copy x to the host and run the CPU
/// reference. A non-finite value is a qvg::Error naming its position, as
/// the host encode's. x needs element alignment only (a view that does not
/// start on 16 bytes is first copied to memory that does). Synchronizes the
/// device's default stream.
EncodedTensor cuda_encode_device(const CodecConfig& config, const void* x, DeviceElement type, int64_t heads,
                                 int64_t tokens, int64_t dim, const EncodeOptions& opt = {});

/// Decode e into out, [heads, tokens, dim] of `type` in the current
/// device's memory: the float decode (bit-identical to the CPU decode's),
/// rounded to nearest even for bf16 and f16. Every method; the limits are
/// make_cuda_codec's. out must be 16-byte aligned (cudaMalloc's memory is).
/// Synchronizes the device's default stream.
void cuda_decode_device(const EncodedTensor& e, void* out, DeviceElement type);

/// Where a codec runs.
enum class Backend { cpu, cuda };

/// make_codec on the chosen backend.
std::unique_ptr<Codec> make_codec(const CodecConfig& config, Backend backend);

}  // namespace qvg
