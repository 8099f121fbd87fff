// The tensor-core assignment kernel called directly (label gpu), for what the
// codecs never ask of it: centroids that are not BF16 values. The encoder's
// k-means makes every centroid a BF16 value (kmeans.h), so through the codecs
// the kernel's residual always reads the pick's float row; off-grid
// centroids take the other path (the BF16 core matrices) and the re-ranking
// bound's centroid term. Both must give, for the ids the kernel picks, the
// next points bf16(x - bf16(c_id)) and the head's max |x - bf16(c_id)| of the
// float subtraction, and ids equal to the exact argmin over the float
// centroids outside three-way near-ties.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/assign_tc.cuh"
#include "cuda/check.h"
#include "gpu_util.h"
#include "qvg/half.h"

namespace {

using namespace qvg;
using namespace qvg::cuda;

template <typename T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n) { QVG_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) + 16)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

template <int D>
void check_residual_paths(bool off_grid) {
  constexpr int kH = 2, kN = 1000, kC = 40;
  std::mt19937 gen(D + (off_grid ? 1 : 0));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kH) * kN * D);
  for (float& v : x) v = round_bf16(nd(gen));  // BF16 input (the A fragments hold it exactly)
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_from_float(x[i]);
  // Centroids: rows of x, moved off the BF16 grid by a factor 1 + 2^-12
  // (then ||c - bf16(c)|| > 0 and the kernel takes the core matrices).
  std::vector<float> cent(static_cast<size_t>(kH) * kC * D);
  for (int h = 0; h < kH; ++h)
    for (int c = 0; c < kC; ++c)
      for (int k = 0; k < D; ++k) {
        const float v = x[(static_cast<size_t>(h) * kN + c * (kN / kC)) * D + k];
        cent[(static_cast<size_t>(h) * kC + c) * D + k] = off_grid ? v * (1.0f + 0x1p-12f) : v;
      }
  Dev<uint16_t> xd(xb.size()), next(x.size());
  Dev<float> cd(cent.size());
  Dev<uint8_t> ids(static_cast<size_t>(kH) * kN);
  Dev<unsigned> rmax(kH);
  QVG_CUDA_CHECK(cudaMemcpy(xd.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  QVG_CUDA_CHECK(cudaMemcpy(cd.p, cent.data(), cent.size() * 4, cudaMemcpyHostToDevice));
  QVG_CUDA_CHECK(cudaMemset(rmax.p, 0, kH * 4));
  QVG_CUDA_CHECK(cudaMemset(next.p, 0xFF, x.size() * 2));
  AssignOutputs o;
  o.ids = ids.p;
  o.resid_max = rmax.p;
  o.next = next.p;
  QVG_CUDA_CHECK((launch_assign_tc<D, __nv_bfloat16>(reinterpret_cast<const __nv_bfloat16*>(xd.p), kN, cd.p, kC, kH,
                                                     nullptr, o, 0)));
  QVG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got_ids(static_cast<size_t>(kH) * kN);
  std::vector<uint16_t> got_next(x.size());
  unsigned got_max[kH];
  QVG_CUDA_CHECK(cudaMemcpy(got_ids.data(), ids.p, got_ids.size(), cudaMemcpyDeviceToHost));
  QVG_CUDA_CHECK(cudaMemcpy(got_next.data(), next.p, got_next.size() * 2, cudaMemcpyDeviceToHost));
  QVG_CUDA_CHECK(cudaMemcpy(got_max, rmax.p, sizeof got_max, cudaMemcpyDeviceToHost));
  const std::string what = std::string(off_grid ? "off-grid" : "BF16") + " centroids, D = " + std::to_string(D);
  size_t next_wrong = 0;
  int64_t wrong = 0, excused = 0;
  for (int h = 0; h < kH; ++h) {
    float want_max = 0.0f;
    for (int n = 0; n < kN; ++n) {
      const int id = got_ids[static_cast<size_t>(h) * kN + n];
      ASSERT_LT(id, kC) << what;
      const float* xr = &x[(static_cast<size_t>(h) * kN + n) * D];
      for (int k = 0; k < D; ++k) {
        const float r = xr[k] - round_bf16(cent[(static_cast<size_t>(h) * kC + id) * D + k]);
        want_max = std::fmax(want_max, std::fabs(r));
        next_wrong += got_next[(static_cast<size_t>(h) * kN + n) * D + k] != bf16_from_float(r);
      }
      // The exact argmin over the float centroids (double distances).
      std::vector<double> dist(kC), cn(kC);
      double xn = 0;
      int best = 0;
      for (int k = 0; k < D; ++k) xn += double(xr[k]) * xr[k];
      for (int c = 0; c < kC; ++c) {
        double s = 0, q = 0;
        for (int k = 0; k < D; ++k) {
          const double cv = cent[(static_cast<size_t>(h) * kC + c) * D + k], e = xr[k] - cv;
          s += e * e;
          q += cv * cv;
        }
        dist[c] = s, cn[c] = q;
        if (s < dist[best]) best = c;
      }
      if (id == best) continue;
      ++wrong;
      int close = 0;
      for (int c = 0; c < kC; ++c)
        close += dist[c] - dist[best] <= 0x1p-6 * std::sqrt(xn) * (std::sqrt(cn[c]) + std::sqrt(cn[best])) +
                                             0x1p-12 * dist[best];
      excused += close >= 3;
    }
    float got = 0;
    std::memcpy(&got, &got_max[h], 4);
    EXPECT_EQ(got, want_max) << what << ", head " << h << ": max |x - bf16(c)|";
  }
  EXPECT_EQ(next_wrong, 0u) << what << ": next points";
  EXPECT_EQ(wrong, excused) << what << ": ids outside three-way near-ties";
}

TEST(AssignKernel, ResidualOfBf16CentroidsReadsTheFloatRows) {
  REQUIRE_GPU();
  check_residual_paths<64>(false);
  check_residual_paths<128>(false);
}

TEST(AssignKernel, ResidualOfOffGridCentroidsReadsTheCoreMatrices) {
  REQUIRE_GPU();
  check_residual_paths<64>(true);
  check_residual_paths<128>(true);
}

// The form for devices with less shared memory (float centroids read through
// L1, launch_assign_tc picks it from the device's limit) gives the same bits
// as the form with them staged in shared memory: ids, distances, next points,
// maxima and the BF16 centroids, for padded C, duplicate centroids, both D and
// both input types.
template <int D, typename T>
void check_float_rows_from_global(int c_count, bool off_grid) {
  constexpr int kH = 3, kN = 2111;
  std::mt19937 gen(static_cast<unsigned>(D * 1000 + c_count + off_grid));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kH) * kN * D);
  for (float& v : x) v = nd(gen);
  std::vector<T> xt(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      xt[i] = x[i];
    else
      xt[i] = __float2bfloat16_rn(x[i]);
  }
  std::vector<float> cent(static_cast<size_t>(kH) * c_count * D);
  for (size_t i = 0; i < cent.size(); ++i) cent[i] = off_grid ? nd(gen) : round_bf16(nd(gen));
  for (int k = 0; k < D; ++k) cent[static_cast<size_t>(c_count - 1) * D + k] = cent[k];  // a duplicate of centroid 0
  Dev<T> xd(xt.size());
  Dev<float> cd(cent.size());
  QVG_CUDA_CHECK(cudaMemcpy(xd.p, xt.data(), xt.size() * sizeof(T), cudaMemcpyHostToDevice));
  QVG_CUDA_CHECK(cudaMemcpy(cd.p, cent.data(), cent.size() * 4, cudaMemcpyHostToDevice));
  struct Got {
    std::vector<uint8_t> ids;
    std::vector<float> dist;
    std::vector<uint16_t> next, cb;
    std::vector<unsigned> xmax, rmax;
  };
  auto run = [&](bool in_smem) {
    Dev<uint8_t> ids(x.size() / D);
    Dev<float> dist(x.size() / D);
    Dev<uint16_t> next(x.size()), cb(cent.size());
    Dev<unsigned> xmax(kH), rmax(kH);
    QVG_CUDA_CHECK(cudaMemset(xmax.p, 0, kH * 4));
    QVG_CUDA_CHECK(cudaMemset(rmax.p, 0, kH * 4));
    AssignOutputs o;
    o.ids = ids.p;
    o.dist = dist.p;
    o.x_max = xmax.p;
    o.resid_max = rmax.p;
    o.next = next.p;
    o.cent_bf16 = cb.p;
    if (in_smem)
      QVG_CUDA_CHECK(
          (launch_assign_tc_as<D, T, kAssignWarps, true, true>(xd.p, kN, cd.p, c_count, kH, nullptr, o, 0)));
    else
      QVG_CUDA_CHECK(
          (launch_assign_tc_as<D, T, kAssignWarps, true, false>(xd.p, kN, cd.p, c_count, kH, nullptr, o, 0)));
    QVG_CUDA_CHECK(cudaDeviceSynchronize());
    Got g{std::vector<uint8_t>(x.size() / D), std::vector<float>(x.size() / D), std::vector<uint16_t>(x.size()),
          std::vector<uint16_t>(cent.size()), std::vector<unsigned>(kH), std::vector<unsigned>(kH)};
    QVG_CUDA_CHECK(cudaMemcpy(g.ids.data(), ids.p, g.ids.size(), cudaMemcpyDeviceToHost));
    QVG_CUDA_CHECK(cudaMemcpy(g.dist.data(), dist.p, g.dist.size() * 4, cudaMemcpyDeviceToHost));
    QVG_CUDA_CHECK(cudaMemcpy(g.next.data(), next.p, g.next.size() * 2, cudaMemcpyDeviceToHost));
    QVG_CUDA_CHECK(cudaMemcpy(g.cb.data(), cb.p, g.cb.size() * 2, cudaMemcpyDeviceToHost));
    QVG_CUDA_CHECK(cudaMemcpy(g.xmax.data(), xmax.p, kH * 4, cudaMemcpyDeviceToHost));
    QVG_CUDA_CHECK(cudaMemcpy(g.rmax.data(), rmax.p, kH * 4, cudaMemcpyDeviceToHost));
    return g;
  };
  const Got a = run(true), b = run(false);
  const std::string what = "D = " + std::to_string(D) + ", C = " + std::to_string(c_count) +
                           (std::is_same_v<T, float> ? ", float" : ", bf16") + (off_grid ? ", off-grid" : "");
  EXPECT_EQ(a.ids, b.ids) << what;
  EXPECT_EQ(0, std::memcmp(a.dist.data(), b.dist.data(), a.dist.size() * 4)) << what;
  EXPECT_EQ(a.next, b.next) << what;
  EXPECT_EQ(a.cb, b.cb) << what;
  EXPECT_EQ(a.xmax, b.xmax) << what;
  EXPECT_EQ(a.rmax, b.rmax) << what;
  EXPECT_LT((assign_tc_smem<D, false>(c_count)), (assign_tc_smem<D, true>(c_count)));
}

TEST(AssignKernel, FloatRowsFromGlobalMemoryGiveTheSameBits) {
  REQUIRE_GPU();
  for (int c : {40, 64, 256})
    for (bool off_grid : {false, true}) {
      check_float_rows_from_global<64, __nv_bfloat16>(c, off_grid);
      check_float_rows_from_global<128, __nv_bfloat16>(c, off_grid);
      check_float_rows_from_global<128, float>(c, off_grid);
    }
  // The largest form fits the 99 KB a block of Ada and consumer Blackwell cards give.
  EXPECT_LE((assign_tc_smem<128, false>(256)), 99u * 1024);
  EXPECT_GT((assign_tc_smem<128, true>(256)), 99u * 1024);
}

}  // namespace
