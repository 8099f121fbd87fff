// Inputs of the GPU benchmarks: seeded random-normal tensors and BF16 bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "qvg/half.h"
#include "qvg/tensor.h"

namespace qvg::bench {

inline std::vector<uint16_t> to_bf16(const HeadTensor& x) {
  std::vector<uint16_t> b(x.data.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_from_float(x.data[i]);
  return b;
}

inline HeadTensor random_normal(int h, int64_t n, int d, uint64_t seed) {
  HeadTensor x(h, n, d);
  uint64_t s = seed;
  for (auto& v : x.data) {  // Box-Muller on a 64-bit LCG: fast, seeded
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = ((s >> 11) + 1) * 0x1.0p-53;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = (s >> 11) * 0x1.0p-53;
    v = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return x;
}

}  // namespace qvg::bench
