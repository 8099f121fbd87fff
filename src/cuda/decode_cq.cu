// The code=cq decode (decode_cq.cuh): run-time G, b, codebook format and
// output type to decode_cq_kernel's template constants, in a translation
// unit of its own (4 x 8 x 2 x 3 kernels).
#include "cuda/check.h"
#include "cuda/decode_cq.cuh"
#include "cuda/dispatch.h"

namespace qvg::cuda {

void decode_cq(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
               cudaStream_t s) {
  QVG_CHECK(sh.cq_dim > 0 && sh.dim % kCqUnit == 0 && sh.dim % sh.cq_dim == 0 && sh.heads >= 1 &&
                sh.heads <= 65535 && p.books != nullptr && (!sh.fp8_books || p.book_scales != nullptr),
            "decode_cq: a code=cq tensor with dim a multiple of 16 and at most 65535 heads");
  if (range.count == 0) return;
  const int64_t items = (range.count + 31) / 32 * (sh.dim / kCqUnit);
  const dim3 grid(static_cast<unsigned>((items + kCqWarps - 1) / kCqWarps), static_cast<unsigned>(sh.heads));
  with_element(dtype, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    OutT* o = static_cast<OutT*>(out);
    with_cq_dim(sh.cq_dim, [&](auto g) {
      with_cq_bits(sh.cq_bits, [&](auto b) {
        constexpr int G = decltype(g)::value, B = decltype(b)::value;
        if (sh.fp8_books)
          decode_cq_kernel<G, B, true, OutT><<<grid, kCqThreads, 0, s>>>(sh, p, o, range);
        else
          decode_cq_kernel<G, B, false, OutT><<<grid, kCqThreads, 0, s>>>(sh, p, o, range);
        QVG_CUDA_CHECK(cudaGetLastError());
      });
    });
  });
}

}  // namespace qvg::cuda
