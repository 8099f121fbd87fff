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
/// - qvg, rtn: encode and decode on the device. Encodes are byte-identical
///   to the CPU reference given the same k-means ids. Every start runs on
///   the device: random and warm starts (the CPU's rows / centroids) and
///   k-means++ (the CPU's rule; its centres equal the CPU's except where a
///   pick is a near-tie of the running distance sums).
/// - kivi, quarot, bf16: encode runs the CPU reference (the same bytes by
///   definition); decode runs on the device and needs dim a multiple of 16
///   (quarot: a power of two up to 512), else it throws qvg::Error.
std::unique_ptr<Codec> make_cuda_codec(const CodecConfig& config);

/// qvg_encode_given_centroids_ref on the GPU (same bytes expected).
EncodedTensor cuda_qvg_encode_given_centroids(const HeadTensor& x, const CodecConfig& c,
                                              const std::vector<uint8_t>& centroids, const std::vector<uint8_t>& ids,
                                              TensorRole role = TensorRole::key);

/// The fused decode kernels of qvg / rtn (all give the same bits). The
/// default (`automatic`) is `lines` where it applies (dim 64 or 128, at most
/// 4 stages, under 2^30 values per head and 2^31 ids; else `vals16`): one
/// block per head and run of rows, D/16 lanes a row reading and writing
/// whole 128-byte lines, 2-4 consecutive rows per lane with every load
/// issued first and immediate offsets, hardware scale conversions
/// (docs/BENCHMARKS.md). `tile` = the same lines in units of 16 values, 256
/// units apart (its predecessor). `vals16` / `vals8` = one thread per 16 / 8
/// consecutive values, any shape; `rows` = D/8 lanes per row, 8 values each,
/// whole rows per warp store, 4 rows per thread (dim 64 and 128, whole
/// tensors only). Other methods ignore the choice.
enum class DecodeKernel { automatic, tile, rows, vals16, vals8, lines };

/// Fused GPU decode to BF16 bits ([heads, tokens, dim]): the float decode
/// rounded to nearest even. Every method (kivi, quarot, bf16: see above).
std::vector<uint16_t> cuda_decode_bf16(const EncodedTensor& e, DecodeKernel kernel = DecodeKernel::automatic);

/// Where a codec runs.
enum class Backend { cpu, cuda };

/// make_codec on the chosen backend.
std::unique_ptr<Codec> make_codec(const CodecConfig& config, Backend backend);

}  // namespace qvg
