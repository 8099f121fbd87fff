// One encoded tensor as bytes and back: a self-contained record for an
// engine that stores or sends encoded K/V itself (a paged cache, a file of
// its own, another process). Layout in docs/FORMAT.md, "Encoded tensor
// record": a header (magic, version, length), the fields of the Python
// module's pickled state (canonical spec, role, shape), the parts exactly as
// a streaming cache file stores a span's tensor (i64 C, then the seven parts
// as (u64 length, bytes)), and a CRC-32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qvg/codec.h"

namespace qvg {

/// The record's first bytes: "QVGTENSR".
inline constexpr char kEncodedRecordMagic[8] = {'Q', 'V', 'G', 'T', 'E', 'N', 'S', 'R'};
/// The record version written and read.
inline constexpr uint32_t kEncodedRecordVersion = 1;

/// e as a record. Throws qvg::Error, before writing anything, when e could
/// not be read back: an empty shape, a config invalid for its dim, or a part
/// whose size differs from what its shape and config need (the checks every
/// decoder makes). Values are not inspected here (deserialize_encoded does).
std::vector<uint8_t> serialize_encoded(const EncodedTensor& e);

/// The tensor a record holds. Checks everything before returning: magic,
/// version, length, CRC-32, the spec (parse_codec_spec), role, shape, C
/// against the spec, part sizes, and the stored values as
/// check_encoded_tensor does (what a cache file's load and the Python
/// module's unpickling check). Throws qvg::Error naming the problem
/// ("encoded tensor record: ..."). Bytes after the record are refused.
EncodedTensor deserialize_encoded(std::span<const uint8_t> bytes);

}  // namespace qvg
