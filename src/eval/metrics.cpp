#include "qvg/metrics.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "util/fixed_product.h"
#include "util/parallel.h"

namespace qvg {

ErrorStats compare(const HeadTensor& ref, const HeadTensor& rec) {
  QVG_CHECK(ref.same_shape(rec), "compare: shapes differ: [", ref.heads, ", ", ref.tokens, ", ", ref.dim,
            "] vs [", rec.heads, ", ", rec.tokens, ", ", rec.dim, "]");
  double err = 0, energy = 0, max_abs = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    const double e = static_cast<double>(ref.data[i]) - rec.data[i];
    err += e * e;
    energy += static_cast<double>(ref.data[i]) * ref.data[i];
    max_abs = std::max(max_abs, std::fabs(e));
  }
  ErrorStats s;
  const double n = static_cast<double>(std::max<size_t>(ref.data.size(), 1));
  s.mse = err / n;
  s.rel_l2 = energy > 0 ? std::sqrt(err / energy) : (err > 0 ? INFINITY : 0.0);
  s.snr_db = err > 0 ? 10.0 * std::log10(energy / err) : INFINITY;
  s.max_abs = max_abs;
  return s;
}

HeadTensor attention_ref(const HeadTensor& q, const HeadTensor& k, const HeadTensor& v, int threads) {
  QVG_CHECK(k.same_shape(v), "attention: K [", k.heads, ", ", k.tokens, ", ", k.dim, "] and V [", v.heads,
            ", ", v.tokens, ", ", v.dim, "] differ in shape");
  QVG_CHECK(q.dim == k.dim, "attention: Q dim ", q.dim, " != K dim ", k.dim);
  QVG_CHECK(k.heads > 0 && q.heads % k.heads == 0, "attention: Q heads (", q.heads,
            ") must be a multiple of KV heads (", k.heads, ")");
  QVG_CHECK(k.tokens > 0, "attention: no keys");
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = Eigen::Map<const RowMat>;
  HeadTensor out(q.heads, q.tokens, q.dim);
  const int64_t group = q.heads / k.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.dim));
  parallel_for(q.heads, threads, [&](int64_t h) {
    const int64_t kh = h / group;
    const Map qm(q.head(h), q.tokens, q.dim), km(k.head(kh), k.tokens, k.dim), vm(v.head(kh), v.tokens, v.dim);
    constexpr int64_t kBlock = 64;
    RowMat s;
    for (int64_t r0 = 0; r0 < q.tokens; r0 += kBlock) {
      const int64_t rows = std::min(kBlock, q.tokens - r0);
      s.noalias() = (qm.middleRows(r0, rows) * km.transpose()) * scale;
      for (int64_t i = 0; i < rows; ++i) {
        const float mx = s.row(i).maxCoeff();
        double sum = 0;
        for (int64_t j = 0; j < k.tokens; ++j) {
          const float e = std::exp(s(i, j) - mx);
          s(i, j) = e;
          sum += e;
        }
        s.row(i) *= static_cast<float>(1.0 / sum);
      }
      Eigen::Map<RowMat> o(out.head(h) + r0 * q.dim, rows, q.dim);
      fixed_product(s, vm, o);
    }
  });
  return out;
}

HeadTensor select_tokens(const HeadTensor& x, int64_t count, bool spread) {
  count = std::min(count, x.tokens);
  HeadTensor out(x.heads, count, x.dim);
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t i = 0; i < count; ++i) {
      const int64_t src = spread ? (i * x.tokens) / count : i;
      std::copy_n(x.head(h) + src * x.dim, x.dim, out.head(h) + i * x.dim);
    }
  return out;
}

}  // namespace qvg
