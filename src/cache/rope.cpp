// RoPE (include/qvg/rope.h): Wan-style 3-D and 1-D rotary embedding in float64.
#include "qvg/rope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qvg/common.h"

namespace qvg {

int rope_position_dims(RopeMode mode) {
  switch (mode) {
    case RopeMode::none:
      return 0;
    case RopeMode::rope_1d:
      return 1;
    case RopeMode::wan_3d:
      return 3;
  }
  return 0;
}

const char* rope_mode_name(RopeMode mode) {
  switch (mode) {
    case RopeMode::none:
      return "none";
    case RopeMode::rope_1d:
      return "1d";
    case RopeMode::wan_3d:
      return "3d";
  }
  return "?";
}

RopeMode parse_rope_mode(const std::string& name) {
  if (name == "none") return RopeMode::none;
  if (name == "1d") return RopeMode::rope_1d;
  if (name == "3d") return RopeMode::wan_3d;
  QVG_CHECK(false, "unknown RoPE mode '", name, "' (known: none, 1d, 3d)");
}

WanRopeSplit wan_rope_split(int64_t dim) {
  const int d = static_cast<int>(dim);
  return WanRopeSplit{d - 4 * (d / 6), 2 * (d / 6), 2 * (d / 6)};
}

void validate(const RopeConfig& c, int64_t dim) {
  if (c.mode == RopeMode::none) return;
  QVG_CHECK(dim > 0 && dim % 2 == 0, "RoPE needs an even head dim, got ", dim);
  QVG_CHECK(std::isfinite(c.theta) && c.theta > 1.0, "RoPE theta must be finite and > 1, got ", c.theta);
}

namespace {

/// One rotated pair: channels (a, b), frequency, and which position coordinate drives it.
struct Pair {
  int a, b;
  double freq;
  int coord;
};

/// The pairs of one part of `n` channels starting at channel `offset`.
void add_part(std::vector<Pair>& out, int offset, int n, int coord, const RopeConfig& c) {
  for (int j = 0; j < n / 2; ++j) {
    const double freq = 1.0 / std::pow(c.theta, static_cast<double>(2 * j) / static_cast<double>(n));
    if (c.pairing == RopePairing::interleaved)
      out.push_back({offset + 2 * j, offset + 2 * j + 1, freq, coord});
    else
      out.push_back({offset + j, offset + j + n / 2, freq, coord});
  }
}

std::vector<Pair> rope_pairs(const RopeConfig& c, int64_t dim) {
  std::vector<Pair> pairs;
  if (c.mode == RopeMode::rope_1d) {
    add_part(pairs, 0, static_cast<int>(dim), 0, c);
  } else if (c.mode == RopeMode::wan_3d) {
    const WanRopeSplit s = wan_rope_split(dim);
    add_part(pairs, 0, s.time, 0, c);
    add_part(pairs, s.time, s.height, 1, c);
    add_part(pairs, s.time + s.height, s.width, 2, c);
  }
  return pairs;
}

}  // namespace

namespace {

/// The plan's header: mode none gives an empty plan.
RopePlan plan_header(int64_t dim, const RopeConfig& c, std::vector<Pair>& pairs) {
  RopePlan plan;
  if (c.mode == RopeMode::none) return plan;
  validate(c, dim);
  plan.position_dims = rope_position_dims(c.mode);
  pairs = rope_pairs(c, dim);
  return plan;
}

/// Pair pr's channels, coordinate and table offset.
void add_pair(RopePlan& plan, const Pair& pr, size_t at) {
  plan.a.push_back(pr.a);
  plan.b.push_back(pr.b);
  plan.coord.push_back(pr.coord);
  plan.base.push_back(static_cast<int64_t>(at));
}

void add_angle(RopePlan& plan, const Pair& pr, int32_t v, double sign) {
  const double angle = static_cast<double>(v) * pr.freq;
  plan.cos.push_back(std::cos(angle));
  plan.sin.push_back(sign * std::sin(angle));
}

}  // namespace

RopePlan rope_range_plan(const int32_t lo[3], const int32_t hi[3], int64_t dim, const RopeConfig& c, bool inverse) {
  std::vector<Pair> pairs;
  RopePlan plan = plan_header(dim, c, pairs);
  for (int d = 0; d < plan.position_dims; ++d) {
    QVG_CHECK(lo[d] <= hi[d] + 1, "RoPE range: coordinate ", d, " has lo ", lo[d], " > hi ", hi[d]);
    plan.lo[d] = lo[d];
  }
  size_t at = 0;
  for (const Pair& pr : pairs) {
    add_pair(plan, pr, at);
    for (int64_t v = lo[pr.coord]; v <= hi[pr.coord]; ++v) add_angle(plan, pr, static_cast<int32_t>(v), inverse ? -1.0 : 1.0);
    at += static_cast<size_t>(std::max<int64_t>(0, static_cast<int64_t>(hi[pr.coord]) - lo[pr.coord] + 1));
  }
  return plan;
}

RopePlan rope_plan(std::span<const int32_t> positions, int64_t tokens, int64_t dim, const RopeConfig& c,
                   bool inverse) {
  std::vector<Pair> pairs;
  RopePlan plan = plan_header(dim, c, pairs);
  if (c.mode == RopeMode::none) return plan;
  const int pd = plan.position_dims;
  QVG_CHECK(positions.size() == static_cast<size_t>(tokens * pd), "RoPE (", rope_mode_name(c.mode),
            "): positions hold ", positions.size(), " values, ", tokens, " tokens need ", tokens * pd);
  // cos/sin of every (pair, coordinate value) that occurs, computed once: the
  // coordinates are small integers (frame, row, column), so a table over
  // their range replaces tokens x pairs transcendental calls. The same
  // expression either way, so the same bits.
  int32_t lo[3] = {0, 0, 0}, hi[3] = {-1, -1, -1};
  for (int d = 0; d < pd; ++d)
    for (int64_t n = 0; n < tokens; ++n) {
      const int32_t v = positions[static_cast<size_t>(n * pd + d)];
      if (n == 0 || v < lo[d]) lo[d] = v;
      if (n == 0 || v > hi[d]) hi[d] = v;
    }
  size_t table = 0;
  for (const Pair& pr : pairs)
    table += tokens > 0 ? static_cast<size_t>(static_cast<int64_t>(hi[pr.coord]) - lo[pr.coord] + 1) : 0;
  if (table <= static_cast<size_t>(tokens) * pairs.size()) return rope_range_plan(lo, hi, dim, c, inverse);
  plan.per_token = true;
  std::copy(lo, lo + 3, plan.lo);
  size_t at = 0;
  for (const Pair& pr : pairs) {
    add_pair(plan, pr, at);
    for (int64_t n = 0; n < tokens; ++n) add_angle(plan, pr, positions[static_cast<size_t>(n * pd + pr.coord)], inverse ? -1.0 : 1.0);
    at += static_cast<size_t>(tokens);
  }
  return plan;
}

void apply_rope(HeadTensor& x, std::span<const int32_t> positions, const RopeConfig& c, bool inverse) {
  if (c.mode == RopeMode::none) return;
  QVG_CHECK(x.data.size() == static_cast<size_t>(x.numel()), "RoPE: tensor data does not match its shape");
  const RopePlan plan = rope_plan(positions, x.tokens, x.dim, c, inverse);
  const int pd = plan.position_dims;
  const size_t np = plan.a.size();
  std::vector<double> cs(np), sn(np);
  for (int64_t n = 0; n < x.tokens; ++n) {
    const int32_t* p = positions.data() + n * pd;
    for (size_t i = 0; i < np; ++i) {
      const int64_t at = plan.base[i] + (plan.per_token ? n : static_cast<int64_t>(p[plan.coord[i]]) -
                                                                 plan.lo[plan.coord[i]]);
      cs[i] = plan.cos[static_cast<size_t>(at)];
      sn[i] = plan.sin[static_cast<size_t>(at)];
    }
    for (int64_t h = 0; h < x.heads; ++h) {
      float* row = x.head(h) + n * x.dim;
      for (size_t i = 0; i < np; ++i) {
        const double a = row[plan.a[i]], b = row[plan.b[i]];
        // (a + ib) * (cos + i sin)
        row[plan.a[i]] = static_cast<float>(a * cs[i] - b * sn[i]);
        row[plan.b[i]] = static_cast<float>(a * sn[i] + b * cs[i]);
      }
    }
  }
}

std::vector<int32_t> wan_grid_positions(int64_t first_frame, int64_t frames, int64_t height, int64_t width) {
  QVG_CHECK(frames >= 0 && height > 0 && width > 0, "wan_grid_positions: bad grid ", frames, " x ", height,
            " x ", width);
  std::vector<int32_t> pos;
  pos.reserve(static_cast<size_t>(frames * height * width * 3));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t xx = 0; xx < width; ++xx) {
        pos.push_back(static_cast<int32_t>(first_frame + f));
        pos.push_back(static_cast<int32_t>(y));
        pos.push_back(static_cast<int32_t>(xx));
      }
  return pos;
}

std::vector<int32_t> positions_1d(int64_t first, int64_t count) {
  QVG_CHECK(count >= 0, "positions_1d: negative count ", count);
  std::vector<int32_t> pos(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
  return pos;
}

}  // namespace qvg
