// The budget rule's quality model (qvg/budget.h, expected_distortion): the
// quantizer's error on normal data, the share of values kept in BF16, and a
// fitted curve of what k-means smoothing leaves.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "qvg/budget.h"
#include "qvg/codec.h"
#include "qvg/common.h"
#include "qvg/methods.h"
#include "util/rng.h"

namespace qvg {

namespace {

/// The relative squared error of c's quantizer (no smoothing stage, no BF16
/// window) on a seeded standard normal [1, max(512, 2 dim), dim] tensor
/// encoded as `role`; computed once per (spec, role, dim).
double normal_quantizer_error(const CodecConfig& c, TensorRole role, int64_t dim) {
  CodecConfig q = c;
  q.stages = 0;
  q.residual = 0;
  q.auto_centroids = false;
  q.name = method_name(c.method);
  // Every field a quantizer without stages or window reads (config.h's table: rtn, kivi, quarot; qvg's
  // code=cq: its dim, codewords and the codewords' format).
  const bool cq = uses_codebooks(q);
  using Key = std::tuple<int, int, int, int, int, int, int, int64_t, int, int, int>;
  const Key key{static_cast<int>(q.method), q.bits,       q.block,   q.group,
                static_cast<int>(q.scale_format), static_cast<int>(q.levels), static_cast<int>(role), dim,
                cq ? q.cq_dim : 0, cq ? q.cq_codewords : 0, cq ? static_cast<int>(q.centroid_format) : 0};
  static std::mutex mu;
  static std::map<Key, double> cache;
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const int64_t tokens = std::max<int64_t>(512, 2 * dim);
  HeadTensor x(1, tokens, dim);
  SplitMix64 rng(20261207);
  for (float& v : x.data) v = static_cast<float>(rng.normal());
  const auto codec = make_codec(q);
  EncodeOptions opt;
  opt.role = role;
  opt.threads = 1;
  HeadTensor y;
  codec->decode(codec->encode(x, opt), y, 1);
  double err = 0, energy = 0;
  for (size_t i = 0; i < x.data.size(); ++i) {
    const double d = static_cast<double>(y.data[i]) - x.data[i];
    err += d * d;
    energy += static_cast<double>(x.data[i]) * x.data[i];
  }
  const double q_err = err / energy;
  const std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, q_err);
  return q_err;
}

/// The energy S stages of C centroids leave of N tokens (the R of
/// qvg/budget.h's expected_distortion).
double smoothing_left(int stages, int centroids, int64_t tokens) {
  if (stages <= 0) return 1.0;
  const double cn = centroids;
  const double first = 0.22 + 0.78 * std::pow(cn, -0.55);
  const double later = 0.88 + 0.12 / cn;
  const double fit = std::max(0.0, 1.0 - cn / static_cast<double>(tokens));  // C = N: every token its own centroid
  return fit * first * std::pow(later, stages - 1);
}

}  // namespace

double expected_distortion(const CodecConfig& c, int64_t tokens, int64_t dim) {
  QVG_CHECK(tokens >= 1, "expected distortion: a span needs at least one token, got ", tokens);
  validate(c, dim);
  if (method_traits(c.method).uncompressed) return 0.0;
  const CodecConfig s = span_config(c, tokens);
  const double r = smoothing_left(smoothing_stages(s), s.kmeans.centroids, tokens);
  double sum = 0;
  for (TensorRole role : {TensorRole::key, TensorRole::value}) {
    const PartBytes b = expected_part_bytes(s, role, 1, tokens, dim);
    const double kept = static_cast<double>(b.full_precision) / (2.0 * static_cast<double>(tokens * dim));
    sum += (1.0 - std::min(kept, 1.0)) * normal_quantizer_error(s, role, dim);
  }
  return 0.5 * sum * r;
}

}  // namespace qvg
