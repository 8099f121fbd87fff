// check_encoded_tensor (include/qvg/codec.h): the values stored in an encoded
// tensor that comes from outside the library (a cache file, a pickled state),
// checked part by part, each failure naming the part and the position.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/codecs.h"
#include "qvg/fp8.h"
#include "qvg/group_quant.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#include "reference/baselines.h"
#include "reference/cq_code.h"

namespace qvg {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

/// A head whose decoded magnitudes may exceed this is decoded and looked at:
/// below it the float rounding of the decode's few operations cannot reach
/// infinity.
constexpr double kSafeBound = std::numeric_limits<float>::max() / 2.0;

std::string hex(unsigned v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = digits - 1; i >= 0; --i) s.push_back(d[(v >> (4 * i)) & 0xF]);
  return s;
}

bool bf16_nonfinite(uint8_t lo, uint8_t hi) { return (hi & 0x7F) == 0x7F && (lo & 0x80); }
bool fp16_nonfinite(uint16_t u) { return (u & 0x7C00) == 0x7C00; }
bool fp8_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }

/// Index of the first non-finite BF16 value in bytes [0, 2n), or kNone. Blocks
/// are or-reduced first (vectorizable); only a block with a hit is searched.
size_t first_nonfinite_bf16(const uint8_t* b, size_t n) {
  constexpr size_t kBlock = 4096;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    unsigned any = 0;
    for (size_t i = start; i < end; ++i) any |= bf16_nonfinite(b[2 * i], b[2 * i + 1]);
    if (!any) continue;
    for (size_t i = start; i < end; ++i)
      if (bf16_nonfinite(b[2 * i], b[2 * i + 1])) return i;
  }
  return kNone;
}

uint16_t u16_at(const std::vector<uint8_t>& b, size_t i) { return static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8)); }

float f32_at(const std::vector<uint8_t>& b, size_t i) {
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

/// Throws for the first non-finite BF16 value of a [heads][tokens][dim] part;
/// `first_token` is the token its row 0 holds.
void check_bf16_rows(const std::vector<uint8_t>& part, const char* name, int64_t tokens, int64_t dim,
                     int64_t first_token) {
  const size_t i = first_nonfinite_bf16(part.data(), part.size() / 2);
  if (i == kNone) return;
  const int64_t per_head = tokens * dim, k = static_cast<int64_t>(i);
  QVG_CHECK(false, "encoded tensor: part '", name, "' holds a non-finite value (BF16 ", hex(u16_at(part, i), 4),
            ") at head ", k / per_head, ", token ", first_token + k % per_head / dim, ", channel ", k % dim);
}

// ---- qvg / rtn ----------------------------------------------------------------------

/// Largest |level| a b-bit code can decode to (any code, not only the encoder's).
double max_level(const CodecConfig& c) {
  return c.levels == LevelRule::symmetric ? std::ldexp(1.0, c.bits - 1) : (std::ldexp(1.0, c.bits) - 1) / 2;
}

}  // namespace

