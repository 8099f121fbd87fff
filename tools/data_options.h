// The data options of `qvg eval`, `qvg codec-demo` and `qvg stream`, defined
// once: K/V files, or built-in data (video-like or a clip's K/V) made on the
// fly, with one set of ranges; and the loader they share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "qvg/io.h"
#include "qvg/tensor.h"

namespace qvg_cli {

/// The values of the data options. A command sets its own defaults on the
/// struct before add_data_options (which names them in the help).
struct DataOptions {
  // K/V files (when none is given: built-in data)
  std::string k, v, q;                 ///< keys, values, queries (optional) files: .npy or .safetensors
  std::string k_name, v_name, q_name;  ///< tensor names inside .safetensors files
  std::string layout = "htd";          ///< htd = [heads, tokens, dim], thd = [tokens, heads, dim]
  std::string raw16;                   ///< dtype of 2-byte void .npy data: f16 or bf16 ("" = none)
  std::string grid = "30x52";          ///< files: the latent frame grid HxW, each side 1..2^20
  // built-in data
  std::string data = "video-like";  ///< video-like or clip
  std::string clip = "cockatoo";    ///< --data clip: a shipped clip's name or a video path
  int heads = 12;                   ///< 1..256
  int frames = 24;                  ///< latent frames of 30 x 52 = 1,560 tokens, 1..100000
  int frame_step = 4;               ///< --data clip: every n-th video frame, 1..100
  int queries = 256;                ///< queries for the attention error, 0..100000 (0 = none)
  uint64_t seed = 1234;
  /// The command the options were added to (add_data_options): load_data refuses
  /// options given that the chosen data ignore.
  const CLI::App* app = nullptr;
};

/// --seed: decimal digits only, 0 .. 2^64 - 1 ("-1" wrapped to 2^64 - 1 and larger
/// numbers saturated to it, so different seeds gave the same data).
extern const CLI::Validator kSeedRange;

/// Which data options a command offers.
struct DataOptionSet {
  /// --k, --v, --k-name, --v-name, --layout, --raw16 and --data (which
  /// built-in data set when no file is given). Without them the command
  /// runs on built-in data it picks itself (codec-demo: both sets).
  bool files = true;
  /// --queries (built-in data), and with files --q, --q-name.
  bool queries = false;
  /// --grid (files: the frame grid that gives tokens their positions).
  bool grid = false;
};

/// Adds the options of `set` to `app`, writing into `d` (which must outlive
/// the parse). Ranges: --heads 1..256, --frames 1..100000, --frame-step
/// 1..100, --queries 0..100000.
void add_data_options(CLI::App* app, DataOptions& d, DataOptionSet set);

/// K/V (and optional Q) as loaded or made.
struct KvData {
  std::string name;                  ///< the keys file, "video-like" or "clip:NAME"
  qvg::HeadTensor k, v;              ///< [heads, tokens, dim]
  std::optional<qvg::HeadTensor> q;  ///< [q_heads, queries, dim]
  int64_t grid_h = 30, grid_w = 52;  ///< the frame grid: tokens per frame = grid_h * grid_w
  bool from_files = false;
  qvg::KvFileInfo info;              ///< files: how the keys were stored (built-in: f32)
  qvg::KvLayout layout = qvg::KvLayout::htd;  ///< files: their layout
  std::string ext = ".npy";          ///< files: the keys file's extension

  int64_t tokens_per_frame() const { return grid_h * grid_w; }
};

/// Progress lines (may be empty).
using Progress = std::function<void(const std::string&)>;

/// The data `d` chooses: the files when --k / --v are given (both, else
/// qvg::Error; --q only with them), else the built-in set d.data. threads:
/// of the generators (0 = all cores; the data do not depend on it). Options
/// that the chosen data ignore are refused, saying why: --heads, --frames,
/// --frame-step, --queries, --seed, --data, --clip beside files; --layout,
/// --raw16, --grid, --k-name, --v-name, --q-name without them.
KvData load_data(const DataOptions& d, int threads, const Progress& progress);

/// Bytes of the built-in K and V (float32, together) that d asks for; 0 when
/// K/V files are given (their size is known once they are read).
double builtin_kv_bytes(const DataOptions& d);

/// Refuses a run before it allocates: throws qvg::Error naming `need` bytes (and
/// `what` they hold) when they exceed the memory available now (MemAvailable of
/// /proc/meminfo); nothing where that cannot be read. `need` is a lower bound,
/// so a run that fits is never refused (it was std::bad_alloc, or the OOM killer,
/// after minutes).
void check_memory(double need, const std::string& what);

/// The built-in data set `kind` ("video-like" or "clip") with d's sizes and
/// seed; with d.queries > 0, that many of the keys' tokens, spread over the
/// span, as queries (self-attention of cached tokens: the generators have
/// no query projection).
KvData make_builtin_data(const std::string& kind, const DataOptions& d, int threads, const Progress& progress);

}  // namespace qvg_cli
