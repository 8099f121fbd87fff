// Probe (CPU): would a centroid count per smoothing stage beat one count for
// every stage at equal bits? The format stores one C for all stages; this
// probe emulates per-stage counts outside it, with the reference's own steps:
// stage s runs kmeans_ref with C_s centroids (seed and start as the codec
// does), subtracts its BF16 centroids, rounds the points to BF16 where another
// stage follows; the residual R goes through the codec `qvg:stages=0` (the
// same group quantizer); the reconstruction adds the stages back, last first.
// A configuration with one C for every stage is also run through the codec
// itself, to show that the emulation reproduces it.
//   bench_stage_centroids_probe FILE.safetensors|.npy [TENSOR ...] [--layout thd|htd] [--tokens N]
// Prints, per tensor and configuration: bits per value (every byte of the
// format, with the stages' counts) and the mean squared error.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "qvg/half.h"
#include "qvg/io.h"
#include "qvg/kmeans.h"
#include "qvg/metrics.h"
#include "qvg/qvg_steps.h"

using namespace qvg;

namespace {

constexpr int kBits = 2, kBlock = 64;

std::string base_spec() {
  return "qvg:bits=2,block=64,scale=fp8,centroid_format=bf16,iters=10,tol=0.0001";
}

/// Bits per value of a QVG tensor whose stage s has cs[s] BF16 centroids.
double bits_for(const std::vector<int>& cs, int64_t heads, int64_t n, int64_t d) {
  double bytes = heads * n * d * kBits / 8.0 + heads * n * (d / kBlock) + heads * 4.0;  // codes, FP8 block scales, span scales
  for (int c : cs) bytes += heads * (2.0 * c * d + n);                                    // BF16 centroids, uint8 ids
  return 8.0 * bytes / (double(heads) * n * d);
}

/// The emulated encode and decode; returns the reconstruction.
HeadTensor emulate(const HeadTensor& x, const std::vector<int>& cs, const CodecConfig& base) {
  const int64_t n = x.tokens, d = x.dim;
  HeadTensor resid(x.heads, n, d);
  std::vector<std::vector<std::vector<float>>> per_head(x.heads);
  std::vector<std::vector<std::vector<uint8_t>>> per_head_ids(x.heads);
  for (int64_t h = 0; h < x.heads; ++h) {
    std::vector<float> r(x.data.begin() + h * n * d, x.data.begin() + (h + 1) * n * d);
    for (size_t s = 0; s < cs.size(); ++s) {
      KMeansParams kp = base.kmeans;
      kp.centroids = cs[s];
      kp.seed = qvg_kmeans_seed(base, static_cast<int>(s), h);  // the codec's seed per stage and head
      KMeansResult km = kmeans_ref(r.data(), n, d, kp);
      for (float& v : km.centroids) v = round_bf16(v);  // stored as BF16
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j) r[t * d + j] -= km.centroids[km.ids[t] * d + j];
      if (s + 1 < cs.size())
        for (float& v : r) v = round_bf16(v);
      per_head[h].push_back(std::move(km.centroids));
      per_head_ids[h].push_back(std::move(km.ids));
    }
    std::copy(r.begin(), r.end(), resid.data.begin() + h * n * d);
  }
  CodecConfig q = parse_codec_spec(base_spec() + ",stages=0");
  auto codec = make_codec(q);
  HeadTensor out;
  codec->decode(codec->encode(resid), out);
  for (int64_t h = 0; h < x.heads; ++h)
    for (int s = static_cast<int>(cs.size()) - 1; s >= 0; --s)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j)
          out.data[(h * n + t) * d + j] += per_head[h][s][per_head_ids[h][s][t] * d + j];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, layout = "thd";
  std::vector<std::string> names;
  int64_t tokens = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--layout") && i + 1 < argc) layout = argv[++i];
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = std::atoll(argv[++i]);
    else if (path.empty()) path = argv[i];
    else names.push_back(argv[i]);
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: bench_stage_centroids_probe FILE [TENSOR ...] [--layout thd|htd] [--tokens N]\n");
    return 2;
  }
  if (names.empty()) names.push_back("");
  try {
    // Equal-C rows first (the codec's own configurations), then the same
    // stages with the centroids moved toward the first stage.
    const std::vector<std::vector<int>> configs = {
        {30}, {15, 15}, {24, 6}, {28, 2}, {8, 8, 8, 8}, {20, 6, 3, 1}, {26, 2, 1, 1},
        {78}, {39, 39}, {60, 18}, {70, 8}, {20, 20, 20, 20}, {50, 18, 8, 4}, {66, 6, 4, 4}};
    for (const std::string& name : names) {
      HeadTensor x = load_kv(path, parse_layout(layout), name);
      if (tokens > 0 && tokens < x.tokens) {
        HeadTensor y(x.heads, tokens, x.dim);
        for (int64_t h = 0; h < x.heads; ++h)
          std::copy_n(x.data.begin() + h * x.tokens * x.dim, tokens * x.dim, y.data.begin() + h * tokens * x.dim);
        x = std::move(y);
      }
      std::printf("%s %s: %lld heads, %lld tokens, dim %lld\n", path.c_str(), name.c_str(), (long long)x.heads,
                  (long long)x.tokens, (long long)x.dim);
      std::printf("%-22s %8s %12s %12s\n", "centroids per stage", "bits", "mse", "codec mse");
      for (const auto& cs : configs) {
        const CodecConfig base = parse_codec_spec(base_spec());
        const double mse = compare(x, emulate(x, cs, base)).mse;
        std::string label, codec_mse = "";
        for (int c : cs) label += (label.empty() ? "" : " ") + std::to_string(c);
        bool equal = true;
        for (int c : cs) equal = equal && c == cs.front();
        if (equal) {
          auto codec = make_codec(parse_codec_spec(base_spec() + ",stages=" + std::to_string(cs.size()) +
                                                   ",centroids=" + std::to_string(cs.front())));
          HeadTensor r;
          const EncodedTensor e = codec->encode(x);
          codec->decode(e, r);
          char b[64];
          std::snprintf(b, sizeof b, "%.6g (%.4f b)", compare(x, r).mse, e.bits_per_value());
          codec_mse = b;
        }
        std::printf("%-22s %8.4f %12.6g %s\n", label.c_str(), bits_for(cs, x.heads, x.tokens, x.dim), mse,
                    codec_mse.c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_stage_centroids_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
