// .npy reader and writer (NumPy format versions 1.0, 2.0, 3.0).
//
// File = "\x93NUMPY" | major u8 | minor u8 | header_len (u16 LE for 1.x, u32 LE for 2.x/3.x)
//        | header (a Python dict literal: {'descr': '<f4', 'fortran_order': False,
//          'shape': (2, 3), }, padded with spaces, ended by '\n') | data (C order).
#include <cstring>

#include "io/io_util.h"
#include "qvg/io.h"

namespace qvg {

using io_detail::file_fail;

namespace {

// ---- a parser for the Python literal subset npy headers use -------------------------------

struct PyValue {
  enum Kind { string, boolean, none, integer, tuple, list, dict } kind = none;
  std::string str;
  bool flag = false;
  int64_t num = 0;
  std::vector<PyValue> items;     // tuple, list; dict: the values
  std::vector<std::string> keys;  // dict: the keys (items[i] is the value of keys[i])
  // (Not a vector of pair<string, PyValue>: pair needs PyValue complete, which
  // clang's checks of libstdc++'s vector enforce.)
};

class PyLiteralParser {
 public:
  PyLiteralParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  PyValue parse_header() {
    PyValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) bad("unexpected text after the dict");
    if (v.kind != PyValue::dict) bad("the header is not a dict");
    return v;
  }

 private:
  [[noreturn]] void bad(const char* why) {
    file_fail(path_, "malformed .npy header: ", why, " at byte ", pos_, " of the header \"",
              s_.substr(0, 200), s_.size() > 200 ? "..." : "", "\"");
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool eat_word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  PyValue value(int depth) {
    if (depth > 16) bad("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) bad("unexpected end");
    const char c = s_[pos_];
    PyValue v;
    if (c == '\'' || c == '"') {
      v.kind = PyValue::string;
      v.str = string_literal();
    } else if (c == '{') {
      v.kind = PyValue::dict;
      ++pos_;
      while (!eat('}')) {
        skip_ws();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) bad("expected a string key");
        v.keys.push_back(string_literal());
        if (!eat(':')) bad("expected ':'");
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat('}')) bad("expected ',' or '}'");
          break;
        }
      }
    } else if (c == '(' || c == '[') {
      v.kind = c == '(' ? PyValue::tuple : PyValue::list;
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      while (!eat(close)) {
        v.items.push_back(value(depth + 1));
        if (!eat(',')) {
          if (!eat(close)) bad("expected ',' or a closing bracket");
          break;
        }
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = PyValue::integer;
      v.num = integer_literal();
    } else if (eat_word("True")) {
      v.kind = PyValue::boolean;
      v.flag = true;
    } else if (eat_word("False")) {
      v.kind = PyValue::boolean;
    } else if (eat_word("None")) {
      v.kind = PyValue::none;
    } else {
      bad("unexpected character");
    }
    return v;
  }

  std::string string_literal() {
    const char q = s_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) bad("unterminated string");
      const char c = s_[pos_++];
      if (c == q) return out;
      if (c == '\\') {
        if (pos_ >= s_.size()) bad("unterminated string");
        out.push_back(s_[pos_++]);
      } else {
        out.push_back(c);
      }
    }
  }

  int64_t integer_literal() {
    bool neg = false;
    if (s_[pos_] == '-') {
      neg = true;
      ++pos_;
    }
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') bad("expected a digit");
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, int64_t{10}, &v) ||
          __builtin_add_overflow(v, int64_t{s_[pos_] - '0'}, &v))
        bad("integer too large");
      ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'L' || s_[pos_] == 'l')) ++pos_;  // Python 2 long
    return neg ? -v : v;
  }

  std::string path_;
  const std::string& s_;
  size_t pos_ = 0;
};

// ---- descr <-> dtype -----------------------------------------------------------------------

