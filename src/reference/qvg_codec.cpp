// QVG encode/decode (the CPU reference) and RTN as its S = 0 case.
//
// Parts (docs/FORMAT.md): centroids BF16 [S][H][C][D] (centroid_format=fp8:
// FP8 E4M3 [S][H][C][D], then FP32 power-of-two scales [S][H]); ids u8 [S][H][N];
// span_scales FP32 [H]; scales [H][N][D/B] (FP8 byte or FP16 LE);
// codes [H][N][D*b/8] packed LSB first. code=cq codes the residual with
// codebooks instead (src/reference/cq_code.h: its scales, codes and the codebooks
// at the end of the centroids part).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/codecs.h"
#include "qvg/fp8.h"
#include "qvg/group_quant.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#include "qvg/qvg_steps.h"
#include "reference/cq_code.h"
#include "util/parallel.h"

namespace qvg {
namespace {

GroupQuantParams gq_params(const CodecConfig& c) {
  return GroupQuantParams{c.bits, c.block, c.scale_format, c.levels};
}

bool fp8_centroids(const CodecConfig& c) { return c.centroid_format == CentroidFormat::fp8; }

bool codebook_code(const CodecConfig& c) { return c.code == ResidualCode::codebook; }

/// Stored bytes of one centroid value (BF16 or FP8).
int64_t centroid_value_bytes(const CodecConfig& c) { return fp8_centroids(c) ? 1 : 2; }

/// The power-of-two scale of one stage and head's FP8 centroids
/// (fp8_centroid_scale_for their largest magnitude).
float fp8_centroid_scale(const float* v, size_t n) {
  float absmax = 0;
  for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(v[i]));
  return fp8_centroid_scale_for(absmax);
}

/// Index of stage s, head h's FP32 centroid scale in the centroids part
/// (after the S*H*C*D FP8 codes), for fp8 centroids.
size_t centroid_scale_offset(const CodecConfig& c, int64_t heads, int64_t dim, int s, int64_t h) {
  const int64_t s_count = smoothing_stages(c), cn = c.kmeans.centroids;
  return static_cast<size_t>(s_count * heads * cn * dim + (s * heads + h) * 4);
}

/// Stage s, head h's centroids as decode adds them (BF16 values, or FP8 code
/// times the stage and head's scale): C * D floats.
std::vector<float> stage_centroids(const EncodedTensor& e, int s, int64_t h) {
  const CodecConfig& c = e.config;
  const int64_t cn = c.kmeans.centroids, d = e.dim;
  const size_t base = static_cast<size_t>((s * e.heads + h) * cn * d);
  std::vector<float> out(static_cast<size_t>(cn * d));
  if (fp8_centroids(c)) {
    float scale;
    std::memcpy(&scale, e.centroids.data() + centroid_scale_offset(c, e.heads, d, s, h), 4);
    for (size_t k = 0; k < out.size(); ++k) out[k] = fp8_e4m3_to_float(e.centroids[base + k]) * scale;
  } else {
    for (size_t k = 0; k < out.size(); ++k) out[k] = bf16_to_float(get_u16(e.centroids, base + k));
  }
  return out;
}

/// Stores stage s, head h's k-means centroids (C * D floats) in e's format.
void put_stage_centroids(EncodedTensor& e, int s, int64_t h, const std::vector<float>& v) {
  const CodecConfig& c = e.config;
  const size_t base = static_cast<size_t>((s * e.heads + h) * c.kmeans.centroids * e.dim);
  if (fp8_centroids(c)) {
    const float scale = fp8_centroid_scale(v.data(), v.size());
    std::memcpy(e.centroids.data() + centroid_scale_offset(c, e.heads, e.dim, s, h), &scale, 4);
    for (size_t k = 0; k < v.size(); ++k) e.centroids[base + k] = fp8_e4m3_from_float(v[k] / scale);
  } else {
    for (size_t k = 0; k < v.size(); ++k) put_u16(e.centroids, base + k, bf16_from_float(v[k]));
  }
}

}  // namespace

