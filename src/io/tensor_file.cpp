// DType / KvLayout / RawTensor basics, file helpers, and the K/V conversions
// (to_head_tensor, from_head_tensor, load_kv, save_kv).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/io_util.h"
#include "qvg/half.h"
#include "qvg/io.h"

namespace qvg {

namespace {

struct DTypeTraits {
  DType dtype;
  const char* name;
  size_t size;
  bool is_float;
};

// One row per dtype (the npy descr and safetensors names live with their readers).
const DTypeTraits kDTypes[] = {
    {DType::f32, "f32", 4, true}, {DType::f16, "f16", 2, true}, {DType::bf16, "bf16", 2, true},
    {DType::u8, "u8", 1, false},  {DType::i32, "i32", 4, false}, {DType::i64, "i64", 8, false},
};

const DTypeTraits& traits(DType t) {
  for (const auto& r : kDTypes)
    if (r.dtype == t) return r;
  throw Error("invalid DType value " + std::to_string(static_cast<int>(t)));
}

}  // namespace

size_t dtype_size(DType t) { return traits(t).size; }
const char* dtype_name(DType t) { return traits(t).name; }
std::string shape_string(const std::vector<int64_t>& shape) { return io_detail::shape_str(shape); }
bool dtype_is_float(DType t) { return traits(t).is_float; }

DType parse_dtype(const std::string& name) {
  static const std::pair<const char*, DType> kAliases[] = {
      {"f32", DType::f32},     {"float32", DType::f32},  {"f16", DType::f16},
      {"float16", DType::f16}, {"half", DType::f16},     {"bf16", DType::bf16},
      {"bfloat16", DType::bf16}, {"u8", DType::u8},      {"uint8", DType::u8},
      {"i32", DType::i32},     {"int32", DType::i32},    {"i64", DType::i64},
      {"int64", DType::i64},
  };
  for (const auto& [n, t] : kAliases)
    if (name == n) return t;
  QVG_CHECK(false, "unknown dtype '", name, "' (expected f32, f16, bf16, u8, i32 or i64)");
  return DType::f32;
}

const char* layout_name(KvLayout l) { return l == KvLayout::thd ? "thd" : "htd"; }

KvLayout parse_layout(const std::string& name) {
  if (name == "thd") return KvLayout::thd;
  if (name == "htd") return KvLayout::htd;
  QVG_CHECK(false, "unknown layout '", name,
            "' (expected \"thd\" = [tokens, heads, dim] or \"htd\" = [heads, tokens, dim])");
  return KvLayout::thd;
}

void check_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      io_detail::file_fail(path, "cannot open: ", ec.message());
    io_detail::file_fail(path, "cannot open: file not found");
  }
  switch (st.type()) {
    case fs::file_type::regular: return;
    case fs::file_type::directory: io_detail::file_fail(path, "cannot open: is a directory");
    case fs::file_type::fifo:
      io_detail::file_fail(path, "cannot read: is a FIFO (named pipe); qvg reads regular files only (write the "
                                 "data to a file first)");
    case fs::file_type::socket: io_detail::file_fail(path, "cannot read: is a socket; qvg reads regular files only");
    case fs::file_type::character:
      io_detail::file_fail(path, "cannot read: is a character device; qvg reads regular files only");
    case fs::file_type::block:
      io_detail::file_fail(path, "cannot read: is a block device; qvg reads regular files only");
    default: io_detail::file_fail(path, "cannot read: not a regular file");
  }
}

int64_t RawTensor::numel() const { return io_detail::checked_numel(shape, "tensor"); }

namespace {

/// Throws unless `size` bytes are what shape and dtype need.
void check_byte_count(const std::vector<int64_t>& shape, DType dtype, size_t size, const std::string& what) {
  const uint64_t need = io_detail::checked_nbytes(shape, dtype, what);
  QVG_CHECK(size == need, what, ": shape ", io_detail::shape_str(shape), " of ", dtype_name(dtype), " needs ", need,
            " bytes but the tensor holds ", size);
}

}  // namespace

void RawTensor::check(const std::string& what) const { check_byte_count(shape, dtype, bytes.size(), what); }

