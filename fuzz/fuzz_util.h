// Shared by the libFuzzer targets: an input file in memory, and checks of
// stated properties.
//
// The readers take paths, so each target writes its input to a memfd (no disk)
// reached through a symbolic link with the extension the reader dispatches on
// (/tmp/qvg_fuzz_XXXXXX/input.npy -> /proc/self/fd/N). The directory is removed
// at exit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace qvg::fuzz {

/// Aborts (a crash libFuzzer records) when a stated property fails.
#define QVG_FUZZ_REQUIRE(cond)                                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "property failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

/// A file whose bytes are set per input; path() names it with `name`'s extension.
class InputFile {
 public:
  explicit InputFile(const std::string& name) {
    fd_ = ::memfd_create("qvg_fuzz_input", MFD_CLOEXEC);
    if (fd_ < 0) die("memfd_create");
    char dir[] = "/tmp/qvg_fuzz_XXXXXX";
    if (!::mkdtemp(dir)) die("mkdtemp");
    dir_ = dir;
    path_ = dir_ + "/" + name;
    const std::string target = "/proc/self/fd/" + std::to_string(fd_);
    if (::symlink(target.c_str(), path_.c_str()) != 0) die("symlink");
  }
  ~InputFile() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
    ::close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }

  /// Replaces the file's contents with data[0, size).
  void set(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) die("ftruncate");
    size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) die("pwrite");
      done += static_cast<size_t>(w);
    }
  }

 private:
  [[noreturn]] static void die(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_ = -1;
  std::string dir_, path_;
};

}  // namespace qvg::fuzz
