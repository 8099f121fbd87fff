// Internals shared by the built-in data generators (data.h): a seeded random
// source whose output is fixed by this file (std::mt19937_64 is specified by
// the standard; std::*_distribution is not), the per-head projection, and the
// channel structure (RMS normalization, per-channel offsets, outlier channels).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "qvg/config.h"

namespace qvg::data {

/// Streams of the generators: one independent seed per (seed, tag, a, b).
enum class Stream : uint64_t { scene = 1, projection = 2, noise = 3, channels = 4 };

/// SplitMix64 finalizer: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t stream_seed(uint64_t seed, Stream tag, uint64_t a, uint64_t b) {
  uint64_t z = mix64(seed + 0x9E3779B97F4A7C15ull);
  z = mix64(z ^ (static_cast<uint64_t>(tag) * 0xD1B54A32D192ED03ull));
  z = mix64(z ^ (a * 0x8CB92BA72F3D8DD7ull + 1));
  z = mix64(z ^ (b * 0xABC98388FB8FAC03ull + 2));
  return z;
}

inline uint64_t role_index(TensorRole role) { return role == TensorRole::key ? 0 : 1; }

/// Uniform and normal numbers from std::mt19937_64 with our own transforms.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  /// Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n), n > 0 (rejection sampling: exact).
  uint64_t below(uint64_t n) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
    uint64_t v = gen_();
    while (v >= limit) v = gen_();
    return v % n;
  }
  /// Standard normal, Box-Muller; the second value of each pair is kept for the next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 6.283185307179586 * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }
  /// -1 or +1.
  double sign() { return (gen_() >> 63) ? -1.0 : 1.0; }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

/// A Gaussian projection in_dim -> out_dim, entries N(0, 1 / in_dim), stored
/// transposed: w[k * out_dim + d] is the weight of input k for output d.
inline std::vector<float> gaussian_projection(Rng& rng, int in_dim, int out_dim) {
  std::vector<float> w(static_cast<size_t>(in_dim) * static_cast<size_t>(out_dim));
  const double s = 1.0 / std::sqrt(static_cast<double>(in_dim));
  for (auto& v : w) v = static_cast<float>(s * rng.normal());
  return w;
}

/// out[n, d] = sum over k (in order) of in[n, k] * w[k, d].
/// @param in   inputs, size n * in_dim
/// @param w    weights from gaussian_projection, size in_dim * out_dim
/// @param out  outputs, size n * out_dim
/// The summation order is fixed (k ascending per output), so the result is the
/// same whether or not the compiler vectorizes across d.
inline void project(const float* in, int64_t n, int in_dim, const float* w, int out_dim, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * out_dim;
    const float* x = in + i * in_dim;
    for (int d = 0; d < out_dim; ++d) o[d] = 0.0f;
    for (int k = 0; k < in_dim; ++k) {
      const float xk = x[k];
      const float* wk = w + static_cast<int64_t>(k) * out_dim;
      for (int d = 0; d < out_dim; ++d) o[d] += xk * wk[d];
    }
  }
}

/// What make_video_like / make_clip_kv do to each head after the projection.
struct ChannelStructure {
  double rms = 1.0;            ///< head RMS before offsets and outliers
  int outlier_channels = 0;    ///< channels given gain and offset (if outlier_gain > 1)
  double outlier_gain = 1.0;   ///< outlier gain in [gain/2, gain], offset +-[gain/4, 3gain/4]*rms
  double channel_offset = 0.0; ///< std of a per-channel offset, in units of rms
};

/// The channel structure of VideoLikeParams or ClipKVParams (same field
/// names) for keys (key = true) or values.
template <typename Params>
ChannelStructure channel_structure_of(const Params& p, bool key) {
  ChannelStructure cs;
  cs.rms = p.rms;
  cs.outlier_channels = p.outlier_channels;
  cs.outlier_gain = key ? p.key_outlier_gain : p.value_outlier_gain;
  cs.channel_offset = key ? p.key_channel_offset : p.value_channel_offset;
  return cs;
}

/// Scales one head (tokens x dim, row-major) to RMS s.rms, then adds a
/// per-channel offset N(0, channel_offset * rms) to every channel, then gives
/// s.outlier_channels distinct random channels (when outlier_gain > 1) a gain
/// in outlier_gain * [0.5, 1] and an offset of +-outlier_gain * [0.25, 0.75] * rms.
inline void apply_channel_structure(float* x, int64_t tokens, int dim, const ChannelStructure& s,
                                    Rng& rng) {
  const int64_t count = tokens * dim;
  double sum_sq = 0.0;
  for (int64_t i = 0; i < count; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double rms_now = count > 0 ? std::sqrt(sum_sq / static_cast<double>(count)) : 0.0;
  const float scale = rms_now > 0.0 ? static_cast<float>(s.rms / rms_now) : 1.0f;

  std::vector<float> gain(static_cast<size_t>(dim), scale);
  std::vector<float> offset(static_cast<size_t>(dim), 0.0f);
  for (int d = 0; d < dim; ++d) offset[d] = static_cast<float>(s.channel_offset * s.rms * rng.normal());
  if (s.outlier_gain > 1.0 && s.outlier_channels > 0) {
    std::vector<int> order(static_cast<size_t>(dim));
    for (int d = 0; d < dim; ++d) order[d] = d;
    const int k = std::min(s.outlier_channels, dim);
    for (int i = 0; i < k; ++i) {  // partial Fisher-Yates
      const int j = i + static_cast<int>(rng.below(static_cast<uint64_t>(dim - i)));
      std::swap(order[i], order[j]);
      const int c = order[i];
      gain[c] = static_cast<float>(scale * s.outlier_gain * rng.uniform(0.5, 1.0));
      offset[c] = static_cast<float>(rng.sign() * s.outlier_gain * rng.uniform(0.25, 0.75) * s.rms);
    }
  }
  for (int64_t n = 0; n < tokens; ++n) {
    float* row = x + n * dim;
    for (int d = 0; d < dim; ++d) row[d] = row[d] * gain[d] + offset[d];
  }
}

}  // namespace qvg::data
