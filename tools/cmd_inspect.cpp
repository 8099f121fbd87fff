// `qvg inspect FILE`: what a file the project reads or writes holds, without
// changing it.
//   - a streaming cache saved by `qvg stream --save` (StreamingKVCache::save):
//     loaded, which validates everything (checksums, sizes, the config,
//     every span by decoding it), then its config and each layer's exact
//     memory;
//   - a K/V tensor file (.npy, .safetensors, as `qvg eval` and `qvg dump-kv`
//     read and write them): each tensor's dtype, shape and value statistics.
// Thin: the library does the reading and the checks; this formats.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "qvg/cache.h"
#include "qvg/half.h"
#include "qvg/io.h"
#include "qvg/rope.h"

namespace qvg_cli {
namespace {

using nlohmann::json;

struct InspectArgs {
  std::string path;
  std::string raw16;  // dtype of 2-byte void / integer .npy data: f16 or bf16
  bool as_json = false;
  bool quiet = false;
};
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Element i of t as a double (every dtype qvg/io.h reads).
double element(const qvg::RawTensor& t, int64_t i) {
  const uint8_t* p = t.bytes.data() + static_cast<size_t>(i) * qvg::dtype_size(t.dtype);
  auto le = [&](int n) {
    uint64_t u = 0;
    for (int b = 0; b < n; ++b) u |= static_cast<uint64_t>(p[b]) << (8 * b);
    return u;
  };
  switch (t.dtype) {
    case qvg::DType::f32:
      return qvg::bits_float(static_cast<uint32_t>(le(4)));
    case qvg::DType::f16:
      return qvg::fp16_to_float(static_cast<uint16_t>(le(2)));
    case qvg::DType::bf16:
      return qvg::bf16_to_float(static_cast<uint16_t>(le(2)));
    case qvg::DType::u8:
      return p[0];
    case qvg::DType::i32:
      return static_cast<int32_t>(static_cast<uint32_t>(le(4)));
    case qvg::DType::i64:
      return static_cast<double>(static_cast<int64_t>(le(8)));
  }
  return 0;
}

/// One tensor's row: dtype, shape, and min / max / mean / rms over its
/// finite values, with the count of the others.
json tensor_row(const std::string& name, const qvg::RawTensor& t) {
  t.check(name);
  const int64_t n = t.numel();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sq = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = element(t, i);
    if (!std::isfinite(v)) continue;
    ++finite;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sq += v * v;
  }
  json r = {{"name", name},  {"dtype", qvg::dtype_name(t.dtype)}, {"shape", t.shape},
            {"elements", n}, {"bytes", t.bytes.size()},           {"non_finite", n - finite}};
  if (finite > 0) {
    r["min"] = lo;
    r["max"] = hi;
    r["mean"] = sum / static_cast<double>(finite);
    r["rms"] = std::sqrt(sq / static_cast<double>(finite));
  }
  return r;
}

void inspect_tensors(const InspectArgs& args, const std::string& kind, const qvg::NamedTensors& tensors) {
  json rows = json::array();
  for (const auto& [name, t] : tensors) rows.push_back(tensor_row(name, t));
  if (args.as_json) {
    std::printf("%s\n", json{{"file", args.path}, {"kind", kind}, {"tensors", rows}}.dump().c_str());
    return;
  }
  std::printf("%s: %s, %zu tensor%s\n\n", args.path.c_str(), kind.c_str(), rows.size(), rows.size() == 1 ? "" : "s");
  std::printf("%-24s %-5s %-20s %12s %12s %12s %12s %10s\n", "name", "dtype", "shape", "min", "max", "mean", "rms",
              "non-finite");
  for (const json& r : rows) {
    const bool any = r.contains("min");
    auto num = [&](const char* key) { return any ? r[key].get<double>() : std::nan(""); };
    std::printf("%-24s %-5s %-20s %12.5g %12.5g %12.5g %12.5g %10" PRId64 "\n", r["name"].get<std::string>().c_str(),
                r["dtype"].get<std::string>().c_str(),
                qvg::shape_string(r["shape"].get<std::vector<int64_t>>()).c_str(), num("min"), num("max"), num("mean"),
                num("rms"), r["non_finite"].get<int64_t>());
  }
}

json codec_json(const qvg::CodecConfig& c) {
  return {{"spec", qvg::codec_spec(c)}, {"method", qvg::method_name(c.method)}, {"describe", qvg::describe(c)}};
}

json memory_json(const qvg::LayerMemory& m, int heads, int dim) {
  return {{"tokens_live", m.tokens_live},
          {"tokens_held", m.tokens_held},
          {"tokens_encoded", m.tokens_encoded},
          {"spans", m.spans},
          {"k_bytes", m.k.total()},
          {"v_bytes", m.v.total()},
          {"tail_bytes", m.k.tail + m.v.tail},
          {"positions_bytes", m.positions},
          {"warm_start_bytes", m.warm_start},
          {"total_bytes", m.total()},
          {"bf16_bytes", m.bf16_bytes},
          {"ratio", m.ratio()},
          {"bits_per_value", m.bits_per_value(heads, dim)}};
}

void inspect_cache(const InspectArgs& args) {
  qvg::check_regular_file(args.path);  // (a FIFO would block the fopen below)
  {  // Not a cache at all: say what inspect reads (load would report a bad magic or a short file).
    std::FILE* f = std::fopen(args.path.c_str(), "rb");
    char magic[8] = {};
    const size_t got = f ? std::fread(magic, 1, sizeof magic, f) : 0;
    if (f) std::fclose(f);
    if (f && (got < sizeof magic || std::string(magic, sizeof magic) != "QVGCACHE"))
      throw qvg::Error(args.path +
                       ": not a qvg streaming cache (no \"QVGCACHE\" magic); qvg inspect reads caches saved by "
                       "`qvg stream --save` and K/V files named *.npy or *.safetensors");
  }
  if (!args.quiet)
    std::fprintf(stderr, "inspect: loading %s (checks every checksum and stored value, and decodes every span)\n", args.path.c_str());
  const qvg::StreamingKVCache cache = qvg::StreamingKVCache::load(args.path);
  const qvg::CacheConfig& c = cache.config();
  const qvg::MemoryStats mem = cache.memory();
  json layers = json::array();
  for (int l = 0; l < c.layers; ++l) {
    json row = memory_json(mem.layers[static_cast<size_t>(l)], c.heads, c.dim);
    row["layer"] = l;
    row["chunks_appended"] = cache.chunks_appended(l);
    row["spans_encoded"] = cache.spans_encoded(l);
    layers.push_back(row);
  }
  const json cfg = {{"layers", c.layers},
                    {"heads", c.heads},
                    {"dim", c.dim},
                    {"key", codec_json(c.key)},
                    {"value", codec_json(c.value)},
                    {"chunk_tokens", c.chunk_tokens},
                    {"quant_factor", c.policy.quant_factor},
                    {"keep_recent", c.policy.keep_recent},
                    {"sink", c.policy.sink},
                    {"window_chunks", c.policy.window_chunks},
                    {"window_tokens", c.policy.window_tokens},
                    {"rope", qvg::rope_mode_name(c.rope.mode)},
                    {"rope_theta", c.rope.theta},
                    {"tail", qvg::tail_format_name(c.tail)},
                    {"warm_start", c.warm_start}};
  if (args.as_json) {
    std::printf("%s\n", json{{"file", args.path},
                             {"kind", "qvg streaming cache"},
                             {"config", cfg},
                             {"layers", layers},
                             {"total", memory_json(mem.total, c.heads, c.dim)}}
                            .dump()
                            .c_str());
    return;
  }
  std::printf("%s: qvg streaming cache (valid: checksums, sizes, config, stored values, every span decoded)\n\n", args.path.c_str());
  std::printf("  layers %d, heads %d, dim %d, chunk tokens %" PRId64 "%s\n", c.layers, c.heads, c.dim, c.chunk_tokens,
              c.chunk_tokens == 0 ? " (any)" : "");
  std::printf("  keys    %s (%s)\n", qvg::codec_spec(c.key).c_str(), qvg::describe(c.key).c_str());
  std::printf("  values  %s (%s)\n", qvg::codec_spec(c.value).c_str(), qvg::describe(c.value).c_str());
  std::printf(
      "  spans of %d chunks; keep recent %d, sink %d, window %" PRId64 " chunks / %" PRId64 " tokens (0: none)\n",
      c.policy.quant_factor, c.policy.keep_recent, c.policy.sink, c.policy.window_chunks, c.policy.window_tokens);
  std::printf("  RoPE on read: %s; full-precision chunks in %s; warm start %s\n\n", qvg::rope_mode_name(c.rope.mode),
              qvg::tail_format_name(c.tail), c.warm_start ? "on" : "off");
  std::printf("%6s %7s %8s %8s %6s %12s %12s %12s %10s %7s\n", "layer", "chunks", "live", "held", "spans", "K bytes",
              "V bytes", "total bytes", "bits/value", "ratio");
  auto line = [&](const std::string& name, const qvg::LayerMemory& m, int64_t chunks) {
    std::printf("%6s %7" PRId64 " %8" PRId64 " %8" PRId64 " %6" PRId64 " %12zu %12zu %12zu %10.3f %6.2fx\n",
                name.c_str(), chunks, m.tokens_live, m.tokens_held, m.spans, m.k.total(), m.v.total(), m.total(),
                m.bits_per_value(c.heads, c.dim), m.ratio());
  };
  int64_t chunks = 0;
  for (int l = 0; l < c.layers; ++l) {
    line(std::to_string(l), mem.layers[static_cast<size_t>(l)], cache.chunks_appended(l));
    chunks += cache.chunks_appended(l);
  }
  line("all", mem.total, chunks);
  std::printf(
      "\n  total = K + V + %zu bytes of token positions + %zu of warm-start centroids; bits/value counts K and V"
      " over the held tokens, ratio is a BF16 cache of the live tokens over K + V\n",
      mem.total.positions, mem.total.warm_start);
}

void run_inspect(const InspectArgs& args) {
  if (ends_with(args.path, ".npy")) {
    std::optional<qvg::DType> raw16;
    if (!args.raw16.empty()) raw16 = qvg::parse_dtype(args.raw16);
    inspect_tensors(args, "npy", {{"(array)", qvg::read_npy(args.path, raw16)}});
  } else if (ends_with(args.path, ".safetensors")) {
    inspect_tensors(args, "safetensors", qvg::read_safetensors(args.path));
  } else {
    inspect_cache(args);
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  InspectArgs& args = *a;
  auto* s =
      app.add_subcommand("inspect",
                         "what a file holds: a cache saved by `qvg stream --save` (validated, its config and "
                         "memory per layer) or a K/V .npy / .safetensors file (dtypes, shapes, value statistics)");
  s->add_option("file", args.path, "the file")->required();
  s->add_option("--raw16", args.raw16, "dtype of .npy files with a 2-byte void dtype (ml_dtypes bfloat16)")
      ->check(CLI::IsMember({"f16", "bf16"}));
  s->add_flag("--json", args.as_json, "print one JSON object");
  s->add_flag("--quiet", args.quiet, "no progress output");
  s->callback([a] { run_inspect(*a); });
}

}  // namespace qvg_cli
