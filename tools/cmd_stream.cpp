// `qvg stream`: simulates autoregressive generation over a K/V sequence with
// the streaming cache: chunk by chunk into every layer, printing each span's
// error and k-means work, memory against BF16 over time, and optionally the
// warm-start effect (a second run without it) and pre- vs post-RoPE key
// caching. --save / --load / --stop-after show stop and resume. Thin: the
// cache does the work (include/qvg/cache.h).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include <unistd.h>

#include "budget_plan.h"
#include "commands.h"
#include "data_options.h"
#include "device.h"
#include "qvg/budget.h"
#include "qvg/cache.h"
#include "qvg/data.h"
#include "qvg/io.h"
#include "qvg/model.h"

namespace qvg_cli {
namespace {

using nlohmann::json;

struct StreamArgs {
  DataOptions data = [] {
    DataOptions d;
    d.heads = 4;
    d.frames = 48;
    d.queries = 0;  // (no attention error here)
    return d;
  }();
  int threads = 0;
  std::string device = "cpu";  ///< where the codecs encode and decode: cpu or cuda
  // cache
  std::string key = "qvg", value = "qvg", rope = "none";
  int layers = 1, chunk_frames = 3, quant_factor = 8, keep_recent = 0, sink = 0;
  int64_t window_chunks = 0, window_tokens = 0;
  bool no_warm = false;
  // run
  bool compare_warm = false, compare_rope = false, as_json = false, quiet = false;
  std::string save, load;
  int64_t stop_after = 0;
  int every = 1;
};

void progress(const StreamArgs& args, const std::string& s) {
  if (args.quiet) return;
  std::fprintf(stderr, "qvg: %s\n", s.c_str());
  std::fflush(stderr);
}

KvData load_stream_data(const StreamArgs& args) {
  if (const double kv = builtin_kv_bytes(args.data); kv > 0)
    check_memory(2 * kv + args.layers * kv / 16,
                 "the K and V as float32 (" + std::to_string(static_cast<int64_t>(kv / 1e6)) +
                     " MB), the reference they are compared with, and " + std::to_string(args.layers) +
                     " layer(s) of cache at 2 bits a value or more");
  KvData d = load_data(args.data, args.threads, [&](const std::string& s) { progress(args, s); });
  if (d.from_files && !d.k.same_shape(d.v)) throw qvg::Error("--k and --v have different shapes");
  // A frame larger than the data made one partial chunk whatever --grid said.
  if (d.from_files && d.tokens_per_frame() > d.k.tokens)
    throw qvg::Error("--grid " + std::to_string(d.grid_h) + "x" + std::to_string(d.grid_w) + " makes frames of " +
                     std::to_string(d.tokens_per_frame()) + " tokens, more than the " + std::to_string(d.k.tokens) +
                     " tokens of the K/V files: give the latent frame grid of the data (H x W tokens a frame)");
  return d;
}

qvg::CacheConfig make_config(const StreamArgs& args, const KvData& d) {
  qvg::CacheConfig c;
  c.layers = args.layers;
  c.heads = static_cast<int>(d.k.heads);
  c.dim = static_cast<int>(d.k.dim);
  c.key = qvg::parse_codec_spec(args.key);
  c.value = qvg::parse_codec_spec(args.value);
  c.chunk_tokens = 0;  // the last chunk of a file may be shorter
  c.policy.quant_factor = args.quant_factor;
  c.policy.keep_recent = args.keep_recent;
  c.policy.sink = args.sink;
  c.policy.window_chunks = args.window_chunks;
  c.policy.window_tokens = args.window_tokens;
  c.rope.mode = qvg::parse_rope_mode(args.rope);
  c.warm_start = !args.no_warm;
  qvg::validate(c);
  return c;
}

qvg::HeadTensor slice(const qvg::HeadTensor& x, int64_t first, int64_t n) {
  qvg::HeadTensor out(x.heads, n, x.dim);
  for (int64_t h = 0; h < x.heads; ++h) std::copy_n(x.head(h) + first * x.dim, n * x.dim, out.head(h));
  return out;
}

/// Positions of tokens [first, first + n) of the sequence (frame-major grid).
std::vector<int32_t> positions(const KvData& d, qvg::RopeMode mode, int64_t first, int64_t n) {
  std::vector<int32_t> p;
  if (mode == qvg::RopeMode::rope_1d) return qvg::positions_1d(first, n);
  if (mode != qvg::RopeMode::wan_3d) return p;
  p.reserve(static_cast<size_t>(3 * n));
  for (int64_t t = first; t < first + n; ++t) {
    const int64_t i = t % d.tokens_per_frame();
    p.push_back(static_cast<int32_t>(t / d.tokens_per_frame()));
    p.push_back(static_cast<int32_t>(i / d.grid_w));
    p.push_back(static_cast<int32_t>(i % d.grid_w));
  }
  return p;
}

/// FNV-1a 64 of the float bytes of every layer's read() K then V.
uint64_t read_digest(const qvg::StreamingKVCache& cache) {
  uint64_t hsh = 0xcbf29ce484222325ull;
  auto eat = [&](const std::vector<float>& x) {
    const auto* b = reinterpret_cast<const uint8_t*>(x.data());
    for (size_t i = 0; i < x.size() * sizeof(float); ++i) hsh = (hsh ^ b[i]) * 0x100000001b3ull;
  };
  for (int l = 0; l < cache.config().layers; ++l) {
    if (cache.chunks_appended(l) == 0) continue;
    const qvg::CacheRead r = cache.read(l);
    eat(r.k.data);
    eat(r.v.data);
  }
  return hsh;
}

json parts_json(const qvg::PartBytes& b) {
  json j;
  for (const qvg::PartField& p : qvg::kPartFields) j[p.name] = b.*p.bytes;
  j["total"] = b.total();
  return j;
}

json memory_json(const qvg::LayerMemory& m, int heads, int dim) {
  return {{"k", {{"spans", parts_json(m.k.spans)}, {"tail", m.k.tail}, {"total", m.k.total()}}},
          {"v", {{"spans", parts_json(m.v.spans)}, {"tail", m.v.tail}, {"total", m.v.total()}}},
          {"kv_bytes", m.kv_bytes()},
          {"bf16_bytes", m.bf16_bytes},
          {"ratio", m.ratio()},
          {"bits_per_value", m.bits_per_value(heads, dim)},
          {"positions", m.positions},
          {"warm_start", m.warm_start},
          {"tokens_live", m.tokens_live},
          {"tokens_held", m.tokens_held},
          {"tokens_encoded", m.tokens_encoded},
          {"spans", m.spans}};
}

json nullable(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

int iterations(const qvg::EncodeReport& r) {
  int n = 0;
  for (const auto& s : r.kmeans) n += s.iterations;
  return n;
}

json span_json(const qvg::SpanReport& s) {
  json j = {{"layer", s.layer},
            {"span", s.span},
            {"first_chunk", s.first_chunk},
            {"chunks", s.chunks},
            {"first_token", s.first_token},
            {"tokens", s.tokens},
            {"centroids", s.centroids},
            {"k_warm_started", s.k_warm_started},
            {"v_warm_started", s.v_warm_started},
            {"k_kmeans_iterations", iterations(s.k)},
            {"v_kmeans_iterations", iterations(s.v)},
            {"k_kmeans_ms", 1e3 * s.k.kmeans_seconds},
            {"v_kmeans_ms", 1e3 * s.v.kmeans_seconds},
            {"encode_ms", 1e3 * s.encode_seconds},
            {"k_bytes", s.k_bytes.total()},
            {"v_bytes", s.v_bytes.total()}};
  if (s.k_error) {
    j["k_rel_l2"] = s.k_error->rel_l2;
    j["k_snr_db"] = nullable(s.k_error->snr_db);
  }
  if (s.v_error) {
    j["v_rel_l2"] = s.v_error->rel_l2;
    j["v_snr_db"] = nullable(s.v_error->snr_db);
  }
  return j;
}

struct RunResult {
  std::vector<qvg::SpanReport> spans;  ///< layer 0's
  json steps = json::array();
  qvg::MemoryStats memory;
  qvg::ErrorStats k_error, v_error;  ///< read(0) against the reference of its live tokens
  uint64_t digest = 0;
  int64_t first_chunk = 0, last_chunk = 0;  ///< chunks [first, last) appended in this run
  double seconds = 0;
};

/// One streamed run. post_rope: keys are rotated before caching (cache RoPE off).
/// main_run: honours --load / --save / --stop-after and prints the timeline.
RunResult run(const StreamArgs& args, const KvData& d, qvg::CacheConfig cfg, bool post_rope, bool main_run,
              const std::string& label) {
  const int64_t n = d.k.tokens;
  if (args.chunk_frames < 1 || d.tokens_per_frame() > (int64_t{1} << 40) / args.chunk_frames)
    throw qvg::Error("--chunk-frames " + std::to_string(args.chunk_frames) + " with " +
                     std::to_string(d.tokens_per_frame()) + " tokens a frame: a chunk must hold 1 to 2^40 tokens");
  const int64_t ct = args.chunk_frames * d.tokens_per_frame();
  const int64_t n_chunks = (n + ct - 1) / ct;
  const qvg::RopeMode ref_rope = cfg.rope.mode;  // the positions the reference keys are rotated with
  if (post_rope) cfg.rope.mode = qvg::RopeMode::none;
  qvg::CacheOptions opt;
  opt.threads = args.threads;
  opt.backend = qvg::parse_backend(args.device);
  opt.measure_span_error = true;

  RunResult res;
  std::optional<qvg::StreamingKVCache> cache;
  if (main_run && !args.load.empty()) {
    progress(args, "loading " + args.load);
    cache.emplace(qvg::StreamingKVCache::load(args.load, cfg, opt));
    res.first_chunk = cache->chunks_appended(0);
    for (int l = 1; l < cfg.layers; ++l)
      if (cache->chunks_appended(l) != res.first_chunk)
        throw qvg::Error(args.load + ": layers hold different numbers of chunks; cannot resume");
    if (res.first_chunk > n_chunks)
      throw qvg::Error(args.load + ": the cache holds " + std::to_string(res.first_chunk) + " chunks, the data has " +
                       std::to_string(n_chunks));
    // The chunks must be this run's chunks of this data (the reference
    // below copies data rows by chunk index and size).
    const int64_t want = std::min(res.first_chunk * ct, n);
    for (int l = 0; l < cfg.layers; ++l)
      if (cache->tokens_appended(l) != want)
        throw qvg::Error(args.load + ": layer " + std::to_string(l) + " holds " +
                         std::to_string(cache->tokens_appended(l)) + " tokens in " + std::to_string(res.first_chunk) +
                         " chunks; with --chunk-frames " + std::to_string(args.chunk_frames) + " (" +
                         std::to_string(ct) + " tokens a chunk) this data's first chunks hold " + std::to_string(want) +
                         "; cannot resume");
    if (!args.as_json) std::printf("resumed from %s at chunk %" PRId64 "\n", args.load.c_str(), res.first_chunk);
  } else {
    cache.emplace(cfg, opt);
  }
  res.last_chunk = (main_run && args.stop_after > 0) ? std::min(n_chunks, args.stop_after) : n_chunks;
  const bool print = main_run && !args.as_json;
  if (print)
    std::printf("\n%6s %9s %6s %14s %14s %7s %6s\n", "chunk", "tokens", "spans", "kv_bytes", "bf16_bytes", "ratio",
                "bits");
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = res.first_chunk; c < res.last_chunk; ++c) {
    const int64_t first = c * ct, t = std::min(ct, n - first);
    qvg::HeadTensor k = slice(d.k, first, t);
    const qvg::HeadTensor v = slice(d.v, first, t);
    const auto pos = positions(d, ref_rope, first, t);
    if (post_rope) qvg::apply_rope(k, pos, qvg::RopeConfig{ref_rope});
    std::vector<qvg::SpanReport> new_spans;
    for (int l = 0; l < cfg.layers; ++l) {
      qvg::AppendReport r = cache->append(l, k, v, post_rope ? std::vector<int32_t>{} : pos);
      if (l == 0)
        for (auto& s : r.spans) new_spans.push_back(std::move(s));
    }
    const qvg::LayerMemory m = cache->memory().total;
    res.steps.push_back({{"chunk", c},
                         {"tokens_live", m.tokens_live},
                         {"spans", m.spans},
                         {"kv_bytes", m.kv_bytes()},
                         {"bf16_bytes", m.bf16_bytes},
                         {"ratio", m.ratio()}});
    if (print && (new_spans.size() > 0 || c % args.every == 0 || c + 1 == res.last_chunk))
      std::printf("%6" PRId64 " %9" PRId64 " %6" PRId64 " %14zu %14zu %6.2fx %6.2f\n", c, m.tokens_live, m.spans,
                  m.kv_bytes(), m.bf16_bytes, m.ratio(), m.bits_per_value(cfg.heads, cfg.dim));
    for (const auto& s : new_spans) {
      if (print)
        std::printf("       span %" PRId64 " = chunks %" PRId64 "..%" PRId64 " (%" PRId64
                    " tokens, C %d): K rel %.4f (%.2f dB), V rel %.4f (%.2f dB); k-means iters K %d V %d, "
                    "%.0f ms, warm start %s\n",
                    s.span, s.first_chunk, s.first_chunk + s.chunks - 1, s.tokens, s.centroids,
                    s.k_error ? s.k_error->rel_l2 : 0.0, s.k_error ? s.k_error->snr_db : 0.0,
                    s.v_error ? s.v_error->rel_l2 : 0.0, s.v_error ? s.v_error->snr_db : 0.0, iterations(s.k),
                    iterations(s.v), 1e3 * (s.k.kmeans_seconds + s.v.kmeans_seconds),
                    s.k_warm_started ? "yes" : "no");
      res.spans.push_back(s);
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: chunk %" PRId64 "/%" PRId64 " into %d layer(s), %.1fs", label.c_str(), c + 1,
                  n_chunks, cfg.layers, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    progress(args, buf);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.memory = cache->memory();
  if (cache->chunks_appended(0) > 0) {
    const qvg::CacheRead r = cache->read(0);
    qvg::HeadTensor ref_k(d.k.heads, r.k.tokens, d.k.dim), ref_v(d.k.heads, r.k.tokens, d.k.dim);
    std::vector<int32_t> ref_pos;
    int64_t off = 0;
    for (size_t i = 0; i < r.chunks.size(); ++i) {
      if (r.chunks[i] < 0 || r.chunks[i] >= n_chunks)
        throw qvg::Error("the cache holds chunk " + std::to_string(r.chunks[i]) + "; this data has " +
                         std::to_string(n_chunks) + " (was the cache made from other data or --chunk-frames?)");
      const int64_t first = r.chunks[i] * ct, t = r.chunk_tokens[i];
      if (t != std::min(ct, n - first))
        throw qvg::Error("chunk " + std::to_string(r.chunks[i]) + " of the cache holds " + std::to_string(t) +
                         " tokens; this data's chunk there holds " + std::to_string(std::min(ct, n - first)) +
                         " (was the cache made from other data or --chunk-frames?)");
      for (int64_t h = 0; h < d.k.heads; ++h) {
        std::copy_n(d.k.head(h) + first * d.k.dim, t * d.k.dim, ref_k.head(h) + off * d.k.dim);
        std::copy_n(d.v.head(h) + first * d.k.dim, t * d.k.dim, ref_v.head(h) + off * d.k.dim);
      }
      const auto p = positions(d, ref_rope, first, t);
      ref_pos.insert(ref_pos.end(), p.begin(), p.end());
      off += t;
    }
    qvg::apply_rope(ref_k, ref_pos, qvg::RopeConfig{ref_rope});
    res.k_error = qvg::compare(ref_k, r.k);
    res.v_error = qvg::compare(ref_v, r.v);
    res.digest = read_digest(*cache);
  }
  if (main_run && !args.save.empty()) {
    cache->save(args.save);
    if (!args.as_json)
      std::printf("saved the cache after chunk %" PRId64 " to %s\n", res.last_chunk - 1, args.save.c_str());
  }
  return res;
}

void print_memory(const qvg::LayerMemory& m, const qvg::CacheConfig& c) {
  std::printf("\nmemory at the end, all %d layer(s) (exact, from the buffers):\n", c.layers);
  std::printf("  %-28s %14s %14s\n", "part", "K bytes", "V bytes");
  auto row = [](const char* name, size_t k, size_t v) { std::printf("  %-28s %14zu %14zu\n", name, k, v); };
  row("codes", m.k.spans.codes, m.v.spans.codes);
  row("scales", m.k.spans.scales, m.v.spans.scales);
  row("span scales (FP32)", m.k.spans.span_scales, m.v.spans.span_scales);
  row("zero points", m.k.spans.zero_points, m.v.spans.zero_points);
  row("centroids (BF16)", m.k.spans.centroids, m.v.spans.centroids);
  row("centroid ids", m.k.spans.ids, m.v.spans.ids);
  row("codec full precision", m.k.spans.full_precision, m.v.spans.full_precision);
  row("tail (chunks in BF16)", m.k.tail, m.v.tail);
  row("total", m.k.total(), m.v.total());
  std::printf("  K+V %zu bytes for %" PRId64 " live tokens (%" PRId64 " held, %" PRId64
              " in spans); BF16 cache of the live tokens %zu bytes: %.2fx smaller, %.3f bits/value\n",
              m.kv_bytes(), m.tokens_live, m.tokens_held, m.tokens_encoded, m.bf16_bytes, m.ratio(),
              m.bits_per_value(c.heads, c.dim));
  std::printf("  besides K/V: positions %zu bytes, warm-start centroids %zu bytes\n", m.positions, m.warm_start);
}

json warm_compare(const RunResult& a, const RunResult& b, bool a_warm) {
  const RunResult& warm = a_warm ? a : b;
  const RunResult& cold = a_warm ? b : a;
  json rows = json::array();
  int it_w = 0, it_c = 0;
  double ms_w = 0, ms_c = 0;
  for (size_t i = 1; i < std::min(warm.spans.size(), cold.spans.size()); ++i) {  // span 0 is cold in both
    const auto& w = warm.spans[i];
    const auto& c = cold.spans[i];
    it_w += iterations(w.k) + iterations(w.v);
    it_c += iterations(c.k) + iterations(c.v);
    ms_w += 1e3 * (w.k.kmeans_seconds + w.v.kmeans_seconds);
    ms_c += 1e3 * (c.k.kmeans_seconds + c.v.kmeans_seconds);
    rows.push_back({{"span", w.span},
                    {"k_iterations_cold", iterations(c.k)},
                    {"k_iterations_warm", iterations(w.k)},
                    {"v_iterations_cold", iterations(c.v)},
                    {"v_iterations_warm", iterations(w.v)},
                    {"kmeans_ms_cold", 1e3 * (c.k.kmeans_seconds + c.v.kmeans_seconds)},
                    {"kmeans_ms_warm", 1e3 * (w.k.kmeans_seconds + w.v.kmeans_seconds)},
                    {"k_rel_l2_cold", c.k_error ? c.k_error->rel_l2 : 0.0},
                    {"k_rel_l2_warm", w.k_error ? w.k_error->rel_l2 : 0.0},
                    {"v_rel_l2_cold", c.v_error ? c.v_error->rel_l2 : 0.0},
                    {"v_rel_l2_warm", w.v_error ? w.v_error->rel_l2 : 0.0}});
  }
  return {{"spans", rows},
          {"iterations_cold", it_c},
          {"iterations_warm", it_w},
          {"kmeans_ms_cold", ms_c},
          {"kmeans_ms_warm", ms_w},
          {"iteration_ratio", it_w > 0 ? double(it_c) / it_w : 0.0},
          {"time_ratio", ms_w > 0 ? ms_c / ms_w : 0.0},
          {"final_k_rel_l2_cold", cold.k_error.rel_l2},
          {"final_k_rel_l2_warm", warm.k_error.rel_l2},
          {"final_v_rel_l2_cold", cold.v_error.rel_l2},
          {"final_v_rel_l2_warm", warm.v_error.rel_l2}};
}

void print_warm(const json& w) {
  std::printf("\nwarm-start effect (layer 0; spans 1.. -- span 0 starts from the codec's init in both runs):\n");
  std::printf("  %5s %11s %11s %11s %11s %11s %11s %9s %9s %9s %9s\n", "span", "K it cold", "K it warm",
              "V it cold", "V it warm", "ms cold", "ms warm", "K rel c", "K rel w", "V rel c", "V rel w");
  for (const auto& r : w["spans"])
    std::printf("  %5d %11d %11d %11d %11d %11.0f %11.0f %9.4f %9.4f %9.4f %9.4f\n", r["span"].get<int>(),
                r["k_iterations_cold"].get<int>(), r["k_iterations_warm"].get<int>(),
                r["v_iterations_cold"].get<int>(), r["v_iterations_warm"].get<int>(),
                r["kmeans_ms_cold"].get<double>(), r["kmeans_ms_warm"].get<double>(),
                r["k_rel_l2_cold"].get<double>(), r["k_rel_l2_warm"].get<double>(),
                r["v_rel_l2_cold"].get<double>(), r["v_rel_l2_warm"].get<double>());
  std::printf("  total: k-means iterations cold %d, warm %d (%.2fx fewer); k-means time cold %.0f ms, warm %.0f ms "
              "(%.2fx less)\n",
              w["iterations_cold"].get<int>(), w["iterations_warm"].get<int>(), w["iteration_ratio"].get<double>(),
              w["kmeans_ms_cold"].get<double>(), w["kmeans_ms_warm"].get<double>(), w["time_ratio"].get<double>());
  std::printf("  final read() rel. L2 error: K cold %.4f warm %.4f, V cold %.4f warm %.4f\n",
              w["final_k_rel_l2_cold"].get<double>(), w["final_k_rel_l2_warm"].get<double>(),
              w["final_v_rel_l2_cold"].get<double>(), w["final_v_rel_l2_warm"].get<double>());
}

void run_stream(const StreamArgs& args) {
  require_backend(args.device);  // before any data are made
  const KvData d = load_stream_data(args);
  const qvg::CacheConfig cfg = make_config(args, d);
  if (args.compare_rope && cfg.rope.mode == qvg::RopeMode::none)
    throw qvg::Error("--compare-rope needs --rope 1d or 3d (the data are taken as pre-RoPE keys)");
  if (!args.load.empty() && (args.compare_warm || args.compare_rope))
    throw qvg::Error("--load resumes one run; drop --compare-warm / --compare-rope");
  const int64_t ct = args.chunk_frames * d.tokens_per_frame();
  if (!args.as_json) {
    std::printf("qvg stream: %s K/V [%" PRId64 " heads, %" PRId64 " tokens, dim %" PRId64
                "] into %d layer(s) (the same K/V in every layer)\n",
                d.name.c_str(), d.k.heads, d.k.tokens, d.k.dim, cfg.layers);
    std::printf("chunks of %d frames = %" PRId64 " tokens; span = %d chunks; keep_recent %d, sink %d, window %" PRId64
                " chunks / %" PRId64 " tokens (0 = none); RoPE %s; warm start %s\n",
                args.chunk_frames, ct, cfg.policy.quant_factor, cfg.policy.keep_recent, cfg.policy.sink,
                cfg.policy.window_chunks, cfg.policy.window_tokens, qvg::rope_mode_name(cfg.rope.mode),
                cfg.warm_start ? "on" : "off");
    std::printf("key codec %s (%s), value codec %s (%s)\n", cfg.key.name.c_str(), qvg::describe(cfg.key).c_str(),
                cfg.value.name.c_str(), qvg::describe(cfg.value).c_str());
  }
  const int64_t span_tokens = ct * cfg.policy.quant_factor;
  note_if_over_limit(cfg.key, qvg::span_bits_per_value(cfg.key, span_tokens, d.k.dim), span_tokens);
  if (!qvg::same_codec(cfg.key, cfg.value))
    note_if_over_limit(cfg.value, qvg::span_bits_per_value(cfg.value, span_tokens, d.k.dim), span_tokens);
  const RunResult main = run(args, d, cfg, false, true, "stream");
  json out = {{"data", d.name},
              {"heads", d.k.heads},
              {"tokens", d.k.tokens},
              {"dim", d.k.dim},
              {"layers", cfg.layers},
              {"chunk_tokens", ct},
              {"quant_factor", cfg.policy.quant_factor},
              {"keep_recent", cfg.policy.keep_recent},
              {"sink", cfg.policy.sink},
              {"window_chunks", cfg.policy.window_chunks},
              {"window_tokens", cfg.policy.window_tokens},
              {"rope", qvg::rope_mode_name(cfg.rope.mode)},
              {"warm_start", cfg.warm_start},
              {"key", cfg.key.name},
              {"value", cfg.value.name},
              {"first_chunk", main.first_chunk},
              {"last_chunk", main.last_chunk},
              {"seconds", main.seconds},
              {"steps", main.steps},
              {"spans", json::array()},
              {"memory", memory_json(main.memory.total, cfg.heads, cfg.dim)},
              {"memory_layer0", memory_json(main.memory.layers[0], cfg.heads, cfg.dim)},
              {"read_k_rel_l2", main.k_error.rel_l2},
              {"read_v_rel_l2", main.v_error.rel_l2},
              {"read_k_snr_db", nullable(main.k_error.snr_db)},
              {"read_v_snr_db", nullable(main.v_error.snr_db)},
              {"read_digest", main.digest}};
  for (const auto& s : main.spans) out["spans"].push_back(span_json(s));
  if (!args.as_json) {
    print_memory(main.memory.total, cfg);
    std::printf("\nread(layer 0): K rel. L2 %.4f (%.2f dB), V rel. L2 %.4f (%.2f dB) against the input%s; "
                "digest of all layers' read() 0x%016" PRIx64 "\n",
                main.k_error.rel_l2, main.k_error.snr_db, main.v_error.rel_l2, main.v_error.snr_db,
                cfg.rope.mode != qvg::RopeMode::none ? " (keys rotated)" : "", main.digest);
  }
  if (args.compare_warm) {
    qvg::CacheConfig other = cfg;
    other.warm_start = !cfg.warm_start;
    const RunResult b = run(args, d, other, false, false, other.warm_start ? "warm-start run" : "cold-start run");
    out["warm_compare"] = warm_compare(main, b, cfg.warm_start);
    if (!args.as_json) print_warm(out["warm_compare"]);
  }
  if (args.compare_rope) {
    const RunResult b = run(args, d, cfg, true, false, "post-RoPE run");
    out["rope_compare"] = {{"pre_rope_k_rel_l2", main.k_error.rel_l2},
                           {"post_rope_k_rel_l2", b.k_error.rel_l2},
                           {"pre_rope_k_snr_db", nullable(main.k_error.snr_db)},
                           {"post_rope_k_snr_db", nullable(b.k_error.snr_db)}};
    if (!args.as_json)
      std::printf("\nkeys cached before RoPE (rotated on read): rel. L2 %.4f (%.2f dB); cached after RoPE: rel. L2 "
                  "%.4f (%.2f dB)\n",
                  main.k_error.rel_l2, main.k_error.snr_db, b.k_error.rel_l2, b.k_error.snr_db);
  }
  if (args.as_json) std::cout << out.dump(2) << std::endl;
}

/// --save: checked when parsed, so a path that cannot be written fails before the run
/// (it was reported only after the whole run; '' saved nothing and exited 0). What the
/// save replaces (qvg::save_target: a regular file, through links) is checked, and it
/// writes a temporary file in that file's directory, so the directory must exist and
/// be writable.
const CLI::Validator kWritableSavePath(
    [](std::string& path) -> std::string {
      if (path.empty()) return "empty path (give the file to save the cache to)";
      namespace fs = std::filesystem;
      std::error_code ec;
      if (fs::is_directory(path, ec)) return "'" + path + "' is a directory";
      std::string target;
      try {
        target = qvg::save_target(path);
      } catch (const qvg::Error& e) {
        return e.what();
      }
      std::string dir = fs::path(target).parent_path().string();
      if (dir.empty()) dir = ".";
      if (!fs::is_directory(dir, ec))
        return "cannot save to '" + path + "': " + (fs::exists(dir, ec) ? "'" + dir + "' is not a directory"
                                                                        : "directory '" + dir + "' does not exist");
      if (::access(dir.c_str(), W_OK | X_OK) != 0)
        return "cannot save to '" + path + "': directory '" + dir + "' is not writable";
      return "";
    },
    "FILE", "writable save path");

}  // namespace

void add_stream_command(CLI::App& app) {
  auto a = std::make_shared<StreamArgs>();
  StreamArgs& args = *a;
  auto* s = app.add_subcommand(
      "stream", "simulate autoregressive generation through the streaming KV cache (spans, memory, warm start)");
  add_data_options(s, args.data, {.files = true, .queries = false, .grid = true});
  s->add_option("--key", args.key, "codec of key spans (default qvg; see `qvg methods`)");
  s->add_option("--value", args.value, "codec of value spans (default qvg)");
  s->add_option("--layers", args.layers, "layers; every layer gets the same K/V")->check(CLI::Range(1, 1000));
  s->add_option("--chunk-frames", args.chunk_frames, "latent frames per chunk (default 3, as Self-Forcing)")->check(CLI::Range(1, 100000));
  s->add_option("--quant-factor", args.quant_factor, "chunks per span (default 8)")->check(CLI::Range(1, 100000));
  s->add_option("--keep-recent", args.keep_recent, "newest chunks kept in BF16")->check(CLI::Range(0, 100000));
  s->add_option("--sink", args.sink, "first chunks never quantized nor evicted")->check(CLI::Range(0, 100000));
  s->add_option("--window-chunks", args.window_chunks, "local attention window in chunks (0 = none)")->check(CLI::NonNegativeNumber);
  s->add_option("--window-tokens", args.window_tokens, "local attention window in tokens (0 = none)")->check(CLI::NonNegativeNumber);
  s->add_option("--rope", args.rope, "none, or 1d / 3d: the data are pre-RoPE keys, rotated on read")
      ->check(CLI::IsMember({"none", "1d", "3d"}));
  s->add_flag("--no-warm-start", args.no_warm, "k-means of every span starts from the codec's init (d2-rounds by default)");
  s->add_flag("--compare-warm", args.compare_warm, "also run with warm start flipped and compare k-means work and error");
  s->add_flag("--compare-rope", args.compare_rope, "also cache keys after RoPE and compare key error (needs --rope 1d|3d)");
  s->add_option("--save", args.save, "save the cache to this file at the end (see --stop-after)")->check(kWritableSavePath);
  s->add_option("--load", args.load, "resume from a cache saved by --save (same data and cache options)")
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            return path.empty() ? "empty path (give a cache saved by --save, or leave --load out)" : "";
          },
          "FILE", "non-empty load path"));
  s->add_option("--stop-after", args.stop_after, "stop after this many chunks (0 = all)")->check(CLI::NonNegativeNumber);
  s->add_option("--every", args.every, "print memory every n chunks (and at every span)")->check(CLI::Range(1, 1000000));
  s->add_option("--threads", args.threads, "worker threads (0 = all cores); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  add_codec_device_option(s, args.device);
  s->add_flag("--json", args.as_json, "print one JSON object");
  s->add_flag("--quiet", args.quiet, "no progress output");
  s->callback([a] { run_stream(*a); });
}

}  // namespace qvg_cli
