// The lines decode (decode_lines.cuh) of tensors with FP8 centroids: the
// kernels of decode_range's lines path with CF8 set, in a translation unit of
// their own so they compile beside qvg_cuda.cu's BF16-centroid kernels.
#include "cuda/check.h"
#include "cuda/decode_lines.cuh"
#include "cuda/dispatch.h"

namespace qvg::cuda {

void decode_lines_fp8c(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
                       cudaStream_t s, int block_shift) {
  QVG_CHECK(sh.fp8_centroids && sh.stages > 0, "decode_lines_fp8c: a tensor with FP8 centroids and stages");
  with_element(dtype, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    with_bits(sh.bits, [&](auto bits) {
      constexpr int B = decltype(bits)::value;
      with_head_dim(sh.dim, [&](auto d) {
        constexpr int D = decltype(d)::value;
        with_stages(sh.stages, [&](auto st) {
          constexpr int S = decltype(st)::value;
          if constexpr (S > 0)
            QVG_CUDA_CHECK((launch_decode_lines<B, D, S, true>(sh, p, range, static_cast<OutT*>(out), s, block_shift)));
        });
      });
    });
  });
}

}  // namespace qvg::cuda