// Reads a descr string. raw16 is set (and the return value meaningless) for 16-bit words
// that do not say they are floats.
DType dtype_from_descr(const std::string& path, const std::string& descr,
                       std::optional<DType> raw16_as) {
  if (descr == "bfloat16") return DType::bf16;
  if (descr.size() < 2)
    file_fail(path, "unsupported dtype '", descr, "' in the .npy header");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=')
    file_fail(path, "unsupported dtype '", descr, "' in the .npy header (no byte-order mark)");
  if (code == "O" || code == "O8" || code == "O4")
    file_fail(path, "unsupported dtype '", descr,
              "': a pickled object array (np.save writes new-style ml_dtypes arrays, e.g. "
              "bfloat16, this way); save x.view(np.uint16) with a bf16 hint, or .safetensors");
  const bool one_byte = code == "u1" || code == "i1" || code == "b1" || code == "V1";
  if (order == '>' && !one_byte && code[0] != 'V')
    file_fail(path, "unsupported dtype '", descr,
              "': big-endian data; convert with x.astype(x.dtype.newbyteorder('<'))");
  if (order == '|' && !one_byte && code[0] != 'V')
    file_fail(path, "unsupported dtype '", descr, "': '|' byte order on a multi-byte type");
  if (code == "f4") return DType::f32;
  if (code == "f2") return DType::f16;
  if (code == "u1") return DType::u8;
  if (code == "i4") return DType::i32;
  if (code == "i8") return DType::i64;
  if (code == "V2" || code == "u2" || code == "i2") {
    if (raw16_as && (*raw16_as == DType::bf16 || *raw16_as == DType::f16)) return *raw16_as;
    file_fail(path, "unsupported dtype '", descr,
              "': 16-bit words that do not say which float they are (np.save writes "
              "ml_dtypes.bfloat16 as '<V2'); pass the dtype hint bf16 (or f16) to read them");
  }
  const char* hint = code == "f8"   ? " (float64)"
                     : code == "b1" ? " (bool)"
                     : code == "i1" ? " (int8)"
                     : code == "u4" ? " (uint32)"
                     : code == "u8" ? " (uint64)"
                     : code[0] == 'c' ? " (complex)"
                     : code[0] == 'U' || code[0] == 'S' ? " (string)"
                                                        : "";
  file_fail(path, "unsupported dtype '", descr, "'", hint,
            " in the .npy header (supported: '<f4', '<f2', bf16 as '<V2' with a hint, '|u1', "
            "'<i4', '<i8')");
}

const char* descr_for(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<V2";
    case DType::u8: return "|u1";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
  }
  return "?";
}

}  // namespace

