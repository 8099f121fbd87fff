// The shared data options and their loader (tools/data_options.h).
#include "data_options.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "qvg/data.h"
#include "qvg/metrics.h"

namespace qvg_cli {

namespace {

std::string with_default(const std::string& help, int value) {
  return help + " (default " + std::to_string(value) + ")";
}

/// "HxW", each side 1 .. 2^20 (positions are int32; tokens per frame H W
/// stays far from overflowing in the chunk arithmetic).
void parse_grid(const std::string& grid, int64_t* h, int64_t* w) {
  const size_t x = grid.find('x');
  if (x == std::string::npos) throw qvg::Error("--grid must be HxW, got '" + grid + "'");
  auto side = [&](const std::string& t) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (t.empty() || used != t.size() || v < 1 || v > (1 << 20))
      throw qvg::Error("--grid must be HxW with H and W in 1.." + std::to_string(1 << 20) + ", got '" + grid + "'");
    return static_cast<int64_t>(v);
  };
  *h = side(grid.substr(0, x));
  *w = side(grid.substr(x + 1));
}

/// Throws for the first of `names` given on the command line, saying why it does nothing.
void refuse_given(const CLI::App* app, std::initializer_list<const char*> names, const std::string& why) {
  if (!app) return;
  for (const char* n : names) {
    const CLI::Option* o = app->get_option_no_throw(n);  // (not every command has every option)
    if (o && o->count() > 0) throw qvg::Error(std::string(n) + " does nothing here: " + why);
  }
}

void say(const Progress& progress, const std::string& s) {
  if (progress) progress(s);
}

KvData load_files(const DataOptions& d, const Progress& progress) {
  if (d.k.empty() || d.v.empty()) throw qvg::Error("give both --k and --v (or neither, for built-in data)");
  KvData out;
  out.from_files = true;
  parse_grid(d.grid, &out.grid_h, &out.grid_w);
  out.layout = qvg::parse_layout(d.layout);
  std::optional<qvg::DType> raw16;
  if (!d.raw16.empty()) raw16 = qvg::parse_dtype(d.raw16);
  say(progress, "reading " + d.k + " and " + d.v);
  out.name = d.k;
  out.k = qvg::load_kv(d.k, out.layout, d.k_name, raw16, &out.info);
  out.ext = std::filesystem::path(d.k).extension().string();
  out.v = qvg::load_kv(d.v, out.layout, d.v_name, raw16);
  if (!d.q.empty()) out.q = qvg::load_kv(d.q, out.layout, d.q_name, raw16);
  return out;
}

}  // namespace

const CLI::Validator kSeedRange(
    [](std::string& s) -> std::string {
      const std::string max = "18446744073709551615";  // 2^64 - 1
      const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      const std::string t = digits ? s.substr(std::min(s.find_first_not_of('0'), s.size() - 1)) : s;
      if (!digits || t.size() > max.size() || (t.size() == max.size() && t > max))
        return "seed '" + s + "' is not an integer in 0.." + max;
      return "";
    },
    "0..2^64-1", "seed range");

void add_data_options(CLI::App* app, DataOptions& d, DataOptionSet set) {
  d.app = app;
  if (set.files) {
    app->add_option("--k", d.k, "keys file (.npy or .safetensors)");
    app->add_option("--v", d.v, "values file (.npy or .safetensors)");
    if (set.queries) app->add_option("--q", d.q, "queries file (optional): adds the attention-output error");
    app->add_option("--k-name", d.k_name, "tensor name inside a .safetensors keys file");
    app->add_option("--v-name", d.v_name, "tensor name inside a .safetensors values file");
    if (set.queries) app->add_option("--q-name", d.q_name, "tensor name inside a .safetensors queries file");
    app->add_option("--layout", d.layout, "file layout: htd = [heads, tokens, dim], thd = [tokens, heads, dim]")
        ->check(CLI::IsMember({"htd", "thd"}));
    app->add_option("--raw16", d.raw16, "dtype of .npy files with a 2-byte void dtype (ml_dtypes bfloat16)")
        ->check(CLI::IsMember({"f16", "bf16"}));
    if (set.grid)
      app->add_option("--grid", d.grid,
                      "files: latent frame grid HxW, default 30x52 (tokens per frame = H*W; 3-D RoPE positions)");
    app->add_option("--data", d.data, "built-in data when no file is given: video-like or clip")
        ->check(CLI::IsMember({"video-like", "clip"}));
  }
  app->add_option("--clip", d.clip, "clip for --data clip: a shipped clip name or a video path");
  app->add_option("--heads", d.heads, with_default("built-in data: heads", d.heads))->check(CLI::Range(1, 256));
  app->add_option("--frames", d.frames, with_default("built-in data: latent frames of 30 x 52 = 1,560 tokens", d.frames))
      ->check(CLI::Range(1, 100000));
  app->add_option("--frame-step", d.frame_step, with_default("--data clip: use every n-th video frame", d.frame_step))
      ->check(CLI::Range(1, 100));
  if (set.queries)
    app->add_option("--queries", d.queries, "built-in data: queries for the attention error (0 = none)")
        ->check(CLI::Range(0, 100000));
  app->add_option("--seed", d.seed, "built-in data: seed")->check(kSeedRange);
}

