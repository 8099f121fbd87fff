// make_video_like: a seeded parametric generator of video-like keys/values.
//
// The scene (shared by every head and by K and V of one seed):
//  - `clusters` objects, each a seed point moving linearly (reflected at the
//    grid's edges) with speed ~ motion cells per frame; the first clusters/4
//    are static, larger background regions. A token belongs to the object with
//    the smallest scaled elliptical distance (a weighted Voronoi segmentation),
//    so regions are compact and move slowly from frame to frame.
//  - latent features (latent_dim values per token): the object's prototype
//    (N(0, 1) per value) + a smooth texture in the object's own coordinates
//    (moves with the object) + a smooth global positional field (slow drift).
// Per head and role: its own mixing weights of the three parts, a Gaussian
// projection latent_dim -> dim, i.i.d. token noise, RMS normalization and the
// channel structure (keys: per-channel offsets and a few outlier channels).
#include <cmath>
#include <cstdint>
#include <vector>

#include "data/synth.h"
#include "qvg/data.h"
#include "util/parallel.h"

namespace qvg {
namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr int kTextureWaves = 4;   // sinusoids per object texture
constexpr int kPositionWaves = 6;  // sinusoids of the global positional field

/// One sinusoid of a smooth field: amp * sin(fx * x + fy * y + ft * t + phase).
struct Wave {
  double fx = 0, fy = 0, ft = 0, phase = 0;
  std::vector<float> amp;  // size latent_dim
};

struct Object {
  double x0 = 0, y0 = 0, vx = 0, vy = 0;  // start (cells) and velocity (cells per frame)
  double inv_r2 = 1;                      // 1 / radius^2
  double c = 1, s = 0, inv_a2 = 1, a2 = 1;  // orientation and elongation
  std::vector<float> proto;               // size latent_dim
  std::vector<Wave> texture;
};

struct Scene {
  std::vector<Object> objects;
  std::vector<Wave> position;
};

/// v folded into [0, len] by reflection at both ends (a triangle wave of period 2 len).
double reflect(double v, double len) {
  double m = std::fmod(v, 2.0 * len);
  if (m < 0) m += 2.0 * len;
  return m <= len ? m : 2.0 * len - m;
}

Wave make_wave(data::Rng& rng, int latent_dim, double amplitude, double fmin, double fmax, double tmax) {
  Wave w;
  const double angle = rng.uniform(0.0, kTwoPi);
  const double f = rng.uniform(fmin, fmax);
  w.fx = f * std::cos(angle);
  w.fy = f * std::sin(angle);
  w.ft = rng.uniform(-tmax, tmax);
  w.phase = rng.uniform(0.0, kTwoPi);
  w.amp.resize(static_cast<size_t>(latent_dim));
  for (auto& a : w.amp) a = static_cast<float>(amplitude * rng.normal());
  return w;
}

Scene make_scene(const VideoLikeParams& p) {
  data::Rng rng(data::stream_seed(p.seed, data::Stream::scene, 0, 0));
  Scene scene;
  const int background = p.clusters / 4;
  // Amplitudes so that each field has standard deviation `texture` / `position`
  // per latent value (a sum of J sinusoids with N(0, a^2) amplitudes has variance J a^2 / 2).
  const double tex_amp = p.texture * std::sqrt(2.0 / kTextureWaves);
  const double pos_amp = p.position * std::sqrt(2.0 / kPositionWaves);
  scene.objects.resize(static_cast<size_t>(p.clusters));
  for (int k = 0; k < p.clusters; ++k) {
    Object& o = scene.objects[k];
    o.x0 = rng.uniform(0.0, p.width);
    o.y0 = rng.uniform(0.0, p.height);
    const bool is_background = k < background;
    const double speed = is_background ? 0.0 : p.motion * rng.uniform(0.25, 1.75);
    const double dir = rng.uniform(0.0, kTwoPi);
    o.vx = speed * std::cos(dir);
    o.vy = speed * std::sin(dir);
    const double r = is_background ? rng.uniform(1.5, 2.5) : rng.uniform(0.6, 1.4);
    o.inv_r2 = 1.0 / (r * r);
    const double theta = rng.uniform(0.0, kTwoPi);
    o.c = std::cos(theta);
    o.s = std::sin(theta);
    const double a = rng.uniform(0.6, 1.6);
    o.a2 = a * a;
    o.inv_a2 = 1.0 / o.a2;
    o.proto.resize(static_cast<size_t>(p.latent_dim));
    for (auto& v : o.proto) v = static_cast<float>(rng.normal());
    for (int j = 0; j < kTextureWaves; ++j)
      o.texture.push_back(make_wave(rng, p.latent_dim, tex_amp, 0.1, 0.6, 0.15));
  }
  for (int j = 0; j < kPositionWaves; ++j)
    scene.position.push_back(make_wave(rng, p.latent_dim, pos_amp, 0.04, 0.3, 0.05));
  return scene;
}

void check_params(const VideoLikeParams& p) {
  QVG_CHECK(p.frames > 0 && p.height > 0 && p.width > 0, "video-like: frames, height and width must be > 0, got ",
            p.frames, ", ", p.height, ", ", p.width);
  QVG_CHECK(p.heads > 0 && p.dim > 0, "video-like: heads and dim must be > 0, got ", p.heads, ", ", p.dim);
  QVG_CHECK(p.clusters > 0, "video-like: clusters must be > 0, got ", p.clusters);
  QVG_CHECK(p.latent_dim > 0, "video-like: latent_dim must be > 0, got ", p.latent_dim);
  QVG_CHECK(p.outlier_channels >= 0, "video-like: outlier_channels must be >= 0, got ", p.outlier_channels);
  QVG_CHECK(p.motion >= 0 && p.texture >= 0 && p.position >= 0 && p.key_noise >= 0 && p.value_noise >= 0 &&
                p.rms > 0 && p.key_outlier_gain >= 0 && p.value_outlier_gain >= 0 &&
                p.key_channel_offset >= 0 && p.value_channel_offset >= 0,
            "video-like: magnitudes must be >= 0 (rms > 0)");
  QVG_CHECK(p.tokens() * p.heads * p.dim < (int64_t{1} << 40), "video-like: tensor too large");
}

/// Labels (object ids) of every token and the three latent parts per token.
struct Latents {
  std::vector<int> labels;     // tokens
  std::vector<float> texture;  // tokens * latent_dim
  std::vector<float> position; // tokens * latent_dim
};

Latents make_latents(const VideoLikeParams& p, const Scene& scene, bool with_features) {
  const int64_t tokens = p.tokens();
  const int L = p.latent_dim;
  Latents lat;
  lat.labels.resize(static_cast<size_t>(tokens));
  if (with_features) {
    lat.texture.assign(static_cast<size_t>(tokens * L), 0.0f);
    lat.position.assign(static_cast<size_t>(tokens * L), 0.0f);
  }
  std::vector<double> cx(scene.objects.size()), cy(scene.objects.size());
  for (int f = 0; f < p.frames; ++f) {
    for (size_t k = 0; k < scene.objects.size(); ++k) {
      const Object& o = scene.objects[k];
      cx[k] = reflect(o.x0 + o.vx * f, p.width);
      cy[k] = reflect(o.y0 + o.vy * f, p.height);
    }
    for (int y = 0; y < p.height; ++y) {
      for (int x = 0; x < p.width; ++x) {
        const int64_t n = (int64_t{f} * p.height + y) * p.width + x;
        const double px = x + 0.5, py = y + 0.5;
        int best = 0;
        double best_d = 0;
        for (size_t k = 0; k < scene.objects.size(); ++k) {
          const Object& o = scene.objects[k];
          const double dx = px - cx[k], dy = py - cy[k];
          const double u = o.c * dx + o.s * dy, v = -o.s * dx + o.c * dy;
          const double d = (u * u * o.inv_a2 + v * v * o.a2) * o.inv_r2;
          if (k == 0 || d < best_d) {
            best_d = d;
            best = static_cast<int>(k);
          }
        }
        lat.labels[static_cast<size_t>(n)] = best;
        if (!with_features) continue;
        float* tex = lat.texture.data() + n * L;
        const Object& o = scene.objects[static_cast<size_t>(best)];
        const double lx = px - cx[best], ly = py - cy[best];  // texture moves with the object
        for (const Wave& w : o.texture) {
          const float s = static_cast<float>(std::sin(w.fx * lx + w.fy * ly + w.ft * f + w.phase));
          for (int i = 0; i < L; ++i) tex[i] += s * w.amp[i];
        }
        float* pos = lat.position.data() + n * L;
        for (const Wave& w : scene.position) {
          const float s = static_cast<float>(std::sin(w.fx * px + w.fy * py + w.ft * f + w.phase));
          for (int i = 0; i < L; ++i) pos[i] += s * w.amp[i];
        }
      }
    }
  }
  return lat;
}

}  // namespace