RawTensor read_npy(const std::string& path, std::optional<DType> raw16_as) {
  io_detail::InFile f(path);
  uint8_t pre[12] = {};  // magic, version, and a u16 (1.0) or u32 (2.0, 3.0) header length
  if (f.size() < 10)
    file_fail(path, "truncated: ", f.size(), " bytes is shorter than the 10-byte .npy preamble");
  f.read_at(0, pre, 8, "the .npy preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0)
    file_fail(path, "bad magic: not a .npy file (expected \\x93NUMPY)");
  const int major = pre[6], minor = pre[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    file_fail(path, "unsupported .npy format version ", major, ".", minor,
              " (supported: 1.0, 2.0, 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  f.read_at(8, pre + 8, static_cast<uint64_t>(len_bytes), "the .npy header length");
  const uint64_t header_len = io_detail::get_le(pre + 8, len_bytes);
  const uint64_t header_at = 8 + static_cast<uint64_t>(len_bytes);
  if (header_len > kMaxTensorHeaderBytes)
    file_fail(path, "corrupt .npy header length ", header_len, " (more than the ",
              kMaxTensorHeaderBytes, "-byte limit)");
  if (header_len > f.size() - header_at)
    file_fail(path, "truncated: the .npy header length ", header_len,
              " is longer than the file (", f.size(), " bytes)");
  std::string header(static_cast<size_t>(header_len), '\0');
  f.read_at(header_at, header.data(), header_len, "the .npy header");

  const PyValue dict = PyLiteralParser(path, header).parse_header();
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    const std::string& k = dict.keys[i];
    const PyValue& v = dict.items[i];
    if (k == "descr") descr = &v;
    else if (k == "fortran_order") fortran = &v;
    else if (k == "shape") shape = &v;
    else file_fail(path, "malformed .npy header: unexpected key '", k, "'");
  }
  if (!descr || !fortran || !shape)
    file_fail(path, "malformed .npy header: missing key '",
              !descr ? "descr" : !fortran ? "fortran_order" : "shape", "'");
  if (descr->kind == PyValue::list)
    file_fail(path, "unsupported dtype: a structured (record) array");
  if (descr->kind != PyValue::string)
    file_fail(path, "malformed .npy header: 'descr' is not a string");
  if (fortran->kind != PyValue::boolean)
    file_fail(path, "malformed .npy header: 'fortran_order' is not True or False");
  if (shape->kind != PyValue::tuple)
    file_fail(path, "malformed .npy header: 'shape' is not a tuple");

  RawTensor t;
  t.dtype = dtype_from_descr(path, descr->str, raw16_as);
  for (const auto& d : shape->items) {
    if (d.kind != PyValue::integer)
      file_fail(path, "malformed .npy header: 'shape' holds a non-integer");
    t.shape.push_back(d.num);
  }
  // Fortran order only matters when two or more dims exceed 1; numpy writes it only then.
  int big_dims = 0;
  for (int64_t d : t.shape) big_dims += d > 1;
  if (fortran->flag && big_dims > 1)
    file_fail(path, "unsupported: Fortran-order (column-major) data; save np.ascontiguousarray(x)");

  const uint64_t nbytes = io_detail::checked_nbytes(t.shape, t.dtype, path);
  const uint64_t data_at = header_at + header_len;
  const uint64_t avail = f.size() - data_at;
  if (nbytes > avail)
    file_fail(path, "truncated: shape ", io_detail::shape_str(t.shape), " of ",
              dtype_name(t.dtype), " needs ", nbytes, " data bytes but the file holds ", avail);
  if (nbytes < avail)
    file_fail(path, "size mismatch: shape ", io_detail::shape_str(t.shape), " of ",
              dtype_name(t.dtype), " needs ", nbytes, " data bytes but the file holds ", avail,
              " (trailing bytes)");
  t.bytes.resize(static_cast<size_t>(nbytes));
  f.read_at(data_at, t.bytes.data(), nbytes, "the .npy data");
  return t;
}

void write_npy(const std::string& path, const RawTensor& t) {
  t.check(path);
  std::string dict = "{'descr': '";
  dict += descr_for(t.dtype);
  dict += "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(t.shape[i]);
  }
  if (t.shape.size() == 1) dict += ",";  // Python's one-element tuple: (5,)
  dict += "), }";
  // Pad with spaces so preamble + header is a multiple of 64; the header ends with '\n'.
  int major = 1;
  size_t pre = 10;
  if ((dict.size() + 1 + pre + 63) / 64 * 64 - pre > 65535) {
    major = 2;
    pre = 12;
  }
  const size_t total = (pre + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - pre - dict.size() - 1, ' ');
  dict.push_back('\n');

  std::string head = "\x93NUMPY";
  head.push_back(static_cast<char>(major));
  head.push_back('\0');
  if (major == 1)
    io_detail::put_u16(head, static_cast<uint16_t>(dict.size()));
  else
    io_detail::put_u32(head, static_cast<uint32_t>(dict.size()));
  head += dict;

  io_detail::OutFile out(path);
  out.write(head.data(), head.size());
  out.write(t.bytes.data(), t.bytes.size());
  out.close();
}

}  // namespace qvg
