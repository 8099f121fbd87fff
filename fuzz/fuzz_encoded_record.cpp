// libFuzzer target: an encoded tensor record from untrusted bytes
// (deserialize_encoded, include/qvg/serialize.h; what
// qvg.EncodedTensor.from_bytes calls), then the decode of what it accepts.
// Each input is read as it is, and again with its length field and CRC-32
// rewritten to fit its bytes, so that mutations reach the parsers behind
// the checksum. Properties: every rejection is a qvg::Error; an accepted
// record's tensor writes a record that reads back to the same tensor and the
// same bytes; it decodes without an error to [heads, tokens, dim] finite
// values.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "cache/checksum.h"
#include "fuzz_util.h"
#include "qvg/codec.h"
#include "qvg/config.h"
#include "qvg/serialize.h"

namespace {

void check_record(std::span<const uint8_t> bytes) {
  qvg::EncodedTensor e;
  try {
    e = qvg::deserialize_encoded(bytes);
  } catch (const qvg::Error&) {
    return;
  }
  // The spec as stored may be any parseable one; written back it is canonical.
  const std::vector<uint8_t> again = qvg::serialize_encoded(e);
  const qvg::EncodedTensor back = qvg::deserialize_encoded(again);
  QVG_FUZZ_REQUIRE(qvg::serialize_encoded(back) == again);
  for (const qvg::PartField& p : qvg::kPartFields) QVG_FUZZ_REQUIRE(back.*p.data == e.*p.data);
  qvg::HeadTensor out;
  try {
    qvg::make_codec(e.config)->decode(e, out, 1);
  } catch (const qvg::Error& err) {
    std::fprintf(stderr, "an accepted record failed to decode: %s\n", err.what());
    QVG_FUZZ_REQUIRE(false);
  }
  QVG_FUZZ_REQUIRE(out.heads == e.heads && out.tokens == e.tokens && out.dim == e.dim);
  for (const float v : out.data) QVG_FUZZ_REQUIRE(std::isfinite(v));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_record(std::span<const uint8_t>(data, size));
  if (size < 28) return 0;
  std::vector<uint8_t> b(data, data + size);  // length = size - 28 (header 24, CRC 4), then the CRC
  const uint64_t n = size - 28;
  for (int i = 0; i < 8; ++i) b[16 + static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  const uint32_t crc = qvg::crc32(b.data(), size - 4);
  for (int i = 0; i < 4; ++i) b[size - 4 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
  check_record(b);
  return 0;
}
