// QVG encode/decode (the CPU reference) and RTN as its S = 0 case.
//
// Parts (docs/FORMAT.md): centroids BF16 [S][H][C][D]; ids u8 [S][H][N];
// span_scales FP32 [H]; scales [H][N][D/B] (FP8 byte or FP16 LE);
// codes [H][N][D*b/8] packed LSB first.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "cpu/codecs.h"
#include "qvg/group_quant.h"
#include "qvg/half.h"
#include "qvg/qvg.h"
#include "util/parallel.h"

namespace qvg {
namespace {

int stages_of(const CodecConfig& c) { return c.method == Method::qvg ? c.stages : 0; }

GroupQuantParams gq_params(const CodecConfig& c) {
  return GroupQuantParams{c.bits, c.block, c.scale_format, c.levels};
}

PartBytes expected_bytes(const CodecConfig& c, int64_t h, int64_t n, int64_t d) {
  const int64_t s = stages_of(c);
  const int64_t cents = s > 0 ? c.kmeans.centroids : 0;
  PartBytes b;
  b.codes = static_cast<size_t>(h * n * (d * c.bits / 8));
  b.scales = static_cast<size_t>(h * n * (d / c.block) * scale_bytes(c.scale_format));
  b.span_scales = static_cast<size_t>(h * 4);
  b.centroids = static_cast<size_t>(s * h * cents * d * 2);
  b.ids = static_cast<size_t>(s * h * n);
  return b;
}

EncodedTensor empty_encoding(const CodecConfig& c, const HeadTensor& x, TensorRole role) {
  EncodedTensor e = encoded_header(c, x, role);
  const PartBytes b = expected_bytes(c, x.heads, x.tokens, x.dim);
  e.codes.resize(b.codes);
  e.scales.resize(b.scales);
  e.span_scales.resize(b.span_scales);
  e.centroids.resize(b.centroids);
  e.ids.resize(b.ids);
  return e;
}

/// r -= stage s's BF16-rounded centroids of head h, by e's ids (ids checked).
void subtract_stage(const EncodedTensor& e, int64_t h, int s, std::vector<float>& r) {
  const int64_t n = e.tokens, d = e.dim, cn = e.config.kmeans.centroids;
  const size_t cbase = static_cast<size_t>((s * e.heads + h) * cn * d);
  const uint8_t* ids = e.ids.data() + (s * e.heads + h) * n;
  for (int64_t i = 0; i < n; ++i) {
    QVG_CHECK(ids[i] < cn, "centroid id ", int(ids[i]), " out of range (C = ", cn, ")");
    const size_t row = cbase + static_cast<size_t>(ids[i] * d);
    for (int64_t k = 0; k < d; ++k) r[i * d + k] -= bf16_to_float(get_u16(e.centroids, row + k));
  }
}

/// From stage s's points r to what follows them (docs/FORMAT.md, Encode 1):
/// r - bf16(c_s)[ids] in float, rounded to BF16 where another stage follows
/// (its points), left float after the last stage (the residual R that is
/// quantized). Stage 0 clusters X as given; every later stage BF16 points,
/// the precision of the input and of the stored centroids (on the GPU the
/// last assignment of a stage writes them, and that of the last stage finds
/// max |R|: no pass of its own).
/// Inputs are finite (checked), but near FLT_MAX a centroid's BF16 rounding,
/// x - c or the BF16 points can overflow: an error then, not a tensor whose
/// span scale is inf (which the decoder would reject) or NaN codes. With
/// centroids from this span's k-means (at least one iteration, or no warm
/// start) |x| <= 2^(126 - S) cannot overflow; given or warm centroids can.
void advance_stage(const EncodedTensor& e, int64_t h, int s, int s_count, std::vector<float>& r) {
  subtract_stage(e, h, s, r);
  if (s + 1 < s_count) std::transform(r.begin(), r.end(), r.begin(), round_bf16);
  const auto bad = std::find_if(r.begin(), r.end(), [](float v) { return !std::isfinite(v); });
  QVG_CHECK(bad == r.end(), e.config.name, ": head ", h, ": the residual after smoothing stage ", s, " overflows float (",
            *bad, " at token ", (bad - r.begin()) / e.dim, "): ", residual_overflow_hint(s_count));
}

/// Group-quantize head h's final residual r (every stage subtracted) into e.
void quantize_residual(EncodedTensor& e, int64_t h, const std::vector<float>& r) {
  const CodecConfig& c = e.config;
  const int64_t n = e.tokens, d = e.dim;
  const GroupQuantParams p = gq_params(c);
  const float span = span_scale_for(max_block_scale_ref(r.data(), n, d, p), c.scale_format);
  put_f32(e.span_scales, static_cast<size_t>(h), span);
  const int64_t code_row = d * c.bits / 8;
  const int64_t scale_row = (d / c.block) * scale_bytes(c.scale_format);
  for (int64_t i = 0; i < n; ++i)
    group_quantize_row_ref(r.data() + i * d, d, p, span, e.codes.data() + (h * n + i) * code_row,
                           e.scales.data() + (h * n + i) * scale_row);
}

class QvgCodec final : public Codec {
 public:
  explicit QvgCodec(CodecConfig c) : config_(std::move(c)) {}
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensor& x, const EncodeOptions& opt, EncodeReport* report) const override {
    check_encode_input(config_, x);
    const int s_count = stages_of(config_);
    const int64_t cn = config_.kmeans.centroids;
    if (s_count > 0)
      QVG_CHECK(cn <= x.tokens, config_.name, ": centroids (", cn, ") exceed the tokens of the span (",
                x.tokens, ")");
    const EncodedTensor* warm = opt.warm_start;
    if (warm && s_count > 0) {
      QVG_CHECK(warm->config.method == Method::qvg && warm->config.stages == s_count &&
                    warm->config.kmeans.centroids == cn && warm->heads == x.heads && warm->dim == x.dim &&
                    warm->centroids.size() == static_cast<size_t>(s_count * x.heads * cn * x.dim * 2),
                config_.name, ": the warm-start tensor does not match (needs ", s_count, " stages, ", cn,
                " centroids, ", x.heads, " heads, dim ", x.dim, ")");
    }
    EncodedTensor e = empty_encoding(config_, x, opt.role);
    if (report) {
      report->kmeans.assign(static_cast<size_t>(s_count * x.heads), KMeansStats{});
      report->kmeans_seconds = 0;
    }
    const int64_t n = x.tokens, d = x.dim;
    parallel_for(x.heads, opt.threads, [&](int64_t h) {
      // r: the points stage s clusters (P_0 = X, then P_s + 1 = bf16(P_s -
      // bf16(c_s)[ids])); after the last stage, the residual R it leaves.
      std::vector<float> r(x.head(h), x.head(h) + n * d);
      std::vector<float> init;
      for (int s = 0; s < s_count; ++s) {
        KMeansParams kp = config_.kmeans;
        kp.seed = qvg_kmeans_seed(config_, s, h);
        const size_t cbase = static_cast<size_t>((s * x.heads + h) * cn * d);
        const float* init_ptr = nullptr;
        if (warm) {
          init.resize(static_cast<size_t>(cn * d));
          for (size_t k = 0; k < init.size(); ++k) init[k] = bf16_to_float(get_u16(warm->centroids, cbase + k));
          init_ptr = init.data();
        }
        KMeansResult km = kmeans_ref(r.data(), n, d, kp, init_ptr);
        for (size_t k = 0; k < km.centroids.size(); ++k) put_u16(e.centroids, cbase + k, bf16_from_float(km.centroids[k]));
        std::copy(km.ids.begin(), km.ids.end(), e.ids.data() + (s * x.heads + h) * n);
        advance_stage(e, h, s, s_count, r);
        if (report) report->kmeans[static_cast<size_t>(s * x.heads + h)] = std::move(km.stats);
      }
      quantize_residual(e, h, r);
    });
    if (report)
      for (const auto& st : report->kmeans) report->kmeans_seconds += st.seconds;
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int threads) const override {
    check_decode_header(config_, e);  // before expected_bytes divides by the block
    check_decode_parts(e, expected_bytes(e.config, e.heads, e.tokens, e.dim));
    check_qvg_part_values(e);
    const CodecConfig& c = e.config;
    const int s_count = stages_of(c);
    const int64_t n = e.tokens, d = e.dim, cn = c.kmeans.centroids;
    const GroupQuantParams p = gq_params(c);
    const int64_t code_row = d * c.bits / 8;
    const int64_t scale_row = (d / c.block) * scale_bytes(c.scale_format);
    out = HeadTensor(e.heads, n, d);
    parallel_for(e.heads, threads, [&](int64_t h) {
      const float span = get_f32(e.span_scales, static_cast<size_t>(h));  // checked: finite, > 0
      float* o = out.head(h);
      for (int64_t i = 0; i < n; ++i) {
        float* row = o + i * d;
        group_dequantize_row_ref(e.codes.data() + (h * n + i) * code_row,
                                 e.scales.data() + (h * n + i) * scale_row, d, p, span, row);
        // Add the stages back, last stage first (the order the fused kernel uses).
        for (int s = s_count - 1; s >= 0; --s) {
          const uint8_t id = e.ids[static_cast<size_t>((s * e.heads + h) * n + i)];  // checked: < C
          const size_t base = static_cast<size_t>(((s * e.heads + h) * cn + id) * d);
          for (int64_t k = 0; k < d; ++k) row[k] += bf16_to_float(get_u16(e.centroids, base + k));
        }
      }
    });
  }

