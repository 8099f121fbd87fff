// .safetensors reader and writer.
//
// File = N (u64 LE) | N bytes of UTF-8 JSON (may end with spaces) | data buffer.
// JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//        "__metadata__": {"key": "value"}}; offsets are relative to the data buffer,
// which the tensors must cover entirely, without overlap.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/io_util.h"
#include "qvg/io.h"

namespace qvg {

using io_detail::file_fail;

namespace {

const std::pair<const char*, DType> kStDTypes[] = {
    {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16},
    {"U8", DType::u8},   {"I32", DType::i32}, {"I64", DType::i64},
};

const char* st_name(DType t) {
  for (const auto& [n, d] : kStDTypes)
    if (d == t) return n;
  return "?";
}

struct Header {
  std::vector<SafetensorsEntry> entries;  // file order
  uint64_t data_at = 0;                   // absolute offset of the data buffer
};

Header parse_header(io_detail::InFile& f, std::map<std::string, std::string>* metadata) {
  const std::string& path = f.path();
  if (f.size() < 8)
    file_fail(path, "truncated: ", f.size(),
              " bytes is shorter than the 8-byte .safetensors header length");
  uint8_t len8[8];
  f.read_at(0, len8, 8, "the .safetensors header length");
  const uint64_t n = io_detail::get_le(len8, 8);
  if (n > kMaxTensorHeaderBytes)
    file_fail(path, "bad .safetensors header length ", n, " (more than the ",
              kMaxTensorHeaderBytes, "-byte limit; not a .safetensors file or corrupt)");
  if (n > f.size() - 8)
    file_fail(path, "truncated: the .safetensors header length ", n,
              " is longer than the file (", f.size(), " bytes)");
  std::string text(static_cast<size_t>(n), '\0');
  f.read_at(8, text.data(), n, "the .safetensors header");
  if (text.empty() || text[0] != '{')
    file_fail(path, "malformed .safetensors header: the JSON header must start with '{' "
                    "(bad magic: not a .safetensors file?)");

  // The format pads the JSON with spaces only (a NUL there was accepted).
  const size_t last = text.find_last_not_of(' ');
  if (last == std::string::npos || text[last] != '}')
    file_fail(path, "malformed .safetensors header: the JSON object must end the header (only spaces may follow it)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    file_fail(path, "malformed .safetensors header JSON: ", e.what());
  }
  if (!j.is_object()) file_fail(path, "malformed .safetensors header: not a JSON object");

  Header h;
  h.data_at = 8 + n;
  const uint64_t buffer = f.size() - h.data_at;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        file_fail(path, "malformed .safetensors header: __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          file_fail(path, "malformed .safetensors header: __metadata__ value of '", m.key(),
                    "' is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    // An empty name cannot be chosen (an empty name asks for the file's only
    // tensor) and the writer refuses it.
    if (name.empty()) file_fail(path, "malformed .safetensors header: a tensor has an empty name");
    if (!v.is_object())
      file_fail(path, "malformed .safetensors header: ", what, " is not an object");
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      file_fail(path, "malformed .safetensors header: ", what,
                " lacks dtype, shape or data_offsets");
    const auto& jd = v["dtype"];
    const auto& js = v["shape"];
    const auto& jo = v["data_offsets"];
    if (!jd.is_string())
      file_fail(path, "malformed .safetensors header: ", what, " dtype is not a string");
    SafetensorsEntry e;
    e.name = name;
    const std::string dt = jd.get<std::string>();
    bool known = false;
    for (const auto& [sn, d] : kStDTypes)
      if (dt == sn) {
        e.dtype = d;
        known = true;
      }
    if (!known)
      file_fail(path, "unsupported dtype '", dt, "' of ", what,
                " (supported: F32, F16, BF16, U8, I32, I64)");
    if (!js.is_array())
      file_fail(path, "malformed .safetensors header: ", what, " shape is not an array");
    for (const auto& d : js) {
      if (!d.is_number_integer() || (d.is_number_integer() && !d.is_number_unsigned() &&
                                     d.get<int64_t>() < 0))
        file_fail(path, "malformed .safetensors header: ", what,
                  " shape holds something other than a non-negative integer: ", js.dump());
      if (d.is_number_unsigned() &&
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        file_fail(path, "malformed .safetensors header: ", what, " shape value too large");
      e.shape.push_back(d.get<int64_t>());
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() ||
        !jo[1].is_number_unsigned())
      file_fail(path, "malformed .safetensors header: ", what,
                " data_offsets is not [begin, end] of non-negative integers: ", jo.dump());
    e.begin = jo[0].get<uint64_t>();
    e.end = jo[1].get<uint64_t>();
    if (e.end < e.begin)
      file_fail(path, "bad data_offsets of ", what, ": end ", e.end, " < begin ", e.begin);
    if (e.end > buffer)
      file_fail(path, "data_offsets of ", what, " [", e.begin, ", ", e.end,
                ") out of range: the data buffer holds ", buffer,
                " bytes (truncated file or corrupt header)");
    const uint64_t need = io_detail::checked_nbytes(e.shape, e.dtype, path + ": " + what);
    if (e.end - e.begin != need)
      file_fail(path, "size mismatch: ", what, " shape ", io_detail::shape_str(e.shape), " of ",
                dt, " needs ", need, " bytes but data_offsets [", e.begin, ", ", e.end,
                ") span ", e.end - e.begin);
    h.entries.push_back(std::move(e));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t at = 0;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const auto& e = h.entries[i];
    if (e.begin < at)
      file_fail(path, "data_offsets overlap: tensor '", e.name, "' [", e.begin, ", ", e.end,
                ") overlaps tensor '", h.entries[i - 1].name, "' [", h.entries[i - 1].begin,
                ", ", h.entries[i - 1].end, ")");
    if (e.begin > at)
      file_fail(path, "data_offsets leave a gap: bytes [", at, ", ", e.begin,
                ") of the data buffer belong to no tensor");
    at = e.end;
  }
  if (at != buffer)
    file_fail(path, "size mismatch: the data buffer holds ", buffer,
              " bytes but the tensors cover ", at, at < buffer ? " (trailing bytes)" : "");
  return h;
}

RawTensor read_entry(io_detail::InFile& f, const Header& h, const SafetensorsEntry& e) {
  RawTensor t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  t.bytes.resize(static_cast<size_t>(e.end - e.begin));
  f.read_at(h.data_at + e.begin, t.bytes.data(), e.end - e.begin, "tensor data");
  return t;
}

}  // namespace

std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path,
                                                      std::map<std::string, std::string>* metadata) {
  io_detail::InFile f(path);
  return parse_header(f, metadata).entries;
}

NamedTensors read_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata) {
  io_detail::InFile f(path);
  const Header h = parse_header(f, metadata);
  NamedTensors out;
  out.reserve(h.entries.size());
  for (const auto& e : h.entries) out.emplace_back(e.name, read_entry(f, h, e));
  return out;
}

