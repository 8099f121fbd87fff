// Internal: matrix products whose float rounding does not depend on the CPU.
//
// Eigen's matrix product cuts the depth (the summed dimension) into panels
// sized from the L1 data cache it queries at run time (kc: 288 for float on
// AVX2 with a 32 KiB L1, 432 with 48 KiB), and each panel's sum is added to
// the result on its own: the same program on two x86-64 CPUs rounds products
// deeper than ~288 differently (the reference model's MLP, depth 1,024, and
// its attention over the history, depth = tokens). fixed_product cuts the
// depth itself into panels of kFixedDepth, each at most the panel Eigen keeps
// whole on any L1 of 32 KiB or more, so the sums are the same everywhere.
#pragma once

#include <Eigen/Core>
#include <algorithm>

namespace qvg {

/// The depth of one panel of fixed_product: a multiple of 8 (Eigen's depth
/// unrolling) not above Eigen's single-panel depth for float with AVX2 (or
/// narrower vectors) on an L1 of 32 KiB.
inline constexpr Eigen::Index kFixedDepth = 256;

/// out = a * b, summed over the depth in panels of kFixedDepth, first to last:
/// out = ((a_0 b_0) + a_1 b_1) + ... (a_p: columns p*256 .. of a; b_p: those
/// rows of b). Equal to Eigen's own product where the depth is ≤ kFixedDepth.
template <typename A, typename B, typename Out>
void fixed_product(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b, Eigen::MatrixBase<Out>& out) {
  const Eigen::Index depth = a.cols();
  const Eigen::Index first = std::min(depth, kFixedDepth);
  out.derived().noalias() = a.leftCols(first) * b.topRows(first);
  for (Eigen::Index k0 = first; k0 < depth; k0 += kFixedDepth) {
    const Eigen::Index n = std::min(kFixedDepth, depth - k0);
    out.derived().noalias() += a.middleCols(k0, n) * b.middleRows(k0, n);
  }
}

/// The same for an rvalue destination (a Map or a block expression).
template <typename A, typename B, typename Out>
void fixed_product(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b, Eigen::MatrixBase<Out>&& out) {
  fixed_product(a, b, out);
}

}  // namespace qvg
