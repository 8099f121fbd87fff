// serialize_encoded / deserialize_encoded (include/qvg/serialize.h): one
// encoded tensor as a record (docs/FORMAT.md, "Encoded tensor record").
#include <cstring>
#include <string>

#include "cache/byte_io.h"
#include "cache/checksum.h"
#include "core/codecs.h"
#include "qvg/methods.h"
#include "qvg/serialize.h"

namespace qvg {
namespace {

constexpr size_t kHeadBytes = 24;  // magic, version, flags, payload length
constexpr uint32_t kMaxSpecBytes = 1u << 16;
constexpr const char* kWhere = "encoded tensor record";

/// The checks every decoder makes before reading parts: shape, config, role, part sizes.
void check_readable(const EncodedTensor& e) {
  check_decode_header(e.config, e);
  QVG_CHECK(e.role == TensorRole::key || e.role == TensorRole::value, "encoded tensor has an unknown role ",
            static_cast<int>(e.role));
  const MethodTraits& t = method_traits(e.config.method);
  check_decode_parts(e, t.expected_bytes(e.config, e.role, e.heads, e.tokens, e.dim));
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

std::vector<uint8_t> serialize_encoded(const EncodedTensor& e) {
  try {
    check_readable(e);
  } catch (const Error& err) {
    QVG_CHECK(false, "serialize_encoded: ", err.what());
  }
  const std::string spec = codec_spec(e.config);
  byte_io::Writer w;
  w.raw(kEncodedRecordMagic, 8);
  w.u32(kEncodedRecordVersion);
  w.u32(0);  // flags
  w.u64(0);  // payload length, set below
  w.u32(static_cast<uint32_t>(spec.size()));
  w.raw(spec.data(), spec.size());
  w.u32(e.role == TensorRole::key ? 0 : 1);
  w.i64(e.heads);
  w.i64(e.tokens);
  w.i64(e.dim);
  // C as the spec gives it back (deserialize_encoded compares them): the
  // config's own, where the method has centroids and C is not "auto".
  byte_io::write_encoded_record(w, e, parse_codec_spec(spec).kmeans.centroids);
  const uint64_t n = w.buf.size() - kHeadBytes;
  for (int i = 0; i < 8; ++i) w.buf[16 + i] = static_cast<uint8_t>(n >> (8 * i));
  w.u32(crc32(w.buf.data(), w.buf.size()));
  return std::move(w.buf);
}

EncodedTensor deserialize_encoded(std::span<const uint8_t> bytes) {
  QVG_CHECK(bytes.size() >= kHeadBytes + 4, kWhere, ": ", bytes.size(), " bytes, fewer than its header and CRC (",
            kHeadBytes + 4, ")");
  QVG_CHECK(std::memcmp(bytes.data(), kEncodedRecordMagic, 8) == 0, kWhere,
            ": bad magic (the record starts with \"QVGTENSR\")");
  const uint32_t version = le32(bytes.data() + 8);
  QVG_CHECK(version == kEncodedRecordVersion, kWhere, ": unsupported version ", version, " (this build reads version ",
            kEncodedRecordVersion, ")");
  QVG_CHECK(le32(bytes.data() + 12) == 0, kWhere, ": unknown flags 0x", std::hex, le32(bytes.data() + 12));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[16 + i]) << (8 * i);
  const uint64_t room = bytes.size() - kHeadBytes - 4;
  QVG_CHECK(n <= room, kWhere, ": the payload length ", n, " runs past the end (", room,
            " bytes left): truncated or corrupt");
  QVG_CHECK(n == room, kWhere, ": ", room - n, " unexpected bytes after the record");
  const uint32_t stored = le32(bytes.data() + kHeadBytes + n);
  const uint32_t crc = crc32(bytes.data(), kHeadBytes + n);
  QVG_CHECK(stored == crc, kWhere, ": checksum mismatch (stored CRC-32 0x", std::hex, stored, ", computed 0x", crc,
            std::dec, "): the record is corrupt");

  byte_io::Reader r(bytes.subspan(kHeadBytes, n), kWhere);
  const uint32_t spec_bytes = r.u32("spec length");
  QVG_CHECK(spec_bytes <= kMaxSpecBytes, kWhere, ": a spec of ", spec_bytes, " bytes (at most ", kMaxSpecBytes, ")");
  const std::vector<uint8_t> spec_raw = r.raw(spec_bytes, "spec");
  const std::string spec(spec_raw.begin(), spec_raw.end());
  EncodedTensor e;
  try {
    e.config = parse_codec_spec(spec);
  } catch (const Error& err) {
    QVG_CHECK(false, kWhere, ": spec \"", printable(spec), "\": ", err.what());
  }
  const uint32_t role = r.u32("role");
  QVG_CHECK(role <= 1, kWhere, ": role ", role, " (0 = key, 1 = value)");
  e.role = role == 0 ? TensorRole::key : TensorRole::value;
  e.heads = r.i64_in("heads", 1, INT64_MAX);
  e.tokens = r.i64_in("tokens", 1, INT64_MAX);
  e.dim = r.i64_in("dim", 1, INT64_MAX);
  const int64_t cn = r.i64("centroids");
  QVG_CHECK(cn == e.config.kmeans.centroids, kWhere, ": records ", cn, " centroids; its spec has ",
            e.config.kmeans.centroids);
  byte_io::read_encoded_parts(r, e, "part");
  r.end();
  try {
    check_encoded_tensor(e);
  } catch (const Error& err) {
    QVG_CHECK(false, kWhere, ": ", err.what());
  }
  return e;
}

}  // namespace qvg
