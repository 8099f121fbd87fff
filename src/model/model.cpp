// The reference video model: weights, validation and the forward pass of one
// chunk (include/qvg/model.h, docs/MODEL.md §3-6). fp32 throughout; Eigen for
// the matmuls, explicit loops for the norms and modulation.
#include "qvg/model.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "qvg/half.h"
#include "qvg/io.h"
#include "util/fixed_product.h"
#include "util/parallel.h"

namespace qvg {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRow = Eigen::Map<RowMat>;
using MapRowC = Eigen::Map<const RowMat>;

/// Tokens per unit of work in the forward pass (a multiple of 8 and of 24, the
/// AVX float kernel's rows, so Eigen takes the same path in every block).
constexpr int64_t kRowBlock = 96;
/// Query rows per unit of attention work (a multiple of 24 too): each unit
/// repacks its head's K and V for Eigen's kernel, so fewer, taller units copy
/// less.
constexpr int64_t kAttnRowBlock = 192;

// ---- config -------------------------------------------------------------------

/// Largest value of an integer config field, and of the sizes derived from
/// them (patch_dim, tokens_per_chunk).
constexpr int64_t kMaxField = int64_t{1} << 20;
constexpr int64_t kMaxDerived = int64_t{1} << 24;

void validate(const ModelConfig& c) {
  QVG_CHECK(c.frame > 0 && c.patch > 0 && c.frame % c.patch == 0, "model config: frame (", c.frame,
            ") must be a positive multiple of patch (", c.patch, ")");
  QVG_CHECK(c.channels > 0, "model config: channels must be > 0, got ", c.channels);
  QVG_CHECK(c.heads > 0 && c.head_dim > 0 && c.dim == int64_t{c.heads} * c.head_dim, "model config: dim (", c.dim,
            ") must equal heads (", c.heads, ") x head_dim (", c.head_dim, ")");
  // The derived sizes are int: keep them (and their products in the
  // forward pass) far from overflowing.
  QVG_CHECK(int64_t{c.patch} * c.patch * c.channels <= kMaxDerived, "model config: patch^2 x channels (",
            int64_t{c.patch} * c.patch * c.channels, ") exceeds ", kMaxDerived);
  QVG_CHECK(int64_t{c.frame / c.patch} * (c.frame / c.patch) * c.chunk_frames <= kMaxDerived,
            "model config: tokens per chunk ((frame / patch)^2 x chunk_frames = ",
            int64_t{c.frame / c.patch} * (c.frame / c.patch) * c.chunk_frames, ") exceed ", kMaxDerived);
  QVG_CHECK(c.head_dim % 2 == 0, "model config: head_dim must be even, got ", c.head_dim);
  QVG_CHECK(c.layers > 0 && c.layers <= 1024, "model config: layers must be 1..1024, got ", c.layers);
  QVG_CHECK(c.mlp_dim > 0, "model config: mlp_dim must be > 0, got ", c.mlp_dim);
  QVG_CHECK(c.chunk_frames > 0, "model config: chunk_frames must be > 0, got ", c.chunk_frames);
  QVG_CHECK(c.freq_dim > 0 && c.freq_dim % 2 == 0, "model config: freq_dim must be even and > 0, got ",
            c.freq_dim);
  QVG_CHECK(std::isfinite(c.eps) && c.eps > 0, "model config: eps must be > 0, got ", c.eps);
  QVG_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 1, "model config: rope_theta must be > 1, got ",
            c.rope_theta);
  QVG_CHECK(std::isfinite(c.t_scale) && c.t_scale > 0, "model config: t_scale must be > 0, got ", c.t_scale);
}