void check_group_quantized_values(const EncodedTensor& e, const HeadTensor* decoded) {
  const CodecConfig& c = e.config;
  const int64_t H = e.heads, N = e.tokens, D = e.dim;
  const int64_t S = smoothing_stages(c), C = S > 0 ? c.kmeans.centroids : 0;
  const bool cq = c.code == ResidualCode::codebook;  // one FP8 scale a token, codebooks after the centroids
  const bool fp8_scales = cq || c.scale_format == ScaleFormat::fp8;
  const bool fp8_cents = c.centroid_format == CentroidFormat::fp8;
  std::vector<double> bound(static_cast<size_t>(H), 0.0);  // per head: largest |decoded value| the parts allow

  for (int64_t h = 0; h < H; ++h) {
    const float span = f32_at(e.span_scales, static_cast<size_t>(h));
    QVG_CHECK(std::isfinite(span) && span > 0, "encoded tensor: part 'span_scales' holds ", span, " at head ", h,
              " (a span scale is finite and positive)");
  }
  // Codebooks (code=cq): finite codewords, finite positive FP8 scales; the largest per head.
  std::vector<double> level(static_cast<size_t>(H), max_level(c));
  if (cq) {
    check_cq_codebook_scales(e);
    const int64_t g = c.cq_dim, k = c.cq_codewords;
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<float> books = cq_head_codebooks(e, h);
      double m = 0;
      for (size_t q = 0; q < books.size(); ++q) {
        const int64_t v = static_cast<int64_t>(q);
        QVG_CHECK(std::isfinite(books[q]),
                  "encoded tensor: part 'centroids' holds a non-finite codeword value at head ", h,
                  ", channel group ", v / (k * g), ", codeword ", v / g % k, ", channel ", v % g);
        m = std::max(m, static_cast<double>(std::fabs(books[q])));
      }
      level[static_cast<size_t>(h)] = m;
    }
  }
  // Block scales [H][N][D/B] (code=cq: token scales [H][N]): no NaN / infinity; the largest per head.
  const int64_t blocks = cq ? 1 : D / c.block, per_head = N * blocks;
  std::vector<double> max_scale(static_cast<size_t>(H), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    float m = 0;
    for (int64_t k = 0; k < per_head; ++k) {
      const size_t i = static_cast<size_t>(h * per_head + k);
      const uint16_t code = fp8_scales ? e.scales[i] : u16_at(e.scales, i);
      const bool bad = fp8_scales ? fp8_nan(static_cast<uint8_t>(code)) : fp16_nonfinite(code);
      QVG_CHECK(!bad, "encoded tensor: part 'scales' holds ", fp8_scales ? "NaN (FP8 " : "a non-finite value (FP16 ",
                hex(code, fp8_scales ? 2 : 4), ") at head ", h, ", token ", k / blocks, ", block ", k % blocks);
      const float v = std::fabs(fp8_scales ? fp8_e4m3_to_float(static_cast<uint8_t>(code)) : fp16_to_float(code));
      m = std::max(m, v);
    }
    max_scale[static_cast<size_t>(h)] = m;
    bound[static_cast<size_t>(h)] =
        static_cast<double>(m) * f32_at(e.span_scales, static_cast<size_t>(h)) * level[static_cast<size_t>(h)];
  }
  // Centroids [S][H][C][D] (BF16, or FP8 codes then FP32 scales [S][H]).
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) {
      const size_t base = static_cast<size_t>((s * H + h) * C * D), n = static_cast<size_t>(C * D);
      double m = 0;
      if (fp8_cents) {
        float cs;
        std::memcpy(&cs, e.centroids.data() + S * H * C * D + (s * H + h) * 4, 4);
        QVG_CHECK(std::isfinite(cs) && cs > 0, "encoded tensor: part 'centroids' holds the FP8 centroid scale ", cs,
                  " at stage ", s, ", head ", h, " (finite and positive)");
        float cm = 0;
        for (size_t k = 0; k < n; ++k) {
          const uint8_t code = e.centroids[base + k];
          QVG_CHECK(!fp8_nan(code), "encoded tensor: part 'centroids' holds NaN (FP8 ", hex(code, 2), ") at stage ", s,
                    ", head ", h, ", centroid ", k / static_cast<size_t>(D), ", channel ", k % static_cast<size_t>(D));
          cm = std::max(cm, std::fabs(fp8_e4m3_to_float(code)));
        }
        m = static_cast<double>(cm) * cs;
      } else {
        const size_t bad = first_nonfinite_bf16(e.centroids.data() + 2 * base, n);
        QVG_CHECK(bad == kNone, "encoded tensor: part 'centroids' holds a non-finite value (BF16 ",
                  hex(bad == kNone ? 0 : u16_at(e.centroids, base + bad), 4), ") at stage ", s, ", head ", h,
                  ", centroid ", bad / static_cast<size_t>(D), ", channel ", bad % static_cast<size_t>(D));
        for (size_t k = 0; k < n; ++k) m = std::max(m, static_cast<double>(std::fabs(bf16_to_float(u16_at(e.centroids, base + k)))));
      }
      bound[static_cast<size_t>(h)] += m;
    }
  for (size_t i = 0; i < e.ids.size(); ++i)
    QVG_CHECK(e.ids[i] < C, "encoded tensor: part 'ids' holds ", int(e.ids[i]), " at stage ",
              static_cast<int64_t>(i) / (H * N), ", head ", static_cast<int64_t>(i) / N % H, ", token ",
              static_cast<int64_t>(i) % N, " (C = ", C, " centroids)");

  // Finite values whose decode overflows float: where the bound allows it, the
  // decode itself is looked at (valid encodings of inputs near the float range
  // reach such bounds and decode finite).
  HeadTensor own;
  for (int64_t h = 0; h < H; ++h) {
    if (bound[static_cast<size_t>(h)] <= kSafeBound) continue;
    if (!decoded) {
      make_codec(c)->decode(e, own);
      decoded = &own;
    }
    QVG_CHECK(decoded->heads == H && decoded->tokens == N && decoded->dim == D,
              "check_encoded_tensor: the decoded tensor's shape differs from the encoded one's");
    const float* x = decoded->head(h);
    for (int64_t k = 0; k < N * D; ++k)
      QVG_CHECK(std::isfinite(x[k]), "encoded tensor: its values decode beyond the float range at head ", h,
                ", token ", k / D, ", channel ", k % D, " (span scale ", f32_at(e.span_scales, static_cast<size_t>(h)),
                ", largest block scale ", max_scale[static_cast<size_t>(h)], S > 0 ? ", with the centroids" : "",
                "): no encoding of a finite input stores these");
  }
}