std::vector<int> video_like_labels(const VideoLikeParams& p) {
  check_params(p);
  return make_latents(p, make_scene(p), /*with_features=*/false).labels;
}

HeadTensor make_video_like(const VideoLikeParams& p, TensorRole role) {
  check_params(p);
  const Scene scene = make_scene(p);
  const Latents lat = make_latents(p, scene, /*with_features=*/true);
  const int64_t tokens = p.tokens();
  const int L = p.latent_dim;
  const uint64_t r = data::role_index(role);
  const bool key = role == TensorRole::key;

  HeadTensor out(p.heads, tokens, p.dim);
  parallel_for(p.heads, p.threads, [&](int64_t h) {
    data::Rng prng(data::stream_seed(p.seed, data::Stream::projection, r, static_cast<uint64_t>(h)));
    // Per-head emphasis of the three parts: heads attend to different things.
    const float a_obj = static_cast<float>(prng.uniform(0.5, 1.5));
    const float a_tex = static_cast<float>(prng.uniform(0.5, 1.5));
    const float a_pos = static_cast<float>(prng.uniform(0.5, 1.5));
    const std::vector<float> w = data::gaussian_projection(prng, L, p.dim);

    // z = a_obj * prototype + a_tex * texture + a_pos * position   [tokens, L]
    std::vector<float> z(static_cast<size_t>(tokens * L));
    for (int64_t n = 0; n < tokens; ++n) {
      const float* proto = scene.objects[static_cast<size_t>(lat.labels[static_cast<size_t>(n)])].proto.data();
      const float* tex = lat.texture.data() + n * L;
      const float* pos = lat.position.data() + n * L;
      float* zn = z.data() + n * L;
      for (int i = 0; i < L; ++i) zn[i] = a_obj * proto[i] + a_tex * tex[i] + a_pos * pos[i];
    }
    float* x = out.head(h);
    data::project(z.data(), tokens, L, w.data(), p.dim, x);

    data::Rng nrng(data::stream_seed(p.seed, data::Stream::noise, r, static_cast<uint64_t>(h)));
    const double noise = key ? p.key_noise : p.value_noise;
    if (noise > 0) {
      for (int64_t i = 0; i < tokens * p.dim; ++i) x[i] += static_cast<float>(noise * nrng.normal());
    }

    data::Rng crng(data::stream_seed(p.seed, data::Stream::channels, r, static_cast<uint64_t>(h)));
    data::apply_channel_structure(x, tokens, p.dim, data::channel_structure_of(p, key), crng);
  });
  return out;
}

}  // namespace qvg
