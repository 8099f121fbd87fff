// qvg's codebook residual code (code=cq), CPU reference: per-token RMS
// scales, per (head, channel group) codebooks trained by the reference's
// k-means, packed codeword indices (src/reference/cq_code.h, docs/FORMAT.md).
#include "reference/cq_code.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/codecs.h"
#include "qvg/common.h"
#include "qvg/fp8.h"
#include "qvg/half.h"
#include "qvg/fixed_sum.h"
#include "qvg/kmeans.h"
#include "util/cq_arith.h"

namespace qvg {

namespace {

bool fp8_books(const CodecConfig& c) { return c.centroid_format == CentroidFormat::fp8; }

/// Byte offset of the codebook section in e's centroids part (it ends the part).
size_t book_offset(const EncodedTensor& e) {
  const size_t bytes = cq_codebook_bytes(e.config, e.heads, e.dim);
  QVG_CHECK(e.centroids.size() >= bytes, "encoded tensor: ", e.centroids.size(),
            " bytes of centroids, the codebooks alone need ", bytes);
  return e.centroids.size() - bytes;
}

/// Index of head h's FP32 codebook scale (fp8) in the centroids part.
size_t book_scale_offset(const EncodedTensor& e, int64_t h) {
  const int64_t values = cq_head_codebook_values(e.config, e.dim);
  return book_offset(e) + static_cast<size_t>(e.heads * values + h * 4);
}

}  // namespace

int cq_index_bits(const CodecConfig& c) {
  int b = 0;
  while ((1 << b) < c.cq_codewords) ++b;
  return b;
}

int64_t cq_row_bytes(const CodecConfig& c, int64_t dim) { return (dim / c.cq_dim * cq_index_bits(c) + 7) / 8; }

int64_t cq_head_codebook_values(const CodecConfig& c, int64_t dim) { return dim * c.cq_codewords; }

size_t cq_codebook_bytes(const CodecConfig& c, int64_t heads, int64_t dim) {
  int64_t values = 0;
  QVG_CHECK(!__builtin_mul_overflow(heads, cq_head_codebook_values(c, dim), &values), "encoded tensor: ", heads,
            " heads of dim ", dim, ": the codebook bytes overflow 64 bits");
  const int64_t per_value = fp8_books(c) ? 1 : 2;
  int64_t bytes = 0;
  QVG_CHECK(!__builtin_mul_overflow(values, per_value, &bytes) &&
                !__builtin_add_overflow(bytes, fp8_books(c) ? heads * 4 : 0, &bytes),
            "encoded tensor: the codebook bytes overflow 64 bits");
  return static_cast<size_t>(bytes);
}

void cq_pack_indices_ref(const uint8_t* idx, int64_t n, int b, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>((n * b + 7) / 8));
  for (int64_t j = 0; j < n; ++j)
    for (int t = 0; t < b; ++t) {
      const int64_t bit = j * b + t;
      out[bit / 8] = static_cast<uint8_t>(out[bit / 8] | (((idx[j] >> t) & 1u) << (bit % 8)));
    }
}

void cq_unpack_indices_ref(const uint8_t* in, int64_t n, int b, uint8_t* idx) {
  for (int64_t j = 0; j < n; ++j) {
    unsigned v = 0;
    for (int t = 0; t < b; ++t) {
      const int64_t bit = j * b + t;
      v |= ((in[bit / 8] >> (bit % 8)) & 1u) << t;
    }
    idx[j] = static_cast<uint8_t>(v);
  }
}

uint64_t cq_kmeans_seed(const CodecConfig& c, int64_t group, int64_t head) {
  return c.kmeans.seed + 1000003ull * static_cast<uint64_t>(9 + group) + static_cast<uint64_t>(head);
}

void cq_assign_ref(const float* u, int64_t n, int g, const float* book, int k, uint8_t* idx, float* dist) {
  // The codewords transposed ([g][k]) so that the loop over them vectorizes:
  // each distance still adds its g terms in order (cq_sq_dist's steps).
  std::vector<float> bt(static_cast<size_t>(g * k));
  for (int w = 0; w < k; ++w)
    for (int t = 0; t < g; ++t) bt[static_cast<size_t>(t * k + w)] = book[w * g + t];
  std::vector<float> dw(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    const float* ui = u + i * g;
    std::fill(dw.begin(), dw.end(), 0.0f);
    for (int t = 0; t < g; ++t) {
      const float ut = ui[t];
      const float* bw = bt.data() + static_cast<size_t>(t * k);
      for (int w = 0; w < k; ++w) {
        const float e = ut - bw[w];
        dw[w] = dw[w] + e * e;
      }
    }
    int arg = 0;
    for (int w = 1; w < k; ++w)
      if (dw[w] < dw[arg]) arg = w;  // strict: ties keep the lowest index
    idx[i] = static_cast<uint8_t>(arg);
    if (dist) dist[i] = dw[arg];
  }
}

