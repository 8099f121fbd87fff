// `qvg generate`: continues a real clip with the reference video model, chunk
// by chunk, its KV cache held in a StreamingKVCache with the chosen codec.
// Prints a line per chunk (time, cache work, memory), the KV memory by part at
// the end, and writes the context + generated frames as a video. Thin: the
// model runtime (include/qvg/model.h) and the cache do the work.
//
// `qvg compare`: the same continuation (same context, same noise) with a BF16
// cache and with each chosen cache; a table of KV bytes, ratio, PSNR / SSIM
// against the BF16 video (overall and per chunk) and time per chunk.
//
// `qvg dump-kv`: runs the model over a clip's frames as clean context and writes
// every layer's Q, K (pre- and post-RoPE) and V to a .safetensors file, so that
// `qvg eval` / `qvg stream` can study the real model's cache.
#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "plot.h"
#include "qvg/cache.h"
#include "qvg/io.h"
#include "qvg/model.h"
#include "qvg/video.h"
#include "qvg/video_metrics.h"
#include "qvg/video_writer.h"

#ifndef QVG_SOURCE_DIR
#define QVG_SOURCE_DIR "."
#endif

namespace qvg_cli {
namespace {

struct GenerateArgs {
  std::string model = std::string(QVG_SOURCE_DIR) + "/models/qvg_ref_video_dit.safetensors";
  std::string context, out;
  std::string cache = "qvg", key, value;
  int frames = 9, context_frames = 6, start = 0, steps = 4, threads = 0, upscale = 4;
  int quant_factor = 4, keep_recent = 0, sink = 0;
  int64_t window = 0;
  bool post_rope = false, no_context_in_output = false;
  uint64_t seed = 2026;
  double fps = 0;
  std::string encoder;
  std::string device = "cpu", gpu_math = "fp32";
};

GenerateArgs g;

struct CompareArgs {
  std::vector<std::string> methods = {"bf16", "rtn", "kivi", "quarot", "qvg", "qvg-pro"};
  bool as_json = false;
  std::string side_by_side;
  std::string plot;  ///< PNG of PSNR per generated frame (gnuplot)
  std::string csv;   ///< PSNR per generated frame, one column per method
};
CompareArgs gc;

struct DumpArgs {
  std::string dtype = "f32";
};
DumpArgs gd;

std::string kb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

/// Where the network and the cache's codecs run (--device, --gpu-math): on
/// cuda both run on the GPU and the context is read on the device.
qvg::SamplerConfig sampler_config() {
  qvg::SamplerConfig sc;
  sc.steps = g.steps;
  sc.threads = g.threads;
  sc.backend = qvg::parse_backend(g.device);
  sc.cuda.math = qvg::parse_cuda_math(g.gpu_math);
  return sc;
}

qvg::CacheOptions cache_options() {
  qvg::CacheOptions copt;
  copt.threads = g.threads;
  copt.backend = qvg::parse_backend(g.device);
  return copt;
}

void add_device_options(CLI::App* s) {
  s->add_option("--device", g.device, "where the network and the cache's codecs run: cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  s->add_option("--gpu-math", g.gpu_math, "GPU matmuls: fp32 (default, no TF32), tf32 or bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
}

/// Frames [start, start + n) of a clip as the model sees them, exactly as
/// train/prepare_data.py prepares them (ffmpeg's crop=416:234,
/// scale=128:72:flags=area, rgb24; other clip sizes: the 16:9 center crop of
/// the full width), then the evaluation's center crop, rows
/// 4..67, columns 32..95 (docs/MODEL.md §10): 8-bit RGB [n, 64, 64, 3].
qvg::Video load_context(const qvg::ModelConfig& c, double* fps) {
  const int fw = 128, fh = 72;
  QVG_CHECK(c.frame == 64, "generate: the context crop assumes 64x64 frames, the model has ", c.frame);
  // The 16:9 center crop of the full width: 416x234 of the shipped 416x240 clips.
  const qvg::Video probe = qvg::read_video(g.context, 1);
  qvg::VideoReadOptions ro;
  ro.max_frames = g.start + g.context_frames;
  ro.width = fw;
  ro.height = fh;
  ro.crop_width = probe.width;
  ro.crop_height = std::min(probe.height, (probe.width * 9 / 16) & ~1);
  const qvg::Video v = qvg::read_video(g.context, ro);
  QVG_CHECK(v.frames >= g.start + g.context_frames, g.context, ": has ", v.frames, " frames, need ",
            g.start + g.context_frames, " (--start ", g.start, " + --context-frames ", g.context_frames, ")");
  *fps = v.fps;
  qvg::Video out;
  out.width = out.height = c.frame;
  out.frames = g.context_frames;
  out.fps = v.fps;
  const int y0 = (fh - c.frame) / 2, x0 = (fw - c.frame) / 2;  // 4, 32
  for (int f = g.start; f < g.start + g.context_frames; ++f)
    for (int y = 0; y < c.frame; ++y) {
      const uint8_t* row = v.frame(f) + (static_cast<size_t>(y0 + y) * fw + x0) * 3;
      out.rgb.insert(out.rgb.end(), row, row + c.frame * 3);
    }
  return out;
}

void print_parts(const char* role, const qvg::RoleBytes& b) {
  const qvg::PartBytes& p = b.spans;
  std::printf("  %s: spans %s (codes %s, scales %s, zero points %s, span scales %s, centroids %s, ids %s, "
              "full precision %s) + BF16/F32 tail %s = %s\n",
              role, kb(p.total()).c_str(), kb(p.codes).c_str(), kb(p.scales).c_str(), kb(p.zero_points).c_str(),
              kb(p.span_scales).c_str(), kb(p.centroids).c_str(), kb(p.ids).c_str(), kb(p.full_precision).c_str(),
              kb(b.tail).c_str(), kb(b.total()).c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* s = app.add_subcommand("generate",
                               "continue a clip with the reference video model; KV cache in the streaming cache");
  s->add_option("--context", g.context, "video clip whose frames are the context (e.g. data/clips/vtest.mp4)")
      ->required();
  s->add_option("-o,--out", g.out, "output video (.mp4: H.264 via libx264, else MPEG-4 part 2); context + generated")
      ->required();
  s->add_option("--frames", g.frames, "frames to generate (rounded up to whole chunks of 3), default 9")
      ->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", g.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", g.start, "first context frame in the clip, default 0 (held-out: vtest 192)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--model", g.model, "weights (.safetensors), default models/qvg_ref_video_dit.safetensors");
  s->add_option("--cache", g.cache,
                "codec of K and V (bf16, rtn, kivi, quarot, qvg, qvg-pro, *-int4, with :key=value overrides; "
                "none = lossless float cache), default qvg");
  s->add_option("--key", g.key, "codec of K (overrides --cache)");
  s->add_option("--value", g.value, "codec of V (overrides --cache)");
  s->add_option("--quant-factor", g.quant_factor, "chunks per encoded span (768 tokens each), default 4")
      ->check(CLI::Range(1, 1 << 20));
  s->add_option("--keep-recent", g.keep_recent, "newest chunks kept in BF16, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--sink", g.sink, "first chunks never encoded nor evicted, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--window", g.window, "attend to the newest N non-sink chunks only (0 = all), default 0")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  s->add_flag("--post-rope", g.post_rope, "cache keys after RoPE (default: before RoPE, RoPE on read)");
  s->add_option("--steps", g.steps, "Euler steps per chunk, default 4")->check(CLI::Range(1, 1000));
  s->add_option("--seed", g.seed, "noise seed, default 2026 (same noise for every cache)");
  s->add_option("--threads", g.threads, "threads of the network passes and of cache encode/decode (0 = all cores); results do not depend on it");
  add_device_options(s);
  s->add_option("--fps", g.fps, "output frame rate (default: the clip's)");
  s->add_option("--upscale", g.upscale, "nearest-neighbour upscaling of the 64x64 frames in the output, default 4")
      ->check(CLI::Range(1, 16));
  s->add_option("--encoder", g.encoder, "FFmpeg encoder (default libx264, else mpeg4)");
  s->add_flag("--no-context-in-output", g.no_context_in_output, "write only the generated frames");
  s->callback([] { run_generate_command(); });
}

void run_generate_command() {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const qvg::Model model = qvg::Model::load(g.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(g.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", g.context_frames);
  qvg::SpanPolicy policy;
  policy.quant_factor = g.quant_factor;
  policy.keep_recent = g.keep_recent;
  policy.sink = g.sink;
  policy.window_chunks = g.window;
  const std::string kspec = g.key.empty() ? g.cache : g.key, vspec = g.value.empty() ? g.cache : g.value;
  qvg::StreamingKVCache cache(qvg::model_cache_config(mc, kspec, vspec, !g.post_rope, policy), cache_options());
  double clip_fps = 0;
  const qvg::Video ctx = load_context(mc, &clip_fps);
  const int gen_chunks = (g.frames + mc.chunk_frames - 1) / mc.chunk_frames;
  const int ctx_chunks = g.context_frames / mc.chunk_frames;
  std::printf("qvg generate: %s frames %d..%d as context (%d chunks), %d frames to generate (%d chunks of %d "
              "frames = %d tokens), %d Euler steps\n",
              g.context.c_str(), g.start, g.start + g.context_frames - 1, ctx_chunks, gen_chunks * mc.chunk_frames,
              gen_chunks, mc.chunk_frames, mc.tokens_per_chunk(), g.steps);
  std::printf("cache: K %s, V %s, keys %s RoPE, span = %d chunks, keep_recent %d, sink %d, window %" PRId64
              ", noise seed %" PRIu64 ", device %s\n",
              kspec.c_str(), vspec.c_str(), g.post_rope ? "after" : "before", g.quant_factor, g.keep_recent, g.sink,
              g.window, g.seed, g.device.c_str());
  std::fflush(stdout);

  qvg::Sampler sampler(model, cache, sampler_config());
  const std::vector<float> ctx_x = qvg::pixels_to_model(ctx.rgb);
  const size_t chunk_values = static_cast<size_t>(mc.chunk_frames * mc.frame_values());
  auto line = [&](const char* what, const qvg::ChunkReport& r, int idx, int total) {
    int spans = 0;
    for (const auto& a : r.appends) spans += static_cast<int>(a.spans.size());
    const qvg::MemoryStats m = cache.memory();
    std::printf("%-8s %3d/%-3d frames %3" PRId64 "..%-3" PRId64 " %7.2f s (read %.2f, network %.2f, append %.2f%s)  "
                "KV %s, %.2fx vs BF16, %" PRId64 " tokens/layer\n",
                what, idx, total, r.frame_start, r.frame_start + mc.chunk_frames - 1,
                r.read_seconds + r.forward_seconds + r.append_seconds, r.read_seconds, r.forward_seconds,
                r.append_seconds, spans ? (", " + std::to_string(spans) + " spans encoded").c_str() : "",
                kb(m.total.kv_bytes()).c_str(), m.total.ratio(), cache.live_tokens(0));
    std::fflush(stdout);
  };
  for (int i = 0; i < ctx_chunks; ++i) {
    const auto r = sampler.add_context(std::span<const float>(ctx_x).subspan(i * chunk_values, chunk_values));
    line("context", r, i + 1, ctx_chunks);
  }
  const size_t noise_values = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  const std::vector<float> noise = qvg::gaussian_noise(static_cast<int64_t>(noise_values) * gen_chunks, g.seed);
  std::vector<float> gen;
  double gen_seconds = 0;
  for (int i = 0; i < gen_chunks; ++i) {
    qvg::ChunkReport r;
    const std::vector<float> f =
        sampler.generate(std::span<const float>(noise).subspan(i * noise_values, noise_values), &r);
    gen.insert(gen.end(), f.begin(), f.end());
    gen_seconds += r.read_seconds + r.forward_seconds + r.append_seconds;
    line("generate", r, i + 1, gen_chunks);
  }

  const qvg::MemoryStats m = cache.memory();
  std::printf("\nKV memory after %" PRId64 " chunks (all %d layers; exact, from the cache's buffers):\n",
              cache.chunks_appended(0), mc.layers);
  print_parts("K", m.total.k);
  print_parts("V", m.total.v);
  std::printf("  K+V %s (BF16 cache of the same live tokens: %s, ratio %.2fx, %.3f bits per value); positions %s, "
              "warm-start centroids %s, total %s\n",
              kb(m.total.kv_bytes()).c_str(), kb(m.total.bf16_bytes).c_str(), m.total.ratio(),
              m.total.bits_per_value(mc.heads, mc.head_dim), kb(m.total.positions).c_str(),
              kb(m.total.warm_start).c_str(), kb(m.total.total()).c_str());
  std::printf("time: %.2f s per generated chunk (%d Euler steps + 1 clean pass), %.2f s in all\n",
              gen_seconds / gen_chunks, g.steps,
              std::chrono::duration<double>(clock::now() - t_start).count());

  qvg::Video out;
  out.width = out.height = mc.frame;
  const std::vector<uint8_t> gen_u8 = qvg::model_to_pixels(std::span<const float>(gen).first(
      static_cast<size_t>(g.frames) * static_cast<size_t>(mc.frame_values())));
  if (!g.no_context_in_output) out.rgb = ctx.rgb;
  out.rgb.insert(out.rgb.end(), gen_u8.begin(), gen_u8.end());
  out.frames = static_cast<int>(out.rgb.size() / static_cast<size_t>(mc.frame_values()));
  qvg::VideoWriteOptions wo;
  wo.fps = g.fps > 0 ? g.fps : (clip_fps > 0 ? clip_fps : 8.0);
  wo.upscale = g.upscale;
  wo.encoder = g.encoder;
  const std::string enc = qvg::write_video(g.out, out, wo);
  std::printf("wrote %s: %d frames (%s%d generated), %dx%d, %s, %.3g fps\n", g.out.c_str(), out.frames,
              g.no_context_in_output ? "" : (std::to_string(g.context_frames) + " context + ").c_str(), g.frames,
              mc.frame * g.upscale, mc.frame * g.upscale, enc.c_str(), wo.fps);
}

// ---- compare ----------------------------------------------------------------------

namespace {

struct RunResult {
  std::string method;
  std::vector<uint8_t> frames;   ///< generated frames, uint8 [frames, 64, 64, 3]
  std::vector<double> chunk_seconds;
  qvg::LayerMemory memory;       ///< all layers, at the end
  double bits = 0;
};

qvg::CacheConfig cache_config_for(const qvg::ModelConfig& mc, const std::string& spec) {
  qvg::SpanPolicy policy;
  policy.quant_factor = g.quant_factor;
  policy.keep_recent = g.keep_recent;
  policy.sink = g.sink;
  policy.window_chunks = g.window;
  return qvg::model_cache_config(mc, spec, spec, !g.post_rope, policy);
}

RunResult run_method(const qvg::Model& model, const std::string& spec, std::span<const float> ctx_x,
                     std::span<const float> noise, int gen_chunks) {
  const qvg::ModelConfig& mc = model.config();
  qvg::StreamingKVCache cache(cache_config_for(mc, spec), cache_options());
  qvg::Sampler sampler(model, cache, sampler_config());
  const size_t cv = static_cast<size_t>(mc.chunk_frames * mc.frame_values());
  for (size_t i = 0; i * cv < ctx_x.size(); ++i) sampler.add_context(ctx_x.subspan(i * cv, cv));
  const size_t nv = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  RunResult r;
  r.method = spec;
  std::vector<float> gen;
  for (int i = 0; i < gen_chunks; ++i) {
    qvg::ChunkReport rep;
    const std::vector<float> f = sampler.generate(noise.subspan(i * nv, nv), &rep);
    gen.insert(gen.end(), f.begin(), f.end());
    r.chunk_seconds.push_back(rep.read_seconds + rep.forward_seconds + rep.append_seconds);
    if (!gc.as_json)
      std::fprintf(stderr, "qvg: %-10s chunk %d/%d %.2f s\n", spec.c_str(), i + 1, gen_chunks, r.chunk_seconds.back());
  }
  r.frames = qvg::model_to_pixels(gen);
  r.memory = cache.memory().total;
  r.bits = r.memory.bits_per_value(mc.heads, mc.head_dim);
  return r;
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto* s = app.add_subcommand("compare",
                               "continue a clip with a BF16 cache and with each chosen cache; PSNR/SSIM vs BF16, "
                               "KV bytes, time per chunk");
  s->add_option("--context", g.context, "video clip whose frames are the context")->required();
  s->add_option("--methods", gc.methods, "caches (codec specs), default bf16 rtn kivi quarot qvg qvg-pro");
  s->add_option("--frames", g.frames, "frames to generate (whole chunks of 3), default 9")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", g.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", g.start, "first context frame in the clip, default 0")->check(CLI::Range(0, 1000000));
  s->add_option("--model", g.model, "weights (.safetensors)");
  s->add_option("--quant-factor", g.quant_factor, "chunks per encoded span, default 4")->check(CLI::Range(1, 1 << 20));
  s->add_option("--keep-recent", g.keep_recent, "newest chunks kept in BF16, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--sink", g.sink, "first chunks never encoded nor evicted, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--window", g.window, "attend to the newest N non-sink chunks only (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  s->add_flag("--post-rope", g.post_rope, "cache keys after RoPE (default: before RoPE)");
  s->add_option("--steps", g.steps, "Euler steps per chunk, default 4")->check(CLI::Range(1, 1000));
  s->add_option("--seed", g.seed, "noise seed, default 2026");
  s->add_option("--threads", g.threads, "threads of the network passes and of cache encode/decode (0 = all cores); results do not depend on it");
  add_device_options(s);
  s->add_option("--side-by-side", gc.side_by_side, "write an MP4 with every method's frames side by side");
  s->add_option("--plot", gc.plot, "write a PNG of PSNR against BF16 per generated frame, one line per method (gnuplot)");
  s->add_option("--csv", gc.csv, "write PSNR against BF16 per generated frame as CSV (one column per method; inf = identical)");
  s->add_flag("--json", gc.as_json, "print one JSON row per method");
  s->callback([] { run_compare_command(); });
}

namespace {

/// compare; `before_runs` (if set) is called once every argument, the model
/// and the clip have been checked, right before the runs (the demo's header).
void compare(const std::function<void()>& before_runs) {
  const qvg::Model model = qvg::Model::load(g.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(g.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", g.context_frames);
  std::vector<std::string> methods = gc.methods;
  methods.erase(std::remove(methods.begin(), methods.end(), "bf16"), methods.end());
  methods.insert(methods.begin(), "bf16");  // the reference, run first
  for (const std::string& m : methods) {  // every spec is checked before minutes of runs
    try {
      cache_config_for(mc, m);
    } catch (const qvg::Error& e) {
      QVG_CHECK(false, "cache '", m, "': ", e.what());
    }
  }
  QVG_CHECK(gc.plot.empty() || methods.size() > 1, "--plot needs a method besides the bf16 reference");
  if (!gc.plot.empty()) require_gnuplot();
  double fps = 0;
  const qvg::Video ctx = load_context(mc, &fps);
  const std::vector<float> ctx_x = qvg::pixels_to_model(ctx.rgb);
  const int gen_chunks = (g.frames + mc.chunk_frames - 1) / mc.chunk_frames;
  const int gen_frames = gen_chunks * mc.chunk_frames;
  const size_t nv = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  const std::vector<float> noise = qvg::gaussian_noise(static_cast<int64_t>(nv) * gen_chunks, g.seed);
  if (before_runs) before_runs();
  std::vector<RunResult> runs;
  for (const std::string& m : methods) runs.push_back(run_method(model, m, ctx_x, noise, gen_chunks));
  const RunResult& ref = runs.front();
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  const double ref_ms = 1000 * mean(ref.chunk_seconds);
  const size_t frame_bytes = static_cast<size_t>(mc.frame_values());
  const size_t chunk_bytes = static_cast<size_t>(mc.chunk_frames) * frame_bytes;
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::vector<double>> per_frame_all;
  if (!gc.as_json) {
    std::printf("qvg compare: %s frames %d..%d as context, %d generated frames (%d chunks), noise seed %" PRIu64
                ", spans of %d chunks, keys %s RoPE; PSNR/SSIM against the BF16-cache video\n\n",
                g.context.c_str(), g.start, g.start + g.context_frames - 1, gen_frames, gen_chunks, g.seed,
                g.quant_factor, g.post_rope ? "after" : "before");
    std::printf("%-12s %6s %7s %10s %8s %7s %9s %8s  %s\n", "method", "bits", "ratio", "kv_bytes", "psnr", "ssim",
                "ms/chunk", "overhead", "psnr / ssim per chunk");
  }
  for (const RunResult& r : runs) {
    const double psnr = qvg::psnr_u8(r.frames, ref.frames);
    const double ssim = qvg::ssim_rgb(r.frames, ref.frames, gen_frames, mc.frame, mc.frame);
    std::vector<double> per_chunk, ssim_chunk, per_frame, ssim_frame;
    for (int i = 0; i < gen_chunks; ++i) {
      const auto a = std::span<const uint8_t>(r.frames).subspan(i * chunk_bytes, chunk_bytes);
      const auto b = std::span<const uint8_t>(ref.frames).subspan(i * chunk_bytes, chunk_bytes);
      per_chunk.push_back(qvg::psnr_u8(a, b));
      ssim_chunk.push_back(qvg::ssim_rgb(a, b, mc.chunk_frames, mc.frame, mc.frame));
    }
    for (int i = 0; i < gen_frames; ++i) {
      const auto a = std::span<const uint8_t>(r.frames).subspan(i * frame_bytes, frame_bytes);
      const auto b = std::span<const uint8_t>(ref.frames).subspan(i * frame_bytes, frame_bytes);
      per_frame.push_back(qvg::psnr_u8(a, b));
      ssim_frame.push_back(qvg::ssim_rgb(a, b, 1, mc.frame, mc.frame));
    }
    const double ms = 1000 * mean(r.chunk_seconds), overhead = 100 * (ms / ref_ms - 1);
    nlohmann::json pc = nlohmann::json::array(), pf = nlohmann::json::array(), sc = nlohmann::json::array();
    for (double x : per_chunk) pc.push_back(num(x));
    for (double x : ssim_chunk) sc.push_back(x);
    nlohmann::json sf = nlohmann::json::array();
    for (double x : ssim_frame) sf.push_back(x);
    for (double x : per_frame) pf.push_back(num(x));
    rows.push_back({{"method", r.method}, {"bits", r.bits}, {"ratio", r.memory.ratio()},
                    {"kv_bytes", r.memory.kv_bytes()}, {"psnr", num(psnr)}, {"ssim", ssim},
                    {"psnr_per_chunk", pc}, {"ssim_per_chunk", sc}, {"psnr_per_frame", pf}, {"ssim_per_frame", sf}, {"first_generated_frame", g.context_frames},
                    {"ms_per_chunk", ms}, {"overhead_pct", overhead}});
    per_frame_all.push_back(per_frame);
    if (!gc.as_json) {
      std::string pcs;
      for (size_t i = 0; i < per_chunk.size(); ++i) {
        char b[40];
        if (std::isfinite(per_chunk[i]))
          std::snprintf(b, sizeof b, "%.2f/%.4f ", per_chunk[i], ssim_chunk[i]);
        else
          std::snprintf(b, sizeof b, "inf/%.4f ", ssim_chunk[i]);
        pcs += b;
      }
      std::printf("%-12s %6.3f %6.2fx %10zu %8.2f %7.4f %9.0f %7.1f%%  %s\n", r.method.c_str(), r.bits,
                  r.memory.ratio(), r.memory.kv_bytes(), psnr, ssim, ms, overhead, pcs.c_str());
    }
  }
  if (gc.as_json) std::cout << rows.dump(2) << std::endl;
  std::fflush(stdout);
  if (!gc.csv.empty()) {
    std::ofstream f(gc.csv);
    QVG_CHECK(f.good(), "cannot write ", gc.csv);
    f << "frame,clip_frame";
    for (const std::string& m : methods) f << "," << m;
    f << "\n";
    for (int i = 0; i < gen_frames; ++i) {
      f << g.context_frames + i << "," << g.start + g.context_frames + i;
      for (const auto& pf : per_frame_all) {
        const double x = pf[static_cast<size_t>(i)];
        if (std::isfinite(x)) {
          char b[32];
          std::snprintf(b, sizeof b, ",%.4f", x);
          f << b;
        } else {
          f << ",inf";
        }
      }
      f << "\n";
    }
    f.close();
    QVG_CHECK(f.good(), "cannot write ", gc.csv);
    if (!gc.as_json) std::printf("wrote %s (PSNR against BF16 per generated frame; inf = identical)\n", gc.csv.c_str());
  }
  if (!gc.plot.empty()) {
    char title[512];
    std::snprintf(title, sizeof title, "%s, context frames %d..%d, %d generated frames, spans of %d chunks%s",
                  std::filesystem::path(g.context).filename().string().c_str(), g.start,
                  g.start + g.context_frames - 1, gen_frames, g.quant_factor,
                  g.window > 0 ? (", window " + std::to_string(g.window) + " chunks").c_str() : "");
    write_psnr_plot(gc.plot, methods, per_frame_all, g.context_frames, title);
    if (!gc.as_json) std::printf("wrote %s (PSNR against BF16 per generated frame, one line per method)\n",
                                 gc.plot.c_str());
  }
  if (!gc.side_by_side.empty()) {
    qvg::Video sbs;
    const int F = mc.frame, M = static_cast<int>(runs.size());
    sbs.width = F * M;
    sbs.height = F;
    sbs.frames = gen_frames;
    sbs.rgb.resize(static_cast<size_t>(sbs.frames) * F * F * M * 3);
    for (int f = 0; f < sbs.frames; ++f)
      for (int m = 0; m < M; ++m)
        for (int y = 0; y < F; ++y)
          std::copy_n(runs[static_cast<size_t>(m)].frames.data() + ((static_cast<size_t>(f) * F + y) * F) * 3, F * 3,
                      sbs.rgb.data() + ((static_cast<size_t>(f) * F + y) * F * M + static_cast<size_t>(m) * F) * 3);
    qvg::VideoWriteOptions wo;
    wo.fps = fps > 0 ? fps : 8.0;
    wo.upscale = 3;
    qvg::write_video(gc.side_by_side, sbs, wo);
    if (!gc.as_json) std::printf("wrote %s (left to right: the methods in table order)\n", gc.side_by_side.c_str());
  }
}

}  // namespace

void run_compare_command() { compare({}); }

// ---- demo ---------------------------------------------------------------------------

namespace {
/// `qvg demo`'s options, with its own defaults (copied into g / gc at run time,
/// so generate / compare keep theirs).
struct DemoArgs {
  std::string context = std::string(QVG_SOURCE_DIR) + "/data/clips/vtest.mp4";
  std::string model = std::string(QVG_SOURCE_DIR) + "/models/qvg_ref_video_dit.safetensors";
  int start = 192, frames = 12, context_frames = 6, quant_factor = 2, threads = 0;
  std::vector<std::string> methods = {"bf16", "rtn", "kivi", "quarot", "qvg", "qvg-pro"};
  std::string plot, csv, side_by_side;
  bool as_json = false;
};
DemoArgs gdemo;
}  // namespace

void add_demo_command(CLI::App& app) {
  auto* s = app.add_subcommand(
      "demo", "the main job: the reference video model continues a held-out clip with its KV cache in BF16 and in "
              "each INT2 method; table of bits, ratio, PSNR/SSIM vs BF16, time (a few minutes on 2 cores)");
  s->add_option("--context", gdemo.context, "clip (default data/clips/vtest.mp4; held-out frames start at 192)");
  s->add_option("--start", gdemo.start, "first context frame, default 192 (held out from training)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--frames", gdemo.frames, "frames to generate, default 12")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", gdemo.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--quant-factor", gdemo.quant_factor, "chunks per encoded span, default 2")
      ->check(CLI::Range(1, 1 << 20));
  s->add_option("--methods", gdemo.methods, "caches (codec specs), default bf16 rtn kivi quarot qvg qvg-pro");
  s->add_option("--model", gdemo.model, "weights (.safetensors)");
  s->add_option("--threads", gdemo.threads, "threads (0 = all cores, the default); results do not depend on it");
  s->add_option("--plot", gdemo.plot, "also write the PSNR-per-frame plot (PNG, gnuplot)");
  s->add_option("--csv", gdemo.csv, "also write PSNR per generated frame as CSV");
  s->add_option("--side-by-side", gdemo.side_by_side, "also write the methods' frames side by side (MP4)");
  s->add_flag("--json", gdemo.as_json, "print one JSON row per method");
  add_device_options(s);  // writes g.device / g.gpu_math directly
  s->callback([] { run_demo_command(); });
}

void run_demo_command() {
  g.context = gdemo.context;
  g.model = gdemo.model;
  g.start = gdemo.start;
  g.frames = gdemo.frames;
  g.context_frames = gdemo.context_frames;
  g.quant_factor = gdemo.quant_factor;
  g.threads = gdemo.threads;
  gc.methods = gdemo.methods;
  gc.plot = gdemo.plot;
  gc.csv = gdemo.csv;
  gc.side_by_side = gdemo.side_by_side;
  gc.as_json = gdemo.as_json;
  auto header = [] {
    if (gc.as_json) return;
    std::printf(
        "qvg demo: the reference video model (docs/MODEL.md) continues frames %d..%d of %s (held out from its\n"
        "training) by %d frames, chunk by chunk (3 frames = 768 tokens), with its KV cache held in BF16 and in each\n"
        "method. Every %d chunks of K/V are encoded as one span (%d tokens per layer and head), so the generated\n"
        "chunks attend to compressed K/V. psnr / ssim: the generated frames against the BF16-cache run (higher =\n"
        "closer; inf = identical). bits: stored bits per K/V value, every byte counted; ratio: BF16 bytes / bytes.\n"
        "Short spans make QVG's 256 BF16 centroids per stage expensive (16 x 256 / %d = %.2f bits per value per\n"
        "stage; a Self-Forcing span of 37,440 tokens pays 0.11). Progress on stderr.\n\n",
        g.start, g.start + g.context_frames - 1, std::filesystem::path(g.context).filename().string().c_str(),
        g.frames, g.quant_factor, g.quant_factor * 768, g.quant_factor * 768, 16.0 * 256 / (g.quant_factor * 768));
    std::fflush(stdout);
  };
  compare(header);  // the header only once the arguments have passed
}

void add_dump_kv_command(CLI::App& app) {
  auto* s = app.add_subcommand("dump-kv", "write the reference model's per-layer Q, K (pre/post-RoPE) and V for a clip");
  s->add_option("--context", g.context, "video clip (e.g. data/clips/cockatoo.mp4)")->required();
  s->add_option("-o,--out", g.out, "output .safetensors")->required();
  s->add_option("--context-frames", g.context_frames, "frames to encode, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", g.start, "first frame in the clip, default 0 (held-out: cockatoo 192)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--model", g.model, "weights (.safetensors), default models/qvg_ref_video_dit.safetensors");
  s->add_option("--dtype", gd.dtype, "stored dtype: f32 (default), f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  s->callback([] { run_dump_kv_command(); });
}

void run_dump_kv_command() {
  const qvg::Model model = qvg::Model::load(g.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(g.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", g.context_frames);
  qvg::StreamingKVCache cache(qvg::model_cache_config(mc, "none", "none"));
  qvg::Sampler sampler(model, cache);
  double fps = 0;
  const qvg::Video ctx = load_context(mc, &fps);
  const std::vector<float> x = qvg::pixels_to_model(ctx.rgb);
  const int chunks = g.context_frames / mc.chunk_frames;
  const int64_t L = mc.tokens_per_chunk(), N = L * chunks;
  const size_t cv = static_cast<size_t>(mc.chunk_frames * mc.frame_values());
  const char* names[4] = {"q", "k_pre", "k", "v"};
  // all[layer][tensor]: [heads, N, head_dim]
  std::vector<std::array<qvg::HeadTensor, 4>> all(static_cast<size_t>(mc.layers));
  for (auto& l : all)
    for (auto& t : l) t = qvg::HeadTensor(mc.heads, N, mc.head_dim);
  for (int ci = 0; ci < chunks; ++ci) {
    std::vector<qvg::LayerKV> kv;
    const auto r = sampler.add_context(std::span<const float>(x).subspan(ci * cv, cv), &kv);
    for (int li = 0; li < mc.layers; ++li) {
      const qvg::LayerKV& k = kv[static_cast<size_t>(li)];
      const qvg::HeadTensor* src[4] = {&k.q, &k.k_pre, &k.k, &k.v};
      for (int t = 0; t < 4; ++t)
        for (int h = 0; h < mc.heads; ++h)
          std::copy_n(src[t]->head(h), L * mc.head_dim,
                      all[static_cast<size_t>(li)][static_cast<size_t>(t)].head(h) + ci * L * mc.head_dim);
    }
    std::fprintf(stderr, "qvg: chunk %d/%d (frames %" PRId64 "..%" PRId64 ") %.2f s\n", ci + 1, chunks,
                 r.frame_start, r.frame_start + mc.chunk_frames - 1, r.forward_seconds);
  }
  qvg::NamedTensors out;
  const qvg::DType dt = qvg::parse_dtype(gd.dtype);
  for (int li = 0; li < mc.layers; ++li)
    for (int t = 0; t < 4; ++t)
      out.push_back({"layer" + std::to_string(li) + "." + names[t],
                     qvg::from_head_tensor(all[static_cast<size_t>(li)][static_cast<size_t>(t)], qvg::KvLayout::thd, dt)});
  std::map<std::string, std::string> meta = {
      {"clip", g.context},
      {"start_frame", std::to_string(g.start)},
      {"frames", std::to_string(g.context_frames)},
      {"layout", "thd: [tokens, heads, head_dim]; tokens in frame, patch row, patch column order"},
      {"grid", std::to_string(mc.grid()) + "x" + std::to_string(mc.grid())},
      {"content", "q and k after RoPE, k_pre after RMSNorm before RoPE, v; every chunk encoded clean (t = 0) "
                  "against the exact cache of the chunks before it"}};
  if (auto it = model.metadata().find("config"); it != model.metadata().end()) meta["config"] = it->second;
  qvg::write_safetensors(g.out, out, meta);
  std::printf("wrote %s: %d layers x {q, k_pre, k, v}, each [%" PRId64 ", %d, %d] %s (%d frames of %s from frame %d)\n",
              g.out.c_str(), mc.layers, N, mc.heads, mc.head_dim, gd.dtype.c_str(), g.context_frames,
              g.context.c_str(), g.start);
  std::printf("e.g.: qvg eval --k %s --k-name layer3.k_pre --v %s --v-name layer3.v --q %s --q-name layer3.q "
              "--layout thd\n",
              g.out.c_str(), g.out.c_str(), g.out.c_str());
}

}  // namespace qvg_cli
