// Where the fused k-means assignment spends its time, by difference: the
// kernel in full and with one phase left out (assign_fused_kernel's kProbe),
// at the LongCat shape [1, 32, 29640, 128], bf16 x, C = 256.
//   bench_assign_probe [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_data.h"
#include "cuda/assign_fused.cuh"
#include "cuda_timer.h"
#include "qvg/half.h"

using namespace qvg;
using namespace qvg::cuda;

namespace {

constexpr int kD = 128, kC = 256, kH = 32;
constexpr int64_t kN = 29640;

template <int kProbe>
void launch(const __nv_bfloat16* x, const float* cent, const __nv_bfloat16* cent_b, const float* cnorm,
            const AssignOutputs& o) {
  const size_t smem = assign_fused_smem<kD>(kC);
  QVG_CUDA_CHECK(cudaFuncSetAttribute(assign_fused_kernel<kD, __nv_bfloat16, kProbe>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  constexpr int64_t kPerBlock = int64_t{kFusedTokens} * kFusedTiles;
  const dim3 grid(static_cast<unsigned>((kN + kPerBlock - 1) / kPerBlock), kH);
  assign_fused_kernel<kD, __nv_bfloat16, kProbe><<<grid, kFusedThreads, smem>>>(x, kN, cent, cent_b, cnorm, kC,
                                                                                nullptr, o);
  QVG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_assign_probe [--reps N]\n");
      return 2;
    }
  }
  try {
    const HeadTensor x = bench::random_normal(kH, kN, kD, 3);
    const std::vector<uint16_t> xb = bench::to_bf16(x);
    // Centroids: every (N/C)-th row of each head, as float, bf16 and norms.
    std::vector<float> cent(static_cast<size_t>(kH) * kC * kD), cnorm(static_cast<size_t>(kH) * kC);
    std::vector<uint16_t> cent_b(cent.size());
    for (int h = 0; h < kH; ++h)
      for (int c = 0; c < kC; ++c) {
        double s = 0;
        for (int k = 0; k < kD; ++k) {
          const float v = bf16_to_float(xb[(static_cast<size_t>(h) * kN + c * (kN / kC)) * kD + k]);
          cent[(static_cast<size_t>(h) * kC + c) * kD + k] = v;
          cent_b[(static_cast<size_t>(h) * kC + c) * kD + k] = bf16_from_float(v);
          s += double(v) * v;
        }
        cnorm[static_cast<size_t>(h) * kC + c] = static_cast<float>(s);
      }
    DeviceBuffer<uint16_t> xd, cbd;
    DeviceBuffer<float> cd, cnd, dist(static_cast<size_t>(kH * kN));
    DeviceBuffer<uint8_t> ids(static_cast<size_t>(kH * kN));
    DeviceBuffer<unsigned> xmax(kH), rmax(kH);
    xd.upload(xb.data(), xb.size());
    cbd.upload(cent_b.data(), cent_b.size());
    cd.upload(cent.data(), cent.size());
    cnd.upload(cnorm.data(), cnorm.size());
    QVG_CUDA_CHECK(cudaMemset(xmax.get(), 0, xmax.bytes()));
    QVG_CUDA_CHECK(cudaMemset(rmax.get(), 0, rmax.bytes()));
    AssignOutputs o;
    o.ids = ids.get();
    o.dist = dist.get();
    o.x_max = xmax.get();
    o.resid_max = rmax.get();
    auto* xp = reinterpret_cast<const __nv_bfloat16*>(xd.get());
    auto* cbp = reinterpret_cast<const __nv_bfloat16*>(cbd.get());
    bench::Timer timer;
    const double flop = 2.0 * kH * kN * kC * kD;
    const char* names[] = {"full", "no exact distances", "no top-two epilogue", "no tensor-core products"};
    double ms[4];
    ms[0] = timer.median_ms(reps, [&] { launch<0>(xp, cd.get(), cbp, cnd.get(), o); });
    ms[1] = timer.median_ms(reps, [&] { launch<1>(xp, cd.get(), cbp, cnd.get(), o); });
    ms[2] = timer.median_ms(reps, [&] { launch<2>(xp, cd.get(), cbp, cnd.get(), o); });
    ms[3] = timer.median_ms(reps, [&] { launch<3>(xp, cd.get(), cbp, cnd.get(), o); });
    std::printf("fused assignment, LongCat [1,32,29640,128] bf16, C=256 (%.1f GFLOP of products)\n", flop / 1e9);
    for (int i = 0; i < 4; ++i)
      std::printf("  %-26s %8.4f ms   (full minus this: %+.4f ms)   %6.1f TFLOP/s\n", names[i], ms[i], ms[0] - ms[i],
                  flop / (ms[i] * 1e9));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_assign_probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