PartBytes qvg_expected_bytes(const CodecConfig& config, int64_t h, int64_t n, int64_t d) {
  const CodecConfig c = config.auto_centroids ? span_config(config, n) : config;  // C of a span of n tokens
  const int64_t s = smoothing_stages(c);
  const int64_t cents = s > 0 ? c.kmeans.centroids : 0;
  PartBytes b;
  if (codebook_code(c)) {
    b.codes = static_cast<size_t>(h * n * cq_row_bytes(c, d));
    b.scales = static_cast<size_t>(h * n);  // one FP8 scale a token
  } else {
    b.codes = static_cast<size_t>(h * n * (d * c.bits / 8));
    b.scales = static_cast<size_t>(h * n * (d / c.block) * scale_bytes(c.scale_format));
  }
  b.span_scales = static_cast<size_t>(h * 4);
  // S x C x value bytes (<= 8 x 256 x 2) times h x d: a shape whose decode fits
  // int64 bounds h x n x d, not this when n < 4,096; checked.
  int64_t centroid_bytes = 0;
  QVG_CHECK(!__builtin_mul_overflow(s * cents * centroid_value_bytes(c), h * d, &centroid_bytes),
            "encoded tensor shape [", h, ", ", n, ", ", d, "] is too large (its centroid bytes overflow 64 bits)");
  b.centroids = static_cast<size_t>(centroid_bytes);
  if (fp8_centroids(c) && s > 0) b.centroids += static_cast<size_t>(s * h * 4);
  if (codebook_code(c)) b.centroids += cq_codebook_bytes(c, h, d);  // after the stages' centroids
  b.ids = static_cast<size_t>(s * h * n);
  return b;
}

