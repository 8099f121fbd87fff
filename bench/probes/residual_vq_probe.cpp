// Probe (CPU, issue 43): can a vector code of the residual beat QVG's INT2
// group quantization at equal bits? Per head: QVG's first stage (k-means, C
// centroids, BF16) as the reference encodes it, then the residual R = x -
// bf16(centroid) coded by
//   qvg      the codec itself (`qvg:...` specs: INT2/INT4 with block scales),
//   vq G.K   each token's residual scaled by its RMS (an FP8 value a token),
//            cut into D / G sub-vectors of G channels, each replaced by the
//            nearest of K codewords of one codebook per head (trained by the
//            reference's k-means on a sample of the head's normalized
//            sub-vectors; BF16 codewords stored).
//   cq G.K   the same with one codebook per group of G channels and head
//            (Coupled Quantization's layout; D / G codebooks stored).
// Bits a value: ids (8 / D) + centroids (16 C D / N D) + the residual code:
// vq: log2(K) / G + 8 / D (token scale) + 16 K G / (N D) a codebook.
// Prints per tensor: bits and the MSE of the reconstruction relative to
// the input's mean square (the error every table reports).
//
//   bench_residual_vq_probe [--data clip|video|FILE.npy|FILE.safetensors] [--tensor NAME,...] [--heads H] [--centroids C]
//                           [--candidates qvg:...;vq4.256;...]
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "probe_kv.h"
#include "qvg/fp8.h"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "qvg/metrics.h"

using namespace qvg;