RawTensor read_safetensors_tensor(const std::string& path, const std::string& name) {
  io_detail::InFile f(path);
  const Header h = parse_header(f, nullptr);
  std::string names;
  for (const auto& e : h.entries) names += (names.empty() ? "'" : ", '") + e.name + "'";
  if (name.empty()) {
    if (h.entries.size() == 1) return read_entry(f, h, h.entries[0]);
    if (h.entries.empty()) file_fail(path, "the .safetensors file holds no tensors");
    file_fail(path, "the file holds ", h.entries.size(),
              " tensors; choose one by name (available: ", names, ")");
  }
  for (const auto& e : h.entries)
    if (e.name == name) return read_entry(f, h, e);
  file_fail(path, "no tensor named '", name, "' (available: ",
            names.empty() ? std::string("none") : names, ")");
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) file_fail(path, "cannot write a tensor with an empty name");
    if (name == "__metadata__") file_fail(path, "'__metadata__' is reserved, not a tensor name");
    if (j.contains(name)) file_fail(path, "duplicate tensor name '", name, "'");
    t.check(path + ": tensor '" + name + "'");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = st_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {at, at + t.bytes.size()};
    j[name] = e;
    at += t.bytes.size();
  }
  std::string header;
  try {
    header = j.dump();
  } catch (const nlohmann::json::exception& e) {
    file_fail(path, "cannot write the header (names and metadata must be valid UTF-8): ", e.what());
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // data buffer starts 8-aligned
  std::string head;
  io_detail::put_u64(head, header.size());
  head += header;

  io_detail::OutFile out(path);
  out.write(head.data(), head.size());
  for (const auto& [name, t] : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.close();
}

}  // namespace qvg
