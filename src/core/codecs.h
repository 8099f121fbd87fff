// Internal: factories of the concrete codecs (make_codec dispatches here) and
// helpers they share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qvg/codec.h"

namespace qvg {

std::unique_ptr<Codec> make_bf16_codec(const CodecConfig& c);
std::unique_ptr<Codec> make_qvg_codec(const CodecConfig& c);  // also RTN (S = 0)
std::unique_ptr<Codec> make_kivi_codec(const CodecConfig& c);
std::unique_ptr<Codec> make_quarot_codec(const CodecConfig& c);
std::unique_ptr<Codec> make_fp8_codec(const CodecConfig& c);

/// fp8 (reference/fp8_codec.cpp): the bytes of every part; the row's
/// check_values (no NaN code, no NaN scale, no scale above
/// 2^kFp8MaxScaleExponent); the GPU decode (cuda/fp8_decode.cu, CUDA builds).
PartBytes fp8_expected_bytes(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens, int64_t dim);
void check_fp8_values(const EncodedTensor& e, const HeadTensor* decoded);
struct DeviceDecodeArgs;
void fp8_decode_on_device(const DeviceDecodeArgs& a);
/// The largest block scale exponent of fp8: 448 * 2^119 < FLT_MAX, so every
/// decoded value is finite; inputs up to 2^127 get no larger one.
inline constexpr int kFp8MaxScaleExponent = 119;

/// The method rows' check_values (encoded_check.cpp): the values of an
/// encoding whose header, role and part sizes are right, as
/// check_encoded_tensor checks them. The group-quantized format (qvg, rtn):
/// span scales, block scales, codebooks, centroids, ids, and where the parts
/// allow a decode beyond the float range, the decode (decoded, or e's own).
/// kivi, quarot: FP16 scales and zero points; kivi, bf16: the BF16 rows.
void check_group_quantized_values(const EncodedTensor& e, const HeadTensor* decoded);
void check_kivi_values(const EncodedTensor& e, const HeadTensor* decoded);
void check_quarot_values(const EncodedTensor& e, const HeadTensor* decoded);
void check_bf16_values(const EncodedTensor& e, const HeadTensor* decoded);

/// The config of preset `name` (methods.cpp's table); throws qvg::Error
/// listing the presets for an unknown name.
CodecConfig preset_config(const std::string& name);

/// QVG / RTN: the bytes every part of an encoding of this shape needs.
PartBytes qvg_expected_bytes(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim);

/// Checks shared by every encoder: the config is valid for x.dim, x has at
/// least one token and head, its data matches its shape, all values finite,
/// the largest magnitude inside the codec's range (check_magnitude).
void check_encode_input(const CodecConfig& c, const HeadTensorView& x);

/// Checks shared by every decoder, in two halves. The header: e was made by
/// a codec of config c's method, its shape is not empty and e.config is
/// valid for e.dim (after which e's expected part sizes can be computed).
/// The parts: their sizes are `expected`.
void check_decode_header(const CodecConfig& c, const EncodedTensor& e);
void check_decode_parts(const EncodedTensor& e, const PartBytes& expected);
/// Both, for decoders whose expected sizes need no check of their own first.
void check_decode_input(const CodecConfig& c, const EncodedTensor& e, const PartBytes& expected);

/// FP8 centroids (centroid_format=fp8): no NaN among the first `codes`
/// bytes, every FP32 scale after them, up to byte `end` (the part's end at
/// most; code=cq's codebooks follow the stages' scales), finite and
/// positive; qvg::Error prefixed with `what` otherwise.
void check_fp8_centroids(const std::vector<uint8_t>& centroids, size_t codes, const std::string& what,
                         size_t end = static_cast<size_t>(-1));

/// Checks of a qvg / rtn tensor's values that every decoder needs (after
/// check_decode_input: the part sizes match): each head's span scale is
/// finite and positive, each centroid id is below C. The CPU decode and the
/// upload to the GPU (cuda::upload_parts) share them, so both reject the same
/// damaged tensors, before writing anything.
void check_qvg_part_values(const EncodedTensor& e);

/// Throws "<what> value i is not finite" for the first BF16 value (little-
/// endian bits) of bytes that is infinite or NaN.
void check_bf16_finite(const std::vector<uint8_t>& bytes, const std::string& what);

/// The end of the error a QVG encoder gives where a residual overflows float
/// (the CPU reference per stage, the CUDA codec from the span scales).
std::string residual_overflow_hint(int stages);

/// An EncodedTensor carrying c, role and x's shape, its parts still empty.
inline EncodedTensor encoded_header(const CodecConfig& c, const HeadTensorView& x, TensorRole role) {
  EncodedTensor e;
  e.config = c;
  e.role = role;
  e.heads = x.heads;
  e.tokens = x.tokens;
  e.dim = x.dim;
  return e;
}

/// Little-endian FP32 / FP16 / BF16 buffer helpers.
void put_f32(std::vector<uint8_t>& buf, size_t index, float v);
float get_f32(const std::vector<uint8_t>& buf, size_t index);
void put_u16(std::vector<uint8_t>& buf, size_t index, uint16_t v);
uint16_t get_u16(const std::vector<uint8_t>& buf, size_t index);

}  // namespace qvg