 private:
  CodecConfig config_;
};

}  // namespace

void check_qvg_part_values(const EncodedTensor& e) {
  QVG_CHECK(e.span_scales.size() >= static_cast<size_t>(e.heads) * 4, "encoded tensor: ", e.span_scales.size(),
            " bytes of span scales for ", e.heads, " heads");
  for (int64_t h = 0; h < e.heads; ++h) {
    const float span = get_f32(e.span_scales, static_cast<size_t>(h));
    QVG_CHECK(std::isfinite(span) && span > 0, "encoded tensor: span scale of head ", h, " is ", span);
  }
  const int64_t cn = e.config.method == Method::qvg ? e.config.kmeans.centroids : 0;
  for (size_t i = 0; i < e.ids.size(); ++i)
    QVG_CHECK(e.ids[i] < cn, "encoded tensor: centroid id ", int(e.ids[i]), " out of range (C = ", cn, ")",
              " at id ", i);
}

uint64_t qvg_kmeans_seed(const CodecConfig& c, int stage, int64_t head) {
  return c.kmeans.seed + 1000003ull * static_cast<uint64_t>(stage) + static_cast<uint64_t>(head);
}

double qvg_bits_per_value_formula(const CodecConfig& c, int64_t tokens, int64_t dim) {
  const double s = stages_of(c);
  const double n = static_cast<double>(tokens), d = static_cast<double>(dim);
  return c.bits + 8.0 * scale_bytes(c.scale_format) / c.block + 8.0 * s / d +
         16.0 * s * (s > 0 ? c.kmeans.centroids : 0) / n + 32.0 / (n * d);
}

