// Run-time values to template constants, for the kernel launchers: each
// with_* calls f with a std::integral_constant (or a Tag of an element
// type) for the value it is given and throws qvg::Error for a value no
// kernel is built for. Callers validate first (make_shape); the throw is
// the guard, not the check users see.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "qvg/cuda.h"
#include "qvg/common.h"

namespace qvg::cuda {

/// An element type as a value: Tag<float>{}; decltype(tag)::type is T.
template <typename T>
struct Tag {
  using type = T;
};

/// f(Tag<float | __nv_bfloat16 | __half>{}) for the element type t.
template <typename F>
decltype(auto) with_element(DeviceElement t, F&& f) {
  switch (t) {
    case DeviceElement::f32: return f(Tag<float>{});
    case DeviceElement::bf16: return f(Tag<__nv_bfloat16>{});
    case DeviceElement::f16: return f(Tag<__half>{});
  }
  ::qvg::detail::fail("dispatch", "unknown device element type ", static_cast<int>(t));
}

/// f(integral_constant<int, D>) for the head dims the k-means and lines
/// kernels are built for: 64 and 128.
template <typename F>
decltype(auto) with_head_dim(int d, F&& f) {
  switch (d) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
  }
  ::qvg::detail::fail("dispatch", "no kernel for head dim ", d, " (64 or 128)");
}

/// f(integral_constant<int, BITS>) for 2 and 4 bits a code.
template <typename F>
decltype(auto) with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
  }
  ::qvg::detail::fail("dispatch", "no kernel for ", bits, "-bit codes (2 or 4)");
}

/// f(integral_constant<int, S>) for 0 <= S <= 4 stages (kTileMaxStages).
template <typename F>
decltype(auto) with_stages(int stages, F&& f) {
  switch (stages) {
    case 0: return f(std::integral_constant<int, 0>{});
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
  }
  ::qvg::detail::fail("dispatch", "no tiled kernel for ", stages, " stages (0 to 4)");
}

/// f(integral_constant<int, G>) for code=cq's sub-vector sizes: 1, 2, 4, 8.
template <typename F>
decltype(auto) with_cq_dim(int g, F&& f) {
  switch (g) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
  }
  ::qvg::detail::fail("dispatch", "no kernel for cq_dim ", g, " (1, 2, 4 or 8)");
}

/// f(integral_constant<int, B>) for code=cq's index widths: 1 to 8 bits
/// (2 to 256 codewords).
template <typename F>
decltype(auto) with_cq_bits(int b, F&& f) {
  switch (b) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
  }
  ::qvg::detail::fail("dispatch", "no kernel for ", b, "-bit codeword indices (1 to 8)");
}

/// Blocks of `threads` threads covering n threads' work.
inline unsigned blocks_for(int64_t n, int threads = 256) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace qvg::cuda
