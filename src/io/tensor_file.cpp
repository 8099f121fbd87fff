// DType / KvLayout / RawTensor basics, file helpers, and the K/V conversions
// (to_head_tensor, from_head_tensor, load_kv, save_kv).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) file_fail(path, "cannot open: file not found");
  if (std::filesystem::is_directory(st)) file_fail(path, "cannot open: is a directory");
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

OutFile::OutFile(const std::string& path) : path_(path) {
  // mkstemp-style, but created with mode 0666 & ~umask (as a plain open would) rather
  // than mkstemp's 0600.
  static std::atomic<uint64_t> counter{0};
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(::getpid()) << 16);
  int err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    uint64_t r = seed ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    std::string suffix(6, 'X');
    for (char& c : suffix) {
      c = kChars[r % (sizeof kChars - 1)];
      r /= sizeof kChars - 1;
    }
    tmp_ = path + ".tmp." + suffix;
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    err = errno;
    if (err != EEXIST) break;
  }
  if (fd_ < 0) {
    const std::string tmp = tmp_;
    tmp_.clear();  // (nothing to remove)
    file_fail(path, "cannot open for writing (creating the temporary file '", tmp, "': ", std::strerror(err), ")");
  }
  // Replacing a file keeps its permissions.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) (void)::fchmod(fd_, st.st_mode & 07777);
}

OutFile::~OutFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  done_ = true;
  file_fail(path_, what, " (", std::strerror(err), ")");
}

void OutFile::write(const void* src, uint64_t n) {
  QVG_CHECK(fd_ >= 0, path_, ": write after close");
  const char* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write error", w < 0 ? errno : EIO);
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

void OutFile::close() {
  QVG_CHECK(fd_ >= 0, path_, ": closed twice");
  if (::fsync(fd_) != 0) fail("write error on fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("write error on close", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename '" + tmp_ + "' over it", errno);
  done_ = true;
  // The rename is durable once the directory is synced. A directory that cannot be
  // opened (no read permission) or synced (EINVAL: not supported) is left as it is.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    file_fail(path_, "written, but syncing its directory '", dir, "' failed (", std::strerror(err), ")");
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
