// Built-in data: the video-like generator, the real-clip K/V and the video reader.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "qvg/data.h"
#include "qvg/video.h"

namespace qvg {
namespace {

/// A small video-like configuration that runs fast.
VideoLikeParams small_params() {
  VideoLikeParams p;
  p.frames = 6;
  p.height = 12;
  p.width = 20;
  p.heads = 3;
  p.dim = 64;
  p.clusters = 12;
  p.threads = 2;
  return p;
}

double mean_sq_dist(const float* a, const float* b, int64_t dim) {
  double s = 0;
  for (int64_t d = 0; d < dim; ++d) s += (static_cast<double>(a[d]) - b[d]) * (static_cast<double>(a[d]) - b[d]);
  return s;
}

/// Mean squared distance between each token and the token `offset` later
/// (pairs given by a predicate), against random pairs of the same head.
struct PairStats {
  double pair = 0;    // mean over chosen pairs
  double random = 0;  // mean over pseudo-random pairs (fixed permutation)
};

template <typename Pairs>
PairStats pair_stats(const HeadTensor& x, Pairs pairs) {
  PairStats st;
  int64_t np = 0, nr = 0;
  for (int64_t h = 0; h < x.heads; ++h) {
    const float* X = x.head(h);
    pairs([&](int64_t a, int64_t b) {
      st.pair += mean_sq_dist(X + a * x.dim, X + b * x.dim, x.dim);
      ++np;
    });
    for (int64_t a = 0; a < x.tokens; ++a) {
      const int64_t b = (a * 7919 + 104729) % x.tokens;  // a fixed "shuffle"
      if (b == a) continue;
      st.random += mean_sq_dist(X + a * x.dim, X + b * x.dim, x.dim);
      ++nr;
    }
  }
  st.pair /= static_cast<double>(np);
  st.random /= static_cast<double>(nr);
  return st;
}

/// Per-channel RMS over heads and tokens, sorted ascending, for each head separately.
std::vector<std::vector<double>> channel_rms(const HeadTensor& x) {
  std::vector<std::vector<double>> out;
  for (int64_t h = 0; h < x.heads; ++h) {
    std::vector<double> r(static_cast<size_t>(x.dim), 0.0);
    for (int64_t n = 0; n < x.tokens; ++n)
      for (int64_t d = 0; d < x.dim; ++d) r[d] += static_cast<double>(x.at(h, n, d)) * x.at(h, n, d);
    for (auto& v : r) v = std::sqrt(v / static_cast<double>(x.tokens));
    std::sort(r.begin(), r.end());
    out.push_back(r);
  }
  return out;
}

bool all_finite(const HeadTensor& x) {
  return std::all_of(x.data.begin(), x.data.end(), [](float v) { return std::isfinite(v); });
}

// ---------------------------------------------------------------- video-like

// Shipped resources: an installed qvg's share/qvg (beside the running
// executable's prefix) first, then the source tree; the first that has the
// file wins, and the search names every place.
TEST(Resources, InstalledFirstThenSourceTree) {
  const std::vector<std::string> roots = resource_roots();
  ASSERT_EQ(roots.size(), 2u);
  EXPECT_NE(roots[0].find("/share/qvg"), std::string::npos) << roots[0];
  EXPECT_EQ(std::filesystem::weakly_canonical(roots[1]), std::filesystem::weakly_canonical(QVG_SOURCE_DIR));
  const std::string model = resource_path("models/qvg_ref_video_dit.safetensors");
  EXPECT_TRUE(std::filesystem::exists(model)) << model;
  EXPECT_EQ(resource_path("no/such/file"), roots[1] + "/no/such/file");
  const std::string search = resource_search("no/such/file");
  EXPECT_NE(search.find(roots[0] + "/no/such/file"), std::string::npos) << search;
  EXPECT_NE(search.find(roots[1] + "/no/such/file"), std::string::npos) << search;
}

TEST(VideoLike, ShapeAndFiniteDefaults) {
  VideoLikeParams p;  // the Self-Forcing span: 24 x 30 x 52 tokens, 12 heads, dim 128
  p.threads = 2;
  EXPECT_EQ(p.tokens(), 37440);
  const HeadTensor k = make_video_like(p, TensorRole::key);
  EXPECT_EQ(k.heads, 12);
  EXPECT_EQ(k.tokens, 37440);
  EXPECT_EQ(k.dim, 128);
  EXPECT_EQ(static_cast<int64_t>(k.data.size()), k.numel());
  EXPECT_TRUE(all_finite(k));
  EXPECT_NO_THROW(check_finite(k, "keys"));
}

TEST(VideoLike, SameSeedSameBytesAnyThreadCount) {
  VideoLikeParams p = small_params();
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    p.threads = 1;
    const HeadTensor a = make_video_like(p, role);
    p.threads = 3;
    const HeadTensor b = make_video_like(p, role);
    ASSERT_TRUE(a.same_shape(b));
    EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)));
  }
}