double builtin_kv_bytes(const DataOptions& d) {
  if (!d.k.empty() || !d.v.empty()) return 0;
  double tokens = 0, dim = 0;
  if (d.data == "clip") {
    qvg::ClipKVParams p;
    p.heads = d.heads;
    p.frames = d.frames;
    tokens = static_cast<double>(p.tokens());
    dim = p.dim;
  } else {
    qvg::VideoLikeParams p;
    p.heads = d.heads;
    p.frames = d.frames;
    tokens = static_cast<double>(p.tokens());
    dim = p.dim;
  }
  return 2.0 * d.heads * tokens * dim * 4.0;
}

void check_memory(double need, const std::string& what) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = -1;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> kib;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  if (kib < 0) return;
  const double available = kib * 1024.0;
  if (need <= available) return;
  char text[160];
  std::snprintf(text, sizeof text, "this run needs at least %.1f GB of memory, %.1f GB are available: ", need / 1e9,
                available / 1e9);
  throw qvg::Error(text + what + " (use fewer frames, heads or layers)");
}

KvData make_builtin_data(const std::string& kind, const DataOptions& d, int threads, const Progress& progress) {
  KvData out;
  if (kind == "video-like") {
    qvg::VideoLikeParams p;
    p.heads = d.heads;
    p.frames = d.frames;
    p.seed = d.seed;
    p.threads = threads;
    out.name = "video-like";
    say(progress, "generating video-like K/V [" + std::to_string(p.heads) + ", " + std::to_string(p.tokens()) + ", " +
                      std::to_string(p.dim) + "] seed " + std::to_string(p.seed));
    out.k = qvg::make_video_like(p, qvg::TensorRole::key);
    out.v = qvg::make_video_like(p, qvg::TensorRole::value);
    out.grid_h = p.height;
    out.grid_w = p.width;
  } else {
    QVG_CHECK(kind == "clip", "unknown built-in data '", kind, "' (known: video-like, clip)");
    qvg::ClipKVParams p;
    p.clip = d.clip;
    p.heads = d.heads;
    p.frames = d.frames;
    p.frame_step = d.frame_step;
    p.seed = d.seed;
    p.threads = threads;
    out.name = "clip:" + d.clip;
    say(progress, "decoding clip '" + d.clip + "' into K/V [" + std::to_string(p.heads) + ", " +
                      std::to_string(p.tokens()) + ", " + std::to_string(p.dim) + "] (frame step " +
                      std::to_string(p.frame_step) + ") seed " + std::to_string(p.seed));
    out.k = qvg::make_clip_kv(p, qvg::TensorRole::key);
    out.v = qvg::make_clip_kv(p, qvg::TensorRole::value);
    out.grid_h = p.grid_height();
    out.grid_w = p.grid_width();
  }
  if (d.queries > 0) out.q = qvg::select_tokens(out.k, d.queries);
  return out;
}

KvData load_data(const DataOptions& d, int threads, const Progress& progress) {
  if (!d.k.empty() || !d.v.empty()) {
    refuse_given(d.app, {"--heads", "--frames", "--frame-step", "--queries", "--seed", "--data", "--clip"},
                 "it sizes or picks the built-in data, and the K/V files (--k, --v) are read instead");
    return load_files(d, progress);
  }
  if (!d.q.empty()) throw qvg::Error("--q needs --k and --v");
  refuse_given(d.app, {"--layout", "--raw16", "--grid", "--k-name", "--v-name", "--q-name"},
               "it describes K/V files, and none is given (--k, --v); the built-in data need none of it");
  return make_builtin_data(d.data, d, threads, progress);
}

}  // namespace qvg_cli
