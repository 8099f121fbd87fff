// The tensor-core k-means assignment (assign_tc.cuh) at the LongCat shape
// [1, 32, 29640, 128], C = 256: each output mode the encoder uses (ids only;
// + the quantizer's max |residual|; + every row's exact distance, as the
// convergence check needs; + max |x|), bf16 and float input, a few block
// shapes (warps per block), and both kinds of products (wgmma, the default,
// and mma.sync). Every variant's ids and distances
// are checked against the default's (they compute the same function).
// Then the kernel with one phase left out (assign_phases.cuh), timed: the
// phases' cost by difference.
// Then the k-means update's cluster sums on the default's ids (C = 256):
// the bucket kernel (the encoder's) against the shared-atomic one, bf16 and
// float input, time and whether their sums and counts are the same bits.
//   bench_assign_probe [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "assign_phases.cuh"
#include "bench_data.h"
#include "cuda/assign_tc.cuh"
#include "cuda/qvg_cuda.h"
#include "cuda_timer.h"
#include "qvg/half.h"

using namespace qvg;
using namespace qvg::cuda;

namespace {

constexpr int kD = 128, kC = 256, kH = 32;
constexpr int64_t kN = 29640;

struct Outs {
  DeviceBuffer<uint8_t> ids{static_cast<size_t>(kH * kN)};
  DeviceBuffer<float> dist{static_cast<size_t>(kH * kN)};
  DeviceBuffer<unsigned> xmax{kH}, rmax{kH};
  AssignOutputs view(bool dist_on, bool resid_on, bool xmax_on) {
    AssignOutputs o;
    o.ids = ids.get();
    o.dist = dist_on ? dist.get() : nullptr;
    o.resid_max = resid_on ? rmax.get() : nullptr;
    o.x_max = xmax_on ? xmax.get() : nullptr;
    return o;
  }
};

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
    // Centroids: every (N/C)-th row of each head (bf16 values, as a random start takes).
    std::vector<float> cent(static_cast<size_t>(kH) * kC * kD);
    for (int h = 0; h < kH; ++h)
      for (int c = 0; c < kC; ++c)
        for (int k = 0; k < kD; ++k)
          cent[(static_cast<size_t>(h) * kC + c) * kD + k] =
              bf16_to_float(xb[(static_cast<size_t>(h) * kN + c * (kN / kC)) * kD + k]);
    DeviceBuffer<uint16_t> xd;
    DeviceBuffer<float> xf, cd;
    xd.upload(xb.data(), xb.size());
    xf.upload(x.data.data(), x.data.size());
    cd.upload(cent.data(), cent.size());
    auto* xp = reinterpret_cast<const __nv_bfloat16*>(xd.get());
    Outs ref, got;
    QVG_CUDA_CHECK((launch_assign_tc<kD, __nv_bfloat16>(xp, kN, cd.get(), kC, kH, nullptr, ref.view(true, true, true), 0)));
    std::vector<uint8_t> ids_ref(static_cast<size_t>(kH * kN)), ids_got(ids_ref.size());
    std::vector<float> dist_ref(ids_ref.size()), dist_got(ids_ref.size());
    ref.ids.download(ids_ref.data(), ids_ref.size());
    ref.dist.download(dist_ref.data(), dist_ref.size());