TEST(VideoLike, DifferentSeedRoleHeadDiffer) {
  VideoLikeParams p = small_params();
  const HeadTensor k = make_video_like(p, TensorRole::key);
  const HeadTensor v = make_video_like(p, TensorRole::value);
  p.seed += 1;
  const HeadTensor k2 = make_video_like(p, TensorRole::key);
  EXPECT_NE(k.data, v.data);
  EXPECT_NE(k.data, k2.data);
  // heads differ from each other
  const size_t per_head = static_cast<size_t>(k.tokens * k.dim);
  EXPECT_FALSE(std::equal(k.data.begin(), k.data.begin() + per_head, k.data.begin() + per_head));
  // different seeds give different segmentations
  VideoLikeParams q = small_params();
  const auto l1 = video_like_labels(q);
  q.seed += 1;
  EXPECT_NE(l1, video_like_labels(q));
}

TEST(VideoLike, GoldenValues) {
  // Pins the generator: a change of these numbers changes every result built on it.
  // The tolerance allows last-bit differences of libm between platforms.
  VideoLikeParams p = small_params();
  const HeadTensor k = make_video_like(p, TensorRole::key);
  const HeadTensor v = make_video_like(p, TensorRole::value);
  const float got[4] = {k.at(0, 0, 0), k.at(2, 1000, 63), v.at(0, 0, 0), v.at(1, 777, 5)};
  // Printed once to update after an intended change of the generator.
  std::printf("golden: %.9g %.9g %.9g %.9g\n", got[0], got[1], got[2], got[3]);
  const float want[4] = {0.419615567f, 2.57973695f, 0.149742424f, -0.985541999f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << i;
}

TEST(VideoLike, ShapesFollowParams) {
  VideoLikeParams p = small_params();
  p.frames = 3;
  p.height = 5;
  p.width = 7;
  p.heads = 2;
  p.dim = 16;
  p.clusters = 1;
  const HeadTensor v = make_video_like(p, TensorRole::value);
  EXPECT_EQ(v.heads, 2);
  EXPECT_EQ(v.tokens, 105);
  EXPECT_EQ(v.dim, 16);
  EXPECT_TRUE(all_finite(v));
  const auto labels = video_like_labels(p);
  EXPECT_EQ(labels.size(), 105u);
  EXPECT_TRUE(std::all_of(labels.begin(), labels.end(), [](int l) { return l == 0; }));
}

/// Neighbours are closer than random pairs: clearly without token noise, and
/// still with the default noise (which adds the same amount to both).
TEST(VideoLike, SpatiallyAndTemporallyCorrelated) {
  for (bool noise : {false, true})
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    VideoLikeParams p = small_params();
    if (!noise) p.key_noise = p.value_noise = 0;
    const double bound = noise ? 0.8 : 0.35;
    const HeadTensor x = make_video_like(p, role);
    const int64_t hw = int64_t{p.height} * p.width;
    // right neighbour in the same row
    const PairStats spatial = pair_stats(x, [&](auto emit) {
      for (int64_t n = 0; n < x.tokens; ++n)
        if ((n % p.width) + 1 < p.width) emit(n, n + 1);
    });
    // the same grid cell in the next frame
    const PairStats temporal = pair_stats(x, [&](auto emit) {
      for (int64_t n = 0; n + hw < x.tokens; ++n) emit(n, n + hw);
    });
    std::printf("video-like noise %d role %d: neighbour / random distance: spatial %.3f temporal %.3f\n", noise,
                static_cast<int>(role), spatial.pair / spatial.random, temporal.pair / temporal.random);
    EXPECT_LT(spatial.pair, bound * spatial.random) << "spatial, role " << static_cast<int>(role);
    EXPECT_LT(temporal.pair, bound * temporal.random) << "temporal, role " << static_cast<int>(role);
  }
}

