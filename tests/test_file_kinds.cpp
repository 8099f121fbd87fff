// What the readers and the crash-safe writer do with what is not a plain file
// (issue 27): a FIFO given as input (it blocked the tool forever), a device, a
// directory; and the temporary files that killed saves leave behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
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

}  // namespace
}  // namespace qvg
