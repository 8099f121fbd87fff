// make_clip_kv: keys/values from real video: patches of the shipped clips
// through a fixed seeded projection; and where the shipped clips are.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/synth.h"
#include "qvg/data.h"
#include "qvg/video.h"
#include "util/join.h"
#include "util/parallel.h"

namespace qvg {

std::vector<std::string> builtin_clips() { return {"box", "cityCC0", "cockatoo", "cup", "vtest"}; }

std::string data_dir() {
  const char* env = std::getenv("QVG_DATA_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  const std::string clips = resource_path("data/clips");
  return clips.substr(0, clips.size() - std::string("/clips").size());
}

std::string builtin_clip_path(const std::string& name) {
  const auto clips = builtin_clips();
  QVG_CHECK(std::find(clips.begin(), clips.end(), name) != clips.end(), "unknown built-in clip '", name, "' (known: ",
            join(clips), ")");
  return data_dir() + "/clips/" + name + ".mp4";
}

std::string resolve_clip(const std::string& name_or_path) {
  const auto clips = builtin_clips();
  if (std::find(clips.begin(), clips.end(), name_or_path) != clips.end()) return builtin_clip_path(name_or_path);
  return name_or_path;
}

HeadTensor make_clip_kv(const ClipKVParams& p, TensorRole role) {
  QVG_CHECK(p.frames > 0, "clip K/V: frames must be > 0, got ", p.frames);
  QVG_CHECK(p.first_frame >= 0, "clip K/V: first_frame must be >= 0, got ", p.first_frame);
  QVG_CHECK(p.frame_step > 0, "clip K/V: frame_step must be > 0, got ", p.frame_step);
  QVG_CHECK(p.patch > 0, "clip K/V: patch must be > 0, got ", p.patch);
  QVG_CHECK(p.width >= p.patch && p.height >= p.patch, "clip K/V: frame size ", p.width, "x", p.height,
            " is smaller than one ", p.patch, "x", p.patch, " patch");
  QVG_CHECK(p.heads > 0 && p.dim > 0, "clip K/V: heads and dim must be > 0, got ", p.heads, ", ", p.dim);
  QVG_CHECK(p.outlier_channels >= 0, "clip K/V: outlier_channels must be >= 0, got ", p.outlier_channels);
  QVG_CHECK(p.key_noise >= 0 && p.value_noise >= 0 && p.rms > 0 && p.key_outlier_gain >= 0 && p.value_outlier_gain >= 0 &&
                p.key_channel_offset >= 0 && p.value_channel_offset >= 0,
            "clip K/V: magnitudes must be >= 0 (rms > 0)");

  const std::string path = resolve_clip(p.clip);
  const int64_t needed = int64_t{p.first_frame} + int64_t{p.frame_step} * (p.frames - 1) + 1;
  QVG_CHECK(needed < (int64_t{1} << 30), "clip K/V: too many frames requested");
  const Video video = read_video(path, static_cast<int>(needed), p.width, p.height);
  QVG_CHECK(video.frames >= needed, "clip K/V: '", path, "' has ", video.frames, " frames, but frames=", p.frames,
            ", first_frame=", p.first_frame, ", frame_step=", p.frame_step, " need ", needed);

  // Patches: [tokens, patch * patch * 3], value = pixel / 255 - mean of its RGB channel.
  const int gw = p.grid_width(), gh = p.grid_height(), P = p.patch;
  const int in_dim = 3 * P * P;
  const int64_t tokens = p.tokens();
  double sum[3] = {0, 0, 0};
  for (int t = 0; t < p.frames; ++t) {
    const uint8_t* img = video.frame(p.first_frame + t * p.frame_step);
    for (int y = 0; y < gh * P; ++y)
      for (int x = 0; x < gw * P; ++x)
        for (int c = 0; c < 3; ++c) sum[c] += img[(static_cast<size_t>(y) * video.width + x) * 3 + c];
  }
  const double count = static_cast<double>(tokens) * P * P * 255.0;
  const float mean[3] = {static_cast<float>(sum[0] / count), static_cast<float>(sum[1] / count),
                         static_cast<float>(sum[2] / count)};
  std::vector<float> patches(static_cast<size_t>(tokens * in_dim));
  for (int t = 0; t < p.frames; ++t) {
    const uint8_t* img = video.frame(p.first_frame + t * p.frame_step);
    for (int py = 0; py < gh; ++py) {
      for (int px = 0; px < gw; ++px) {
        const int64_t n = (int64_t{t} * gh + py) * gw + px;
        float* v = patches.data() + n * in_dim;
        for (int dy = 0; dy < P; ++dy)
          for (int dx = 0; dx < P; ++dx)
            for (int c = 0; c < 3; ++c) {
              const size_t at = (static_cast<size_t>(py * P + dy) * video.width + (px * P + dx)) * 3 + c;
              *v++ = static_cast<float>(img[at]) * (1.0f / 255.0f) - mean[c];
            }
      }
    }
  }

  // Balance colour and texture: a patch is dominated by its mean colour, which
  // would make every projected channel a copy of one direction. Scale each
  // patch's deviation from its own mean colour so that, over the clip, the
  // deviations carry as much energy as the mean colours.
  {
    std::vector<float> patch_mean(static_cast<size_t>(tokens) * 3u);
    double e_mean = 0, e_detail = 0;
    for (int64_t n = 0; n < tokens; ++n) {
      const float* v = patches.data() + n * in_dim;
      double m[3] = {0, 0, 0};
      for (int i = 0; i < P * P; ++i)
        for (int c = 0; c < 3; ++c) m[c] += v[i * 3 + c];
      for (int c = 0; c < 3; ++c) {
        patch_mean[static_cast<size_t>(n) * 3 + c] = static_cast<float>(m[c] / (P * P));
        e_mean += static_cast<double>(P * P) * (m[c] / (P * P)) * (m[c] / (P * P));
      }
      for (int i = 0; i < P * P; ++i)
        for (int c = 0; c < 3; ++c) {
          const double dv = v[i * 3 + c] - patch_mean[static_cast<size_t>(n) * 3 + c];
          e_detail += dv * dv;
        }
    }
    const float g = e_detail > 0 && e_mean > 0 ? static_cast<float>(std::sqrt(e_mean / e_detail)) : 1.0f;
    for (int64_t n = 0; n < tokens; ++n) {
      float* v = patches.data() + n * in_dim;
      const float* m = patch_mean.data() + n * 3;
      for (int i = 0; i < P * P; ++i)
        for (int c = 0; c < 3; ++c) v[i * 3 + c] = m[c] + g * (v[i * 3 + c] - m[c]);
    }
  }

  const uint64_t r = data::role_index(role);
  const bool key = role == TensorRole::key;
  HeadTensor out(p.heads, tokens, p.dim);
  parallel_for(p.heads, p.threads, [&](int64_t h) {
    data::Rng prng(data::stream_seed(p.seed, data::Stream::projection, r + 2, static_cast<uint64_t>(h)));
    const std::vector<float> w = data::gaussian_projection(prng, in_dim, p.dim);
    float* x = out.head(h);
    data::project(patches.data(), tokens, in_dim, w.data(), p.dim, x);
    const double noise = key ? p.key_noise : p.value_noise;
    if (noise > 0) {  // noise relative to the projection's RMS
      double sum_sq = 0.0;
      for (int64_t i = 0; i < tokens * p.dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
      const double sigma = noise * std::sqrt(sum_sq / static_cast<double>(tokens * p.dim));
      data::Rng nrng(data::stream_seed(p.seed, data::Stream::noise, r + 2, static_cast<uint64_t>(h)));
      for (int64_t i = 0; i < tokens * p.dim; ++i) x[i] += static_cast<float>(sigma * nrng.normal());
    }
    data::Rng crng(data::stream_seed(p.seed, data::Stream::channels, r + 2, static_cast<uint64_t>(h)));
    data::apply_channel_structure(x, tokens, p.dim, data::channel_structure_of(p, key), crng);
  });
  return out;
}

}  // namespace qvg
