// PSNR and SSIM of 8-bit video (include/qvg/video_metrics.h).
#include "qvg/video_metrics.h"

#include <cmath>
#include <limits>
#include <vector>

#include "qvg/common.h"

namespace qvg {

double psnr_u8(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  QVG_CHECK(a.size() == b.size() && !a.empty(), "psnr: buffers of ", a.size(), " and ", b.size(),
            " values (must be equal and non-empty)");
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / (se / static_cast<double>(a.size())));
}

double ssim_rgb(std::span<const uint8_t> a, std::span<const uint8_t> b, int frames, int height, int width) {
  constexpr int R = 5, K = 2 * R + 1;
  QVG_CHECK(frames > 0 && height >= K && width >= K, "ssim: frames of ", height, "x", width,
            " (need at least 11x11) x ", frames);
  const size_t n = static_cast<size_t>(frames) * height * width * 3;
  QVG_CHECK(a.size() == n && b.size() == n, "ssim: buffers of ", a.size(), " and ", b.size(), " values, expected ", n);
  double w[K], ws = 0;
  for (int i = 0; i < K; ++i) ws += (w[i] = std::exp(-0.5 * (i - R) * (i - R) / (1.5 * 1.5)));
  for (double& x : w) x /= ws;
  const double C1 = (0.01 * 255) * (0.01 * 255), C2 = (0.03 * 255) * (0.03 * 255);
  const int oh = height - 2 * R, ow = width - 2 * R;
  // Separable Gaussian filtering of x, y, xx, yy, xy: rows first (valid columns), then columns.
  std::vector<double> h(static_cast<size_t>(5) * height * ow);
  double total = 0;
  for (int f = 0; f < frames; ++f)
    for (int c = 0; c < 3; ++c) {
      auto px = [&](std::span<const uint8_t> s, int y, int x) {
        return static_cast<double>(s[((static_cast<size_t>(f) * height + y) * width + x) * 3 + c]);
      };
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < ow; ++x) {
          double m[5] = {0, 0, 0, 0, 0};
          for (int k = 0; k < K; ++k) {
            const double p = px(a, y, x + k), q = px(b, y, x + k);
            m[0] += w[k] * p;
            m[1] += w[k] * q;
            m[2] += w[k] * p * p;
            m[3] += w[k] * q * q;
            m[4] += w[k] * p * q;
          }
          for (int j = 0; j < 5; ++j) h[(static_cast<size_t>(j) * height + y) * ow + x] = m[j];
        }
      double sum = 0;
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          double m[5] = {0, 0, 0, 0, 0};
          for (int k = 0; k < K; ++k)
            for (int j = 0; j < 5; ++j) m[j] += w[k] * h[(static_cast<size_t>(j) * height + y + k) * ow + x];
          const double mx = m[0], my = m[1];
          const double vx = m[2] - mx * mx, vy = m[3] - my * my, cxy = m[4] - mx * my;
          sum += ((2 * mx * my + C1) * (2 * cxy + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2));
        }
      total += sum / (static_cast<double>(oh) * ow);
    }
  return total / (3.0 * frames);
}

}  // namespace qvg
