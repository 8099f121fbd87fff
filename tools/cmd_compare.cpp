// `qvg compare`: the same continuation (same context, same noise) with a BF16
// cache and with each chosen cache; a table of KV bytes, ratio, PSNR / SSIM
// against the BF16 video (overall and per chunk) and time per chunk, and
// optionally the PSNR per frame as CSV and a plot, and the methods' frames
// side by side. `qvg demo`: compare on a held-out clip with the demo's
// defaults and a header that explains the table. Thin: the model runtime
// (include/qvg/model.h), the cache and the video metrics do the work.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "model_run.h"
#include "plot.h"
#include "qvg/cache.h"
#include "qvg/model.h"
#include "qvg/video.h"
#include "qvg/video_metrics.h"
#include "qvg/video_writer.h"

namespace qvg_cli {
namespace {

/// `qvg compare`'s and `qvg demo`'s options.
struct CompareArgs {
  ModelRunArgs run;
  std::vector<std::string> methods = {"bf16", "rtn", "kivi", "quarot", "qvg", "qvg-pro"};  ///< caches (codec specs)
  bool as_json = false;
  std::string side_by_side;  ///< MP4 of every method's frames side by side ("" = none)
  std::string plot;          ///< PNG of PSNR per generated frame (gnuplot; "" = none)
  std::string csv;           ///< PSNR per generated frame, one column per method ("" = none)
};

struct RunResult {
  std::string method;
  std::vector<uint8_t> frames;   ///< generated frames, uint8 [frames, 64, 64, 3]
  std::vector<double> chunk_seconds;
  qvg::LayerMemory memory;       ///< all layers, at the end
  double bits = 0;
};

qvg::CacheConfig cache_config_for(const ModelRunArgs& run, const qvg::ModelConfig& mc, const std::string& spec) {
  return qvg::model_cache_config(mc, spec, spec, !run.post_rope, span_policy(run));
}

RunResult run_method(const CompareArgs& a, const qvg::Model& model, const std::string& spec,
                     std::span<const float> ctx_x, std::span<const float> noise, int gen_chunks) {
  const qvg::ModelConfig& mc = model.config();
  qvg::StreamingKVCache cache(cache_config_for(a.run, mc, spec), cache_options(a.run));
  qvg::Sampler sampler(model, cache, sampler_config(a.run));
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
    if (!a.as_json)
      std::fprintf(stderr, "qvg: %-10s chunk %d/%d %.2f s\n", spec.c_str(), i + 1, gen_chunks, r.chunk_seconds.back());
  }
  r.frames = qvg::model_to_pixels(gen);
  r.memory = cache.memory().total;
  r.bits = r.memory.bits_per_value(mc.heads, mc.head_dim);
  return r;
}

/// compare; `before_runs` (if set) is called once every argument, the model
/// and the clip have been checked, right before the runs (the demo's header).
void compare(const CompareArgs& a, const std::function<void()>& before_runs) {
  const qvg::Model model = load_model(a.run.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(a.run.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", a.run.context_frames);
  std::vector<std::string> methods = a.methods;
  methods.erase(std::remove(methods.begin(), methods.end(), "bf16"), methods.end());
  methods.insert(methods.begin(), "bf16");  // the reference, run first
  for (const std::string& m : methods) {  // every spec is checked before minutes of runs
    try {
      cache_config_for(a.run, mc, m);
    } catch (const qvg::Error& e) {
      QVG_CHECK(false, "cache '", m, "': ", e.what());
    }
  }
  QVG_CHECK(a.plot.empty() || methods.size() > 1, "--plot needs a method besides the bf16 reference");
  if (!a.plot.empty()) require_gnuplot();
  double fps = 0;
  const qvg::Video ctx = load_context(a.run, mc, &fps);
  const std::vector<float> ctx_x = qvg::pixels_to_model(ctx.rgb);
  const int gen_chunks = (a.run.frames + mc.chunk_frames - 1) / mc.chunk_frames;
  const int gen_frames = gen_chunks * mc.chunk_frames;
  const size_t nv = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  const std::vector<float> noise = qvg::gaussian_noise(static_cast<int64_t>(nv) * gen_chunks, a.run.seed);
  if (before_runs) before_runs();
  std::vector<RunResult> runs;
  for (const std::string& m : methods) runs.push_back(run_method(a, model, m, ctx_x, noise, gen_chunks));
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
  if (!a.as_json) {
    std::printf("qvg compare: %s frames %d..%d as context, %d generated frames (%d chunks), noise seed %" PRIu64
                ", spans of %d chunks, keys %s RoPE; PSNR/SSIM against the BF16-cache video\n\n",
                a.run.context.c_str(), a.run.start, a.run.start + a.run.context_frames - 1, gen_frames, gen_chunks,
                a.run.seed, a.run.quant_factor, a.run.post_rope ? "after" : "before");
    std::printf("%-12s %6s %7s %10s %8s %7s %9s %8s  %s\n", "method", "bits", "ratio", "kv_bytes", "psnr", "ssim",
                "ms/chunk", "overhead", "psnr / ssim per chunk");
  }
  for (const RunResult& r : runs) {
    const double psnr = qvg::psnr_u8(r.frames, ref.frames);
    const double ssim = qvg::ssim_rgb(r.frames, ref.frames, gen_frames, mc.frame, mc.frame);
    std::vector<double> per_chunk, ssim_chunk, per_frame, ssim_frame;
    for (int i = 0; i < gen_chunks; ++i) {
      const auto x = std::span<const uint8_t>(r.frames).subspan(i * chunk_bytes, chunk_bytes);
      const auto y = std::span<const uint8_t>(ref.frames).subspan(i * chunk_bytes, chunk_bytes);
      per_chunk.push_back(qvg::psnr_u8(x, y));
      ssim_chunk.push_back(qvg::ssim_rgb(x, y, mc.chunk_frames, mc.frame, mc.frame));
    }
    for (int i = 0; i < gen_frames; ++i) {
      const auto x = std::span<const uint8_t>(r.frames).subspan(i * frame_bytes, frame_bytes);
      const auto y = std::span<const uint8_t>(ref.frames).subspan(i * frame_bytes, frame_bytes);
      per_frame.push_back(qvg::psnr_u8(x, y));
      ssim_frame.push_back(qvg::ssim_rgb(x, y, 1, mc.frame, mc.frame));
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
                    {"psnr_per_chunk", pc}, {"ssim_per_chunk", sc}, {"psnr_per_frame", pf}, {"ssim_per_frame", sf}, {"first_generated_frame", a.run.context_frames},
                    {"ms_per_chunk", ms}, {"overhead_pct", overhead}});
    per_frame_all.push_back(per_frame);
    if (!a.as_json) {
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
  if (a.as_json) std::cout << rows.dump(2) << std::endl;
  std::fflush(stdout);
  if (!a.csv.empty()) {
    std::ofstream f(a.csv);
    QVG_CHECK(f.good(), "cannot write ", a.csv);
    f << "frame,clip_frame";
    for (const std::string& m : methods) f << "," << m;
    f << "\n";
    for (int i = 0; i < gen_frames; ++i) {
      f << a.run.context_frames + i << "," << a.run.start + a.run.context_frames + i;
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
    QVG_CHECK(f.good(), "cannot write ", a.csv);
    if (!a.as_json) std::printf("wrote %s (PSNR against BF16 per generated frame; inf = identical)\n", a.csv.c_str());
  }
  if (!a.plot.empty()) {
    char title[512];
    std::snprintf(title, sizeof title, "%s, context frames %d..%d, %d generated frames, spans of %d chunks%s",
                  std::filesystem::path(a.run.context).filename().string().c_str(), a.run.start,
                  a.run.start + a.run.context_frames - 1, gen_frames, a.run.quant_factor,
                  a.run.window > 0 ? (", window " + std::to_string(a.run.window) + " chunks").c_str() : "");
    write_psnr_plot(a.plot, methods, per_frame_all, a.run.context_frames, title);
    if (!a.as_json) std::printf("wrote %s (PSNR against BF16 per generated frame, one line per method)\n",
                                 a.plot.c_str());
  }
  if (!a.side_by_side.empty()) {
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
    qvg::write_video(a.side_by_side, sbs, wo);
    if (!a.as_json) std::printf("wrote %s (left to right: the methods in table order)\n", a.side_by_side.c_str());
  }
}

void run_demo(const CompareArgs& a) {
  const ModelRunArgs& r = a.run;
  auto header = [&] {
    if (a.as_json) return;
    std::printf(
        "qvg demo: the reference video model (docs/MODEL.md) continues frames %d..%d of %s (held out from its\n"
        "training) by %d frames, chunk by chunk (3 frames = 768 tokens), with its KV cache held in BF16 and in each\n"
        "method. Every %d chunks of K/V are encoded as one span (%d tokens per layer and head), so the generated\n"
        "chunks attend to compressed K/V. psnr / ssim: the generated frames against the BF16-cache run (higher =\n"
        "closer; inf = identical). bits: stored bits per K/V value, every byte counted; ratio: BF16 bytes / bytes.\n"
        "Short spans make QVG's 256 BF16 centroids per stage expensive (16 x 256 / %d = %.2f bits per value per\n"
        "stage; a Self-Forcing span of 37,440 tokens pays 0.11). Progress on stderr.\n\n",
        r.start, r.start + r.context_frames - 1, std::filesystem::path(r.context).filename().string().c_str(),
        r.frames, r.quant_factor, r.quant_factor * 768, r.quant_factor * 768, 16.0 * 256 / (r.quant_factor * 768));
    std::fflush(stdout);
  };
  compare(a, header);  // the header only once the arguments have passed
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* s = app.add_subcommand("compare",
                               "continue a clip with a BF16 cache and with each chosen cache; PSNR/SSIM vs BF16, "
                               "KV bytes, time per chunk");
  s->add_option("--context", a->run.context, "video clip whose frames are the context")->required();
  s->add_option("--methods", a->methods, "caches (codec specs), default bf16 rtn kivi quarot qvg qvg-pro");
  s->add_option("--frames", a->run.frames, "frames to generate (whole chunks of 3), default 9")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", a->run.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", a->run.start, "first context frame in the clip, default 0")->check(CLI::Range(0, 1000000));
  s->add_option("--model", a->run.model, "weights (.safetensors)");
  s->add_option("--quant-factor", a->run.quant_factor, "chunks per encoded span, default 4")->check(CLI::Range(1, 1 << 20));
  s->add_option("--keep-recent", a->run.keep_recent, "newest chunks kept in BF16, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--sink", a->run.sink, "first chunks never encoded nor evicted, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--window", a->run.window, "attend to the newest N non-sink chunks only (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  s->add_flag("--post-rope", a->run.post_rope, "cache keys after RoPE (default: before RoPE)");
  s->add_option("--steps", a->run.steps, "Euler steps per chunk, default 4")->check(CLI::Range(1, 1000));
  s->add_option("--seed", a->run.seed, "noise seed, default 2026");
  s->add_option("--threads", a->run.threads, "threads of the network passes and of cache encode/decode (0 = all cores); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  add_device_options(s, a->run);
  s->add_option("--side-by-side", a->side_by_side, "write an MP4 with every method's frames side by side");
  s->add_option("--plot", a->plot, "write a PNG of PSNR against BF16 per generated frame, one line per method (gnuplot)");
  s->add_option("--csv", a->csv, "write PSNR against BF16 per generated frame as CSV (one column per method; inf = identical)");
  s->add_flag("--json", a->as_json, "print one JSON row per method");
  s->callback([a] { compare(*a, {}); });
}

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();  // the demo's defaults:
  a->run.context = qvg::builtin_clip_path("vtest");
  a->run.start = 192;
  a->run.frames = 12;
  a->run.quant_factor = 2;
  auto* s = app.add_subcommand(
      "demo", "the main job: the reference video model continues a held-out clip with its KV cache in BF16 and in "
              "each INT2 method; table of bits, ratio, PSNR/SSIM vs BF16, time (a few minutes on 2 cores)");
  s->add_option("--context", a->run.context, "clip (default data/clips/vtest.mp4; held-out frames start at 192)");
  s->add_option("--start", a->run.start, "first context frame, default 192 (held out from training)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--frames", a->run.frames, "frames to generate, default 12")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", a->run.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--quant-factor", a->run.quant_factor, "chunks per encoded span, default 2")
      ->check(CLI::Range(1, 1 << 20));
  s->add_option("--methods", a->methods, "caches (codec specs), default bf16 rtn kivi quarot qvg qvg-pro");
  s->add_option("--model", a->run.model, "weights (.safetensors)");
  s->add_option("--threads", a->run.threads, "threads (0 = all cores, the default); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  s->add_option("--plot", a->plot, "also write the PSNR-per-frame plot (PNG, gnuplot)");
  s->add_option("--csv", a->csv, "also write PSNR per generated frame as CSV");
  s->add_option("--side-by-side", a->side_by_side, "also write the methods' frames side by side (MP4)");
  s->add_flag("--json", a->as_json, "print one JSON row per method");
  add_device_options(s, a->run);
  s->callback([a] { run_demo(*a); });
}

}  // namespace qvg_cli
