// The options of a run of the reference video model over a clip, shared by
// `qvg generate`, `qvg dump-kv`, `qvg compare` and `qvg demo`, and what they
// become in the library: the sampler's and the cache's configs, and the
// context frames read from the clip.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "qvg/cache.h"
#include "qvg/data.h"
#include "qvg/model.h"
#include "qvg/video.h"

namespace qvg_cli {

/// The shipped weights, relative to a resource root (qvg::resource_roots).
inline constexpr const char* kModelFile = "models/qvg_ref_video_dit.safetensors";

/// The model of a run: its weights, or an error saying where the shipped
/// weights were looked for when they are missing.
qvg::Model load_model(const std::string& path);

/// A model run's options. Each command registers those it offers, with its
/// own help text; the others keep these defaults.
struct ModelRunArgs {
  std::string model = qvg::resource_path(kModelFile);  ///< weights (installed, else the source tree's)
  std::string context;     ///< the clip whose frames are the context
  int frames = 9;          ///< frames to generate (rounded up to whole chunks)
  int context_frames = 6;  ///< context frames, a multiple of the model's chunk frames
  int start = 0;           ///< first context frame in the clip
  int steps = 4;           ///< Euler steps per chunk
  int threads = 0;         ///< network passes and cache encode/decode (0 = all cores)
  int quant_factor = 4;    ///< chunks per encoded span
  int keep_recent = 0;     ///< newest chunks kept in BF16
  int sink = 0;            ///< first chunks never encoded nor evicted
  int64_t window = 0;      ///< attend to the newest N non-sink chunks only (0 = all)
  bool post_rope = false;  ///< cache keys after RoPE (else before, RoPE on read)
  uint64_t seed = 2026;    ///< noise seed (the same noise for every cache)
  std::string device = "cpu";    ///< where the network and the cache's codecs run: cpu or cuda
  std::string gpu_math = "fp32";  ///< GPU matmuls: fp32, tf32 or bf16
};

/// --device and --gpu-math.
void add_device_options(CLI::App* s, ModelRunArgs& a);

/// The sampler's config: steps, threads, and where the network runs.
qvg::SamplerConfig sampler_config(const ModelRunArgs& a);
/// The cache's options: threads, and where its codecs run (on cuda the
/// context is read on the device).
qvg::CacheOptions cache_options(const ModelRunArgs& a);
/// The cache's span policy: quant_factor, keep_recent, sink, window.
qvg::SpanPolicy span_policy(const ModelRunArgs& a);

/// Frames [start, start + context_frames) of a.context as the model sees
/// them, exactly as train/prepare_data.py prepares them (ffmpeg's
/// crop=416:234, scale=128:72:flags=area, rgb24; other clip sizes: the 16:9
/// center crop of the full width), then the evaluation's center crop, rows
/// 4..67, columns 32..95 (docs/MODEL.md §10): 8-bit RGB [n, 64, 64, 3].
/// *fps receives the clip's frame rate.
qvg::Video load_context(const ModelRunArgs& a, const qvg::ModelConfig& c, double* fps);

}  // namespace qvg_cli