TEST(VideoLike, ObjectsMoveSlowly) {
  const VideoLikeParams p = small_params();
  const auto labels = video_like_labels(p);
  const int64_t hw = int64_t{p.height} * p.width;
  int64_t same = 0, total = 0;
  for (size_t n = 0; n + hw < labels.size(); ++n, ++total) same += labels[n] == labels[n + hw];
  EXPECT_GT(static_cast<double>(same) / total, 0.75);  // most cells keep their object
  int64_t changed = 0;
  for (size_t n = 0; n + hw < labels.size(); ++n) changed += labels[n] != labels[n + hw];
  EXPECT_GT(changed, 0);  // but objects do move
  std::vector<int> count(static_cast<size_t>(p.clusters), 0);
  for (int l : labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, p.clusters);
    ++count[l];
  }
  EXPECT_GE(std::count_if(count.begin(), count.end(), [](int c) { return c > 0; }), p.clusters / 2);
}

TEST(VideoLike, TokensOfOneObjectLookAlike) {
  const VideoLikeParams p = small_params();
  const auto labels = video_like_labels(p);
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const HeadTensor x = make_video_like(p, role);
    double total = 0, within = 0;
    for (int64_t h = 0; h < x.heads; ++h) {
      // variance around the global mean vs around each object's mean
      std::vector<double> mean(static_cast<size_t>(x.dim), 0.0);
      std::vector<double> obj_mean(static_cast<size_t>(p.clusters * x.dim), 0.0);
      std::vector<int64_t> obj_n(static_cast<size_t>(p.clusters), 0);
      for (int64_t n = 0; n < x.tokens; ++n) {
        ++obj_n[labels[n]];
        for (int64_t d = 0; d < x.dim; ++d) {
          mean[d] += x.at(h, n, d);
          obj_mean[labels[n] * x.dim + d] += x.at(h, n, d);
        }
      }
      for (auto& m : mean) m /= static_cast<double>(x.tokens);
      for (int c = 0; c < p.clusters; ++c)
        for (int64_t d = 0; d < x.dim; ++d)
          if (obj_n[c] > 0) obj_mean[c * x.dim + d] /= static_cast<double>(obj_n[c]);
      for (int64_t n = 0; n < x.tokens; ++n)
        for (int64_t d = 0; d < x.dim; ++d) {
          const double v = x.at(h, n, d);
          total += (v - mean[d]) * (v - mean[d]);
          within += (v - obj_mean[labels[n] * x.dim + d]) * (v - obj_mean[labels[n] * x.dim + d]);
        }
    }
    EXPECT_LT(within, 0.5 * total) << "role " << static_cast<int>(role);
  }
}

TEST(VideoLike, KeysHaveOutlierChannelsValuesDoNot) {
  VideoLikeParams p = small_params();
  const auto krms = channel_rms(make_video_like(p, TensorRole::key));
  const auto vrms = channel_rms(make_video_like(p, TensorRole::value));
  for (size_t h = 0; h < krms.size(); ++h) {
    const auto& k = krms[h];
    const double k_median = k[k.size() / 2];
    // the outlier_channels largest channels are >= 3x the median channel
    for (int i = 1; i <= p.outlier_channels; ++i) EXPECT_GT(k[k.size() - i], 3.0 * k_median) << "head " << h;
    EXPECT_LT(k[k.size() - p.outlier_channels - 1], 3.0 * k_median) << "head " << h;
    const auto& v = vrms[h];
    EXPECT_LT(v.back(), 2.5 * v[v.size() / 2]) << "head " << h;
  }
  p.outlier_channels = 0;
  const auto none = channel_rms(make_video_like(p, TensorRole::key));
  for (const auto& k : none) EXPECT_LT(k.back(), 2.5 * k[k.size() / 2]);
}

TEST(VideoLike, RmsOfOrdinaryChannels) {
  VideoLikeParams p = small_params();
  p.outlier_channels = 0;
  p.key_channel_offset = 0;
  p.rms = 2.5;
  const HeadTensor k = make_video_like(p, TensorRole::key);
  for (int64_t h = 0; h < k.heads; ++h) {
    double s = 0;
    for (int64_t i = 0; i < k.tokens * k.dim; ++i) s += static_cast<double>(k.head(h)[i]) * k.head(h)[i];
    EXPECT_NEAR(std::sqrt(s / static_cast<double>(k.tokens * k.dim)), 2.5, 1e-3);
  }
}