namespace io_detail {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  for (int64_t d : shape)
    QVG_CHECK(d >= 0, what, ": negative dimension in shape ", shape_str(shape));
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    QVG_CHECK(!__builtin_mul_overflow(n, d, &n), what, ": shape ", shape_str(shape),
              " is too large (element count overflows)");
  return n;
}

uint64_t checked_nbytes(const std::vector<int64_t>& shape, DType dtype, const std::string& what) {
  const int64_t n = checked_numel(shape, what);
  int64_t bytes = 0;
  QVG_CHECK(!__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &bytes), what,
            ": shape ", shape_str(shape), " is too large (byte count overflows)");
  return static_cast<uint64_t>(bytes);
}

InFile::InFile(const std::string& path) : path_(path) {
  check_regular_file(path);
  in_.open(path, std::ios::binary);
  if (!in_) file_fail(path, "cannot open for reading");
  in_.seekg(0, std::ios::end);
  const std::streamoff end = in_.tellg();
  if (end < 0) file_fail(path, "cannot determine the file size");
  size_ = static_cast<uint64_t>(end);
}

void InFile::read_at(uint64_t offset, void* dst, uint64_t n, const char* what) {
  if (offset > size_ || n > size_ - offset)
    file_fail(path_, "truncated: ", what, " needs bytes [", offset, ", ", offset + n,
              ") but the file has ", size_, " bytes");
  if (n == 0) return;
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  if (!in_ || static_cast<uint64_t>(in_.gcount()) != n)
    file_fail(path_, "read error while reading ", what);
}

}  // namespace io_detail

// ---- K/V conversions -----------------------------------------------------------------------

