// Pixels <-> model space, patchify, the model's KV cache glue and the Euler
// sampler (include/qvg/model.h, docs/MODEL.md §1-2, §7-8).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>

#include "qvg/model.h"
#include "qvg/model_cuda.h"

namespace qvg {

// ---- pixels and tokens ------------------------------------------------------------

std::vector<float> pixels_to_model(std::span<const uint8_t> u8) {
  std::vector<float> x(u8.size());
  for (size_t i = 0; i < u8.size(); ++i) x[i] = static_cast<float>(u8[i]) / 127.5f - 1.0f;
  return x;
}

std::vector<uint8_t> model_to_pixels(std::span<const float> x) {
  std::vector<uint8_t> u8(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float c = std::isnan(x[i]) ? 0.0f : std::clamp(x[i], -1.0f, 1.0f);
    u8[i] = static_cast<uint8_t>(std::nearbyint((c + 1.0f) * 127.5f));  // default mode: half to even
  }
  return u8;
}

namespace {

/// fn(token value index, frame value index) for every value of a chunk, in
/// token order: tokens row by row over the patch grid, each patch's rows,
/// columns, then channels.
template <typename Fn>
void for_each_patch_value(const ModelConfig& c, Fn&& fn) {
  const int g = c.grid(), p = c.patch, C = c.channels, F = c.frame;
  size_t o = 0;
  for (int f = 0; f < c.chunk_frames; ++f)
    for (int r = 0; r < g; ++r)
      for (int cc = 0; cc < g; ++cc)
        for (int py = 0; py < p; ++py)
          for (int px = 0; px < p; ++px)
            for (int ch = 0; ch < C; ++ch)
              fn(o++, ((static_cast<size_t>(f) * F + (r * p + py)) * F + (cc * p + px)) * C + ch);
}

}  // namespace

std::vector<float> patchify(std::span<const float> frames, const ModelConfig& c) {
  QVG_CHECK(frames.size() == static_cast<size_t>(c.chunk_frames * c.frame_values()), "patchify: ",
            frames.size(), " values, a chunk of ", c.chunk_frames, " frames needs ", c.chunk_frames * c.frame_values());
  std::vector<float> tok(frames.size());
  for_each_patch_value(c, [&](size_t t, size_t f) { tok[t] = frames[f]; });
  return tok;
}

std::vector<float> unpatchify(std::span<const float> tokens, const ModelConfig& c) {
  QVG_CHECK(tokens.size() == static_cast<size_t>(c.tokens_per_chunk()) * c.patch_dim(), "unpatchify: ",
            tokens.size(), " values, a chunk needs ", c.tokens_per_chunk(), " x ", c.patch_dim());
  std::vector<float> frames(tokens.size());
  for_each_patch_value(c, [&](size_t t, size_t f) { frames[f] = tokens[t]; });
  return frames;
}

// ---- the model's KV cache ---------------------------------------------------------------

CacheConfig model_cache_config(const ModelConfig& c, const std::string& key_spec, const std::string& value_spec,
                               bool pre_rope, const SpanPolicy& policy) {
  validate(c);
  auto exact = [](const std::string& s) { return s == "none" || s == "exact"; };
  CacheConfig cc;
  cc.layers = c.layers;
  cc.heads = c.heads;
  cc.dim = c.head_dim;
  cc.chunk_tokens = c.tokens_per_chunk();
  cc.policy = policy;
  if (exact(key_spec) || exact(value_spec)) {
    QVG_CHECK(exact(key_spec) && exact(value_spec), "model cache: '", key_spec, "' / '", value_spec,
              "': the exact cache ('none' / 'exact') must be used for both K and V");
    cc.key = parse_codec_spec("bf16");  // never used: no span is ever encoded
    cc.value = parse_codec_spec("bf16");
    cc.tail = TailFormat::f32;
    cc.policy.quant_factor = 1 << 30;
    cc.policy.keep_recent = 0;
  } else {
    cc.key = parse_codec_spec(key_spec);
    cc.value = parse_codec_spec(value_spec);
  }
  cc.rope = pre_rope ? RopeConfig{RopeMode::wan_3d, c.rope_theta, RopePairing::interleaved} : RopeConfig{RopeMode::none};
  validate(cc);
  return cc;
}

void check_cache_fits(const CacheConfig& cc, const ModelConfig& c) {
  QVG_CHECK(cc.layers == c.layers && cc.heads == c.heads && cc.dim == c.head_dim, "model cache: the cache is ",
            cc.layers, " layers x ", cc.heads, " heads x ", cc.dim, ", the model needs ", c.layers, " x ", c.heads,
            " x ", c.head_dim);
}

KVContext read_context(const StreamingKVCache& cache, const ModelConfig& c) {
  check_cache_fits(cache.config(), c);
  KVContext ctx;
  if (cache.chunks_appended(0) == 0) return ctx;
  for (int li = 0; li < c.layers; ++li) {
    CacheRead r = cache.read(li);
    ctx.k.push_back(std::move(r.k));
    ctx.v.push_back(std::move(r.v));
  }
  return ctx;
}

std::vector<AppendReport> append_chunk(StreamingKVCache& cache, const Model& model, const std::vector<LayerKV>& kv, int64_t frame_start) {
  const ModelConfig& c = model.config();
  const CacheConfig& cc = cache.config();
  check_cache_fits(cc, c);
  QVG_CHECK(kv.size() == static_cast<size_t>(c.layers), "model cache: ", kv.size(), " layers of K/V, model has ",
            c.layers);
  const bool pre = cc.rope.mode != RopeMode::none;
  if (pre) {
    const RopeConfig r = model.rope();
    QVG_CHECK(cc.rope.mode == r.mode && cc.rope.theta == r.theta && cc.rope.pairing == r.pairing,
              "model cache: the cache's RoPE-on-read (", rope_mode_name(cc.rope.mode), ", theta ", cc.rope.theta,
              ") differs from the model's (3d, theta ", r.theta, ", interleaved pairs)");
  }
  const std::vector<int32_t> pos = pre ? model.chunk_positions(frame_start) : std::vector<int32_t>{};
  std::vector<AppendReport> reps;
  for (int li = 0; li < c.layers; ++li) {
    const LayerKV& l = kv[static_cast<size_t>(li)];
    reps.push_back(cache.append(li, pre ? l.k_pre : l.k, l.v, pos));
  }
  return reps;
}

// ---- sampler ---------------------------------------------------------------------------

std::vector<double> sampler_timesteps(int steps, double shift) {
  QVG_CHECK(steps >= 1 && steps <= 1000, "sampler: steps must be 1..1000, got ", steps);
  QVG_CHECK(std::isfinite(shift) && shift > 0, "sampler: shift must be > 0, got ", shift);
  std::vector<double> t;
  for (int k = 0; k <= steps; ++k) {
    const double s = 1.0 - static_cast<double>(k) / steps;
    t.push_back(shift * s / (1.0 + (shift - 1.0) * s));
  }
  return t;
}

std::vector<float> gaussian_noise(int64_t n, uint64_t seed) {
  QVG_CHECK(n >= 0, "gaussian_noise: negative count ", n);
  uint64_t state = seed;
  auto next = [&]() {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&]() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * std::numbers::pi * uniform();
    out[static_cast<size_t>(i)] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[static_cast<size_t>(i + 1)] = static_cast<float>(r * std::sin(a));
  }
  return out;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

const char* cuda_math_name(CudaMath m) {
  switch (m) {
    case CudaMath::fp32:
      return "fp32";
    case CudaMath::tf32:
      return "tf32";
    case CudaMath::bf16:
      return "bf16";
  }
  return "?";
}

CudaMath parse_cuda_math(const std::string& name) {
  for (CudaMath m : {CudaMath::fp32, CudaMath::tf32, CudaMath::bf16})
    if (name == cuda_math_name(m)) return m;
  QVG_CHECK(false, "unknown CUDA math '", name, "' (known: fp32, tf32, bf16)");
}

const char* backend_name(Backend b) { return b == Backend::cuda ? "cuda" : "cpu"; }

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  QVG_CHECK(false, "unknown device '", name, "' (known: cpu, cuda)");
}