TEST(VideoLike, BadParamsThrow) {
  VideoLikeParams p = small_params();
  p.frames = 0;
  EXPECT_THROW(make_video_like(p, TensorRole::key), Error);
  p = small_params();
  p.dim = -1;
  EXPECT_THROW(make_video_like(p, TensorRole::key), Error);
  p = small_params();
  p.clusters = 0;
  EXPECT_THROW(video_like_labels(p), Error);
  p = small_params();
  p.rms = 0;
  EXPECT_THROW(make_video_like(p, TensorRole::value), Error);
}

// ---------------------------------------------------------------- clips

TEST(Clips, BuiltinNamesAndPaths) {
  const auto clips = builtin_clips();
  EXPECT_EQ(clips, (std::vector<std::string>{"box", "cityCC0", "cockatoo", "cup", "vtest"}));
  for (const auto& c : clips) {
    const std::string path = builtin_clip_path(c);
    EXPECT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_EQ(resolve_clip(c), path);
  }
  EXPECT_EQ(resolve_clip("/some/where.mp4"), "/some/where.mp4");
  try {
    builtin_clip_path("parrot");
    FAIL() << "no error for an unknown clip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parrot"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cockatoo"), std::string::npos);
  }
}

#if defined(QVG_WITH_FFMPEG) && QVG_WITH_FFMPEG

TEST(Video, ReadsEveryShippedClip) {
  ASSERT_TRUE(video_support());
  // frames of each clip (data/clips/NOTICE.md)
  const std::vector<std::pair<std::string, int>> expected = {
      {"box", 228}, {"cityCC0", 190}, {"cockatoo", 240}, {"cup", 217}, {"vtest", 240}};
  for (const auto& [name, frames] : expected) {
    const Video v = read_video(builtin_clip_path(name));
    EXPECT_EQ(v.width, 416) << name;
    EXPECT_EQ(v.height, 240) << name;
    EXPECT_EQ(v.frames, frames) << name;
    EXPECT_GT(v.fps, 5.0) << name;
    EXPECT_EQ(v.rgb.size(), static_cast<size_t>(frames) * 416 * 240 * 3) << name;
    // real content, not a constant image
    const auto [lo, hi] = std::minmax_element(v.rgb.begin(), v.rgb.begin() + 416 * 240 * 3);
    EXPECT_GT(*hi - *lo, 100) << name;
  }
}

TEST(Video, MaxFramesAndScaling) {
  const Video v = read_video(builtin_clip_path("cockatoo"), 5, 104, 60);
  EXPECT_EQ(v.frames, 5);
  EXPECT_EQ(v.width, 104);
  EXPECT_EQ(v.height, 60);
  EXPECT_EQ(v.rgb.size(), 5u * 104 * 60 * 3);
  const Video again = read_video(builtin_clip_path("cockatoo"), 5, 104, 60);
  EXPECT_EQ(v.rgb, again.rgb);
}

TEST(Video, MissingFileThrows) {
  try {
    read_video("/nonexistent/dir/clip.mp4");
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/clip.mp4"), std::string::npos) << e.what();
  }
}

TEST(Video, CorruptFileThrows) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string garbage = (dir / "qvg_test_garbage.mp4").string();
  {
    std::ofstream f(garbage, std::ios::binary);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 100000; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      f.put(static_cast<char>(s & 0xFF));
    }
  }
  EXPECT_THROW(read_video(garbage), Error);
  // a real clip cut after its header: no decodable frame, or an error
  const std::string cut = (dir / "qvg_test_truncated.mp4").string();
  {
    std::ifstream in(builtin_clip_path("cup"), std::ios::binary);
    std::vector<char> head(2000);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream out(cut, std::ios::binary);
    out.write(head.data(), in.gcount());
  }
  EXPECT_THROW(read_video(cut), Error);
  const std::string empty = (dir / "qvg_test_empty.mp4").string();
  { std::ofstream f(empty, std::ios::binary); }
  EXPECT_THROW(read_video(empty), Error);
  std::filesystem::remove(garbage);
  std::filesystem::remove(cut);
  std::filesystem::remove(empty);
}

TEST(Video, BadArgumentsThrow) {
  EXPECT_THROW(read_video(builtin_clip_path("cup"), -1), Error);
  EXPECT_THROW(read_video(builtin_clip_path("cup"), 1, -4, 10), Error);
}

// ---------------------------------------------------------------- clip K/V

ClipKVParams small_clip() {
  ClipKVParams p;
  p.frames = 4;
  p.heads = 2;
  p.dim = 64;
  p.threads = 2;
  return p;
}