    bench::Timer timer;
    const double flop = 2.0 * kH * kN * kC * kD;
    std::printf("tensor-core assignment, LongCat [1,32,29640,128], C=256 (%.1f GFLOP of products)\n", flop / 1e9);
    std::printf("  %-34s %-20s %9s %9s  %s\n", "mode", "block", "ms", "TFLOP/s", "same ids/dist as default");
    int bad = 0;
    auto run = [&](const char* mode, const char* block, bool d, bool r, bool m, auto&& launch) {
      QVG_CUDA_CHECK(cudaMemset(got.ids.get(), 0xEE, got.ids.bytes()));
      const double ms = timer.median_ms(reps, [&] { QVG_CUDA_CHECK(launch(got.view(d, r, m))); });
      got.ids.download(ids_got.data(), ids_got.size());
      bool same = ids_got == ids_ref;
      if (d) {
        got.dist.download(dist_got.data(), dist_got.size());
        same = same && dist_got == dist_ref;
      }
      bad += !same;
      std::printf("  %-34s %-20s %9.4f %9.1f  %s\n", mode, block, ms, flop / (ms * 1e9), same ? "yes" : "NO");
    };
    auto bfk = [&](auto warps, auto wg) {
      return [&, warps, wg](const AssignOutputs& o) {
        return launch_assign_tc<kD, __nv_bfloat16, decltype(warps)::value, decltype(wg)::value>(xp, kN, cd.get(), kC,
                                                                                                 kH, nullptr, o, 0);
      };
    };
    using Wg = std::true_type;
    using Sync = std::false_type;
    auto bf = [&](auto warps) { return bfk(warps, Wg{}); };
    using W8 = std::integral_constant<int, 8>;
    using W12 = std::integral_constant<int, 12>;
    using W16 = std::integral_constant<int, 16>;
    run("bf16: ids", "16 warps (default)", false, false, false, bf(W16{}));
    run("bf16: ids", "8 warps", false, false, false, bf(W8{}));
    run("bf16: ids", "12 warps", false, false, false, bf(W12{}));
    run("bf16: ids, mma.sync", "16 warps", false, false, false, bfk(W16{}, Sync{}));
    run("bf16: ids, mma.sync", "8 warps", false, false, false, bfk(W8{}, Sync{}));
    run("bf16: ids + max|x - c| (last)", "16 warps (default)", false, true, false, bf(W16{}));
    run("bf16: ids + max|x| (first)", "16 warps (default)", false, false, true, bf(W16{}));
    run("bf16: ids + dist (convergence)", "16 warps (default)", true, false, false, bf(W16{}));
    // Phases left out (assign_phases.cuh; timing by difference only: the
    // outputs are wrong). Its kernel with nothing left out must give the
    // product kernel's ids and distances (else the copy has drifted).
    using probe::PhaseOut;
    auto phase = [&](auto out, auto wg) {
      return [&, out, wg](const AssignOutputs& o) {
        return probe::launch_assign_phase_probe<kD, decltype(wg)::value, decltype(out)::value>(xp, kN, cd.get(), kC,
                                                                                               kH, nullptr, o, 0);
      };
    };
    using None = std::integral_constant<PhaseOut, PhaseOut::none>;
    using NoExact = std::integral_constant<PhaseOut, PhaseOut::exact>;
    using NoTopTwo = std::integral_constant<PhaseOut, PhaseOut::top_two>;
    using NoProducts = std::integral_constant<PhaseOut, PhaseOut::products>;
    using NoLoads = std::integral_constant<PhaseOut, PhaseOut::loads>;
    run("phase probe (none left out)", "16 warps", true, true, true, phase(None{}, Wg{}));
    run("phase probe (none), mma.sync", "16 warps", true, true, true, phase(None{}, Sync{}));
    std::printf("  phases left out (ids mode, 16 warps; outputs not checked):\n");
    const char* probe_names[] = {"nothing left out", "no exact phase", "no top-two epilogue",
                                 "no tensor-core products", "no loads of x (made-up rows)"};
    auto time_phase = [&](auto out, auto&& launch) {
      const double ms = timer.median_ms(reps, [&] { QVG_CUDA_CHECK(launch(got.view(false, false, false))); });
      std::printf("  %-34s %-20s %9.4f %9.1f\n", probe_names[static_cast<int>(decltype(out)::value)], "16 warps", ms,
                  flop / (ms * 1e9));
    };
    time_phase(None{}, phase(None{}, Wg{}));
    time_phase(NoExact{}, phase(NoExact{}, Wg{}));
    time_phase(NoTopTwo{}, phase(NoTopTwo{}, Wg{}));
    time_phase(NoProducts{}, phase(NoProducts{}, Wg{}));
    time_phase(NoLoads{}, phase(NoLoads{}, Wg{}));
    std::printf("  the same for the mma.sync products:\n");
    time_phase(None{}, phase(None{}, Sync{}));
    time_phase(NoExact{}, phase(NoExact{}, Sync{}));
    time_phase(NoTopTwo{}, phase(NoTopTwo{}, Sync{}));
    time_phase(NoProducts{}, phase(NoProducts{}, Sync{}));
    // How many rows the exact phase re-ranks (the rest keep the bf16 pick).
    {
      Outs p1;
      QVG_CUDA_CHECK((probe::launch_assign_phase_probe<kD, true, PhaseOut::exact>(xp, kN, cd.get(), kC, kH, nullptr,
                                                                                  p1.view(false, false, false), 0)));
      std::vector<uint8_t> bf16_pick(ids_ref.size());
      p1.ids.download(bf16_pick.data(), bf16_pick.size());
      int64_t moved = 0;
      for (size_t i = 0; i < ids_ref.size(); ++i) moved += bf16_pick[i] != ids_ref[i];
      std::printf("  rows whose exact re-ranking changed the bf16 pick: %lld of %lld (%.3f %%)\n",
                  static_cast<long long>(moved), static_cast<long long>(ids_ref.size()),
                  100.0 * moved / ids_ref.size());
    }
    // Float input (QVG-Pro's residual stages): ids may differ from the bf16
    // run's (other rounding), so only the time counts here.
    std::printf("  float input (ids not compared: x is not rounded to bf16 before the exact re-ranking):\n");
    for (const bool d : {false, true}) {
      QVG_CUDA_CHECK(cudaDeviceSynchronize());
      const double ms = timer.median_ms(reps, [&] {
        QVG_CUDA_CHECK((launch_assign_tc<kD, float>(xf.get(), kN, cd.get(), kC, kH, nullptr, got.view(d, false, false), 0)));
      });
      std::printf("  %-34s %-20s %9.4f %9.1f\n", d ? "float: ids + dist" : "float: ids", "16 warps (default)", ms,
                  flop / (ms * 1e9));
    }
    {
      const double ms = timer.median_ms(reps, [&] {
        QVG_CUDA_CHECK((launch_assign_tc<kD, float, 16, false>(xf.get(), kN, cd.get(), kC, kH, nullptr,
                                                               got.view(false, false, false), 0)));
      });
      std::printf("  %-34s %-20s %9.4f %9.1f\n", "float: ids, mma.sync", "16 warps", ms, flop / (ms * 1e9));
    }
    // The k-means update's cluster sums on the default's ids: both kernels,
    // each from zeroed sums for the comparison (the timed calls just keep
    // adding: integer sums, the time is the same).
    {
      std::printf("cluster sums (k-means update) on the default's ids, C=256 (%.0f MB of bf16 x):\n",
                  2.0 * kH * kN * kD / 1e6);
      std::printf("  %-34s %9s %9s %9s %9s  %s\n", "input", "atomics", "buckets", "ratio", "GB/s", "same sums");
      const size_t n_sums = static_cast<size_t>(kH) * kC * kD, n_counts = static_cast<size_t>(kH) * kC;
      DeviceBuffer<unsigned long long> sums_a(n_sums), sums_b(n_sums);
      DeviceBuffer<int> counts_a(n_counts), counts_b(n_counts);
      DeviceBuffer<unsigned> hmax;
      auto sums_case = [&](const char* name, const void* xp, DeviceElement dtype, const std::vector<float>& xv,
                           double bytes) {
        std::vector<unsigned> hm(kH);
        for (int h = 0; h < kH; ++h) {
          float m = 0.0f;
          for (int64_t i = 0; i < kN * kD; ++i) m = std::max(m, std::fabs(xv[static_cast<size_t>(h) * kN * kD + i]));
          std::memcpy(&hm[h], &m, 4);
        }
        hmax.upload(hm.data(), hm.size());
        auto call = [&](SumKernel k, DeviceBuffer<unsigned long long>& sums, DeviceBuffer<int>& counts) {
          centroid_sums(xp, dtype, kH, kN, kD, kC, ref.ids.get(), hmax.get(), nullptr, sums.get(), counts.get(), 0, k);
        };
        const double ms_a = timer.median_ms(reps, [&] { call(SumKernel::atomics, sums_a, counts_a); });
        const double ms_b = timer.median_ms(reps, [&] { call(SumKernel::buckets, sums_b, counts_b); });
        for (auto* b : {&sums_a, &sums_b}) QVG_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
        for (auto* b : {&counts_a, &counts_b}) QVG_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
        call(SumKernel::atomics, sums_a, counts_a);
        call(SumKernel::buckets, sums_b, counts_b);
        std::vector<unsigned long long> sa(n_sums), sb(n_sums);
        std::vector<int> ca(n_counts), cb(n_counts);
        sums_a.download(sa.data(), n_sums);
        sums_b.download(sb.data(), n_sums);
        counts_a.download(ca.data(), n_counts);
        counts_b.download(cb.data(), n_counts);
        QVG_CUDA_CHECK(cudaDeviceSynchronize());
        int64_t rows = 0;
        for (const int v : cb) rows += v;
        const bool same = sa == sb && ca == cb && rows == int64_t{kH} * kN;
        bad += !same;
        std::printf("  %-34s %9.4f %9.4f %9.2f %9.0f  %s\n", name, ms_a, ms_b, ms_a / ms_b, bytes / (ms_b * 1e6),
                    same ? "yes" : "NO");
      };
      std::vector<float> xbv(xb.size());
      for (size_t i = 0; i < xb.size(); ++i) xbv[i] = bf16_to_float(xb[i]);
      sums_case("bf16", xd.get(), DeviceElement::bf16, xbv, 2.0 * kH * kN * kD);
      sums_case("float", xf.get(), DeviceElement::f32, x.data, 4.0 * kH * kN * kD);
    }
    if (bad) {
      std::fprintf(stderr, "bench_assign_probe: %d variant(s) disagree with the default\n", bad);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_assign_probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