ModelConfig parse_model_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    QVG_CHECK(false, "model config: malformed JSON: ", e.what());
  }
  QVG_CHECK(j.is_object(), "model config: expected a JSON object");
  ModelConfig c;
  auto get_int = [&](const char* key, int& field) {
    if (!j.contains(key)) return;
    const nlohmann::json& v = j[key];
    QVG_CHECK(v.is_number_integer(), "model config: '", key, "' must be an integer");
    // Read wide, then range-check (get<int> truncated 2^32 + 6 to 6).
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(kMaxField)
                                                 : v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxField;
    QVG_CHECK(in_range && v.get<int64_t>() >= 1, "model config: '", key, "' must be 1..", kMaxField, ", got ", v.dump());
    field = static_cast<int>(v.get<int64_t>());
  };
  auto get_num = [&](const char* key, double& field) {
    if (!j.contains(key)) return;
    QVG_CHECK(j[key].is_number(), "model config: '", key, "' must be a number");
    field = j[key].get<double>();
  };
  get_int("frame", c.frame);
  get_int("patch", c.patch);
  get_int("channels", c.channels);
  get_int("dim", c.dim);
  get_int("heads", c.heads);
  get_int("head_dim", c.head_dim);
  get_int("layers", c.layers);
  get_int("mlp_dim", c.mlp_dim);
  get_int("chunk_frames", c.chunk_frames);
  get_int("freq_dim", c.freq_dim);
  get_num("eps", c.eps);
  get_num("rope_theta", c.rope_theta);
  get_num("t_scale", c.t_scale);
  return c;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_weight_shapes(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  auto lin = [&](const std::string& name, int64_t o, int64_t i) {
    out.push_back({name + ".weight", {o, i}});
    out.push_back({name + ".bias", {o}});
  };
  lin("patch_embed", c.dim, c.patch_dim());
  lin("t_fc1", c.dim, c.freq_dim);
  lin("t_fc2", c.dim, c.dim);
  for (int i = 0; i < c.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    lin(b + "ada", 6 * int64_t{c.dim}, c.dim);
    for (const char* p : {"q", "k", "v", "o"}) lin(b + "attn." + p, c.dim, c.dim);
    out.push_back({b + "attn.norm_q.weight", {c.dim}});
    out.push_back({b + "attn.norm_k.weight", {c.dim}});
    lin(b + "fc1", c.mlp_dim, c.dim);
    lin(b + "fc2", c.dim, c.mlp_dim);
  }
  lin("final_ada", 2 * int64_t{c.dim}, c.dim);
  lin("final", c.patch_dim(), c.dim);
  return out;
}

// ---- loading --------------------------------------------------------------------

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// A stored float tensor widened to float32 (bf16 and f16 exactly).
std::vector<float> widen(const RawTensor& t, const std::string& what) {
  t.check(what);
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const uint8_t* p = t.bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::f32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case DType::bf16:
        out[i] = bf16_to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
        break;
      case DType::f16:
        out[i] = fp16_to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
        break;
      default:
        QVG_CHECK(false, what, ": dtype ", dtype_name(t.dtype), " is not a float type");
    }
    QVG_CHECK(std::isfinite(out[i]), what, ": value ", i, " is not finite");
  }
  return out;
}

void check_linear(const Linear& l, const std::string& name) {
  QVG_CHECK(l.in > 0 && l.out > 0 && l.w.size() == static_cast<size_t>(l.in) * l.out &&
                l.b.size() == static_cast<size_t>(l.out),
            "model weights: ", name, " has inconsistent sizes");
}

/// y [n, out] = x [n, in] W^T + b.
void linear(const float* x, int64_t n, const Linear& l, float* y) {
  MapRowC X(x, n, l.in);
  MapRowC W(l.w.data(), l.out, l.in);
  MapRow Y(y, n, l.out);
  fixed_product(X, W.transpose(), Y);
  const Eigen::Map<const Eigen::RowVectorXf> b(l.b.data(), l.out);
  Y.rowwise() += b;
}

