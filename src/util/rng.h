// A small seeded generator whose output is fixed by this file alone (unlike
// std::*_distribution, which differs between standard libraries).
#pragma once

#include <cmath>
#include <cstdint>

#include "qvg/common.h"

namespace qvg {

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, full period.
class SplitMix64 {
 public:
  /// The state's step per draw (the golden ratio in 64-bit fixed point).
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  QVG_HD explicit SplitMix64(uint64_t seed) : state_(seed) {}
  QVG_HD uint64_t next() {
    uint64_t z = (state_ += kGamma);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Skip k draws: the state after them is the state plus k * kGamma, so
  /// SplitMix64(seed).discard(i) makes draw i of SplitMix64(seed) first.
  QVG_HD void discard(uint64_t k) { state_ += k * kGamma; }
  /// Uniform in [0, 1) with 53 random bits.
  QVG_HD double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n), n > 0 (multiply-shift; bias below 2^-11 for n < 2^53).
  QVG_HD uint64_t below(uint64_t n) {
    const uint64_t v = static_cast<uint64_t>(uniform() * static_cast<double>(n));
    return v < n ? v : n - 1;  // the product can round up to n
  }
  /// Standard normal (Box-Muller, one value per call).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace qvg
