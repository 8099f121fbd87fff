// What the readers and the crash-safe writer do with what is not a plain file
// (issue 27): a FIFO given as input (it blocked the tool forever), a device, a
// directory; and the temporary files that killed saves leave behind. What a
// save may replace (issue 41: it replaced FIFOs, devices and links): regular
// files only, written through symbolic links, their mode kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_util.h"
#include "io/io_util.h"
#include "qvg/cache.h"
#include "qvg/io.h"
#include "qvg/model.h"

namespace qvg {
namespace {

namespace fs = std::filesystem;
using test::error_of;

class FileKinds : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("qvg_test_kinds_") + info->name() + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

/// f's error message, or a failure if f has not returned within 10 s (then the
/// FIFO is opened for writing, which lets a reader blocked in open() go on).
std::string error_within_10s(const std::function<void()>& f, const std::string& fifo) {
  auto result = std::async(std::launch::async, [&] { return error_of(f); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::ready) return result.get();
  ADD_FAILURE() << "blocked on the FIFO " << fifo;
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  const std::string e = result.get();
  if (fd >= 0) ::close(fd);
  return e;
}

// Every reader refuses a FIFO at once, naming it; before, the open blocked until a
// writer appeared (`qvg eval --k fifo.npy` never returned).
TEST_F(FileKinds, FifoInputIsRefusedWithoutBlocking) {
  for (const char* name : {"k.npy", "k.safetensors", "c.qvgc", "w.safetensors"}) {
    const std::string p = path(name);
    ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
    const std::string ext = fs::path(p).extension().string();
    std::vector<std::function<void()>> readers;
    if (ext == ".npy") readers = {[&] { read_npy(p); }, [&] { load_kv(p, KvLayout::thd); }};
    if (ext == ".safetensors")
      readers = {[&] { read_safetensors(p); }, [&] { read_safetensors_header(p); }, [&] { load_kv(p, KvLayout::htd); },
                 [&] { Model::load(p); }};
    if (ext == ".qvgc") readers = {[&] { StreamingKVCache::load(p); }};
    for (const auto& read : readers) {
      const std::string e = error_within_10s(read, p);
      EXPECT_NE(e.find(p), std::string::npos) << e;
      EXPECT_NE(e.find("is a FIFO (named pipe); qvg reads regular files only"), std::string::npos) << e;
    }
  }
}

TEST_F(FileKinds, DevicesAndDirectoriesAreNamed) {
  EXPECT_NE(error_of([] { read_npy("/dev/null"); }).find("/dev/null: cannot read: is a character device"),
            std::string::npos);
  EXPECT_NE(error_of([] { StreamingKVCache::load("/dev/zero"); }).find("is a character device"), std::string::npos);
  EXPECT_NE(error_of([&] { read_safetensors(dir_.string()); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { StreamingKVCache::load(dir_.string()); }).find("is a directory"), std::string::npos);
  const std::string missing = error_of([&] { read_npy(path("none.npy")); });
  EXPECT_NE(missing.find("none.npy: cannot open: file not found"), std::string::npos) << missing;
  // Through a symbolic link, a regular file is read.
  write_npy(path("a.npy"), RawTensor{DType::u8, {3}, {1, 2, 3}});
  fs::create_symlink(path("a.npy"), path("link.npy"));
  EXPECT_EQ(read_npy(path("link.npy")).bytes, (std::vector<uint8_t>{1, 2, 3}));
}

// A save removes the temporary files of its target that no living writer holds
// (a killed save's); it leaves a locked one (a save in progress elsewhere), other
// targets' and names that are not its pattern.
TEST_F(FileKinds, SaveRemovesOnlyStaleTemporaryFilesOfItsTarget) {
  const std::string target = path("t.npy");
  auto touch = [&](const std::string& name) {
    std::ofstream(path(name)) << "partial";
    return path(name);
  };
  touch("t.npy.tmp.AbC123");                       // stale: removed
  touch("t.npy.tmp.zzzzzz");                       // stale: removed
  const std::string held = touch("t.npy.tmp.HELD00");  // locked below: kept
  touch("t.npy.tmp.short");                        // not the pattern: kept
  touch("t.npy.tmp.ABCDEFG");                      // not the pattern: kept
  touch("t.npy.tmp.AB-DEF");                       // not the pattern: kept
  touch("u.npy.tmp.ABCDEF");                       // another target: kept
  const int fd = ::open(held.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  write_npy(target, RawTensor{DType::u8, {2}, {7, 8}});
  auto names = [&] {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"t.npy", "t.npy.tmp.AB-DEF", "t.npy.tmp.ABCDEFG", "t.npy.tmp.HELD00",
                                               "t.npy.tmp.short", "u.npy.tmp.ABCDEF"}));
  ::close(fd);  // its writer is gone: the next save removes it
  EXPECT_EQ(io_detail::remove_stale_temp_files(target), 1);
  EXPECT_FALSE(fs::exists(held));
  EXPECT_EQ(read_npy(target).bytes, (std::vector<uint8_t>{7, 8}));
}

std::vector<uint8_t> bytes_of(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

/// Names in dir holding ".tmp.": temporary files a save left.
int temp_files_in(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

CacheConfig tiny_cache_config() {
  CacheConfig c;
  c.layers = 1;
  c.heads = 1;
  c.dim = 16;
  c.key = c.value = parse_codec_spec("bf16");
  return c;
}

// Every existing target that is not a regular file is refused, named, and left
// as it was; nothing is written. (This suite runs as root in CI's container:
// /dev/null is reached only through a link here, so a save that regressed would
// replace the link, not the device.)
TEST_F(FileKinds, SaveRefusesTargetsThatAreNotRegularFiles) {
  StreamingKVCache cache(tiny_cache_config(), CacheOptions{1});
  cache.append(0, HeadTensor(1, 4, 16), HeadTensor(1, 4, 16));
  const RawTensor t{DType::u8, {2}, {1, 2}};
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = path("sock");
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  fs::create_directory(path("dir"));
  fs::create_symlink("/dev/null", path("null_link"));
  fs::create_symlink(path("dir"), path("dir_link"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {path("fifo"), "fifo: cannot save: is a FIFO (named pipe); a save replaces regular files only"},
      {sock_path, "sock: cannot save: is a socket; a save replaces regular files only"},
      {path("dir"), "dir: cannot save: is a directory"},
      {path("null_link"), "null_link: cannot save: it leads to '/dev/null', which is a character device"},
      {path("dir_link"), "dir_link: cannot save: it leads to '" + path("dir") + "', which is a directory"},
  };
  for (const auto& [target_name, message] : cases) {
    const std::string target = target_name;  // lambdas below capture it (clang: not a structured binding)
    SCOPED_TRACE(target);
    const fs::file_status before = fs::symlink_status(target);
    for (const std::string& e : {error_of([&] { cache.save(target); }), error_of([&] { write_npy(target, t); }),
                                 error_of([&] { write_safetensors(target, {{"t", t}}); })})
      EXPECT_NE(e.find(message), std::string::npos) << e;
    EXPECT_EQ(fs::symlink_status(target).type(), before.type());
  }
  EXPECT_NE(error_of([] { (void)save_target("/dev/null"); }).find("/dev/null: cannot save: is a character device"),
            std::string::npos);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_EQ(temp_files_in(dir_), 0);
  ::close(sock);
}

// A symbolic link is written through: the file it leads to (through a chain of
// links, in another directory) gets the new bytes and keeps its mode; the links
// stay links. A link to nothing is refused and nothing is created.
TEST_F(FileKinds, SaveWritesThroughSymbolicLinksAndKeepsTheMode) {
  StreamingKVCache cache(tiny_cache_config(), CacheOptions{1});
  cache.append(0, HeadTensor(1, 4, 16), HeadTensor(1, 4, 16));
  cache.save(path("reference.qvgc"));
  const std::vector<uint8_t> reference = bytes_of(path("reference.qvgc"));
  fs::create_directory(path("sub"));
  const std::string file = path("sub/real.qvgc");
  std::ofstream(file) << "old";
  fs::create_symlink("sub/real.qvgc", path("link1"));  // relative
  fs::create_symlink(path("link1"), path("link2"));     // a chain
  for (const fs::perms mode : {fs::perms(0640), fs::perms(0600), fs::perms(0751)}) {
    fs::permissions(file, mode);
    cache.save(path("link2"));
    EXPECT_EQ(bytes_of(file), reference);
    EXPECT_EQ(fs::status(file).permissions() & fs::perms::all, mode);
    EXPECT_TRUE(fs::is_symlink(path("link1")));
    EXPECT_TRUE(fs::is_symlink(path("link2")));
    EXPECT_EQ(fs::read_symlink(path("link1")), "sub/real.qvgc");
    EXPECT_EQ(save_target(path("link2")), fs::canonical(file).string());
  }
  EXPECT_NO_THROW(StreamingKVCache::load(path("link2")));
  EXPECT_EQ(temp_files_in(dir_), 0);
  EXPECT_EQ(temp_files_in(path("sub")), 0);
  // A file saved over directly keeps its mode too; a new file gets 0666 & ~umask.
  fs::permissions(path("reference.qvgc"), fs::perms(0604));
  cache.save(path("reference.qvgc"));
  EXPECT_EQ(fs::status(path("reference.qvgc")).permissions() & fs::perms::all, fs::perms(0604));
  // A link to nothing.
  fs::create_symlink("missing/none.qvgc", path("dangling"));
  const std::string e = error_of([&] { cache.save(path("dangling")); });
  EXPECT_NE(e.find("dangling: cannot save: is a symbolic link to 'missing/none.qvgc', which does not lead to an "
                   "existing file"),
            std::string::npos)
      << e;
  EXPECT_TRUE(fs::is_symlink(path("dangling")));
  EXPECT_FALSE(fs::exists(path("missing")));
  EXPECT_NE(error_of([] { (void)save_target(""); }).find("cannot save: the path is empty"), std::string::npos);
}

}  // namespace
}  // namespace qvg
