// Shared by the model tests (CPU and CUDA runtime): the shipped weights and
// golden file, golden tensors as float, the difference measures the tests
// state their bounds in, and the golden case (MODEL.md §12) through a Sampler
// on either backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "qvg/io.h"
#include "qvg/model.h"

namespace golden {

inline const std::string kModel = std::string(QVG_SOURCE_DIR) + "/models/qvg_ref_video_dit.safetensors";
inline const std::string kGolden = std::string(QVG_SOURCE_DIR) + "/models/golden/golden.safetensors";

/// A float32 tensor of the golden file, flattened.
inline std::vector<float> golden_f32(const std::string& name) {
  const qvg::RawTensor t = qvg::read_safetensors_tensor(kGolden, name);
  EXPECT_EQ(t.dtype, qvg::DType::f32) << name;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
  return v;
}

/// max |a - b|, max |a - b| / max |b|, ||a - b|| / ||b||.
struct Diff {
  double max_abs = 0, max_rel = 0, rel_l2 = 0;
};

inline Diff diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0, mb = 0;
  Diff d;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    num += e * e;
    den += static_cast<double>(b[i]) * b[i];
    d.max_abs = std::max(d.max_abs, std::abs(e));
    mb = std::max(mb, std::abs(static_cast<double>(b[i])));
  }
  d.max_rel = mb > 0 ? d.max_abs / mb : d.max_abs;
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

/// The shipped model, loaded once.
inline const qvg::Model& model() {
  static const qvg::Model m = qvg::Model::load(kModel);
  return m;
}

/// Tokens [0, n) of a HeadTensor [heads, L, dim] in the golden layout [n, heads, dim].
inline std::vector<float> first_tokens_thd(const qvg::HeadTensor& x, int64_t n) {
  std::vector<float> out;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < x.heads; ++h)
      for (int64_t d = 0; d < x.dim; ++d) out.push_back(x.at(h, t, d));
  return out;
}

/// Errors of one golden run against the golden file.
struct GoldenResult {
  double qkv_max_rel = 0, qkv_max_abs = 0, steps_max_abs = 0, steps_max_rel = 0, frames_max_abs = 0,
         frames_rel_l2 = 0;
  int u8_max_diff = 0;
  int64_t u8_differ = 0;
  std::vector<float> frames;  ///< the generated chunks' frames (both chunks when run)
};

/// The golden case through a Sampler with `sc`: 2 context chunks (their
/// per-layer Q/K/V checked when check_layers, each ≤ 1e-3 relative), chunk 0's
/// Euler steps, and with both_chunks the 6 generated frames.
inline GoldenResult run_golden(qvg::StreamingKVCache& cache, const qvg::SamplerConfig& sc, bool check_layers,
                               bool both_chunks = true) {
  const qvg::ModelConfig& c = model().config();
  GoldenResult r;
  const std::vector<float> ctx = golden_f32("context");
  const size_t fv = static_cast<size_t>(c.chunk_frames * c.frame_values());
  const size_t cv = static_cast<size_t>(c.tokens_per_chunk()) * c.patch_dim();
  qvg::Sampler s(model(), cache, sc);
  s.add_context(std::span<const float>(ctx).subspan(0, fv));
  std::vector<qvg::LayerKV> rec;
  s.add_context(std::span<const float>(ctx).subspan(fv, fv), &rec);
  if (check_layers)
    for (int li = 0; li < c.layers; ++li) {
      const std::string p = "layer" + std::to_string(li) + ".ctx1.";
      const auto& l = rec[static_cast<size_t>(li)];
      for (auto [name, x] : {std::pair{"q", &l.q}, {"k_pre", &l.k_pre}, {"k", &l.k}, {"v", &l.v}}) {
        const Diff d = diff(first_tokens_thd(*x, 128), golden_f32(p + name));
        r.qkv_max_rel = std::max(r.qkv_max_rel, d.max_rel);
        r.qkv_max_abs = std::max(r.qkv_max_abs, d.max_abs);
        EXPECT_LE(d.max_rel, 1e-3) << p << name;
      }
    }
  const std::vector<float> noise = golden_f32("noise");
  std::vector<std::vector<float>> steps;
  r.frames = s.generate(std::span<const float>(noise).subspan(0, cv), nullptr, &steps);
  const std::vector<float> gsteps = golden_f32("chunk0_steps");
  EXPECT_EQ(steps.size(), 4u);
  for (size_t k = 0; k < steps.size(); ++k) {
    const Diff d = diff(steps[k], std::span<const float>(gsteps).subspan(k * cv, cv));
    r.steps_max_abs = std::max(r.steps_max_abs, d.max_abs);
    r.steps_max_rel = std::max(r.steps_max_rel, d.max_rel);
  }
  if (!both_chunks) return r;
  const std::vector<float> gen1 = s.generate(std::span<const float>(noise).subspan(cv, cv));
  r.frames.insert(r.frames.end(), gen1.begin(), gen1.end());
  const Diff d = diff(r.frames, golden_f32("generated"));
  r.frames_max_abs = d.max_abs;
  r.frames_rel_l2 = d.rel_l2;
  const qvg::RawTensor gu8 = qvg::read_safetensors_tensor(kGolden, "generated_u8");
  const std::vector<uint8_t> u8 = qvg::model_to_pixels(r.frames);
  EXPECT_EQ(u8.size(), gu8.bytes.size());
  for (size_t i = 0; i < std::min(u8.size(), gu8.bytes.size()); ++i) {
    const int e = std::abs(int{u8[i]} - int{gu8.bytes[i]});
    r.u8_max_diff = std::max(r.u8_max_diff, e);
    r.u8_differ += e != 0;
  }
  return r;
}

/// The exact-cache golden run's figures (printed with `tag`) against the
/// bounds: Q/K/V rel ≤ 1e-3 (issue 6) and abs ≤ 1e-4, Euler steps ≤ 1e-4 abs
/// / 1e-3 rel; with frames (pre-RoPE runs) frames ≤ 1e-4 abs, uint8 ± 1.
inline void expect_golden_exact(const GoldenResult& r, const char* tag, bool pre_rope, bool frames) {
  std::printf("[%s, %s keys] Q/K/V max|err|/max|ref| %.3g (max abs %.3g); Euler steps of chunk 0 max abs %.3g "
              "(rel %.3g)",
              tag, pre_rope ? "pre-RoPE" : "post-RoPE", r.qkv_max_rel, r.qkv_max_abs, r.steps_max_abs,
              r.steps_max_rel);
  if (frames)
    std::printf("; 6 generated frames max abs %.3g, rel L2 %.3g; uint8: %lld of %d differ, max %d", r.frames_max_abs,
                r.frames_rel_l2, static_cast<long long>(r.u8_differ), 6 * 64 * 64 * 3, r.u8_max_diff);
  std::printf("\n");
  EXPECT_LE(r.qkv_max_rel, 1e-3);
  EXPECT_LE(r.qkv_max_abs, 1e-4);
  EXPECT_LE(r.steps_max_rel, 1e-3);
  EXPECT_LE(r.steps_max_abs, 1e-4);
  if (!frames) return;
  EXPECT_LE(r.frames_max_abs, 1e-4);
  EXPECT_LE(r.u8_max_diff, 1);
}

}  // namespace golden