TEST(ClipKV, DefaultShape) {
  ClipKVParams p;
  EXPECT_EQ(p.grid_width(), 52);
  EXPECT_EQ(p.grid_height(), 30);
  EXPECT_EQ(p.tokens(), 37440);
  p.heads = 1;  // keep the test quick; tokens are what the defaults promise
  p.threads = 1;
  const HeadTensor k = make_clip_kv(p, TensorRole::key);
  EXPECT_EQ(k.heads, 1);
  EXPECT_EQ(k.tokens, 37440);
  EXPECT_EQ(k.dim, 128);
  EXPECT_TRUE(all_finite(k));
}

TEST(ClipKV, DeterministicAndSeeded) {
  ClipKVParams p = small_clip();
  const HeadTensor a = make_clip_kv(p, TensorRole::key);
  p.threads = 1;
  const HeadTensor b = make_clip_kv(p, TensorRole::key);
  EXPECT_EQ(a.data, b.data);
  const HeadTensor v = make_clip_kv(p, TensorRole::value);
  EXPECT_NE(a.data, v.data);
  p.seed = 99;
  EXPECT_NE(a.data, make_clip_kv(p, TensorRole::key).data);
  p = small_clip();
  p.clip = "vtest";
  EXPECT_NE(a.data, make_clip_kv(p, TensorRole::key).data);
}

TEST(ClipKV, EveryClipIsCorrelatedWithOutlierKeys) {
  for (bool noise : {false, true})
  for (const auto& name : builtin_clips()) {
    ClipKVParams p = small_clip();
    p.clip = name;
    if (!noise) p.key_noise = p.value_noise = 0;
    const double bound = noise ? 0.85 : 0.75;  // real texture and motion: less than video-like
    const HeadTensor k = make_clip_kv(p, TensorRole::key);
    const HeadTensor v = make_clip_kv(p, TensorRole::value);
    ASSERT_EQ(k.tokens, 4 * 1560);
    EXPECT_TRUE(all_finite(k) && all_finite(v)) << name;
    const int gw = p.grid_width();
    const int64_t hw = int64_t{gw} * p.grid_height();
    for (const HeadTensor* x : {&k, &v}) {
      const PairStats spatial = pair_stats(*x, [&](auto emit) {
        for (int64_t n = 0; n < x->tokens; ++n)
          if ((n % gw) + 1 < gw) emit(n, n + 1);
      });
      const PairStats temporal = pair_stats(*x, [&](auto emit) {
        for (int64_t n = 0; n + hw < x->tokens; ++n) emit(n, n + hw);
      });
      std::printf("%s noise %d: neighbour / random distance: spatial %.3f temporal %.3f\n", name.c_str(), noise,
                  spatial.pair / spatial.random, temporal.pair / temporal.random);
      EXPECT_LT(spatial.pair, bound * spatial.random) << name;
      EXPECT_LT(temporal.pair, bound * temporal.random) << name;
    }
    const auto krms = channel_rms(k);
    for (const auto& c : krms)
      for (int i = 1; i <= p.outlier_channels; ++i) EXPECT_GT(c[c.size() - i], 3.0 * c[c.size() / 2]) << name;
    const auto vrms = channel_rms(v);
    for (const auto& c : vrms) EXPECT_LT(c.back(), 3.0 * c[c.size() / 2]) << name;
  }
}

TEST(ClipKV, PathOverrideAndErrors) {
  ClipKVParams p = small_clip();
  p.clip = builtin_clip_path("box");  // a path works like the name
  const HeadTensor a = make_clip_kv(p, TensorRole::value);
  p.clip = "box";
  EXPECT_EQ(a.data, make_clip_kv(p, TensorRole::value).data);
  p.clip = "/nonexistent/clip.mp4";
  EXPECT_THROW(make_clip_kv(p, TensorRole::key), Error);
  p = small_clip();
  p.clip = "cup";  // 217 frames
  p.frames = 60;
  p.frame_step = 4;  // needs 237
  try {
    make_clip_kv(p, TensorRole::key);
    FAIL() << "no error for a too short clip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("217"), std::string::npos) << e.what();
  }
  p = small_clip();
  p.patch = 0;
  EXPECT_THROW(make_clip_kv(p, TensorRole::key), Error);
}

#else

TEST(Video, WithoutFFmpegThrows) {
  EXPECT_FALSE(video_support());
  EXPECT_THROW(read_video(builtin_clip_path("cockatoo")), Error);
  EXPECT_THROW(make_clip_kv(ClipKVParams{}, TensorRole::key), Error);
}

#endif

}  // namespace
}  // namespace qvg