EncodedTensor qvg_encode_given_centroids_ref(const HeadTensor& x, const CodecConfig& c,
                                             std::vector<uint8_t> centroids, std::vector<uint8_t> ids,
                                             TensorRole role, int threads) {
  QVG_CHECK(c.method == Method::qvg || c.method == Method::rtn, c.name, ": not a QVG/RTN config");
  check_encode_input(c, x);
  EncodedTensor e = empty_encoding(c, x, role);
  QVG_CHECK(centroids.size() == e.centroids.size(), "given centroids have ", centroids.size(),
            " bytes, the config needs ", e.centroids.size());
  QVG_CHECK(ids.size() == e.ids.size(), "given ids have ", ids.size(), " bytes, the config needs ",
            e.ids.size());
  check_bf16_finite(centroids, c.name + ": given centroid");
  e.centroids = std::move(centroids);
  e.ids = std::move(ids);
  const int s_count = stages_of(c);
  parallel_for(x.heads, threads, [&](int64_t h) {
    std::vector<float> r(x.head(h), x.head(h) + x.tokens * x.dim);
    for (int s = 0; s < s_count; ++s) advance_stage(e, h, s, s_count, r);
    quantize_residual(e, h, r);
  });
  return e;
}

std::unique_ptr<Codec> make_qvg_codec(const CodecConfig& c) { return std::make_unique<QvgCodec>(c); }

}  // namespace qvg