namespace {

// Decodes n little-endian elements of a float dtype to float32.
void decode_floats(DType dt, const uint8_t* src, float* dst, int64_t n) {
  switch (dt) {
    case DType::f32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);  // (an empty vector's data() may be null)
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = fp16_to_float(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = bf16_to_float(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
      return;
    default:
      throw Error("decode_floats: not a float dtype");
  }
}

// Encodes n floats to a float dtype, little-endian, round to nearest even.
void encode_floats(DType dt, const float* src, uint8_t* dst, int64_t n) {
  switch (dt) {
    case DType::f32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::f16:
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = dt == DType::f16 ? fp16_from_float(src[i]) : bf16_from_float(src[i]);
        dst[2 * i] = static_cast<uint8_t>(h & 0xFF);
        dst[2 * i + 1] = static_cast<uint8_t>(h >> 8);
      }
      return;
    default:
      throw Error("encode_floats: not a float dtype");
  }
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

HeadTensor to_head_tensor(const RawTensor& t, KvLayout layout, const std::string& what) {
  return to_head_tensor(RawTensorView{t.dtype, t.shape, t.bytes}, layout, what);
}

HeadTensor to_head_tensor(const RawTensorView& t, KvLayout layout, const std::string& what) {
  using io_detail::shape_str;
  check_byte_count(t.shape, t.dtype, t.bytes.size(), what);
  QVG_CHECK(dtype_is_float(t.dtype), what, ": a K/V tensor must be f32, f16 or bf16, not ",
            dtype_name(t.dtype));
  const auto& s = t.shape;
  const bool batch = s.size() == 4;
  QVG_CHECK((s.size() == 3) || (batch && s[0] == 1), what, ": expected a K/V tensor of shape ",
            layout == KvLayout::thd ? "[tokens, heads, dim] or [1, tokens, heads, dim]"
                                    : "[heads, tokens, dim] or [1, heads, tokens, dim]",
            " (layout ", layout_name(layout), "), got shape ", shape_str(s),
            batch ? " (a leading batch dimension must be 1)" : "");
  const int64_t a = s[batch ? 1 : 0], b = s[batch ? 2 : 1], d = s[batch ? 3 : 2];
  const int64_t heads = layout == KvLayout::thd ? b : a;
  const int64_t tokens = layout == KvLayout::thd ? a : b;
  // Before any loop over tokens x heads: a zero dim leaves nothing to loop over (and a
  // shape like [10^6, 10^6, 0] would spin for 10^12 iterations).
  QVG_CHECK(heads > 0 && tokens > 0 && d > 0, what, ": shape ", shape_str(s), " (layout ", layout_name(layout),
            ": heads ", heads, ", tokens ", tokens, ", dim ", d, ") is empty; a K/V tensor needs at least one head, "
            "one token and one channel");
  HeadTensor x(heads, tokens, d);
  const size_t es = dtype_size(t.dtype);
  if (layout == KvLayout::htd || heads == 1 || tokens == 1) {
    decode_floats(t.dtype, t.bytes.data(), x.data.data(), x.numel());
  } else {
    // file [tokens, heads, dim] -> [heads, tokens, dim], one dim-row at a time
    for (int64_t n = 0; n < tokens; ++n)
      for (int64_t h = 0; h < heads; ++h)
        decode_floats(t.dtype, t.bytes.data() + static_cast<size_t>((n * heads + h) * d) * es,
                      x.data.data() + (h * tokens + n) * d, d);
  }
  return x;
}

RawTensor from_head_tensor(const HeadTensor& x, KvLayout layout, DType dtype, bool leading_batch) {
  QVG_CHECK(dtype_is_float(dtype), "from_head_tensor: dtype must be f32, f16 or bf16, not ",
            dtype_name(dtype));
  QVG_CHECK(x.heads >= 0 && x.tokens >= 0 && x.dim >= 0 &&
                static_cast<int64_t>(x.data.size()) == x.numel(),
            "from_head_tensor: HeadTensor [", x.heads, ", ", x.tokens, ", ", x.dim, "] holds ",
            x.data.size(), " values");
  RawTensor t;
  t.dtype = dtype;
  if (leading_batch) t.shape.push_back(1);
  if (layout == KvLayout::thd)
    t.shape.insert(t.shape.end(), {x.tokens, x.heads, x.dim});
  else
    t.shape.insert(t.shape.end(), {x.heads, x.tokens, x.dim});
  const size_t es = dtype_size(dtype);
  t.bytes.resize(static_cast<size_t>(x.numel()) * es);
  if (layout == KvLayout::htd || x.heads == 1 || x.tokens == 1 || x.numel() == 0) {  // (empty: no heads x tokens loop)
    encode_floats(dtype, x.data.data(), t.bytes.data(), x.numel());
  } else {
    for (int64_t h = 0; h < x.heads; ++h)
      for (int64_t n = 0; n < x.tokens; ++n)
        encode_floats(dtype, x.data.data() + (h * x.tokens + n) * x.dim,
                      t.bytes.data() + static_cast<size_t>((n * x.heads + h) * x.dim) * es, x.dim);
  }
  return t;
}

HeadTensor load_kv(const std::string& path, KvLayout layout, const std::string& name,
                   std::optional<DType> raw16_as, KvFileInfo* info) {
  const std::string ext = lower_extension(path);
  RawTensor t;
  std::string what = path;
  if (ext == ".npy") {
    if (!name.empty())
      io_detail::file_fail(path, "a tensor name ('", name, "') was given but .npy files hold one "
                                 "unnamed tensor");
    t = read_npy(path, raw16_as);
  } else if (ext == ".safetensors") {
    t = read_safetensors_tensor(path, name);
    if (!name.empty()) what += ":" + name;
  } else {
    io_detail::file_fail(path, "unknown tensor file extension '", ext,
                         "' (expected .npy or .safetensors)");
  }
  HeadTensor x = to_head_tensor(t, layout, what);
  if (info) {
    info->dtype = t.dtype;
    info->shape = t.shape;
    info->leading_batch = t.shape.size() == 4;
  }
  return x;
}

void save_kv(const std::string& path, const HeadTensor& x, KvLayout layout, DType dtype,
             const std::string& name, bool leading_batch) {
  const std::string ext = lower_extension(path);
  if (ext != ".npy" && ext != ".safetensors")
    io_detail::file_fail(path, "unknown tensor file extension '", ext,
                         "' (expected .npy or .safetensors)");
  RawTensor t = from_head_tensor(x, layout, dtype, leading_batch);
  if (ext == ".npy") {
    write_npy(path, t);
  } else {
    NamedTensors entries;
    entries.emplace_back(name.empty() ? std::string("tensor") : name, std::move(t));
    write_safetensors(path, entries);
  }
}

}  // namespace qvg
