// The GPU decode of the fp8 method (docs/FORMAT.md "## FP8"; the reference it
// reproduces bit for bit: src/reference/fp8_codec.cpp), reached only through
// its method row (MethodTraits::decode_on_device).
//
//   x^ = fp8_e4m3_to_float(code) * 2^(s - 127)
//
// Both factors are exact floats and their product is exact (4 significant
// bits, at least 2^-136), so the float output equals the CPU's bit for bit;
// the 16-bit outputs are it rounded to nearest even (baseline_kernels.cuh's
// store16, as the other decoders).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/codecs.h"
#include "cuda/baseline_kernels.cuh"
#include "cuda/check.h"
#include "cuda/dispatch.h"
#include "qvg/fp8.h"
#include "qvg/methods.h"

namespace qvg::cuda {

namespace {

/// One thread per 16 consecutive values of a token row (one 16-byte load of
/// codes; one scale, since B is a multiple of 16): grid rows * (D / 16)
/// threads.
///   codes  [rows][D]      E4M3 bytes (rows = H * N)
///   scales [rows][D / B]  E8M0 bytes
///   out    [rows][D]      OutT: float, __nv_bfloat16 or __half
template <typename OutT>
__global__ void fp8_decode_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                                  int64_t rows, int dim, int block, OutT* __restrict__ out) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int per_row = dim / kBaselineVals;
  if (g >= rows * per_row) return;
  const int64_t row = g / per_row;
  const int col = static_cast<int>(g % per_row) * kBaselineVals;
  // 2^(s - 127) from its bits: the float exponent field is s (s = 0: the subnormal 2^-127).
  const uint32_t s = __ldg(scales + row * (dim / block) + col / block);
  const float scale = __uint_as_float(s != 0 ? s << 23 : 0x00400000u);
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(codes + row * dim + col));
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float v[kBaselineVals];
#pragma unroll
  for (int i = 0; i < kBaselineVals; ++i)
    v[i] = __fmul_rn(fp8_e4m3_to_float(static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)))), scale);
  baseline_detail::store16(out + row * dim + col, v);
}

/// Queue the decode of rows x dim values (dim a multiple of block, block a
/// multiple of 16) on stream. Returns the launch error.
template <typename OutT>
cudaError_t launch_fp8_decode(const uint8_t* codes, const uint8_t* scales, int64_t rows, int dim, int block,
                              OutT* out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t threads = rows * (dim / kBaselineVals);
  if (threads == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  fp8_decode_kernel<OutT><<<blocks, kThreads, 0, stream>>>(codes, scales, rows, dim, block, out);
  return cudaGetLastError();
}

}  // namespace

}  // namespace qvg::cuda

namespace qvg {

void fp8_decode_on_device(const DeviceDecodeArgs& a) {
  QVG_CHECK(a.config->block % cuda::kBaselineVals == 0 && a.dim % a.config->block == 0 && a.dim <= INT32_MAX,
            a.config->name, ": the CUDA fp8 decoder needs blocks of a multiple of ", cuda::kBaselineVals,
            " dividing dim, got block ", a.config->block, " and dim ", a.dim);
  cuda::with_element(a.type, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    QVG_CUDA_CHECK(cuda::launch_fp8_decode(a.codes, a.scales, a.heads * a.tokens, static_cast<int>(a.dim),
                                           a.config->block, static_cast<OutT*>(a.out),
                                           static_cast<cudaStream_t>(a.stream)));
  });
}

}  // namespace qvg
