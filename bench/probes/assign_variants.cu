// Times assign_tc_kernel alone, without the library, so that variants of
// src/cuda/assign_tc.cuh can be compiled in seconds and compared in one GPU
// call (scripts/assign_variants.sh: a variant is a copy of the header in an
// overlay folder put first on the include path).
//   bench_assign_variants [--reps N]
// LongCat [32, 29640, 128] bf16 random-normal rows, C = 256, two kinds of
// centroids: data rows (a random start: the first assignment) and BF16 means
// of 116 rows each (norms like the later iterations'). For each, ids alone
// and ids + max |x - c| (the last assignment). Prints the median time, a hash
// of the ids and of the maxima (variants that keep the results print the
// same hashes), and checks head 0's ids against an exact assignment in double
// on the host (ties to the lowest index; random data has no near-ties at
// the bf16 error bound's scale, so mismatches are 0).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/assign_tc.cuh"
#include "cuda_timer.h"
#include "qvg/half.h"

namespace {

using namespace qvg;
using namespace qvg::cuda;

constexpr int kH = 32, kN = 29640, kD = 128, kC = 256;
constexpr int kMeanRows = 116;  // rows averaged into one "mean" centroid (kC * kMeanRows <= kN)

uint32_t fnv(const void* p, size_t n, uint32_t h = 2166136261u) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 16777619u;
  return h;
}

/// Rows of head 0 whose id differs from the exact (double) argmin.
int head0_mismatches(const std::vector<float>& x, const std::vector<float>& cent, const std::vector<uint8_t>& ids) {
  int bad = 0;
  for (int n = 0; n < kN; ++n) {
    double best = 0;
    int arg = 0;
    for (int c = 0; c < kC; ++c) {
      double d = 0;
      for (int k = 0; k < kD; ++k) {
        const double e = static_cast<double>(x[static_cast<size_t>(n) * kD + k]) - cent[static_cast<size_t>(c) * kD + k];
        d += e * e;
      }
      if (c == 0 || d < best) best = d, arg = c;
    }
    bad += ids[n] != arg;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_assign_variants [--reps N]\n");
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "bench_assign_variants: --reps must be at least 1\n");
    return 2;
  }
  try {
    std::vector<float> x(static_cast<size_t>(kH) * kN * kD);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal;
    for (float& v : x) v = round_bf16(normal(rng));
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_from_float(x[i]);
    std::vector<float> rows(static_cast<size_t>(kH) * kC * kD), means(rows.size());
    for (int h = 0; h < kH; ++h)
      for (int c = 0; c < kC; ++c)
        for (int k = 0; k < kD; ++k) {
          const size_t at = (static_cast<size_t>(h) * kC + c) * kD + k;
          rows[at] = x[(static_cast<size_t>(h) * kN + static_cast<size_t>(c) * (kN / kC)) * kD + k];
          double s = 0;
          for (int m = 0; m < kMeanRows; ++m) s += x[(static_cast<size_t>(h) * kN + c * kMeanRows + m) * kD + k];
          means[at] = round_bf16(static_cast<float>(s / kMeanRows));
        }
    __nv_bfloat16* xd = nullptr;
    float* cd = nullptr;
    uint8_t* ids = nullptr;
    unsigned* rmax = nullptr;
    QVG_CUDA_CHECK(cudaMalloc(&xd, xb.size() * 2));
    QVG_CUDA_CHECK(cudaMalloc(&cd, rows.size() * 4));
    QVG_CUDA_CHECK(cudaMalloc(&ids, static_cast<size_t>(kH) * kN));
    QVG_CUDA_CHECK(cudaMalloc(&rmax, kH * 4));
    QVG_CUDA_CHECK(cudaMemcpy(xd, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    bench::Timer timer;
    std::printf("assign_tc_kernel, LongCat [32, 29640, 128] bf16, C = 256, median of %d\n", reps);
    for (const bool mean_centroids : {false, true}) {
      const std::vector<float>& cent = mean_centroids ? means : rows;
      QVG_CUDA_CHECK(cudaMemcpy(cd, cent.data(), cent.size() * 4, cudaMemcpyHostToDevice));
      for (const bool resid : {false, true}) {
        AssignOutputs o;
        o.ids = ids;
        o.resid_max = resid ? rmax : nullptr;
        const double ms = timer.median_ms(reps, [&] {
          QVG_CUDA_CHECK(cudaMemsetAsync(rmax, 0, kH * 4));
          QVG_CUDA_CHECK((launch_assign_tc<kD, __nv_bfloat16>(xd, kN, cd, kC, kH, nullptr, o, 0)));
        });
        std::vector<uint8_t> hid(static_cast<size_t>(kH) * kN);
        unsigned hm[kH];
        QVG_CUDA_CHECK(cudaMemcpy(hid.data(), ids, hid.size(), cudaMemcpyDeviceToHost));
        QVG_CUDA_CHECK(cudaMemcpy(hm, rmax, sizeof hm, cudaMemcpyDeviceToHost));
        const int bad = resid ? -1 : head0_mismatches(x, cent, hid);
        std::printf("  %-6s %-13s %8.4f ms  ids %08x  max %08x", mean_centroids ? "means" : "rows",
                    resid ? "ids + max|r|" : "ids", ms, fnv(hid.data(), hid.size()), resid ? fnv(hm, sizeof hm) : 0u);
        if (bad >= 0) std::printf("  head 0 vs exact: %d mismatches", bad);
        std::printf("\n");
      }
    }
    cudaFree(xd);
    cudaFree(cd);
    cudaFree(ids);
    cudaFree(rmax);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_assign_variants: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
