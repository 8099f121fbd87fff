// Built-in K/V data for tests, benchmarks and the demo:
//  (1) make_video_like: a seeded parametric generator of video-like keys and
//      values (tokens on a frames x height x width grid, spatially and
//      temporally correlated, clustered into moving objects, with a few
//      large-magnitude outlier channels in the keys);
//  (2) make_clip_kv: keys and values derived from the real clips shipped in
//      data/clips (8x8 RGB patches through a fixed seeded random projection).
// Both return float32 [heads, tokens, dim] with tokens in frame-major order,
// then row, then column: token n = (f * grid_height + y) * grid_width + x.
// Both are deterministic for a seed: they use std::mt19937_64 (fully specified
// by the standard) with this library's own uniform/normal transforms, fixed
// summation orders and no FP contraction, and do not depend on the thread
// count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qvg/config.h"
#include "qvg/tensor.h"

namespace qvg {

/// Parameters of make_video_like. The defaults give one Self-Forcing 480p span
/// of one layer: 24 latent frames x 30 x 52 = 37,440 tokens, 12 heads, dim 128.
/// The noise defaults are calibrated so that k-means smoothing helps about as
/// much as the paper reports on real models: QVG INT2 (C = 256, B = 64) has
/// ~7.6x lower key MSE and ~2.7x lower value MSE than RTN INT2 at B = 64 (heads 0-1)
/// (paper: 6.9x and 2.6x); less noise makes the data easier to compress.
struct VideoLikeParams {
  int frames = 24;     ///< latent frames
  int height = 30;     ///< grid rows per frame
  int width = 52;      ///< grid columns per frame (30 x 52 = 1,560 tokens per frame)
  int heads = 12;      ///< attention heads (each head sees its own projection)
  int dim = 128;       ///< head_dim D
  int clusters = 24;   ///< semantic objects (regions of the grid; the first
                       ///< clusters/4 are static background regions)
  int latent_dim = 32; ///< size of the shared scene features projected to D per head
  double motion = 0.4;     ///< mean object speed, grid cells per frame
  double texture = 0.6;    ///< smooth within-object texture, relative to the
                           ///< spread of object prototypes (1)
  double position = 0.4;   ///< smooth global positional field (slowly drifting)
  double key_noise = 0.3;    ///< i.i.d. token noise of keys (relative to 1)
  double value_noise = 0.9;  ///< i.i.d. token noise of values (values are less structured)
  double rms = 1.0;        ///< RMS of each head before the channel structure
  int outlier_channels = 4;        ///< per head, keys: channels with large magnitude
  double key_outlier_gain = 10.0;  ///< outlier channels: gain and offset up to this
  double key_channel_offset = 0.5; ///< keys: std of a per-channel offset (all channels)
  double value_outlier_gain = 1.0; ///< values: outlier gain (1 = no outliers)
  double value_channel_offset = 0.1;  ///< values: std of a per-channel offset
  uint64_t seed = 1234;    ///< one seed for the scene, projections, noise
  int threads = 0;         ///< threads over heads; 0 = all cores (same bytes for any)

  int64_t tokens() const { return int64_t{frames} * height * width; }
};

/// Video-like keys (role = key) or values (role = value), [heads, tokens(), dim].
/// Keys and values of one seed describe the same scene (the same objects and
/// motion) through different projections, noise and channel structure.
/// Throws qvg::Error for non-positive sizes or negative magnitudes.
HeadTensor make_video_like(const VideoLikeParams& p, TensorRole role);

/// The object (cluster) id of every token, size p.tokens(), values in
/// [0, p.clusters): the segmentation make_video_like used. For tests and analysis.
std::vector<int> video_like_labels(const VideoLikeParams& p);

/// Parameters of make_clip_kv. The defaults give 24 frames x 1,560 patches =
/// 37,440 tokens, 12 heads, dim 128 from data/clips/cockatoo.mp4. The noise
/// defaults are calibrated like VideoLikeParams' (QVG vs RTN INT2 MSE: keys
/// ~6.9x, values ~2.75x lower on cockatoo, heads 0-3); without noise, projected pixel
/// patches are far more compressible than real model features.
struct ClipKVParams {
  std::string clip = "cockatoo";  ///< a shipped clip's name (builtin_clips()) or a path
  int frames = 24;       ///< frames used (tokens = frames * (height/patch) * (width/patch))
  int first_frame = 0;   ///< index of the first decoded frame used
  int frame_step = 4;    ///< use every frame_step-th frame (4 mimics the 4x temporal
                         ///< compression of a video VAE's latent frames)
  int width = 416;       ///< frames are scaled to width x height
  int height = 240;
  int patch = 8;         ///< square patches of patch x patch RGB pixels (8 -> 192 values)
  int heads = 12;
  int dim = 128;
  double key_noise = 0.35;   ///< i.i.d. token noise added to keys after the projection,
                             ///< relative to its RMS (the high-rank part of real features)
  double value_noise = 0.65; ///< the same for values
  double rms = 1.0;      ///< RMS of each head before the channel structure
  int outlier_channels = 4;
  double key_outlier_gain = 10.0;
  double key_channel_offset = 0.5;
  double value_outlier_gain = 1.0;
  double value_channel_offset = 0.1;
  uint64_t seed = 1234;  ///< projection, noise and channel-structure seed
  int threads = 0;

  int grid_width() const { return patch > 0 ? width / patch : 0; }
  int grid_height() const { return patch > 0 ? height / patch : 0; }
  int64_t tokens() const { return int64_t{frames} * grid_width() * grid_height(); }
};

/// Keys or values from a real clip, [heads, p.tokens(), dim]. Each patch
/// (pixel values / 255 minus the clip's mean per RGB channel, order dy, dx,
/// R/G/B; its deviation from its own mean colour scaled by one factor per
/// clip so that colour and texture carry equal energy) goes through a seeded
/// Gaussian projection to dim per head and role;
/// then each head is scaled to RMS p.rms and given the channel structure
/// (keys: per-channel offsets and outlier channels). Throws qvg::Error when
/// the clip is missing, corrupt, too short, or the sizes are invalid, and in
/// builds without FFmpeg.
HeadTensor make_clip_kv(const ClipKVParams& p, TensorRole role);

/// Names of the clips shipped in data/clips: box, cityCC0, cockatoo, cup, vtest.
std::vector<std::string> builtin_clips();

/// The data directory: the environment variable QVG_DATA_DIR when set, else
/// data/ of the first of resource_roots() that has data/clips.
std::string data_dir();

/// Where the shipped resources (data/clips, models/) are looked for, in
/// order: <prefix>/share/qvg of an installed qvg (<prefix>: the parent of
/// the running executable's directory), then the source tree recorded at
/// build time (an uninstalled build).
std::vector<std::string> resource_roots();

/// root/relative for the first of resource_roots() where it exists
/// ("models/qvg_ref_video_dit.safetensors"); when none has it, the last
/// candidate (the source tree's), so that an error names a path. 
std::string resource_path(const std::string& relative);

/// "looked in A, B": the candidates of resource_path(relative), for messages.
std::string resource_search(const std::string& relative);

/// Path of a shipped clip by name ("cockatoo" -> <data_dir()>/clips/cockatoo.mp4).
/// Throws qvg::Error for an unknown name (the message lists the known ones).
std::string builtin_clip_path(const std::string& name);

/// A clip name or a path: builtin_clip_path(name_or_path) for a shipped
/// clip's name, else name_or_path unchanged.
std::string resolve_clip(const std::string& name_or_path);

}  // namespace qvg