Sampler::Sampler(const Model& model, StreamingKVCache& cache, SamplerConfig config)
    : model_(model), cache_(cache), config_(config), ts_(sampler_timesteps(config.steps, config.shift)) {
  check_cache_fits(cache.config(), model.config());
  QVG_CHECK(cache.chunks_appended(0) == 0, "sampler: the cache must start empty (it holds ",
            cache.chunks_appended(0), " chunks)");
  if (config_.backend == Backend::cuda) gpu_ = std::make_unique<CudaModel>(model, config_.cuda);
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;

KVContext Sampler::read_chunk_context(ChunkReport& rep) {
  const auto t0 = std::chrono::steady_clock::now();
  KVContext ctx;
  if (gpu_ && config_.device_context_read && cache_.options().backend == Backend::cuda) {
    gpu_->set_context(cache_);  // spans decoded on the device into the model's K/V buffers
  } else {
    ctx = read_context(cache_, model_.config());
    if (gpu_) {
      gpu_->set_context(ctx);  // once per chunk; synchronous
      ctx = KVContext{};
    }
  }
  rep.read_seconds = seconds_since(t0);
  return ctx;
}

std::vector<float> Sampler::forward(std::span<const float> x, float t, int64_t frame_start, const KVContext& ctx,
                                    std::vector<LayerKV>* layers_out, bool record_q) {
  ForwardOptions fo;
  fo.record_q = record_q;
  fo.threads = config_.threads;
  if (gpu_) return gpu_->forward(x, t, frame_start, layers_out, fo);  // against the uploaded context
  return model_.forward(x, t, frame_start, ctx, layers_out, fo);
}

ChunkReport Sampler::add_context(std::span<const float> frames, std::vector<LayerKV>* layers_out) {
  ChunkReport rep;
  rep.chunk = chunks_;
  rep.frame_start = next_frame();
  const std::vector<float> tok = patchify(frames, model_.config());
  const KVContext ctx = read_chunk_context(rep);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<LayerKV> kv;
  forward(tok, 0.0f, rep.frame_start, ctx, &kv, layers_out != nullptr);
  rep.forward_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  rep.appends = append_chunk(cache_, model_, kv, rep.frame_start);
  rep.append_seconds = seconds_since(t0);
  ++chunks_;
  if (layers_out) *layers_out = std::move(kv);
  return rep;
}

std::vector<float> Sampler::generate(std::span<const float> noise, ChunkReport* report,
                                     std::vector<std::vector<float>>* steps_out) {
  const ModelConfig& c = model_.config();
  QVG_CHECK(noise.size() == static_cast<size_t>(c.tokens_per_chunk()) * c.patch_dim(), "sampler: noise holds ",
            noise.size(), " values, a chunk needs ", c.tokens_per_chunk(), " x ", c.patch_dim());
  ChunkReport rep;
  rep.chunk = chunks_;
  rep.frame_start = next_frame();
  const KVContext ctx = read_chunk_context(rep);  // read-only during the chunk's steps
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> x(noise.begin(), noise.end());
  if (steps_out) steps_out->clear();
  for (size_t k = 0; k + 1 < ts_.size(); ++k) {
    const std::vector<float> v = forward(x, static_cast<float>(ts_[k]), rep.frame_start, ctx, nullptr);
    const float dt = static_cast<float>(ts_[k + 1] - ts_[k]);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + dt * v[i];
    if (steps_out) steps_out->push_back(x);
  }
  for (float& e : x) e = std::clamp(e, -1.0f, 1.0f);
  std::vector<LayerKV> kv;
  forward(x, 0.0f, rep.frame_start, ctx, &kv);  // the chunk's clean K/V
  rep.forward_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  rep.appends = append_chunk(cache_, model_, kv, rep.frame_start);
  rep.append_seconds = seconds_since(t0);
  ++chunks_;
  if (report) *report = std::move(rep);
  return unpatchify(x, c);
}

}  // namespace qvg