std::vector<float> linear(std::span<const float> x, int64_t n, const Linear& l) {
  std::vector<float> y(static_cast<size_t>(n) * l.out);
  linear(x.data(), n, l, y.data());
  return y;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

/// GELU, tanh form, in place over n values (Eigen's vectorized tanh; `v`
/// 32-byte aligned with n a multiple of 8 keeps every value on the vector path).
void gelu_tanh(float* v, int64_t n) {
  Eigen::Map<Eigen::ArrayXf> x(v, n);
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  x = 0.5f * x * (1.0f + (k * (x + 0.044715f * x * x * x)).tanh());
}

/// LayerNorm without affine over rows of width d, then * (1 + scale) + shift.
/// shift/scale: [d] (one per chunk), out [n, d].
void ln_modulate(const float* h, int64_t n, int d, double eps, const float* shift, const float* scale,
                 float* out) {
  std::vector<float> one_plus(static_cast<size_t>(d));
  for (int j = 0; j < d; ++j) one_plus[static_cast<size_t>(j)] = 1.0f + scale[j];
  for (int64_t i = 0; i < n; ++i) {
    const float* x = h + i * d;
    double mean = 0;
    for (int j = 0; j < d; ++j) mean += x[j];
    mean /= d;
    double var = 0;
    for (int j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= d;
    const float m = static_cast<float>(mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    float* y = out + i * d;
    for (int j = 0; j < d; ++j) y[j] = ((x[j] - m) * rstd) * one_plus[static_cast<size_t>(j)] + shift[j];
  }
}

/// RMSNorm over rows of width d, in place.
void rms_norm(float* x, int64_t n, int d, double eps, const std::vector<float>& w) {
  for (int64_t i = 0; i < n; ++i) {
    float* r = x + i * d;
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += static_cast<double>(r[j]) * r[j];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (int j = 0; j < d; ++j) r[j] = (r[j] * inv) * w[static_cast<size_t>(j)];
  }
}

/// [L, heads*hd] row-major -> HeadTensor [heads, L, hd].
HeadTensor split_heads(const std::vector<float>& x, int64_t L, int heads, int hd) {
  HeadTensor t(heads, L, hd);
  for (int64_t n = 0; n < L; ++n)
    for (int h = 0; h < heads; ++h)
      std::copy_n(x.data() + (n * heads + h) * hd, hd, t.head(h) + n * hd);
  return t;
}


}  // namespace

std::vector<float> timestep_embedding(float t, const ModelConfig& c) {
  const int half = c.freq_dim / 2;
  std::vector<float> e(static_cast<size_t>(c.freq_dim));
  const float ts = t * static_cast<float>(c.t_scale);
  for (int i = 0; i < half; ++i) {
    const float w = static_cast<float>(std::exp(-std::log(10000.0) * i / half));
    const float a = ts * w;
    e[static_cast<size_t>(i)] = std::cos(a);
    e[static_cast<size_t>(half + i)] = std::sin(a);
  }
  return e;
}

Model::Model(ModelConfig config, ModelWeights weights) : config_(config), weights_(std::move(weights)) {
  validate(config_);
  const ModelConfig& c = config_;
  auto need = [](const Linear& l, int out, int in, const std::string& name) {
    check_linear(l, name);
    QVG_CHECK(l.out == out && l.in == in, "model weights: ", name, " is [", l.out, ", ", l.in, "], expected [",
              out, ", ", in, "]");
  };
  need(weights_.patch_embed, c.dim, c.patch_dim(), "patch_embed");
  need(weights_.t_fc1, c.dim, c.freq_dim, "t_fc1");
  need(weights_.t_fc2, c.dim, c.dim, "t_fc2");
  QVG_CHECK(weights_.blocks.size() == static_cast<size_t>(c.layers), "model weights: ", weights_.blocks.size(),
            " blocks, config says ", c.layers);
  for (int i = 0; i < c.layers; ++i) {
    const BlockWeights& b = weights_.blocks[static_cast<size_t>(i)];
    const std::string p = "blocks." + std::to_string(i) + ".";
    need(b.ada, 6 * c.dim, c.dim, p + "ada");
    need(b.q, c.dim, c.dim, p + "attn.q");
    need(b.k, c.dim, c.dim, p + "attn.k");
    need(b.v, c.dim, c.dim, p + "attn.v");
    need(b.o, c.dim, c.dim, p + "attn.o");
    QVG_CHECK(b.norm_q.size() == static_cast<size_t>(c.dim) && b.norm_k.size() == static_cast<size_t>(c.dim),
              "model weights: ", p, "attn.norm_q/norm_k must have ", c.dim, " values");
    need(b.fc1, c.mlp_dim, c.dim, p + "fc1");
    need(b.fc2, c.dim, c.mlp_dim, p + "fc2");
  }
  need(weights_.final_ada, 2 * c.dim, c.dim, "final_ada");
  need(weights_.final, c.patch_dim(), c.dim, "final");
}

Model Model::load(const std::string& path) {
  std::map<std::string, std::string> meta;
  NamedTensors tensors;
  try {
    tensors = read_safetensors(path, &meta);
  } catch (const Error& e) {
    QVG_CHECK(false, "model weights: ", e.what());
  }
  auto it = meta.find("format");
  QVG_CHECK(it == meta.end() || it->second == "qvg-reference-video-dit-v1", path, ": format '", it->second,
            "' is not qvg-reference-video-dit-v1");
  ModelConfig c;
  if (auto ci = meta.find("config"); ci != meta.end()) {
    try {
      c = parse_model_config(ci->second);
      validate(c);
    } catch (const Error& e) {
      QVG_CHECK(false, path, ": metadata: ", e.what());
    }
  }
  std::map<std::string, const RawTensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  const auto expected = expected_weight_shapes(c);
  std::set<std::string> names;
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, shape] : expected) {
    names.insert(name);
    auto f = by_name.find(name);
    QVG_CHECK(f != by_name.end(), path, ": tensor '", name, "' is missing (expected ", shape_str(shape), ")");
    const RawTensor& t = *f->second;
    QVG_CHECK(t.shape == shape, path, ": tensor '", name, "' has shape ", shape_str(t.shape), ", expected ",
              shape_str(shape));
    QVG_CHECK(dtype_is_float(t.dtype), path, ": tensor '", name, "' has dtype ", dtype_name(t.dtype),
              ", expected bf16 (or f16 / f32)");
    values[name] = widen(t, path + ": tensor '" + name + "'");
  }
  for (const auto& [name, t] : tensors)
    QVG_CHECK(names.count(name), path, ": unexpected tensor '", name, "' (not part of the reference model)");

  auto take = [&](const std::string& name) { return std::move(values.at(name)); };
  auto lin = [&](const std::string& name) {
    Linear l;
    l.w = take(name + ".weight");
    l.b = take(name + ".bias");
    l.out = static_cast<int>(l.b.size());
    l.in = static_cast<int>(l.w.size() / std::max<size_t>(1, l.b.size()));
    return l;
  };
  ModelWeights w;
  w.patch_embed = lin("patch_embed");
  w.t_fc1 = lin("t_fc1");
  w.t_fc2 = lin("t_fc2");
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    BlockWeights b;
    b.ada = lin(p + "ada");
    b.q = lin(p + "attn.q");
    b.k = lin(p + "attn.k");
    b.v = lin(p + "attn.v");
    b.o = lin(p + "attn.o");
    b.norm_q = take(p + "attn.norm_q.weight");
    b.norm_k = take(p + "attn.norm_k.weight");
    b.fc1 = lin(p + "fc1");
    b.fc2 = lin(p + "fc2");
    w.blocks.push_back(std::move(b));
  }
  w.final_ada = lin("final_ada");
  w.final = lin("final");
  Model m(c, std::move(w));
  m.metadata_ = std::move(meta);
  return m;
}

