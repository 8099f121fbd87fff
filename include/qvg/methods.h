// The method table: one row per compression method, the one place that says
// what a method reads, checks, stores and which backends run it. Parsing, the
// spec string, the cache file, reports, the Python module and the help text
// all go through it (config.h's field table and these rows).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "qvg/config.h"
#include "qvg/cuda.h"

namespace qvg {

/// An encoded tensor's parts in device memory (docs/FORMAT.md; a part the
/// method does not store: null) and where its decode goes: what a method's
/// own GPU decode (MethodTraits::decode_on_device) reads.
struct DeviceDecodeArgs {
  const CodecConfig* config = nullptr;
  TensorRole role = TensorRole::key;
  int64_t heads = 0, tokens = 0, dim = 0;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const uint8_t* zero_points = nullptr;
  const uint8_t* span_scales = nullptr;
  const uint8_t* centroids = nullptr;
  const uint8_t* ids = nullptr;
  const uint8_t* full_precision = nullptr;
  void* out = nullptr;                     ///< [heads, tokens, dim] of `type`, 16-byte aligned
  DeviceElement type = DeviceElement::f32;
  void* stream = nullptr;                  ///< a cudaStream_t
};

/// One row of the method table.
struct MethodTraits {
  Method method;
  const char* name;     ///< spec / file name: "qvg"
  const char* summary;  ///< one line for `qvg methods`
  /// The configuration fields it reads (codec_fields keys, in spec order).
  std::vector<std::string> fields;
  /// The fields a bit budget may change (qvg/budget.h); empty: none (the
  /// method has one size).
  std::vector<std::string> budget_fields;
  /// Runs k-means stages: in a span of N tokens C is clamped to N
  /// (span_config), and a streaming cache warm-starts the next span from the
  /// last span's centroids.
  bool clustered = false;
  /// Stores every value as BF16, uncompressed: the reference the others are
  /// measured against (16 code bits, no error, no size warning).
  bool uncompressed = false;
  /// Stores the group-quantized format (codes, block scales, span scales,
  /// centroids, ids: docs/FORMAT.md) that the QVG reference codec writes;
  /// the CUDA backend's fused decode, range decode and pack/unpack read it.
  bool group_quantized = false;
  /// Quantizes asymmetrically (min/max) with an FP16 scale and zero point per
  /// group and no span scale above them (reference/baselines.h): an input whose
  /// largest magnitude is below 2^-20 would make the scales subnormal.
  bool asymmetric_fp16 = false;
  /// Lays keys and values out differently (KIVI: keys per channel, values per
  /// token): the part sizes and the decode depend on the tensor's role.
  bool role_layout = false;
  /// Quantizes token rows rotated by the normalized Walsh-Hadamard transform
  /// (one scale per token); the decode rotates them back.
  bool rotated = false;
  /// The CUDA backend encodes it on the GPU (cuda::Encoder); else the CUDA
  /// codec runs the CPU reference's encode and uploads the parts.
  bool device_encode = false;
  /// The CUDA backend decodes it on the GPU (make_cuda_codec, DeviceCodec,
  /// the device cache); false: the method is CPU only.
  bool device_decode = false;
  /// The method's own GPU decode, for a method outside the group-quantized
  /// format (device_decode, not group_quantized): queues the decode of the
  /// parts on a.stream and throws qvg::Error if the launch fails. The CUDA
  /// backend calls it once the tensor passed the CPU decoder's checks
  /// (check_decode_input with expected_bytes, then check_values) and its
  /// parts are on the device, dim a multiple of 16. Null: the built-in
  /// kernels of the kivi / quarot / bf16 layouts (baseline_kernels.cuh);
  /// always null in builds without CUDA.
  void (*decode_on_device)(const DeviceDecodeArgs& a) = nullptr;
  /// Bits of c's code per value, metadata not counted (code_bits); null:
  /// c.bits.
  double (*code_bits)(const CodecConfig& c) = nullptr;
  /// The largest input magnitudes M it encodes with an error relative to
  /// the tensor that is independent of M (encodable_magnitudes), where c's
  /// method runs no k-means stage.
  MagnitudeRange encodable{0.0, std::numeric_limits<double>::infinity()};
  /// Checks beyond the fields' own (e.g. QuaRot's power-of-two dim); may be
  /// null. Throws qvg::Error prefixed with c.name.
  void (*validate)(const CodecConfig& c, int64_t dim) = nullptr;
  /// Bytes of every part of a valid encoding of this shape.
  PartBytes (*expected_bytes)(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens,
                              int64_t dim) = nullptr;
  /// Short description: "INT2 B64 fp8 S1 C256".
  std::string (*describe)(const CodecConfig& c) = nullptr;
  /// The CPU reference codec (the specification).
  std::unique_ptr<Codec> (*make_cpu)(const CodecConfig& c) = nullptr;
  /// check_encoded_tensor's checks of the stored values, once the header,
  /// the role and every part's size are right; decoded (optional) is e's
  /// decode. Throws qvg::Error naming the part and the position.
  void (*check_values)(const EncodedTensor& e, const HeadTensor* decoded) = nullptr;
  /// Whether config c reads field `key` (one of `fields`), where c's own
  /// fields switch some off (qvg's code); null: every field of `fields`.
  bool (*reads)(const CodecConfig& c, const std::string& key) = nullptr;
};

/// Every method, in Method's order.
const std::vector<MethodTraits>& method_table();

/// The names of the methods whose row `keep` accepts, in the table's order,
/// for messages: "bf16, kivi and quarot".
std::string method_names_where(bool (*keep)(const MethodTraits& t));

/// Whether config c codes its residual with codebooks: qvg's code=cq (c's
/// method reads the `code` field and c's is cq).
bool uses_codebooks(const CodecConfig& c);

/// The row of method m.
const MethodTraits& method_traits(Method m);

/// The fields a bit budget may change in config c: its method's
/// budget_fields that c reads (reads_field), in the table's order.
std::vector<std::string> budget_fields_of(const CodecConfig& c);

/// Bits of c's code per value, metadata not counted: its method's
/// MethodTraits::code_bits, else `bits` (group quantization); log2(
/// cq_codewords) / cq_dim for qvg's code=cq, 16 for bf16.
double code_bits(const CodecConfig& c);

/// Whether the CUDA backend encodes config c on the GPU: its method's
/// device_encode (qvg with either residual code: code=cq's codebooks are
/// trained on the GPU too, src/cuda/encode_cq.cuh, the CPU reference's bytes).
bool device_encodes(const CodecConfig& c);

/// The bytes each part of an encoding of c (valid for dim) must have.
PartBytes expected_part_bytes(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens, int64_t dim);

/// The config of a span of `tokens` tokens: for clustered methods with
/// centroids=auto, C resolved for the span (auto_centroid_count; the result
/// has a fixed C); else C clamped to the tokens (k-means needs C <= N); for
/// other methods c unchanged.
CodecConfig span_config(const CodecConfig& c, int64_t tokens);

/// The config that encodes heads [first_head, first_head + n) of a tensor
/// as c encodes those heads within the whole tensor: for clustered methods
/// the k-means seed moved by first_head (each head's seeds are seed + head
/// + 1000003 * stage, qvg_kmeans_seed; every other choice of the encoders
/// is per head already); else c unchanged. A device that holds some of a
/// model's heads (head-sharded sequence parallelism) encodes them with it
/// and stores, byte for byte, those heads of a single-device encoding.
/// first_head >= 0.
CodecConfig config_for_heads(const CodecConfig& c, int64_t first_head);

/// The config of an encoding of c that holds `centroids` centroids (as a
/// saved one states them): for clustered methods, c with that fixed C (auto
/// resolved); else c unchanged. centroids: 1 .. c.kmeans.centroids.
CodecConfig config_with_centroids(const CodecConfig& c, int centroids);

/// centroids=auto's C for a span of `tokens` tokens (CodecConfig::
/// auto_centroids): clamp(floor(centroid_bits * tokens / cb), 1, min(
/// kmeans.centroids, tokens)), cb = 16 for BF16 centroids, 8 for FP8.
int auto_centroid_count(const CodecConfig& c, int64_t tokens);

}  // namespace qvg
