// Shared by the model tests (CPU and CUDA runtime): the shipped weights and
// golden file, golden tensors as float, and the difference measures the
// tests state their bounds in.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "qvg/io.h"

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

}  // namespace golden