namespace {

/// The exact total of the distances (cq_train_codebook_ref), as a double.
double cq_total_of(const std::vector<float>& dist) {
  float most = 0;
  for (float v : dist) most = std::max(most, v);
  const int e = fixed_sum_exponent(most, static_cast<int64_t>(dist.size()));
  const double scale = fixed_scale(e);
  int64_t sum = 0;
  for (float v : dist) sum += to_fixed_scaled(v, scale);
  return cq_total(sum, e);
}

}  // namespace

void cq_train_codebook_ref(const float* x, int64_t rows, int g, int c, int max_iter, double tol, uint64_t seed,
                           float* book) {
  QVG_CHECK(rows >= 1 && g >= 1 && c >= 1 && c <= 256 && c <= rows, "cq codebook: ", c, " codewords from ", rows,
            " rows of dim ", g);
  const std::vector<int64_t> start = kmeans_random_rows(rows, c, seed);
  for (int w = 0; w < c; ++w)
    for (int t = 0; t < g; ++t) book[w * g + t] = round_bf16(x[start[static_cast<size_t>(w)] * g + t]);
  std::vector<uint8_t> ids(static_cast<size_t>(rows));
  std::vector<float> dist(static_cast<size_t>(rows));
  cq_assign_ref(x, rows, g, book, c, ids.data(), dist.data());
  double total = cq_total_of(dist);
  const int fx = kmeans_fixed_exponent(x, rows, g);
  for (int it = 1; it <= max_iter; ++it) {
    kmeans_update_ref(x, rows, g, ids.data(), dist.data(), c, fx, book);
    cq_assign_ref(x, rows, g, book, c, ids.data(), dist.data());
    const double prev = total;
    total = cq_total_of(dist);
    if (cq_converged(prev, total, tol)) break;
  }
}

void cq_encode_head_ref(EncodedTensor& e, int64_t h, const std::vector<float>& r) {
  const CodecConfig& c = e.config;
  const int64_t n = e.tokens, d = e.dim, g = c.cq_dim, k = c.cq_codewords, groups = d / g;
  const int b = cq_index_bits(c);
  // Token scales: RMS (summed in double) as FP8 E4M3 against the head's span scale.
  std::vector<float> rms(static_cast<size_t>(n));
  float most = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) sq = cq_add_square(sq, r[i * d + q]);
    rms[i] = cq_rms(sq, d);
    most = std::max(most, rms[i]);
  }
  const float span = most > 0 ? most / 448.0f : 1.0f;
  put_f32(e.span_scales, static_cast<size_t>(h), span);
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = fp8_e4m3_from_float(cq_div(rms[i], span));
    e.scales[static_cast<size_t>(h * n + i)] = code;
    s[i] = cq_mul(fp8_e4m3_to_float(code), span);
  }
  // Each group's normalized sub-vectors, [groups][n][g].
  std::vector<float> u(static_cast<size_t>(groups * n * g));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < groups; ++j)
      for (int64_t t = 0; t < g; ++t)
        u[(j * n + i) * g + t] = s[i] > 0 ? cq_div(r[i * d + j * g + t], s[i]) : 0.0f;
  // Codebooks, [groups][k][g], from at most 64 K rows of each group.
  const int64_t want = std::min<int64_t>(n, 64 * k);
  const int64_t stride = (n + want - 1) / want;
  const int64_t rows = (n + stride - 1) / stride;
  const int64_t trained = std::min<int64_t>(k, rows);
  std::vector<float> books(static_cast<size_t>(groups * k * g));
  std::vector<float> sample(static_cast<size_t>(rows * g));
  for (int64_t j = 0; j < groups; ++j) {
    for (int64_t p = 0; p < rows; ++p)
      std::copy_n(u.begin() + (j * n + p * stride) * g, g, sample.begin() + p * g);
    float* book = books.data() + j * k * g;
    cq_train_codebook_ref(sample.data(), rows, static_cast<int>(g), static_cast<int>(trained), c.kmeans.max_iter,
                          c.kmeans.tol, cq_kmeans_seed(c, j, h), book);
    for (int64_t w = trained; w < k; ++w) std::copy_n(book, g, book + w * g);
  }
  // Store them (BF16 exactly: k-means' centroids are BF16 values; or FP8
  // against one power-of-two scale of the head) and take the stored values.
  const size_t base = book_offset(e) + static_cast<size_t>(h * d * k) * (fp8_books(c) ? 1 : 2);
  if (fp8_books(c)) {
    float absmax = 0;
    for (float v : books) absmax = std::max(absmax, std::fabs(v));
    const float scale = fp8_centroid_scale_for(absmax);
    std::memcpy(e.centroids.data() + book_scale_offset(e, h), &scale, 4);
    for (size_t q = 0; q < books.size(); ++q) {
      const uint8_t code = fp8_e4m3_from_float(cq_div(books[q], scale));
      e.centroids[base + q] = code;
      books[q] = cq_mul(fp8_e4m3_to_float(code), scale);
    }
  } else {
    for (size_t q = 0; q < books.size(); ++q) {
      const uint16_t v = bf16_from_float(books[q]);
      e.centroids[base + 2 * q] = static_cast<uint8_t>(v & 0xFF);
      e.centroids[base + 2 * q + 1] = static_cast<uint8_t>(v >> 8);
      books[q] = bf16_to_float(v);
    }
  }
  // Indices: the nearest stored codeword of every sub-vector, packed per token.
  std::vector<uint8_t> idx(static_cast<size_t>(groups * n));  // [groups][n]
  for (int64_t j = 0; j < groups; ++j)
    cq_assign_ref(u.data() + j * n * g, n, static_cast<int>(g), books.data() + j * k * g, static_cast<int>(k),
                  idx.data() + j * n);
  const int64_t row = cq_row_bytes(c, d);
  std::vector<uint8_t> tok(static_cast<size_t>(groups));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < groups; ++j) tok[j] = idx[j * n + i];
    cq_pack_indices_ref(tok.data(), groups, b, e.codes.data() + (h * n + i) * row);
  }
}

