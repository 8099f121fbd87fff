// Little-endian byte buffers: the writer and the bounds-checked reader of the
// streaming cache file (serialize.cpp) and of the encoded tensor record
// (encoded_record.cpp), and the encoded tensor as both hold it
// (docs/FORMAT.md, "Streaming cache file" and "Encoded tensor record").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qvg/codec.h"

namespace qvg::byte_io {

class Writer {
 public:
  std::vector<uint8_t> buf;
  void u8(uint8_t v) { buf.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
  }
  void bytes(const std::vector<uint8_t>& v) {  // u64 length, then the bytes
    u64(v.size());
    raw(v.data(), v.size());
  }
  void i32s(const std::vector<int32_t>& v) {
    for (int32_t x : v) u32(static_cast<uint32_t>(x));
  }
};

/// Bounds-checked reader over one section's payload; errors name the file,
/// the section and what was being read.
class Reader {
 public:
  Reader(std::span<const uint8_t> b, std::string where) : b_(b), where_(std::move(where)) {}
  const std::string& where() const { return where_; }
  size_t left() const { return b_.size() - pos_; }
  void need(size_t n, const char* what) const {
    QVG_CHECK(n <= left(), where_, ": truncated (", what, " needs ", n, " bytes, ", left(), " left)");
  }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
  /// An i64 in [lo, hi].
  int64_t i64_in(const char* what, int64_t lo, int64_t hi) {
    const int64_t v = i64(what);
    QVG_CHECK(v >= lo && v <= hi, where_, ": ", what, " = ", v, " is out of range [", lo, ", ", hi, "]");
    return v;
  }
  std::vector<uint8_t> bytes(const char* what) {
    const uint64_t n = u64(what);
    QVG_CHECK(n <= left(), where_, ": truncated (", what, " claims ", n, " bytes, ", left(), " left)");
    std::vector<uint8_t> v(b_.begin() + static_cast<std::ptrdiff_t>(pos_),
                           b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return v;
  }
  std::vector<uint8_t> raw(size_t n, const char* what) {
    need(n, what);
    std::vector<uint8_t> v(b_.begin() + static_cast<std::ptrdiff_t>(pos_),
                           b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return v;
  }
  std::vector<int32_t> i32s(size_t n, const char* what) {
    QVG_CHECK(n <= left() / 4, where_, ": truncated (", what, " needs ", n, " int32 values)");
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(u32(what));
    return v;
  }
  void end() const { QVG_CHECK(left() == 0, where_, ": ", left(), " unexpected bytes at the end of the section"); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  std::string where_;
};

/// An encoded tensor's bytes in the cache file's span record and in the
/// encoded tensor record: i64 C (the config's kmeans.centroids), then the
/// seven parts in kPartFields' order, each as (u64 length, bytes).
inline void write_encoded_record(Writer& w, const EncodedTensor& e, int64_t centroids) {
  w.i64(centroids);
  for (const PartField& p : kPartFields) w.bytes(e.*p.data);
}

/// The seven parts of that record (after its C) into e.
inline void read_encoded_parts(Reader& r, EncodedTensor& e, const char* what) {
  for (const PartField& p : kPartFields) e.*p.data = r.bytes(what);
}

}  // namespace qvg::byte_io