namespace {

struct Result {
  double bits = 0, err = 0, energy = 0;
};

/// Residual VQ of one head's residual r (n x d): returns the squared error
/// summed and the bits a value.
Result vq_head(const std::vector<float>& r, int64_t n, int64_t d, int g, int k, uint64_t seed, bool per_group) {
  Result res;
  const int64_t subs = d / g;
  // Token scales: RMS of each token's residual, stored as FP8 E4M3 (power-of-two head scale ignored:
  // the probe keeps them in float after an E4M3 rounding relative to the head's largest).
  std::vector<float> scale(static_cast<size_t>(n));
  float smax = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += static_cast<double>(r[i * d + c]) * r[i * d + c];
    scale[i] = static_cast<float>(std::sqrt(s / d));
    smax = std::max(smax, scale[i]);
  }
  const float unit = smax > 0 ? smax / 448.0f : 1.0f;
  for (float& s : scale) s = fp8_e4m3_to_float(fp8_e4m3_from_float(s / unit)) * unit;
  // Normalized sub-vectors.
  std::vector<float> u(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) u[i * d + c] = scale[i] > 0 ? r[i * d + c] / scale[i] : 0.0f;
  if (k > 256) {
    std::fprintf(stderr, "vq: K <= 256 (uint8 ids of the reference's k-means)\n");
    std::exit(2);
  }
  // One codebook for every group of G channels (vq), or one per group (cq,
  // Coupled Quantization's layout), each from at most 64 K sub-vectors.
  const int64_t books = per_group ? subs : 1;
  for (int64_t bk = 0; bk < books; ++bk) {
    const int64_t first = per_group ? bk : 0, count = per_group ? 1 : subs;  // sub-spaces of this book
    std::vector<float> pts;  // the book's sub-vectors, token-major
    pts.reserve(static_cast<size_t>(n * count * g));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t s = first; s < first + count; ++s)
        pts.insert(pts.end(), u.begin() + i * d + s * g, u.begin() + i * d + (s + 1) * g);
    const int64_t points = n * count;
    const int64_t want = std::min<int64_t>(points, int64_t{64} * k);
    const int64_t stride = std::max<int64_t>(1, points / want);
    std::vector<float> sample;
    for (int64_t p = 0; p < points && static_cast<int64_t>(sample.size()) < want * g; p += stride)
      sample.insert(sample.end(), pts.begin() + p * g, pts.begin() + (p + 1) * g);
    KMeansParams kp;
    kp.centroids = k;
    kp.max_iter = 10;
    kp.seed = seed + static_cast<uint64_t>(bk);
    const std::vector<float> book = kmeans_ref(sample.data(), static_cast<int64_t>(sample.size()) / g, g, kp).centroids;
    std::vector<uint8_t> ids(static_cast<size_t>(points));
    kmeans_assign_ref(pts.data(), points, g, book.data(), k, ids.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t s = first; s < first + count; ++s) {
        const float* cw = book.data() + ids[i * count + (s - first)] * g;
        for (int64_t c = 0; c < g; ++c) {
          const double e = r[i * d + s * g + c] - static_cast<double>(cw[c]) * scale[i];
          res.err += e * e;
        }
      }
  }
  res.bits = std::log2(static_cast<double>(k)) / g + 8.0 / d +
             16.0 * k * g * static_cast<double>(books) / static_cast<double>(n * d);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  probe::Args args;
  args.candidates = "qvg:centroids=256,block=64;qvg:centroids=256,block=128;vq4.256;vq8.256;vq4.64;vq2.16";
  if (!probe::parse(argc, argv, args, false)) return 2;
  const std::string& data = args.data;
  const std::string& tensor = args.tensor;
  const std::string& cands = args.candidates;
  const int heads = args.heads, c = args.centroids;
  auto xs = probe::load(data, tensor);
  const std::vector<std::string> names = probe::split(cands, ';');
  for (auto& [label, full] : xs) {
    const int H = static_cast<int>(std::min<int64_t>(heads, full.heads));
    HeadTensor x(H, full.tokens, full.dim);
    std::copy_n(full.data.begin(), x.data.size(), x.data.begin());
    const int64_t n = x.tokens, d = x.dim;
    double energy = 0;
    for (float v : x.data) energy += static_cast<double>(v) * v;
    std::printf("== %s: %d heads x %lld tokens x %lld; first stage C = %d\n", label.c_str(), H,
                static_cast<long long>(n), static_cast<long long>(d), c);
    std::printf("%-34s %8s %12s %9s\n", "code", "bits", "mse/msq", "SNR dB");
    // The first stage once per head: its centroids and ids (the residual's source).
    std::vector<std::vector<float>> resid(static_cast<size_t>(H));
    double stage_bits = 8.0 / d + 16.0 * c / static_cast<double>(n);
    for (int h = 0; h < H; ++h) {
      KMeansParams kp;
      kp.centroids = c;
      kp.max_iter = 10;
      kp.seed = 1234 + static_cast<uint64_t>(h);
      const KMeansResult km = kmeans_ref(x.head(h), n, d, kp);
      resid[h].resize(static_cast<size_t>(n * d));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t q = 0; q < d; ++q)
          resid[h][i * d + q] = x.head(h)[i * d + q] - round_bf16(km.centroids[km.ids[i] * d + q]);
    }
    for (const std::string& nm : names) {
      double bits = 0, err = 0;
      int g = 0, k = 0;
      if (nm.rfind("qvg", 0) == 0) {
        const CodecConfig cc = parse_codec_spec(nm);
        auto codec = make_codec(cc);
        const EncodedTensor e = codec->encode(x);
        HeadTensor y;
        codec->decode(e, y);
        bits = e.bits_per_value();
        err = compare(x, y).mse * static_cast<double>(x.data.size());
      } else if (std::sscanf(nm.c_str(), "vq%d.%d", &g, &k) == 2 || std::sscanf(nm.c_str(), "cq%d.%d", &g, &k) == 2) {
        for (int h = 0; h < H; ++h) {
          const Result r = vq_head(resid[h], n, d, g, k, 77 + static_cast<uint64_t>(h), nm[0] == 'c');
          err += r.err;
          bits = r.bits + stage_bits;
        }
      } else {
        std::fprintf(stderr, "unknown candidate %s\n", nm.c_str());
        return 2;
      }
      const double rel = err / energy;
      std::printf("%-34s %8.3f %12.5f %9.2f\n", nm.c_str(), bits, rel, -10.0 * std::log10(rel));
      std::fflush(stdout);
    }
  }
  return 0;
}
