// `qvg generate`: continues a real clip with the reference video model, chunk
// by chunk, its KV cache held in a StreamingKVCache with the chosen codec.
// Prints a line per chunk (time, cache work, memory), the KV memory by part at
// the end, and writes the context + generated frames as a video. Thin: the
// model runtime (include/qvg/model.h) and the cache do the work.
//
// `qvg dump-kv`: runs the model over a clip's frames as clean context and writes
// every layer's Q, K (pre- and post-RoPE) and V to a .safetensors file, so that
// `qvg eval` / `qvg stream` can study the real model's cache.
#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "data_options.h"
#include "model_run.h"
#include "qvg/cache.h"
#include "qvg/io.h"
#include "qvg/model.h"
#include "qvg/video.h"
#include "qvg/video_writer.h"

namespace qvg_cli {
namespace {

/// `qvg generate`'s options.
struct GenerateArgs {
  ModelRunArgs run;
  std::string out;             ///< output video
  std::string cache = "qvg";   ///< codec of K and V
  std::string key, value;      ///< codec of K / V ("" = cache)
  double fps = 0;              ///< output frame rate (0 = the clip's)
  int upscale = 4;             ///< nearest-neighbour upscaling of the frames in the output
  std::string encoder;         ///< FFmpeg encoder ("" = libx264, else mpeg4)
  bool no_context_in_output = false;
};

/// `qvg dump-kv`'s options.
struct DumpArgs {
  ModelRunArgs run;
  std::string out;             ///< output .safetensors
  std::string dtype = "f32";   ///< stored dtype
};

std::string kb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

void print_parts(const char* role, const qvg::RoleBytes& b) {
  const qvg::PartBytes& p = b.spans;
  std::printf("  %s: spans %s (codes %s, scales %s, zero points %s, span scales %s, centroids %s, ids %s, "
              "full precision %s) + BF16/F32 tail %s = %s\n",
              role, kb(p.total()).c_str(), kb(p.codes).c_str(), kb(p.scales).c_str(), kb(p.zero_points).c_str(),
              kb(p.span_scales).c_str(), kb(p.centroids).c_str(), kb(p.ids).c_str(), kb(p.full_precision).c_str(),
              kb(b.tail).c_str(), kb(b.total()).c_str());
}

void run_generate(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const qvg::Model model = load_model(a.run.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(a.run.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", a.run.context_frames);
  const qvg::SpanPolicy policy = span_policy(a.run);
  const std::string kspec = a.key.empty() ? a.cache : a.key, vspec = a.value.empty() ? a.cache : a.value;
  qvg::StreamingKVCache cache(qvg::model_cache_config(mc, kspec, vspec, !a.run.post_rope, policy),
                              cache_options(a.run));
  double clip_fps = 0;
  const qvg::Video ctx = load_context(a.run, mc, &clip_fps);
  const int gen_chunks = (a.run.frames + mc.chunk_frames - 1) / mc.chunk_frames;
  const int ctx_chunks = a.run.context_frames / mc.chunk_frames;
  std::printf(
      "qvg generate: %s frames %d..%d as context (%d chunks), %d frames to generate (%d chunks of %d "
      "frames = %d tokens), %d Euler steps\n",
      a.run.context.c_str(), a.run.start, a.run.start + a.run.context_frames - 1, ctx_chunks,
      gen_chunks * mc.chunk_frames, gen_chunks, mc.chunk_frames, mc.tokens_per_chunk(), a.run.steps);
  std::printf("cache: K %s, V %s, keys %s RoPE, span = %d chunks, keep_recent %d, sink %d, window %" PRId64
              ", noise seed %" PRIu64 ", device %s\n",
              kspec.c_str(), vspec.c_str(), a.run.post_rope ? "after" : "before", a.run.quant_factor, a.run.keep_recent,
              a.run.sink, a.run.window, a.run.seed, a.run.device.c_str());
  std::fflush(stdout);

  qvg::Sampler sampler(model, cache, sampler_config(a.run));
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
  const std::vector<float> noise = qvg::gaussian_noise(static_cast<int64_t>(noise_values) * gen_chunks, a.run.seed);
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
              gen_seconds / gen_chunks, a.run.steps,
              std::chrono::duration<double>(clock::now() - t_start).count());

  qvg::Video out;
  out.width = out.height = mc.frame;
  const std::vector<uint8_t> gen_u8 = qvg::model_to_pixels(std::span<const float>(gen).first(
      static_cast<size_t>(a.run.frames) * static_cast<size_t>(mc.frame_values())));
  if (!a.no_context_in_output) out.rgb = ctx.rgb;
  out.rgb.insert(out.rgb.end(), gen_u8.begin(), gen_u8.end());
  out.frames = static_cast<int>(out.rgb.size() / static_cast<size_t>(mc.frame_values()));
  qvg::VideoWriteOptions wo;
  wo.fps = a.fps > 0 ? a.fps : (clip_fps > 0 ? clip_fps : 8.0);
  wo.upscale = a.upscale;
  wo.encoder = a.encoder;
  const std::string enc = qvg::write_video(a.out, out, wo);
  std::printf("wrote %s: %d frames (%s%d generated), %dx%d, %s, %.3g fps\n", a.out.c_str(), out.frames,
              a.no_context_in_output ? "" : (std::to_string(a.run.context_frames) + " context + ").c_str(),
              a.run.frames, mc.frame * a.upscale, mc.frame * a.upscale, enc.c_str(), wo.fps);
}

void run_dump_kv(const DumpArgs& a) {
  const qvg::Model model = load_model(a.run.model);
  const qvg::ModelConfig& mc = model.config();
  QVG_CHECK(a.run.context_frames % mc.chunk_frames == 0, "--context-frames must be a multiple of ", mc.chunk_frames,
            ", got ", a.run.context_frames);
  qvg::StreamingKVCache cache(qvg::model_cache_config(mc, "none", "none"));
  qvg::Sampler sampler(model, cache);
  double fps = 0;
  const qvg::Video ctx = load_context(a.run, mc, &fps);
  const std::vector<float> x = qvg::pixels_to_model(ctx.rgb);
  const int chunks = a.run.context_frames / mc.chunk_frames;
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
  const qvg::DType dt = qvg::parse_dtype(a.dtype);
  for (int li = 0; li < mc.layers; ++li)
    for (int t = 0; t < 4; ++t)
      out.push_back({"layer" + std::to_string(li) + "." + names[t],
                     qvg::from_head_tensor(all[static_cast<size_t>(li)][static_cast<size_t>(t)], qvg::KvLayout::thd, dt)});
  std::map<std::string, std::string> meta = {
      {"clip", a.run.context},
      {"start_frame", std::to_string(a.run.start)},
      {"frames", std::to_string(a.run.context_frames)},
      {"layout", "thd: [tokens, heads, head_dim]; tokens in frame, patch row, patch column order"},
      {"grid", std::to_string(mc.grid()) + "x" + std::to_string(mc.grid())},
      {"content", "q and k after RoPE, k_pre after RMSNorm before RoPE, v; every chunk encoded clean (t = 0) "
                  "against the exact cache of the chunks before it"}};
  if (auto it = model.metadata().find("config"); it != model.metadata().end()) meta["config"] = it->second;
  qvg::write_safetensors(a.out, out, meta);
  std::printf("wrote %s: %d layers x {q, k_pre, k, v}, each [%" PRId64 ", %d, %d] %s (%d frames of %s from frame %d)\n",
              a.out.c_str(), mc.layers, N, mc.heads, mc.head_dim, a.dtype.c_str(), a.run.context_frames,
              a.run.context.c_str(), a.run.start);
  std::printf("e.g.: qvg eval --k %s --k-name layer3.k_pre --v %s --v-name layer3.v --q %s --q-name layer3.q "
              "--layout thd\n",
              a.out.c_str(), a.out.c_str(), a.out.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* s = app.add_subcommand("generate",
                               "continue a clip with the reference video model; KV cache in the streaming cache");
  s->add_option("--context", a->run.context, "video clip whose frames are the context (e.g. data/clips/vtest.mp4)")
      ->required();
  s->add_option("-o,--out", a->out, "output video (.mp4: H.264 via libx264, else MPEG-4 part 2); context + generated")
      ->required();
  s->add_option("--frames", a->run.frames, "frames to generate (rounded up to whole chunks of 3), default 9")
      ->check(CLI::Range(1, 100000));
  s->add_option("--context-frames", a->run.context_frames, "context frames, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", a->run.start, "first context frame in the clip, default 0 (held-out: vtest 192)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--model", a->run.model, "weights (.safetensors), default models/qvg_ref_video_dit.safetensors");
  std::string presets;
  for (const std::string& p : qvg::codec_presets()) presets += (presets.empty() ? "" : ", ") + p;
  s->add_option("--cache", a->cache,
                "codec of K and V (" + presets + ", with :key=value overrides; none = lossless float cache), "
                "default qvg");
  s->add_option("--key", a->key, "codec of K (overrides --cache)");
  s->add_option("--value", a->value, "codec of V (overrides --cache)");
  s->add_option("--quant-factor", a->run.quant_factor, "chunks per encoded span (768 tokens each), default 4")
      ->check(CLI::Range(1, 1 << 20));
  s->add_option("--keep-recent", a->run.keep_recent, "newest chunks kept in BF16, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--sink", a->run.sink, "first chunks never encoded nor evicted, default 0")->check(CLI::Range(0, 1 << 20));
  s->add_option("--window", a->run.window, "attend to the newest N non-sink chunks only (0 = all), default 0")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  s->add_flag("--post-rope", a->run.post_rope, "cache keys after RoPE (default: before RoPE, RoPE on read)");
  s->add_option("--steps", a->run.steps, "Euler steps per chunk, default 4")->check(CLI::Range(1, 1000));
  s->add_option("--seed", a->run.seed, "noise seed, default 2026 (same noise for every cache)")->check(kSeedRange);
  s->add_option("--threads", a->run.threads, "threads of the network passes and of cache encode/decode (0 = all cores); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  add_device_options(s, a->run);
  s->add_option("--fps", a->fps, "output frame rate (default: the clip's)");
  s->add_option("--upscale", a->upscale, "nearest-neighbour upscaling of the 64x64 frames in the output, default 4")
      ->check(CLI::Range(1, 16));
  s->add_option("--encoder", a->encoder, "FFmpeg encoder (default libx264, else mpeg4)");
  s->add_flag("--no-context-in-output", a->no_context_in_output, "write only the generated frames");
  s->callback([a] { run_generate(*a); });
}

void add_dump_kv_command(CLI::App& app) {
  auto a = std::make_shared<DumpArgs>();
  auto* s = app.add_subcommand("dump-kv", "write the reference model's per-layer Q, K (pre/post-RoPE) and V for a clip");
  s->add_option("--context", a->run.context, "video clip (e.g. data/clips/cockatoo.mp4)")->required();
  s->add_option("-o,--out", a->out, "output .safetensors")->required();
  s->add_option("--context-frames", a->run.context_frames, "frames to encode, a multiple of 3, default 6")
      ->check(CLI::Range(3, 100000));
  s->add_option("--start", a->run.start, "first frame in the clip, default 0 (held-out: cockatoo 192)")
      ->check(CLI::Range(0, 1000000));
  s->add_option("--model", a->run.model, "weights (.safetensors), default models/qvg_ref_video_dit.safetensors");
  s->add_option("--dtype", a->dtype, "stored dtype: f32 (default), f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  s->callback([a] { run_dump_kv(*a); });
}

}  // namespace qvg_cli
