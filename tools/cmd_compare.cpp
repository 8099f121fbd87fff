// `qvg compare`: the same continuation (same context, same noise) with a BF16
// cache and with each method's cache at equal memory: at each budget of bits
// per value (--bits) every method gets the configuration of its own family
// with the lowest expected error within it (qvg/budget.h's quality model: the
// K/V are not at hand before the run); a table per budget of the chosen
// configuration, measured bits, ratio, PSNR / SSIM against the BF16 video
// (overall and per chunk); optionally a rate-distortion sweep (--rd-bits; CSV
// and plot), the PSNR per frame (CSV and plot) and the frames side by side.
// `qvg demo`: compare on a held-out clip with the demo's defaults, writing
// its files into one folder. Thin: the model runtime (include/qvg/model.h),
// the cache, the budget rule and the video metrics do the work.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "budget_plan.h"
#include "commands.h"
#include "data_options.h"
#include "compare_report.h"
#include "model_run.h"
#include "plot.h"
#include "progress.h"
#include "qvg/cache.h"
#include "qvg/methods.h"
#include "qvg/model.h"
#include "qvg/video.h"
#include "qvg/video_metrics.h"
#include "qvg/video_writer.h"
#include "side_by_side.h"

namespace qvg_cli {
namespace {

/// `qvg compare`'s and `qvg demo`'s options.
struct CompareArgs {
  ModelRunArgs run;
  std::vector<std::string> methods = qvg::comparison_presets();  ///< caches (codec specs)
  std::vector<std::string> bits = {"2.5"};  ///< budgets of the tables; "none": the specs as given
  std::vector<std::string> rd_bits;         ///< budgets run only for the rate-distortion CSV / plot
  int rd_frames = 0;                        ///< frames of the rate-distortion measure and its runs (0 = all)
  bool as_json = false;
  std::string side_by_side;  ///< MP4 of the first budget's frames side by side ("" = none)
  std::string plot;          ///< PNG of PSNR per generated frame (gnuplot; "" = none)
  std::string csv;           ///< PSNR per generated frame, one column per method ("" = none)
  std::string rd_csv;        ///< rate-distortion rows: budget, method, config, bits, PSNR ("" = none)
  std::string rd_plot;       ///< PNG of PSNR against measured bits, one line per method ("" = none)
  std::string drift_csv;     ///< per frame: PSNR / SSIM against BF16 and the real frames, K/V bytes ("" = none)
  std::string real_plot;     ///< PNG of PSNR against the real frames per generated frame ("" = none)
  bool real_plot_if_any = false;  ///< no real_plot (instead of an error) where the clip ends too early
  std::string kv_plot;       ///< PNG of the caches' K/V bytes over the generated frames ("" = none)
};

/// "1 chunk", "3 chunks".
std::string count_text(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// The plots' title: the clip, the context, the run and its cache policy, the budget (0: none).
std::string plot_title(const CompareArgs& a, const std::string& clip, int gen_frames, double budget) {
  std::string t = clip + ", context frames " + std::to_string(a.run.start) + ".." +
                  std::to_string(a.run.start + a.run.context_frames - 1) + ", " + std::to_string(gen_frames) +
                  " generated frames, spans of " + count_text(a.run.quant_factor, "chunk");
  if (a.run.sink > 0) t += ", sink " + count_text(a.run.sink, "chunk");
  if (a.run.window > 0) t += ", window " + count_text(a.run.window, "chunk");
  if (budget > 0) t += ", budget " + psnr_text(budget, "%.3g") + " bits";
  return t;
}

qvg::CacheConfig cache_config_for(const ModelRunArgs& run, const qvg::ModelConfig& mc, const std::string& spec) {
  return qvg::model_cache_config(mc, spec, spec, !run.post_rope, span_policy(run));
}

/// One continuation with one cache: gen_chunks chunks, the cache's memory
/// also after rd_chunks of them.
RunResult run_method(const CompareArgs& a, const qvg::Model& model, const std::string& spec, const std::string& label,
                     std::span<const float> ctx_x, std::span<const float> noise, int gen_chunks, int rd_chunks,
                     JobProgress& progress) {
  const qvg::ModelConfig& mc = model.config();
  qvg::StreamingKVCache cache(cache_config_for(a.run, mc, spec), cache_options(a.run));
  qvg::Sampler sampler(model, cache, sampler_config(a.run));
  const size_t cv = static_cast<size_t>(mc.chunk_frames * mc.frame_values());
  for (size_t i = 0; i * cv < ctx_x.size(); ++i) sampler.add_context(ctx_x.subspan(i * cv, cv));
  const size_t nv = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  RunResult r;
  r.spec = spec;
  std::vector<float> gen;
  for (int i = 0; i < gen_chunks; ++i) {
    const std::vector<float> f = sampler.generate(noise.subspan(i * nv, nv));
    gen.insert(gen.end(), f.begin(), f.end());
    const qvg::MemoryStats m = cache.memory();
    r.kv_bytes.push_back(static_cast<int64_t>(m.total.kv_bytes()));
    if (i + 1 == rd_chunks) r.rd_bits = m.total.span_bits_per_value(mc.heads, mc.head_dim);
    progress.step(label + " chunk " + std::to_string(i + 1) + "/" + std::to_string(gen_chunks));
  }
  r.frames = qvg::model_to_pixels(gen);
  r.chunks = gen_chunks;
  r.memory = cache.memory().total;
  r.bits = r.memory.bits_per_value(mc.heads, mc.head_dim);
  r.span_bits = r.memory.span_bits_per_value(mc.heads, mc.head_dim);
  return r;
}

/// The clip's frames that follow the context (what the model continues), as
/// the model sees them; empty where the clip ends before `frames` of them.
std::vector<uint8_t> real_frames(const ModelRunArgs& run, const qvg::ModelConfig& mc, int frames) {
  ModelRunArgs next = run;
  next.start = run.start + run.context_frames;
  next.context_frames = frames;
  double fps = 0;
  try {
    return load_context(next, mc, &fps).rgb;
  } catch (const qvg::Error&) {
    return {};
  }
}

/// compare; `before_runs` (if set) is called once every argument, the model
/// and the clip have been checked, right before the runs (the demo's header).
void compare(const CompareArgs& a, const std::function<void(const qvg::ModelConfig&)>& before_runs) {
  const qvg::Model model = load_model(a.run.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(a.run.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", a.run.context_frames);
  Outcome o;
  o.span_tokens = static_cast<int64_t>(mc.tokens_per_chunk()) * a.run.quant_factor;
  o.budgets = parse_budget_option(a.bits, "--bits");
  if (!a.rd_bits.empty())
    for (double b : parse_budget_option(a.rd_bits, "--rd-bits"))
      if (std::find(o.budgets.begin(), o.budgets.end(), b) == o.budgets.end()) o.rd_budgets.push_back(b);
  QVG_CHECK(o.rd_budgets.empty() || !o.budgets.empty(), "--rd-bits needs --bits budgets (not none)");
  std::vector<double> all = o.budgets;
  all.insert(all.end(), o.rd_budgets.begin(), o.rd_budgets.end());
  o.plan = plan_budgets(a.methods, all, o.span_tokens, mc.head_dim);
  o.gen_chunks = (a.run.frames + mc.chunk_frames - 1) / mc.chunk_frames;
  QVG_CHECK(a.rd_frames <= a.run.frames, "--rd-frames ", a.rd_frames, " is more than the ", a.run.frames,
            " generated frames");
  o.rd_chunks = a.rd_frames > 0 ? (a.rd_frames + mc.chunk_frames - 1) / mc.chunk_frames : o.gen_chunks;
  // The runs: BF16 (the reference) first, then each distinct reachable configuration once: the tables' for
  // every frame, the sweep's own for its frames only.
  struct Run {
    std::string spec, label;
    int chunks;
  };
  std::vector<Run> specs = {{"bf16", "bf16", o.gen_chunks}};
  for (const PlannedMethod& p : o.plan)
    if (p.reachable && !o.run_of.count(p.canonical)) {
      o.run_of[p.canonical] = specs.size();
      char b[64];
      std::snprintf(b, sizeof b, p.budget > 0 ? "%s at %.3g bits" : "%s", p.label.c_str(), p.budget);
      const bool in_tables = o.budgets.empty() || std::count(o.budgets.begin(), o.budgets.end(), p.budget) > 0;
      specs.push_back({p.spec, b, in_tables ? o.gen_chunks : o.rd_chunks});
    }
  for (const auto& [spec, label, chunks] : specs) {  // every cache is checked before minutes of runs
    try {
      cache_config_for(a.run, mc, spec);
    } catch (const qvg::Error& e) {
      QVG_CHECK(false, "cache '", label, "' (", spec, "): ", e.what());
    }
  }
  const bool several = all.size() > 1;
  QVG_CHECK(a.plot.empty() || specs.size() > 1, "--plot needs a method besides the bf16 reference");
  QVG_CHECK(a.rd_plot.empty() || specs.size() > 1, "--rd-plot needs a method besides the bf16 reference");
  if (!a.plot.empty()) require_gnuplot("--plot");
  if (!a.rd_plot.empty()) require_gnuplot("--rd-plot");
  if (!a.real_plot.empty()) require_gnuplot("--real-plot");
  if (!a.kv_plot.empty()) require_gnuplot("--kv-plot");
  double fps = 0;
  const qvg::Video ctx = load_context(a.run, mc, &fps);
  const std::vector<float> ctx_x = qvg::pixels_to_model(ctx.rgb);
  const int gen_frames = o.gen_chunks * mc.chunk_frames;
  const size_t nv = static_cast<size_t>(mc.tokens_per_chunk()) * mc.patch_dim();
  const std::vector<float> noise = qvg::gaussian_noise(static_cast<int64_t>(nv) * o.gen_chunks, a.run.seed);
  const std::vector<uint8_t> real = real_frames(a.run, mc, gen_frames);  // empty where the clip ends first
  QVG_CHECK(a.real_plot.empty() || !real.empty() || a.real_plot_if_any, "--real-plot: ", a.run.context,
            " ends before frame ", a.run.start + a.run.context_frames + gen_frames - 1,
            ": no real frames to compare with");
  const std::string real_plot = real.empty() ? "" : a.real_plot;
  if (before_runs) before_runs(mc);
  int64_t total_chunks = 0;
  for (const Run& r : specs) total_chunks += r.chunks;
  JobProgress progress(total_chunks, a.as_json);
  for (const auto& [spec, label, chunks] : specs)
    o.runs.push_back(run_method(a, model, spec, label, ctx_x, noise, chunks, o.rd_chunks, progress));
  for (RunResult& r : o.runs) measure(r, o.runs.front(), real, mc, o.rd_chunks);
  if (a.as_json) {
    std::cout << json_rows(o, a.run.context_frames).dump(2) << std::endl;
  } else {
    std::printf("qvg compare: %s frames %d..%d as context, %d generated frames (%s), noise seed %" PRIu64
                ", spans of %s, keys %s RoPE; PSNR/SSIM against the BF16-cache video; %zu runs in %s\n",
                a.run.context.c_str(), a.run.start, a.run.start + a.run.context_frames - 1, gen_frames,
                count_text(o.gen_chunks, "chunk").c_str(), a.run.seed, count_text(a.run.quant_factor, "chunk").c_str(),
                a.run.post_rope ? "after" : "before", specs.size(), clock_text(progress.elapsed()).c_str());
    if (o.budgets.empty()) print_table(o, 0);
    for (double b : o.budgets) print_table(o, b);
    if (several) print_rd_table(o, all);
  }
  std::fflush(stdout);
  auto say = [&](const std::string& s) {
    if (!a.as_json) std::printf("wrote %s\n", s.c_str());
  };
  // Per frame and side by side: the first table's runs (BF16 first).
  const double first = o.budgets.empty() ? 0.0 : o.budgets.front();
  std::vector<std::string> labels = {"bf16"};
  std::vector<const RunResult*> first_runs = {&o.runs.front()};
  std::vector<std::string> panel_titles = {"BF16 cache, 16 bits"};
  for (const PlannedMethod* p : at_budget(o, first))
    if (p->reachable) {
      labels.push_back(p->label);
      first_runs.push_back(&o.runs[o.run_of.at(p->canonical)]);
      char t[96];
      // The encoded spans' bits (the table's "bits", what the budget counts).
      std::snprintf(t, sizeof t, "%s, %.2f bits", p->label.c_str(), first_runs.back()->span_bits);
      panel_titles.push_back(t);
    }
  const std::string clip = std::filesystem::path(a.run.context).filename().string();
  if (!a.csv.empty()) {
    write_frame_csv(labels, first_runs, a.run.context_frames, a.run.start + a.run.context_frames, a.csv);
    say(a.csv + " (PSNR against BF16 per generated frame; inf = identical)");
  }
  const std::string title = plot_title(a, clip, gen_frames, first);
  if (!a.plot.empty()) {
    std::vector<std::vector<double>> per_frame;
    for (const RunResult* r : first_runs) per_frame.push_back(r->psnr_frame);
    write_psnr_plot(a.plot, labels, per_frame, a.run.context_frames, title);
    say(a.plot + " (PSNR against BF16 per generated frame, one line per method)");
  }
  if (!a.drift_csv.empty()) {
    write_drift_csv(labels, first_runs, a.run.context_frames, a.run.start + a.run.context_frames, mc.chunk_frames,
                    a.drift_csv);
    say(a.drift_csv + " (per generated frame and method: PSNR / SSIM against BF16 and against the real frames, K/V MB)");
  }
  if (!real_plot.empty() || !a.kv_plot.empty()) {
    write_drift_plots(labels, first_runs, a.run.context_frames, mc.chunk_frames, real_plot, a.kv_plot, title);
    if (!real_plot.empty()) say(real_plot + " (PSNR against the real frames per generated frame, BF16 included)");
    if (!a.kv_plot.empty()) say(a.kv_plot + " (each cache's K/V bytes over the generated frames)");
  }
  if (!a.rd_csv.empty()) {
    write_rd_csv(o, a.rd_csv);
    say(a.rd_csv + " (rate-distortion: one row per budget and method)");
  }
  if (!a.rd_plot.empty()) {
    char title[256];
    std::snprintf(title, sizeof title, "%s from frame %d, %d generated frames, spans of %" PRId64 " tokens", clip.c_str(),
                  a.run.start, o.rd_chunks * mc.chunk_frames, o.span_tokens);
    write_rd_plot(o, a.rd_plot, title);
    say(a.rd_plot + " (PSNR against BF16 over measured bits per value, one line per method)");
  }
  if (!a.side_by_side.empty()) {
    SideBySide sbs;
    sbs.side = mc.frame;
    sbs.frames = gen_frames;
    sbs.fps = fps > 0 ? fps : 8.0;
    sbs.real = {"real frames", "real", real};
    sbs.reference = {panel_titles[0], "BF16", first_runs[0]->frames};
    for (size_t i = 1; i < first_runs.size(); ++i)
      sbs.methods.push_back({panel_titles[i], labels[i], first_runs[i]->frames});
    write_side_by_side(a.side_by_side, sbs);
    say(a.side_by_side + " (titled panels: " + (sbs.real.frames.empty() ? "" : "the real frames, ") +
        "BF16, each method; below each method |method - BF16| x " + std::to_string(sbs.amplify) + ")");
  }
}

void add_common_options(CLI::App* s, CompareArgs& a) {
  std::string presets;
  for (const std::string& p : a.methods) presets += " " + p;
  s->add_option("--methods", a.methods, "caches (codec specs), default" + presets);
  s->add_option("--bits", a.bits,
                "budgets of bits per value, one table each (default 2.5; a list, e.g. 2 2.5 3, runs a sweep; none: "
                "the specs as given): every method gets the configuration of its own family with the lowest "
                "expected error (quality model) within the budget, at most 3 % above it");
  s->add_option("--model", a.run.model, "weights (.safetensors)");
  s->add_option("--threads", a.run.threads,
                "threads of the network passes and of cache encode/decode (0 = all cores); results do not depend on it")
      ->check(CLI::Range(0, 1 << 16));
  add_device_options(s, a.run);
  s->add_flag("--json", a.as_json, "print one JSON row per method and budget");
}

/// --sink and --window, with the command's defaults in their help.
void add_window_options(CLI::App* s, CompareArgs& a, const std::string& sink, const std::string& window) {
  s->add_option("--sink", a.run.sink, "first chunks never encoded nor evicted, default " + sink)
      ->check(CLI::Range(0, 1 << 20));
  s->add_option("--window", a.run.window, "attend to the newest N non-sink chunks only, default " + window)
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
}

void add_rd_frames_option(CLI::App* s, CompareArgs& a, const std::string& dflt) {
  s->add_option("--rd-frames", a.rd_frames,
                "frames over which the rate-distortion sweep is measured (its budgets' runs generate only these; "
                "the tables' runs are measured over their first as many), default " + dflt)
      ->check(CLI::Range(1, 100000));
}

/// The demo's header: what it runs and how to read the table.
void print_demo_header(const CompareArgs& a, int tokens_per_chunk) {
  const ModelRunArgs& r = a.run;
  std::string policy;
  if (r.sink > 0 || r.window > 0)
    policy = "\nThe model attends to a sink (the first " + count_text(r.sink, "chunk") +
             ", kept in BF16) and a window of the newest " + count_text(r.window, "chunk") +
             ";\nolder chunks are dropped, so the cache's size levels off.";
  std::printf(
      "qvg demo: the reference video model (docs/MODEL.md; trained on the first 80 %% of each shipped clip) takes\n"
      "frames %d..%d of %s as context and generates %d frames, chunk by chunk (3 frames = %d tokens), with its\n"
      "KV cache held in BF16 and in each method at equal memory. K/V are encoded in spans of %s (%d\n"
      "tokens per layer and head), so the generated chunks attend to compressed K/V.%s Each method runs\n"
      "the configuration of its own family (bits, block or group size, centroids, stages) with the lowest\n"
      "expected error within the budget of bits per value (at most 3 %% above it; docs/BENCHMARKS.md, \"The budget\n"
      "rule\"); a method whose family cannot get there is listed as such.\n"
      "bits: measured over the encoded spans, every byte counted; cache: the whole cache's bits; ratio: BF16\n"
      "bytes / the cache's bytes; psnr / ssim: the generated frames against the BF16-cache run (higher =\n"
      "closer; inf = identical). Progress and the time left on stderr.\n",
      r.start, r.start + r.context_frames - 1, std::filesystem::path(r.context).filename().string().c_str(), r.frames,
      tokens_per_chunk, count_text(r.quant_factor, "chunk").c_str(), r.quant_factor * tokens_per_chunk,
      policy.c_str());
  std::fflush(stdout);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* s = app.add_subcommand("compare",
                               "continue a clip with a BF16 cache and with each method's cache at equal memory; "
                               "PSNR/SSIM vs BF16, bits, rate-distortion sweeps");
  s->add_option("--context", a->run.context, "video clip whose frames are the context")->required();
  add_common_options(s, *a);
  s->add_option("--rd-bits", a->rd_bits, "more budgets, run for the rate-distortion CSV / plot only (e.g. 3 4)");
  add_rd_frames_option(s, *a, "all");
  s->add_option("--frames", a->run.frames, "frames to generate (whole chunks of 3), default 9")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", a->run.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", a->run.start, "first context frame in the clip, default 0")->check(CLI::Range(0, 1000000));
  s->add_option("--quant-factor", a->run.quant_factor, "chunks per encoded span, default 4")->check(CLI::Range(1, 1 << 20));
  s->add_option("--keep-recent", a->run.keep_recent, "newest chunks kept in BF16, default 0")->check(CLI::Range(0, 1 << 20));
  add_window_options(s, *a, "0", "0 = all");
  s->add_flag("--post-rope", a->run.post_rope, "cache keys after RoPE (default: before RoPE)");
  s->add_option("--steps", a->run.steps, "Euler steps per chunk, default 4")->check(CLI::Range(1, 1000));
  s->add_option("--seed", a->run.seed, "noise seed, default 2026")->check(kSeedRange);
  s->add_option("--side-by-side", a->side_by_side,
                "write an MP4 of labelled panels: the real frames, BF16 and each method at the first budget, and "
                "their amplified differences from BF16");
  s->add_option("--plot", a->plot, "write a PNG of PSNR against BF16 per generated frame, one line per method (gnuplot)");
  s->add_option("--csv", a->csv, "write PSNR against BF16 per generated frame as CSV (one column per method; inf = identical)");
  s->add_option("--rd-csv", a->rd_csv, "write the rate-distortion rows (budget, method, config, bits, PSNR) as CSV");
  s->add_option("--rd-plot", a->rd_plot, "write a PNG of PSNR against measured bits, one line per method (gnuplot)");
  s->add_option("--drift-csv", a->drift_csv,
                "write per generated frame and method: PSNR / SSIM against BF16 and against the real frames, and "
                "the cache's K/V megabytes (CSV)");
  s->add_option("--real-plot", a->real_plot,
                "write a PNG of PSNR against the clip's real frames per generated frame, BF16 included (gnuplot)");
  s->add_option("--kv-plot", a->kv_plot, "write a PNG of each cache's K/V bytes over the generated frames (gnuplot)");
  s->callback([a] { compare(*a, nullptr); });
}

/// The demo's codebook-code cache, beside the presets (its family: stages,
/// centroids, codebook shape and format by the budget rule).
constexpr const char* kDemoCodebookSpec = "qvg:code=cq";

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();  // the demo's defaults:
  a->run.context = qvg::builtin_clip_path("vtest");
  a->run.start = 138;  // 6 context + 96 generated frames end at vtest's last frame (239)
  a->run.frames = 96;
  a->run.quant_factor = 1;  // every chunk encoded when it is appended: only the sink waits in BF16
  a->run.sink = 1;
  a->run.window = 3;  // with the sink, the 4 context chunks of the model's training windows
  a->rd_bits = {"1.5", "2", "3", "5"};
  a->rd_frames = 12;
  a->methods.push_back(kDemoCodebookSpec);  // the presets and the codebook residual code
  auto out = std::make_shared<std::string>("qvg-demo");
  auto quick = std::make_shared<bool>(false);
  auto* s = app.add_subcommand(
      "demo", "the main job: the reference video model continues a clip for 96 frames with its KV cache in BF16 and "
              "in each method at equal memory; table, rate-distortion sweep, drift and rate-distortion plots and a "
              "labelled video (4 to 6 minutes on 2 cores; --quick: 6 s)");
  s->add_option("--context", a->run.context, "clip (default data/clips/vtest.mp4; its frames 192..239 were held out from training)");
  s->add_option("--start", a->run.start, "first context frame, default 138 (the real frames then last to the generated 96th)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--frames", a->run.frames, "frames to generate, default 96")->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", a->run.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--quant-factor", a->run.quant_factor, "chunks per encoded span, default 1")
      ->check(CLI::Range(1, 1 << 20));
  add_window_options(s, *a, "1", "3 (0 = all)");
  add_common_options(s, *a);
  s->add_option("--rd-bits", a->rd_bits, "more budgets for the rate-distortion sweep, default 1.5 2 3 5 (none: no sweep)");
  add_rd_frames_option(s, *a, "12");
  s->add_option("--out", *out,
                "folder of the demo's files (rate-distortion and PSNR-per-frame CSV + PNG, the labelled video), "
                "default qvg-demo; none: no files");
  s->add_flag("--quick", *quick,
              "a short run (3 context frames, 3 generated, spans of 1 chunk, no window, no sweep): 6 s on 2 cores");
  s->callback([a, out, quick, s] {
    CompareArgs d = *a;
    if (d.run.device != "cpu" && s->get_option("--methods")->count() == 0) {
      // No CUDA encode or decode for the codebook code yet: the default list leaves it out there.
      std::erase(d.methods, std::string(kDemoCodebookSpec));
      std::fprintf(stderr, "qvg: %s has no CUDA kernels yet; the demo leaves it out on --device %s\n",
                   kDemoCodebookSpec, d.run.device.c_str());
    }
    if (*quick) {
      d.run.context_frames = 3;
      d.run.frames = 3;
      d.run.sink = 0;
      d.run.window = 0;
      d.rd_bits.clear();
    }
    d.rd_frames = std::min(d.rd_frames, d.run.frames);
    if (d.rd_bits.size() == 1 && d.rd_bits[0] == "none") d.rd_bits.clear();
    if (d.bits.size() == 1 && d.bits[0] == "none") d.rd_bits.clear();  // the specs as given: no sweep
    if (*out != "none") {
      std::filesystem::create_directories(*out);
      const std::filesystem::path dir = std::filesystem::absolute(*out);  // the paths printed are absolute
      d.csv = (dir / "psnr_per_frame.csv").string();
      d.drift_csv = (dir / "drift.csv").string();
      d.rd_csv = (dir / "rate_distortion.csv").string();
      d.side_by_side = (dir / "side_by_side.mp4").string();
      try {
        require_gnuplot("the demo's plots");
        d.plot = (dir / "psnr_per_frame.png").string();
        if (!d.rd_bits.empty()) d.rd_plot = (dir / "rate_distortion.png").string();
        d.kv_plot = (dir / "kv_bytes.png").string();
        d.real_plot = (dir / "psnr_vs_real.png").string();  // where the clip has the frames
        d.real_plot_if_any = true;
      } catch (const qvg::Error& e) {
        std::fprintf(stderr, "qvg: no plots: %s\n", e.what());
      }
    }
    compare(d, [&](const qvg::ModelConfig& mc) {
      if (!d.as_json) print_demo_header(d, mc.tokens_per_chunk());
    });
  });
}

}  // namespace qvg_cli
