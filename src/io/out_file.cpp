// io_detail::OutFile: a file replaced crash-safely (unique temporary file in the
// same directory, fsync, rename over the target, fsync the directory), what it
// may replace (save_target: regular files, through symbolic links), and the
// removal of temporary files that killed savers left behind.
//
// Every temporary file is flock()ed by its writer from creation until it has been
// renamed. A lock is released when its holder dies (also by SIGKILL), so an
// unlocked `<name>.tmp.XXXXXX` belongs to no living writer: each save removes
// those of its own target.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_util.h"

namespace qvg::io_detail {

namespace {

constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr size_t kSuffix = 6;

/// True when `name` is `base` + ".tmp." + six characters of kChars.
bool is_temp_name_of(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  if (name.size() != prefix.size() + kSuffix || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return std::strchr(kChars, c) != nullptr && c != '\0'; });
}

/// Same inode on the same device.
bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

std::string parent_dir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

int remove_stale_temp_files(const std::string& path, const std::string& keep) {
  const std::string dir = parent_dir(path);
  const std::string base = std::filesystem::path(path).filename().string();
  const std::string keep_name = keep.empty() ? std::string() : std::filesystem::path(keep).filename().string();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != keep_name && is_temp_name_of(name, base)) candidates.push_back(name);
  }
  ::closedir(d);
  int removed = 0;
  for (const std::string& name : candidates) {
    const std::string p = dir + "/" + name;
    const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;  // gone already (renamed by its writer), or not ours to open
    struct stat by_fd, by_name;
    // Unlocked: its writer is dead. The name must still be the file locked (a
    // writer that finished renamed it away; its name is then free or new).
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &by_fd) == 0 && S_ISREG(by_fd.st_mode) &&
        ::lstat(p.c_str(), &by_name) == 0 && same_file(by_fd, by_name) && ::unlink(p.c_str()) == 0)
      ++removed;
    ::close(fd);  // (releases the lock)
  }
  return removed;
}

OutFile::OutFile(const std::string& path) : path_(path), target_(save_target(path)) {
  // mkstemp-style, but created with mode 0666 & ~umask (as a plain open would) rather
  // than mkstemp's 0600.
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(::getpid()) << 16);
  int err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    uint64_t r = seed ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    std::string suffix(kSuffix, 'X');
    for (char& c : suffix) {
      c = kChars[r % (sizeof kChars - 1)];
      r /= sizeof kChars - 1;
    }
    tmp_ = target_ + ".tmp." + suffix;
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      err = errno;
      if (err != EEXIST) break;
      continue;
    }
    // Locked from here until it is renamed. Another save's cleanup may have locked
    // (and then removed) it between the open and this lock: then try another name.
    struct stat by_fd, by_name;
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd_, &by_fd) == 0 && ::stat(tmp_.c_str(), &by_name) == 0 &&
        same_file(by_fd, by_name))
      break;
    err = EEXIST;
    ::close(fd_);
    fd_ = -1;
  }
  if (fd_ < 0) {
    const std::string tmp = tmp_;
    tmp_.clear();  // (nothing to remove)
    file_fail(path, "cannot open for writing (creating the temporary file '", tmp, "': ", std::strerror(err), ")");
  }
  // Replacing a file keeps its permissions.
  struct stat st;
  if (::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) (void)::fchmod(fd_, st.st_mode & 07777);
  remove_stale_temp_files(target_, tmp_);
}

OutFile::~OutFile() {
  if (!done_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void OutFile::fail(const std::string& what, int err) {
  if (!tmp_.empty() && !done_) ::unlink(tmp_.c_str());
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
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
  // Renamed while still open (and locked), so no cleanup can take it first.
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    fail("cannot rename '" + tmp_ + "' over " + (target_ == path_ ? std::string("it") : "'" + target_ + "'"), errno);
  done_ = true;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    file_fail(path_, "written, but closing it failed (", std::strerror(errno), ")");
  // The rename is durable once the directory is synced. A directory that cannot be
  // opened (no read permission) or synced (EINVAL: not supported) is left as it is.
  const std::string dir = parent_dir(target_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    file_fail(path_, "written, but syncing its directory '", dir, "' failed (", std::strerror(err), ")");
}

}  // namespace qvg::io_detail

namespace qvg {

std::string save_target(const std::string& path) {
  if (path.empty()) throw Error("cannot save: the path is empty");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return path;  // a new file (a missing directory fails at creation)
    io_detail::file_fail(path, "cannot save: ", std::strerror(errno));
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    // Written through: the file the link leads to is replaced, the link stays.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(path, ec);
    if (ec || ::stat(real.c_str(), &st) != 0) {
      std::error_code ec2;
      const std::string to = std::filesystem::read_symlink(path, ec2).string();
      io_detail::file_fail(path, "cannot save: is a symbolic link to '", to, "', which does not lead to an existing file (",
                ec ? ec.message() : std::strerror(errno),
                "); a save writes through a link only to a file that exists");
    }
    target = real.string();
  }
  const char* kind = S_ISREG(st.st_mode)    ? nullptr
                     : S_ISDIR(st.st_mode)  ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : "not a regular file";
  if (kind)
    io_detail::file_fail(path, "cannot save: ", target == path ? "" : "it leads to '" + target + "', which ", "is ", kind,
              "; a save replaces regular files only (give the path of a file to create or replace)");
  return target;
}

}  // namespace qvg
