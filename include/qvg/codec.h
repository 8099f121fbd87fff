// The codec interface every method implements, the encoded tensor, and exact
// byte accounting. Byte layouts of every part: docs/FORMAT.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qvg/config.h"
#include "qvg/kmeans.h"
#include "qvg/tensor.h"

namespace qvg {

/// Bytes of an encoded tensor by part; every byte that decode reads is counted.
struct PartBytes {
  size_t codes = 0;           ///< packed b-bit codes
  size_t scales = 0;          ///< per-block scales (FP8 or FP16)
  size_t zero_points = 0;     ///< per-group zero points (FP16; KIVI, QuaRot)
  size_t span_scales = 0;     ///< per-head FP32 scales that keep FP8 scales in range
  size_t centroids = 0;       ///< k-means centroids (BF16, or FP8 codes and scales), then code=cq's codebooks
  size_t ids = 0;             ///< centroid ids (uint8 per token per stage)
  size_t full_precision = 0;  ///< values kept in BF16 (KIVI window, bf16 method)
  size_t total() const {
    return codes + scales + zero_points + span_scales + centroids + ids + full_precision;
  }
};

/// One encoded K or V tensor of shape [heads, tokens, dim]. Each part is a
/// little-endian byte buffer laid out as docs/FORMAT.md describes.
struct EncodedTensor {
  CodecConfig config;
  TensorRole role = TensorRole::key;
  int64_t heads = 0, tokens = 0, dim = 0;
  std::vector<uint8_t> codes, scales, zero_points, span_scales, centroids, ids, full_precision;

  PartBytes bytes() const;
  /// heads x tokens x dim; throws qvg::Error for a negative dim or a shape whose
  /// float32 decode would not fit int64 bytes (HeadTensor::checked_numel).
  int64_t values() const { return HeadTensor::checked_numel(heads, tokens, dim); }
  /// Total bits stored per value (all parts counted).
  double bits_per_value() const;
  /// BF16 size / encoded size.
  double ratio_to_bf16() const;
};

/// One part of an encoded tensor: its name (docs/FORMAT.md, reports, files)
/// and where it lives in EncodedTensor and PartBytes.
struct PartField {
  using Data = std::vector<uint8_t> EncodedTensor::*;
  using Bytes = size_t PartBytes::*;
  const char* name;
  Data data;
  Bytes bytes;
};

/// The seven parts, in docs/FORMAT.md's order: the only list of them.
inline constexpr PartField kPartFields[] = {
    {"codes", &EncodedTensor::codes, &PartBytes::codes},
    {"scales", &EncodedTensor::scales, &PartBytes::scales},
    {"zero_points", &EncodedTensor::zero_points, &PartBytes::zero_points},
    {"span_scales", &EncodedTensor::span_scales, &PartBytes::span_scales},
    {"centroids", &EncodedTensor::centroids, &PartBytes::centroids},
    {"ids", &EncodedTensor::ids, &PartBytes::ids},
    {"full_precision", &EncodedTensor::full_precision, &PartBytes::full_precision},
};

/// Per-call options and reports.
struct EncodeOptions {
  TensorRole role = TensorRole::key;
  int threads = 0;  ///< worker threads over heads; 0 = hardware concurrency.
                    ///< Results are identical for any value.
  /// Warm start: k-means of stage s, head h starts from this tensor's
  /// centroids for (s, h) (same config and dim required). May be null.
  const EncodedTensor* warm_start = nullptr;
};

/// What encode did, for statistics; filled when passed.
struct EncodeReport {
  /// k-means runs, index [stage * heads + head].
  std::vector<KMeansStats> kmeans;
  double kmeans_seconds = 0;  ///< summed over threads
};

/// A compression method. Implementations are stateless and thread-safe.
class Codec {
 public:
  virtual ~Codec() = default;
  virtual const CodecConfig& config() const = 0;
  /// x: [heads, tokens, dim], finite: a HeadTensor, or a view of the
  /// caller's buffer in any layout HeadTensorView takes, read in place (the
  /// same bytes either way). Throws qvg::Error on invalid input.
  virtual EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt = {},
                               EncodeReport* report = nullptr) const = 0;
  /// Writes the reconstruction into out (resized to [heads, tokens, dim]).
  virtual void decode(const EncodedTensor& e, HeadTensor& out, int threads = 0) const = 0;
};

/// The codec for a configuration (validated when encode sees the dim).
std::unique_ptr<Codec> make_codec(const CodecConfig& config);

/// Input policy (docs/RELIABILITY.md, "Hostile numbers"): every encoder
/// refuses a tensor with a NaN or an infinity, and a tensor whose largest
/// magnitude M is neither 0 nor inside its codec's range, where its error
/// relative to the tensor is that at M = 1 (measured; encodes scale by
/// powers of two exactly inside it):
///  - k-means methods (qvg, qvg-pro, any stages > 0) and code=cq (also
///    with stages=0): 2^-60 <= M <= 2^56 (float distances of a head of dim
///    <= 1024 neither overflow nor lose their small terms to underflow);
///  - kivi, quarot: M >= 2^-20 (their FP16 scales and zero points go
///    subnormal below; above, a group or token whose FP16 parameters
///    overflow is refused by the encoder, naming it);
///  - fp8: 2^-91 <= M <= 2^127 (its E8M0 block scales);
///  - rtn, bf16: any finite M (FP8 block scales under an FP32 span scale;
///    bf16 is the rounding itself).
/// DeviceCodec's stream-ordered encodes (device_codec.h) check nothing.
struct MagnitudeRange {
  double lo = 0.0, hi = 0.0;  ///< inclusive; hi = infinity: no upper bound
};
MagnitudeRange encodable_magnitudes(const CodecConfig& config);
/// Throws qvg::Error naming the codec, M and the range when M (the input's
/// largest magnitude, finite; check_finite returns it) is neither 0 nor
/// inside it; `where` prefixes the message.
void check_magnitude(const CodecConfig& config, double max_abs, const std::string& where = "");

/// Checks an encoded tensor that comes from outside the library (a cache file,
/// a pickled state) before it is trusted, beyond what a decoder needs to stay in
/// bounds: its shape, config, role and part sizes as a decoder checks them, then
/// the values stored: no non-finite BF16 value (centroids, full_precision), no
/// NaN FP8 code (block scales, centroids: E4M3 0x7F / 0xFF), no non-finite FP16
/// scale or zero point and no negative FP16 scale (kivi, quarot), span scales
/// and FP8 centroid scales finite and positive, centroid ids below C, and no
/// value that decodes beyond the float range (finite parts whose product
/// overflows: a head whose parts allow magnitudes above FLT_MAX / 2 is decoded
/// and looked at). Throws qvg::Error naming the part and the position (head,
/// token, channel, stage, block or group). `decoded`: e's CPU decode when the
/// caller has one (else this decodes, only for such heads). A tensor that an
/// encoder made from a finite input passes. Cost: one pass over the scales,
/// centroids and BF16 parts; none over the codes.
void check_encoded_tensor(const EncodedTensor& e, const HeadTensor* decoded = nullptr);

/// Convenience: make_codec(parse_codec_spec(spec)).
std::unique_ptr<Codec> make_codec(const std::string& spec);

}  // namespace qvg
