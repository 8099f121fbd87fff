// Rotary position embedding (RoPE) as video diffusion transformers apply it to
// keys and queries: Wan-style 3-D RoPE (head_dim split into time / height /
// width parts, positions (t, y, x) per token) and plain 1-D RoPE.
//
// Wan 2.1 (github.com/Wan-Video/Wan2.1, wan/modules/model.py; Self-Forcing's
// causal_model.py uses the same tables with a start_frame offset):
//   d = head_dim; freqs = cat(rope_params(1024, d - 4 * (d // 6)),
//                             rope_params(1024, 2 * (d // 6)),
//                             rope_params(1024, 2 * (d // 6)))
//   rope_params(n, dim, theta = 10000): angle(p, j) = p / theta^(2j / dim),
//   j = 0 .. dim/2 - 1, computed in float64;
//   rope_apply: view_as_complex(x.reshape(..., -1, 2)) -- channels (2i, 2i+1)
//   form pair i (interleaved) -- times the complex exponentials, in float64,
//   split [c - 2 (c // 3), c // 3, c // 3] pairs with c = d / 2.
// For D = 128: 44 time channels (22 pairs), 42 height (21), 42 width (21).
// Each part uses its own frequency ladder (normalized by the part's size).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qvg/tensor.h"

namespace qvg {

enum class RopeMode {
  none,     ///< no rotation (keys are cached as given)
  rope_1d,  ///< one position per token; every pair uses theta^(-2j/D)
  wan_3d,   ///< Wan 3-D: positions (t, y, x) per token; time / height / width parts
};

/// Which channels form a rotated pair.
enum class RopePairing {
  interleaved,  ///< pair i = channels (2i, 2i+1): Wan, GPT-J, Meta LLaMA (complex view)
  half,         ///< pair i = channels (i, i + n/2) of each part: GPT-NeoX / HF "rotate_half"
};

/// RoPE settings. Defaults: Wan's (3-D, theta 10000, interleaved pairs).
struct RopeConfig {
  RopeMode mode = RopeMode::wan_3d;
  double theta = 10000.0;  ///< base of the frequency ladder, > 1
  RopePairing pairing = RopePairing::interleaved;
};

/// Integers per token in a positions array: 3 (wan_3d), 1 (rope_1d), 0 (none).
int rope_position_dims(RopeMode mode);

/// "none", "1d", "3d"; parse_rope_mode accepts these (throws qvg::Error otherwise).
const char* rope_mode_name(RopeMode mode);
RopeMode parse_rope_mode(const std::string& name);

/// Channels of the time, height and width parts of Wan's 3-D RoPE for a head
/// dim: {d - 4 (d / 6), 2 (d / 6), 2 (d / 6)} (integer division); D = 128 ->
/// {44, 42, 42}, D = 64 -> {24, 20, 20}.
struct WanRopeSplit {
  int time = 0, height = 0, width = 0;
};
WanRopeSplit wan_rope_split(int64_t dim);

/// Throws qvg::Error unless the config is usable for dim (dim even and > 0,
/// theta finite and > 1).
void validate(const RopeConfig& c, int64_t dim);

/// Rotates every token of x in place: x[h][n] <- R(pos[n]) x[h][n].
/// @param x          [heads, tokens, dim], float32
/// @param positions  tokens * rope_position_dims(c.mode) int32 values, token-major:
///                   (t, y, x) for wan_3d, (p) for rope_1d; any sign
/// @param inverse    rotate by the opposite angles (undoes a forward rotation)
/// Angles p * theta^(-2j/n) and the rotation are computed in float64 (as Wan
/// does), the result rounded to float32. mode none leaves x unchanged.
/// Throws qvg::Error on a wrong positions size or an invalid config.
void apply_rope(HeadTensor& x, std::span<const int32_t> positions, const RopeConfig& c,
                bool inverse = false);

/// The rotation apply_rope performs, as data, so that another implementation
/// (the GPU read of the streaming cache) rotates with the same bits: pair i
/// turns channels (a[i], b[i]) of token n by the angle whose cos / sin
/// (float64, sin already negated for an inverse) sit at
///   base[i] + n                                   when per_token,
///   base[i] + positions[n * pd + coord[i]] - lo[coord[i]]   otherwise
/// (cos/sin tabulated over each coordinate's range when that is smaller than
/// tokens x pairs). Rotation: a' = float(a cos - b sin), b' = float(a sin + b
/// cos), every product and sum rounded to float64.
struct RopePlan {
  std::vector<int32_t> a, b, coord;
  std::vector<int64_t> base;
  std::vector<double> cos, sin;
  int32_t lo[3] = {0, 0, 0};
  bool per_token = false;
  int position_dims = 0;
};

/// The plan of apply_rope(x, positions, c, inverse) for `tokens` tokens of
/// head dim `dim`. Throws as apply_rope does.
RopePlan rope_plan(std::span<const int32_t> positions, int64_t tokens, int64_t dim, const RopeConfig& c,
                   bool inverse = false);

/// The plan of apply_rope for any positions whose coordinate d lies in
/// [lo[d], hi[d]] (d < rope_position_dims): cos/sin tabulated over those
/// ranges (per_token false), the same bits as rope_plan's. Lets a cache keep
/// one table while its tokens change. Throws qvg::Error when lo[d] > hi[d] + 1.
RopePlan rope_range_plan(const int32_t lo[3], const int32_t hi[3], int64_t dim, const RopeConfig& c,
                         bool inverse = false);

/// Wan positions (t, y, x) of `frames` latent frames of a height x width grid
/// starting at frame first_frame, in the built-in data's token order (frame,
/// then row, then column): size frames * height * width * 3.
std::vector<int32_t> wan_grid_positions(int64_t first_frame, int64_t frames, int64_t height,
                                        int64_t width);

/// 1-D positions first, first + 1, ..., first + count - 1.
std::vector<int32_t> positions_1d(int64_t first, int64_t count);

}  // namespace qvg
