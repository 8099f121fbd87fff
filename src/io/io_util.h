// Internal helpers shared by the tensor-file readers and writers (src/io/*.cpp).
#pragma once

#include <bit>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "qvg/common.h"
#include "qvg/io.h"

namespace qvg::io_detail {

static_assert(std::endian::native == std::endian::little,
              "tensor files are little-endian; a big-endian host needs byte swaps here");

/// Throws qvg::Error("<path>: <parts...>"), escaped by printable (the parts may
/// quote bytes of a damaged header).
template <typename... Args>
[[noreturn]] void file_fail(const std::string& path, Args&&... args) {
  std::ostringstream os;
  os << path << ": ";
  (os << ... << args);
  throw Error(printable(os.str()));
}

/// Product of dims with overflow checks; 0 if any dim is 0. Throws (naming `what`) on a
/// negative dim or when the product (or product * itemsize) exceeds int64.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what);
/// numel * itemsize with an overflow check (same errors as checked_numel).
uint64_t checked_nbytes(const std::vector<int64_t>& shape, DType dtype, const std::string& what);

/// "[2, 3, 4]".
std::string shape_str(const std::vector<int64_t>& shape);

/// A file opened for reading, with its size; every read is bounds-checked against it.
class InFile {
 public:
  explicit InFile(const std::string& path);
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Reads n bytes at offset into dst; throws "<path>: truncated: <what> ..." when the
  /// file ends first.
  void read_at(uint64_t offset, void* dst, uint64_t n, const char* what);

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

/// A file replaced crash-safely (src/io/out_file.cpp): the bytes go to a new temporary
/// file in the same directory (path + ".tmp.XXXXXX", created exclusively, so concurrent
/// writers of one path never share it, and flock()ed until renamed); close() fsyncs it,
/// renames it over `path` and fsyncs the directory. Until close() returns, `path` keeps
/// its old contents; a failure, or destruction without close(), removes the temporary
/// file. The constructor also removes the temporary files of `path` that no living
/// writer holds (remove_stale_temp_files). What it replaces is save_target(path)
/// (qvg/io.h: a regular file, through symbolic links; anything else is refused
/// before a byte is written). Errors name `path`.
class OutFile {
 public:
  explicit OutFile(const std::string& path);
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(const void* src, uint64_t n);
  void close();
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);  ///< removes the temporary file, throws

  std::string path_, target_, tmp_;  // target_: save_target(path_)
  int fd_ = -1;
  bool done_ = false;
};

/// The directory holding `path` ("." for a bare file name).
std::string parent_dir(const std::string& path);

/// Removes the files `path` + ".tmp.XXXXXX" (six characters of [A-Za-z0-9]) in the
/// directory of `path` that no process holds a flock() on, i.e. temporary files of
/// OutFile writers that died (a SIGKILL, a crash, a power loss) before renaming them;
/// `keep` (a full path) is skipped. Best effort: entries that cannot be opened or
/// locked are left. Returns how many files it removed.
int remove_stale_temp_files(const std::string& path, const std::string& keep = "");

inline void put_u16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xFF));
  s.push_back(static_cast<char>(v >> 8));
}
inline void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace qvg::io_detail
