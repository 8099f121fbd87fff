// The kill test (issue 27): a forked child saves two different caches to one
// path in turn, over and over; the parent SIGKILLs it at a random moment and
// then reads the path. Every time, the file must load and equal one of the two
// caches bit for bit (its bytes, and read() of every layer), and the temporary
// files of killed saves must be removed by the next save.
//
// QVG_KILL_SAVES sets the number of kills (default 200), QVG_KILL_SECONDS a
// time limit after which the test stops killing (default 60; at least 50
// kills are required either way). The counts are printed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qvg/cache.h"
#include "qvg/data.h"

namespace qvg {
namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// Temporary files of saves to `path` (path.tmp.*) in its directory.
int temp_files_of(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

/// A cache of `layers` x 2 heads x 128 dims holding 12 chunks of 256 tokens:
/// spans of `spec` and 4 full-precision (f32) recent chunks (2.4 MB a layer).
StreamingKVCache make_cache(const std::string& spec, int layers, uint64_t seed) {
  CacheConfig c;
  c.layers = layers;
  c.heads = 2;
  c.dim = 128;
  c.key = parse_codec_spec(spec);
  c.value = parse_codec_spec(spec);
  c.policy.quant_factor = 4;
  c.policy.keep_recent = 4;
  c.tail = TailFormat::f32;
  VideoLikeParams p;
  p.frames = 12;
  p.height = 16;
  p.width = 16;
  p.heads = c.heads;
  p.dim = c.dim;
  p.clusters = 8;
  p.seed = seed;
  p.threads = 1;
  const HeadTensor k = make_video_like(p, TensorRole::key), v = make_video_like(p, TensorRole::value);
  StreamingKVCache cache(c, CacheOptions{1});
  const int64_t t = p.height * p.width;
  for (int64_t chunk = 0; chunk < p.frames; ++chunk) {
    HeadTensor kc(c.heads, t, c.dim), vc(c.heads, t, c.dim);
    for (int64_t h = 0; h < c.heads; ++h) {
      std::copy_n(k.head(h) + chunk * t * c.dim, t * c.dim, kc.head(h));
      std::copy_n(v.head(h) + chunk * t * c.dim, t * c.dim, vc.head(h));
    }
    for (int l = 0; l < layers; ++l) cache.append(l, kc, vc);
  }
  return cache;
}

/// read() of every layer of a and b is the same, bit for bit.
bool same_reads(const StreamingKVCache& a, const StreamingKVCache& b) {
  if (a.config().layers != b.config().layers) return false;
  for (int l = 0; l < a.config().layers; ++l) {
    const CacheRead x = a.read(l), y = b.read(l);
    if (!x.k.same_shape(y.k) || !x.v.same_shape(y.v) || x.chunks != y.chunks) return false;
    if (std::memcmp(x.k.data.data(), y.k.data.data(), x.k.data.size() * 4) != 0 ||
        std::memcmp(x.v.data.data(), y.v.data.data(), x.v.data.size() * 4) != 0)
      return false;
  }
  return true;
}

TEST(CacheKill, SigkillDuringSavesLeavesOneWholeCache) {
  const int kills = env_int("QVG_KILL_SAVES", 200);
  const int seconds = env_int("QVG_KILL_SECONDS", 60);
  const StreamingKVCache a = make_cache("qvg:centroids=16", 2, 1), b = make_cache("rtn", 1, 2);
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("qvg_kill_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "cache.qvgc").string();

  // The two files, and how long a save takes here (the kill delays span a few saves).
  auto t0 = Clock::now();
  b.save(path);
  const std::vector<uint8_t> want_b = file_bytes(path);
  a.save(path);
  const std::vector<uint8_t> want_a = file_bytes(path);
  const double save_s = std::chrono::duration<double>(Clock::now() - t0).count() / 2;
  ASSERT_NE(want_a, want_b);
  std::printf("cache a: %zu bytes, cache b: %zu bytes; a save takes %.1f ms\n", want_a.size(), want_b.size(),
              save_s * 1e3);

  std::mt19937_64 rng(20261203);
  std::uniform_real_distribution<double> delay(0.0, 3.0 * save_s);
  int done = 0, seen_a = 0, seen_b = 0, changed = 0, corrupt = 0, max_temp = 0, mid_save = 0;
  std::string first_problem;
  std::vector<uint8_t> before = want_a;
  const auto start = Clock::now();
  while (done < kills && std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork failed";
    if (child == 0) {  // saves a, b, a, b, ... until killed
      try {
        for (;;) {
          a.save(path);
          b.save(path);
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the saving child ended by itself";
    ++done;

    const std::vector<uint8_t> bytes = file_bytes(path);
    const bool is_a = bytes == want_a, is_b = bytes == want_b;
    seen_a += is_a;
    seen_b += is_b;
    changed += bytes != before;
    before = bytes;
    const int temps = temp_files_of(path);  // > 0: killed inside a save (or before its cleanup ran)
    max_temp = std::max(max_temp, temps);
    mid_save += temps > 0;
    std::string problem;
    if (!is_a && !is_b) {
      problem = "the file is neither cache (" + std::to_string(bytes.size()) + " bytes)";
    } else {
      try {
        if (!same_reads(StreamingKVCache::load(path, CacheOptions{1}), is_a ? a : b))
          problem = "the loaded cache reads differently";
      } catch (const Error& e) {
        problem = e.what();
      }
    }
    if (!problem.empty()) {
      ++corrupt;
      if (first_problem.empty()) first_problem = "kill " + std::to_string(done) + ": " + problem;
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%d kills in %.1f s: %d left cache a, %d cache b, %d corrupt; %d left the file as it was (old), %d "
              "changed it (new); %d left a temporary file (killed inside a save), at most %d at once\n",
              done, elapsed, seen_a, seen_b, corrupt, done - changed, changed, mid_save, max_temp);
  EXPECT_EQ(corrupt, 0) << first_problem;
  EXPECT_EQ(seen_a + seen_b, done);
  EXPECT_GE(done, std::min(kills, 50)) << "too few kills in " << seconds << " s";
  EXPECT_GT(changed, 0) << "no kill came after a completed save";
  EXPECT_GT(mid_save, 0) << "no kill landed inside a save";
  // The next save removes what killed saves left.
  a.save(path);
  EXPECT_EQ(temp_files_of(path), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qvg