std::vector<int32_t> Model::chunk_positions(int64_t frame_start) const {
  return wan_grid_positions(frame_start, config_.chunk_frames, config_.grid(), config_.grid());
}

// ---- forward --------------------------------------------------------------------

std::vector<float> Model::forward(std::span<const float> tokens, float t, int64_t frame_start,
                                  const KVContext& context, std::vector<LayerKV>* layers_out,
                                  const ForwardOptions& options) const {
  const ModelConfig& c = config_;
  const ModelWeights& W = weights_;
  const int64_t L = c.tokens_per_chunk();
  const int d = c.dim, H = c.heads, hd = c.head_dim;
  QVG_CHECK(tokens.size() == static_cast<size_t>(L * c.patch_dim()), "model forward: tokens hold ",
            tokens.size(), " values, a chunk needs ", L, " x ", c.patch_dim());
  QVG_CHECK(std::isfinite(t) && t >= 0.0f && t <= 1.0f, "model forward: t must be in [0, 1], got ", t);
  QVG_CHECK(frame_start >= 0, "model forward: negative frame_start ", frame_start);
  QVG_CHECK(options.threads >= 0, "model forward: threads must be >= 0 (0 = all cores), got ", options.threads);
  const int64_t N0 = context.tokens();
  if (!context.k.empty() || !context.v.empty()) {
    QVG_CHECK(context.k.size() == static_cast<size_t>(c.layers) && context.v.size() == context.k.size(),
              "model forward: context has ", context.k.size(), " / ", context.v.size(), " layers, model has ",
              c.layers);
    for (int i = 0; i < c.layers; ++i) {
      const HeadTensor& k = context.k[static_cast<size_t>(i)];
      const HeadTensor& v = context.v[static_cast<size_t>(i)];
      QVG_CHECK(k.heads == H && k.dim == hd && k.tokens == N0 && v.same_shape(k), "model forward: context layer ",
                i, " is K [", k.heads, ", ", k.tokens, ", ", k.dim, "], V [", v.heads, ", ", v.tokens, ", ", v.dim,
                "], expected [", H, ", ", N0, ", ", hd, "]");
    }
  }
  if (layers_out) layers_out->assign(static_cast<size_t>(c.layers), LayerKV{});
  const int threads = resolve_threads(options.threads);
  // Work is split into fixed blocks of kRowBlock tokens (and, in attention, a
  // head x query-block grid); every block is computed the same way whichever
  // thread runs it, so the output bytes do not depend on the thread count.
  const int64_t blocks = (L + kRowBlock - 1) / kRowBlock;
  auto rows_of = [&](int64_t b) { return std::pair{b * kRowBlock, std::min(L, (b + 1) * kRowBlock)}; };

  // Timestep conditioning: c = t_fc2(SiLU(t_fc1(e))); s = SiLU(c).
  const std::vector<float> e = timestep_embedding(t, c);
  std::vector<float> c1 = linear(e, 1, W.t_fc1);
  for (float& x : c1) x = silu(x);
  std::vector<float> cond = linear(c1, 1, W.t_fc2);
  for (float& x : cond) x = silu(x);

  const std::vector<int32_t> pos = chunk_positions(frame_start);
  const RopeConfig rope_cfg = rope();
  std::vector<float> h(static_cast<size_t>(L * d));  // [L, d], the residual stream
  parallel_for(blocks, threads, [&](int64_t b) {
    const auto [r0, r1] = rows_of(b);
    linear(tokens.data() + r0 * c.patch_dim(), r1 - r0, W.patch_embed, h.data() + r0 * d);
  });
  std::vector<float> q(static_cast<size_t>(L * d)), k(q.size()), v(q.size()), o(q.size());
  const float sqrt_d = static_cast<float>(std::sqrt(static_cast<double>(hd)));
  const int64_t N = N0 + L;
  for (int li = 0; li < c.layers; ++li) {
    const BlockWeights& B = W.blocks[static_cast<size_t>(li)];
    const std::vector<float> m = linear(cond, 1, B.ada);  // [6 d]
    const float *shift_a = m.data(), *scale_a = shift_a + d, *gate_a = scale_a + d;
    const float *shift_m = gate_a + d, *scale_m = shift_m + d, *gate_m = scale_m + d;

    // q, k_pre, v of each row block: LN + modulation, projections, RMSNorm.
    parallel_for(blocks, threads, [&](int64_t b) {
      const auto [r0, r1] = rows_of(b);
      const int64_t n = r1 - r0;
      RowMat y(n, d);
      ln_modulate(h.data() + r0 * d, n, d, c.eps, shift_a, scale_a, y.data());
      linear(y.data(), n, B.q, q.data() + r0 * d);
      linear(y.data(), n, B.k, k.data() + r0 * d);
      linear(y.data(), n, B.v, v.data() + r0 * d);
      rms_norm(q.data() + r0 * d, n, d, c.eps, B.norm_q);
      rms_norm(k.data() + r0 * d, n, d, c.eps, B.norm_k);
    });
    HeadTensor qh = split_heads(q, L, H, hd), kpre = split_heads(k, L, H, hd), vh = split_heads(v, L, H, hd);
    apply_rope(qh, pos, rope_cfg);
    HeadTensor kh = kpre;
    apply_rope(kh, pos, rope_cfg);

    // Keys and values attended per head: [context tokens, own tokens].
    std::vector<RowMat> Kall(static_cast<size_t>(H)), Vall(static_cast<size_t>(H));
    parallel_for(H, threads, [&](int64_t hh) {
      RowMat& K = Kall[static_cast<size_t>(hh)];
      RowMat& V = Vall[static_cast<size_t>(hh)];
      K.resize(N, hd);
      V.resize(N, hd);
      if (N0 > 0) {
        K.topRows(N0) = MapRowC(context.k[static_cast<size_t>(li)].head(static_cast<int>(hh)), N0, hd);
        V.topRows(N0) = MapRowC(context.v[static_cast<size_t>(li)].head(static_cast<int>(hh)), N0, hd);
      }
      K.bottomRows(L) = MapRowC(kh.head(static_cast<int>(hh)), L, hd);
      V.bottomRows(L) = MapRowC(vh.head(static_cast<int>(hh)), L, hd);
    });
    // Attention over (head, query block): softmax(q K^T / sqrt(D)) V in fp32.
    const int64_t attn_blocks = (L + kAttnRowBlock - 1) / kAttnRowBlock;
    parallel_for(H * attn_blocks, threads, [&](int64_t item) {
      const int hh = static_cast<int>(item / attn_blocks);
      const int64_t r0 = (item % attn_blocks) * kAttnRowBlock, r1 = std::min(L, r0 + kAttnRowBlock);
      const int64_t n = r1 - r0;
      RowMat S(n, N);
      S.noalias() = MapRowC(qh.head(hh) + r0 * hd, n, hd) * Kall[static_cast<size_t>(hh)].transpose();
      for (int64_t i = 0; i < n; ++i) {  // softmax of each row (Eigen's vectorized exp)
        Eigen::Map<Eigen::ArrayXf> row(S.data() + i * N, N);
        row /= sqrt_d;  // q k^T / sqrt(D), divided as the reference does
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
      }
      RowMat O;
      fixed_product(S, Vall[static_cast<size_t>(hh)], O);
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(O.data() + i * hd, hd, o.data() + (r0 + i) * d + static_cast<int64_t>(hh) * hd);
    });
    // Output projection, MLP and both residual updates, per row block.
    parallel_for(blocks, threads, [&](int64_t b) {
      const auto [r0, r1] = rows_of(b);
      const int64_t n = r1 - r0;
      RowMat tmp(n, d), y(n, d), mlp(n, c.mlp_dim);
      float* hb = h.data() + r0 * d;
      linear(o.data() + r0 * d, n, B.o, tmp.data());
      for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) hb[i * d + j] += tmp(i, j) * gate_a[j];
      ln_modulate(hb, n, d, c.eps, shift_m, scale_m, y.data());
      linear(y.data(), n, B.fc1, mlp.data());
      gelu_tanh(mlp.data(), n * c.mlp_dim);
      linear(mlp.data(), n, B.fc2, tmp.data());
      for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < d; ++j) hb[i * d + j] += tmp(i, j) * gate_m[j];
    });

    if (layers_out) {
      LayerKV& r = (*layers_out)[static_cast<size_t>(li)];
      if (options.record_q) r.q = std::move(qh);
      r.k_pre = std::move(kpre);
      r.k = std::move(kh);
      r.v = std::move(vh);
    }
  }
  const std::vector<float> fm = linear(cond, 1, W.final_ada);  // shift, scale
  std::vector<float> out(static_cast<size_t>(L * c.patch_dim()));
  parallel_for(blocks, threads, [&](int64_t b) {
    const auto [r0, r1] = rows_of(b);
    RowMat y(r1 - r0, d);
    ln_modulate(h.data() + r0 * d, r1 - r0, d, c.eps, fm.data(), fm.data() + d, y.data());
    linear(y.data(), r1 - r0, W.final, out.data() + r0 * c.patch_dim());
  });
  return out;
}

}  // namespace qvg