// ---- kivi, quarot, bf16 ---------------------------------------------------------------

namespace {

/// FP16 scales (finite, >= 0) and zero points (finite), group gi of `groups_per_head`.
void check_fp16_params(const EncodedTensor& e, int64_t groups_per_head, const char* unit) {
  const size_t n = e.scales.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t s = u16_at(e.scales, i), z = u16_at(e.zero_points, i);
    const int64_t h = static_cast<int64_t>(i) / groups_per_head, g = static_cast<int64_t>(i) % groups_per_head;
    QVG_CHECK(!fp16_nonfinite(s) && !(s & 0x8000 && (s & 0x7FFF) != 0), "encoded tensor: part 'scales' holds ",
              fp16_to_float(s), " (FP16 ", hex(s, 4), ") at head ", h, ", ", unit, " ", g,
              " (a scale is finite and >= 0)");
    QVG_CHECK(!fp16_nonfinite(z), "encoded tensor: part 'zero_points' holds ", fp16_to_float(z), " (FP16 ", hex(z, 4),
              ") at head ", h, ", ", unit, " ", g);
  }
}

}  // namespace

void check_kivi_values(const EncodedTensor& e, const HeadTensor*) {
  const CodecConfig& c = e.config;
  const int64_t nq = kivi_quantized_tokens(c, e.role, e.tokens);
  const int64_t groups = e.role == TensorRole::key ? nq / c.group * e.dim : nq * (e.dim / c.group);
  if (groups > 0) check_fp16_params(e, groups, "group");
  check_bf16_rows(e.full_precision, "full_precision", e.tokens - nq, e.dim, nq);
}

void check_quarot_values(const EncodedTensor& e, const HeadTensor*) { check_fp16_params(e, e.tokens, "token"); }

void check_bf16_values(const EncodedTensor& e, const HeadTensor*) {
  check_bf16_rows(e.full_precision, "full_precision", e.tokens, e.dim, 0);
}

void check_encoded_tensor(const EncodedTensor& e, const HeadTensor* decoded) {
  const CodecConfig& c = e.config;
  check_decode_header(c, e);
  QVG_CHECK(e.role == TensorRole::key || e.role == TensorRole::value, "encoded tensor has an unknown role ",
            static_cast<int>(e.role));
  check_decode_parts(e, expected_part_bytes(c, e.role, e.heads, e.tokens, e.dim));
  method_traits(c.method).check_values(e, decoded);
}

}  // namespace qvg
