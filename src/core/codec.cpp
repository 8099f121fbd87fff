#include "qvg/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/codecs.h"
#include "qvg/methods.h"
#include "qvg/half.h"

namespace qvg {

PartBytes EncodedTensor::bytes() const {
  PartBytes b;
  for (const PartField& p : kPartFields) b.*p.bytes = (this->*p.data).size();
  return b;
}

double EncodedTensor::bits_per_value() const {
  return values() > 0 ? 8.0 * static_cast<double>(bytes().total()) / static_cast<double>(values()) : 0.0;
}

double EncodedTensor::ratio_to_bf16() const {
  const double total = static_cast<double>(bytes().total());
  return total > 0 ? 2.0 * static_cast<double>(values()) / total : 0.0;
}

std::unique_ptr<Codec> make_codec(const CodecConfig& config) { return method_traits(config.method).make_cpu(config); }

std::unique_ptr<Codec> make_codec(const std::string& spec) { return make_codec(parse_codec_spec(spec)); }

MagnitudeRange encodable_magnitudes(const CodecConfig& c) {
  // code=cq without stages too: its decode multiplies token scales by codewords of up to sqrt(D).
  if (smoothing_stages(c) > 0 || uses_codebooks(c)) return {std::ldexp(1.0, -60), std::ldexp(1.0, 56)};
  return method_traits(c.method).encodable;
}

void check_magnitude(const CodecConfig& c, double max_abs, const std::string& where) {
  const MagnitudeRange r = encodable_magnitudes(c);
  if (max_abs == 0.0 || (max_abs >= r.lo && max_abs <= r.hi)) return;
  const bool low = max_abs < r.lo;
  QVG_CHECK(false, where, c.name, ": the input's largest magnitude ", max_abs, " is ", low ? "below " : "above ",
            low ? r.lo : r.hi, " (2^", std::ilogb(low ? r.lo : r.hi), "), outside the range where its error does not "
            "depend on the scale (",
            smoothing_stages(c) > 0 ? "k-means distances in float would " : "FP16 scales would ",
            smoothing_stages(c) > 0 ? (low ? "underflow" : "overflow") : "go subnormal",
            "); multiply the tensor by a power of two first (docs/RELIABILITY.md, \"Hostile numbers\")");
}

void check_encode_input(const CodecConfig& c, const HeadTensorView& x) {
  validate(c, x.dim);
  QVG_CHECK(x.heads > 0, c.name, ": the tensor has no heads");
  QVG_CHECK(x.tokens > 0, c.name, ": the tensor has no tokens (N = 0)");
  check_magnitude(c, check_finite(x, "input tensor"));
}

void check_decode_header(const CodecConfig& c, const EncodedTensor& e) {
  QVG_CHECK(e.config.method == c.method, "decoding a ", method_name(e.config.method),
            " tensor with a ", method_name(c.method), " codec");
  QVG_CHECK(e.heads > 0 && e.tokens > 0 && e.dim > 0, "encoded tensor has an empty shape [",
            e.heads, ", ", e.tokens, ", ", e.dim, "]");
  // A shape whose float32 decode fits int64 bytes (what HeadTensor holds), so the
  // part sizes computed from it do not overflow (issue 27: a pickled shape such as
  // [2^62, 4, 64] overflowed them, undefined behaviour, before any check).
  int64_t bytes = 4;
  QVG_CHECK(!__builtin_mul_overflow(bytes, e.heads, &bytes) && !__builtin_mul_overflow(bytes, e.tokens, &bytes) &&
                !__builtin_mul_overflow(bytes, e.dim, &bytes),
            "encoded tensor shape [", e.heads, ", ", e.tokens, ", ", e.dim,
            "] is too large (its decoded size overflows 64 bits)");
  validate(e.config, e.dim);
}

void check_decode_parts(const EncodedTensor& e, const PartBytes& expected) {
  const PartBytes got = e.bytes();
  for (const PartField& p : kPartFields)
    QVG_CHECK(got.*p.bytes == expected.*p.bytes, "encoded tensor is inconsistent: part '", p.name, "' has ",
              got.*p.bytes, " bytes, its shape and config need ", expected.*p.bytes);
}

void check_decode_input(const CodecConfig& c, const EncodedTensor& e, const PartBytes& expected) {
  check_decode_header(c, e);
  check_decode_parts(e, expected);
}

void put_f32(std::vector<uint8_t>& buf, size_t index, float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  for (int i = 0; i < 4; ++i) buf[index * 4 + i] = static_cast<uint8_t>(u >> (8 * i));
}

float get_f32(const std::vector<uint8_t>& buf, size_t index) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(buf[index * 4 + i]) << (8 * i);
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

void put_u16(std::vector<uint8_t>& buf, size_t index, uint16_t v) {
  buf[index * 2] = static_cast<uint8_t>(v & 0xFF);
  buf[index * 2 + 1] = static_cast<uint8_t>(v >> 8);
}

uint16_t get_u16(const std::vector<uint8_t>& buf, size_t index) {
  return static_cast<uint16_t>(buf[index * 2] | (buf[index * 2 + 1] << 8));
}

void check_bf16_finite(const std::vector<uint8_t>& bytes, const std::string& what) {
  for (size_t i = 0; i < bytes.size() / 2; ++i)
    QVG_CHECK(std::isfinite(bf16_to_float(get_u16(bytes, i))), what, " value ", i, " is not finite");
}

std::string residual_overflow_hint(int stages) {
  return "the input or the centroids are too close to the float range (inputs up to 2^" +
         std::to_string(126 - stages) + " with centroids from their own k-means never overflow)";
}

}  // namespace qvg
