// The code=cq decode (decode_cq.cuh): run-time G, codebook format and output
// type to decode_cq_kernel's template constants (4 x 2 x 3 kernels; the
// index width is read at run time), the grid and the codebooks' place, in a
// translation unit of its own.
#include "cuda/check.h"
#include "cuda/decode_cq.cuh"
#include "cuda/dispatch.h"

namespace qvg::cuda {
namespace {

/// Blocks of `kernel` an SM holds with smem bytes of dynamic shared memory
/// (0 where none fits).
template <typename Kernel>
int blocks_per_sm(Kernel* kernel, int64_t smem) {
  int per_sm = 0;
  QVG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kCqThreads, static_cast<size_t>(smem)));
  return per_sm;
}

/// Launches decode_cq_kernel<G, F8, OutT>: blocks a head as many as fill the
/// device once (at most one a row slot of the range), the codebooks staged
/// in shared memory where they fit a block and each block decodes at least
/// K rows (every staged codeword value read once or more on average), else
/// gathered from global memory.
template <int G, bool F8, typename OutT>
void launch_decode_cq(const QvgShape& sh, QvgParts p, const DecodeRange& range, OutT* out, cudaStream_t s) {
  auto* kernel = decode_cq_kernel<G, F8, OutT>;
  const int k = 1 << sh.cq_bits;
  const int stride = cq_shared_book_stride(k, G * (F8 ? 1 : 2));
  const int64_t smem = static_cast<int64_t>(sh.dim / G) * stride;
  int dev = 0, sms = 0, optin = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  QVG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  QVG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int units = sh.dim / 16;
  const int slots = kCqThreads / (units < kCqThreads ? units : kCqThreads);  // rows a block decodes at once
  const int64_t useful = (range.count + slots - 1) / slots;                  // more blocks a head would idle
  auto blocks_a_head = [&](int per_sm) {
    const int64_t x = static_cast<int64_t>(sms) * per_sm / sh.heads;
    return x < 1 ? int64_t{1} : x > useful ? useful : x;
  };
  bool staged = false;
  int64_t per_head = 0;
  if (smem <= optin) {
    // Every launch: the attribute belongs to the current device's context.
    // The device's largest (the same value from every thread and launch).
    QVG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    const int per_sm = blocks_per_sm(kernel, smem);
    if (per_sm > 0) {
      per_head = blocks_a_head(per_sm);
      staged = (range.count + per_head - 1) / per_head >= k;
    }
  }
  if (!staged) {
    const int per_sm = blocks_per_sm(kernel, 0);
    QVG_CHECK(per_sm > 0, "decode_cq: no block of ", kCqThreads, " threads fits an SM");
    per_head = blocks_a_head(per_sm);
  }
  const dim3 grid(static_cast<unsigned>(per_head), static_cast<unsigned>(sh.heads));
  kernel<<<grid, kCqThreads, staged ? static_cast<size_t>(smem) : 0, s>>>(sh, p, out, range, staged ? stride : 0);
  QVG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void decode_cq(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
               cudaStream_t s) {
  QVG_CHECK(sh.cq_dim > 0 && sh.dim % 16 == 0 && sh.dim % sh.cq_dim == 0 && sh.cq_bits >= 1 && sh.cq_bits <= 8 &&
                sh.heads >= 1 && sh.heads <= 65535 && p.books != nullptr && (!sh.fp8_books || p.book_scales != nullptr),
            "decode_cq: a code=cq tensor with dim a multiple of 16, 1- to 8-bit indices and at most 65535 heads");
  QVG_CHECK(sh.stages == 0 || sh.fp8_centroids == sh.fp8_books,
            "decode_cq: the stages' centroids and the codebooks share one centroid_format");
  if (range.count == 0) return;
  with_element(dtype, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    OutT* o = static_cast<OutT*>(out);
    with_cq_dim(sh.cq_dim, [&](auto g) {
      constexpr int G = decltype(g)::value;
      if (sh.fp8_books)
        launch_decode_cq<G, true, OutT>(sh, p, range, o, s);
      else
        launch_decode_cq<G, false, OutT>(sh, p, range, o, s);
    });
  });
}

}  // namespace qvg::cuda