namespace {

EncodedTensor empty_encoding(const CodecConfig& c, const HeadTensorView& x, TensorRole role) {
  EncodedTensor e = encoded_header(c, x, role);
  const PartBytes b = qvg_expected_bytes(c, x.heads, x.tokens, x.dim);
  e.codes.resize(b.codes);
  e.scales.resize(b.scales);
  e.span_scales.resize(b.span_scales);
  e.centroids.resize(b.centroids);
  e.ids.resize(b.ids);
  return e;
}

/// Head h of x as tokens x dim floats: the working copy every stage updates.
std::vector<float> head_rows(const HeadTensorView& x, int64_t h) {
  std::vector<float> r(static_cast<size_t>(x.tokens * x.dim));
  for (int64_t n = 0; n < x.tokens; ++n) std::copy(x.row(h, n), x.row(h, n) + x.dim, r.begin() + n * x.dim);
  return r;
}

/// r -= stage s's stored centroids of head h (as decode adds them), by e's
/// ids (ids checked).
void subtract_stage(const EncodedTensor& e, int64_t h, int s, std::vector<float>& r) {
  const int64_t n = e.tokens, d = e.dim, cn = e.config.kmeans.centroids;
  const std::vector<float> cents = stage_centroids(e, s, h);
  const uint8_t* ids = e.ids.data() + (s * e.heads + h) * n;
  for (int64_t i = 0; i < n; ++i) {
    QVG_CHECK(ids[i] < cn, "centroid id ", int(ids[i]), " out of range (C = ", cn, ")");
    const float* row = cents.data() + static_cast<size_t>(ids[i] * d);
    for (int64_t k = 0; k < d; ++k) r[i * d + k] -= row[k];
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

/// Code head h's final residual r (every stage subtracted) into e: group
/// quantization, or the codebook code (code=cq).
void quantize_residual(EncodedTensor& e, int64_t h, const std::vector<float>& r) {
  const CodecConfig& c = e.config;
  if (codebook_code(c)) return cq_encode_head_ref(e, h, r);
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

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport* report) const override {
    check_encode_input(config_, x);
    // centroids=auto: the span's C, chosen from its length; the encoding holds it.
    if (config_.auto_centroids && smoothing_stages(config_) > 0)
      return QvgCodec(span_config(config_, x.tokens)).encode(x, opt, report);
    const int s_count = smoothing_stages(config_);
    const int64_t cn = config_.kmeans.centroids;
    if (s_count > 0)
      QVG_CHECK(cn <= x.tokens, config_.name, ": centroids (", cn, ") exceed the tokens of the span (",
                x.tokens, ")");
    const EncodedTensor* warm = opt.warm_start;
    if (warm && s_count > 0) {
      QVG_CHECK(method_traits(warm->config.method).clustered && warm->config.stages == s_count &&
                    warm->config.kmeans.centroids == cn && warm->heads == x.heads && warm->dim == x.dim &&
                    warm->config.centroid_format == config_.centroid_format &&
                    warm->centroids.size() == qvg_expected_bytes(warm->config, x.heads, 0, x.dim).centroids,
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
      std::vector<float> r = head_rows(x, h);
      std::vector<float> init;
      for (int s = 0; s < s_count; ++s) {
        KMeansParams kp = config_.kmeans;
        kp.seed = qvg_kmeans_seed(config_, s, h);
        const float* init_ptr = nullptr;
        if (warm) {
          init = stage_centroids(*warm, s, h);
          init_ptr = init.data();
        }
        KMeansResult km = kmeans_ref(r.data(), n, d, kp, init_ptr);
        put_stage_centroids(e, s, h, km.centroids);
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
    check_decode_parts(e, qvg_expected_bytes(e.config, e.heads, e.tokens, e.dim));
    check_qvg_part_values(e);
    const CodecConfig& c = e.config;
    const int s_count = smoothing_stages(c);
    const int64_t n = e.tokens, d = e.dim;
    const bool cq = codebook_code(c);  // else group quantization: bits, block (checked), scale, levels
    const GroupQuantParams p = gq_params(c);
    const int64_t code_row = cq ? 0 : d * c.bits / 8;
    const int64_t scale_row = cq ? 0 : (d / c.block) * scale_bytes(c.scale_format);
    out = HeadTensor(e.heads, n, d);
    parallel_for(e.heads, threads, [&](int64_t h) {
      const float span = get_f32(e.span_scales, static_cast<size_t>(h));  // checked: finite, > 0
      std::vector<std::vector<float>> cents(static_cast<size_t>(s_count));
      for (int s = 0; s < s_count; ++s) cents[static_cast<size_t>(s)] = stage_centroids(e, s, h);
      const std::vector<float> books = cq ? cq_head_codebooks(e, h) : std::vector<float>();
      float* o = out.head(h);
      for (int64_t i = 0; i < n; ++i) {
        float* row = o + i * d;
        if (cq)
          cq_decode_row_ref(e, h, i, books.data(), span, row);
        else
          group_dequantize_row_ref(e.codes.data() + (h * n + i) * code_row,
                                   e.scales.data() + (h * n + i) * scale_row, d, p, span, row);
        // Add the stages back, last stage first (the order the fused kernel uses).
        for (int s = s_count - 1; s >= 0; --s) {
          const uint8_t id = e.ids[static_cast<size_t>((s * e.heads + h) * n + i)];  // checked: < C
          const float* c_row = cents[static_cast<size_t>(s)].data() + static_cast<size_t>(id) * d;
          for (int64_t k = 0; k < d; ++k) row[k] += c_row[k];
        }
      }
    });
  }

 private:
  CodecConfig config_;
};

}  // namespace

void check_fp8_centroids(const std::vector<uint8_t>& centroids, size_t codes, const std::string& what, size_t end) {
  QVG_CHECK(centroids.size() >= codes, what, ": ", centroids.size(), " bytes of FP8 centroids, need ", codes);
  for (size_t i = 0; i < codes; ++i)
    QVG_CHECK((centroids[i] & 0x7F) != 0x7F, what, ": FP8 centroid ", i, " is NaN");
  end = std::min(end, centroids.size());
  for (size_t i = codes; i + 4 <= end; i += 4) {
    float scale;
    std::memcpy(&scale, centroids.data() + i, 4);
    QVG_CHECK(std::isfinite(scale) && scale > 0, what, ": centroid scale ", (i - codes) / 4, " is ", scale);
  }
}

void check_qvg_part_values(const EncodedTensor& e) {
  QVG_CHECK(e.span_scales.size() >= static_cast<size_t>(e.heads) * 4, "encoded tensor: ", e.span_scales.size(),
            " bytes of span scales for ", e.heads, " heads");
  for (int64_t h = 0; h < e.heads; ++h) {
    const float span = get_f32(e.span_scales, static_cast<size_t>(h));
    QVG_CHECK(std::isfinite(span) && span > 0, "encoded tensor: span scale of head ", h, " is ", span);
  }
  const int64_t cn = smoothing_stages(e.config) > 0 ? e.config.kmeans.centroids : 0;
  const int64_t stage_codes = smoothing_stages(e.config) * e.heads * cn * e.dim;
  if (fp8_centroids(e.config) && cn > 0)  // the stages' codes and scales; codebooks (code=cq) follow them
    check_fp8_centroids(e.centroids, static_cast<size_t>(stage_codes), "encoded tensor",
                        static_cast<size_t>(stage_codes + smoothing_stages(e.config) * e.heads * 4));
  if (codebook_code(e.config)) check_cq_codebook_scales(e);
  for (size_t i = 0; i < e.ids.size(); ++i)
    QVG_CHECK(e.ids[i] < cn, "encoded tensor: centroid id ", int(e.ids[i]), " out of range (C = ", cn, ")",
              " at id ", i);
}

uint64_t qvg_kmeans_seed(const CodecConfig& c, int stage, int64_t head) {
  return c.kmeans.seed + 1000003ull * static_cast<uint64_t>(stage) + static_cast<uint64_t>(head);
}

double qvg_bits_per_value_formula(const CodecConfig& config, int64_t tokens, int64_t dim) {
  const CodecConfig c = config.auto_centroids ? span_config(config, tokens) : config;
  const double s = smoothing_stages(c);
  const double n = static_cast<double>(tokens), d = static_cast<double>(dim);
  const double centroid_bits = fp8_centroids(c) ? 8.0 : 16.0;  // + an FP32 scale per stage and head with fp8
  const double per_head = 32.0 + (fp8_centroids(c) ? 32.0 * s : 0.0);
  const double stages = 8.0 * s / d + centroid_bits * s * (s > 0 ? c.kmeans.centroids : 0) / n + per_head / (n * d);
  if (codebook_code(c))  // whole bytes of indices a token; FP8 token scales; codebooks (+ an FP32 scale with fp8)
    return 8.0 * static_cast<double>(cq_row_bytes(c, dim)) / d + 8.0 / d + stages +
           (centroid_bits * c.cq_codewords * d + (fp8_centroids(c) ? 32.0 : 0.0)) / (n * d);
  return c.bits + 8.0 * scale_bytes(c.scale_format) / c.block + stages;
}

EncodedTensor qvg_encode_given_centroids_ref(const HeadTensor& x, const CodecConfig& c,
                                             std::vector<uint8_t> centroids, std::vector<uint8_t> ids,
                                             TensorRole role, int threads) {
  QVG_CHECK(method_traits(c.method).group_quantized, c.name, ": not a QVG/RTN config");
  check_encode_input(c, x);
  EncodedTensor e = empty_encoding(c, x, role);
  QVG_CHECK(c.centroid_format == CentroidFormat::bf16, c.name, ": given centroids are BF16 (centroid_format=bf16)");
  QVG_CHECK(centroids.size() == e.centroids.size(), "given centroids have ", centroids.size(),
            " bytes, the config needs ", e.centroids.size());
  QVG_CHECK(ids.size() == e.ids.size(), "given ids have ", ids.size(), " bytes, the config needs ",
            e.ids.size());
  check_bf16_finite(centroids, c.name + ": given centroid");
  e.centroids = std::move(centroids);
  e.ids = std::move(ids);
  const int s_count = smoothing_stages(c);
  parallel_for(x.heads, threads, [&](int64_t h) {
    std::vector<float> r = head_rows(x, h);
    for (int s = 0; s < s_count; ++s) advance_stage(e, h, s, s_count, r);
    quantize_residual(e, h, r);
  });
  return e;
}

std::unique_ptr<Codec> make_qvg_codec(const CodecConfig& c) { return std::make_unique<QvgCodec>(c); }

}  // namespace qvg