std::vector<float> cq_head_codebooks(const EncodedTensor& e, int64_t h) {
  const CodecConfig& c = e.config;
  const int64_t values = cq_head_codebook_values(c, e.dim);
  std::vector<float> out(static_cast<size_t>(values));
  const size_t base = book_offset(e) + static_cast<size_t>(h * values) * (fp8_books(c) ? 1 : 2);
  if (fp8_books(c)) {
    float scale;
    std::memcpy(&scale, e.centroids.data() + book_scale_offset(e, h), 4);
    for (size_t q = 0; q < out.size(); ++q) out[q] = fp8_e4m3_to_float(e.centroids[base + q]) * scale;
  } else {
    for (size_t q = 0; q < out.size(); ++q)
      out[q] = bf16_to_float(static_cast<uint16_t>(e.centroids[base + 2 * q] | (e.centroids[base + 2 * q + 1] << 8)));
  }
  return out;
}

void cq_decode_row_ref(const EncodedTensor& e, int64_t h, int64_t i, const float* books, float span, float* row) {
  const CodecConfig& c = e.config;
  const int64_t d = e.dim, g = c.cq_dim, k = c.cq_codewords, groups = d / g;
  const float s = fp8_e4m3_to_float(e.scales[static_cast<size_t>(h * e.tokens + i)]) * span;
  uint8_t idx[1024];  // groups <= dim; dims above 1024 go through the heap
  std::vector<uint8_t> big;
  uint8_t* ids = idx;
  if (groups > 1024) {
    big.resize(static_cast<size_t>(groups));
    ids = big.data();
  }
  cq_unpack_indices_ref(e.codes.data() + (h * e.tokens + i) * cq_row_bytes(c, d), groups, cq_index_bits(c), ids);
  for (int64_t j = 0; j < groups; ++j) {
    const float* w = books + (j * k + ids[j]) * g;
    for (int64_t t = 0; t < g; ++t) row[j * g + t] = s * w[t];
  }
}

void check_cq_codebook_scales(const EncodedTensor& e) {
  if (!fp8_books(e.config)) return;
  for (int64_t h = 0; h < e.heads; ++h) {
    float scale;
    std::memcpy(&scale, e.centroids.data() + book_scale_offset(e, h), 4);
    QVG_CHECK(std::isfinite(scale) && scale > 0, "encoded tensor: the FP8 codebook scale of head ", h, " is ", scale,
              " (finite and positive)");
  }
}

}  // namespace qvg
