// Median of CUDA-event-timed repetitions after one warm-up (the GPU benchmarks).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/check.h"

namespace qvg::bench {

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    QVG_CUDA_CHECK(cudaEventCreate(&a));
    QVG_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  template <typename F>
  double median_ms(int reps, F&& f) {
    f();  // warm-up
    QVG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      QVG_CUDA_CHECK(cudaEventRecord(a));
      f();
      QVG_CUDA_CHECK(cudaEventRecord(b));
      QVG_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      QVG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  /// Median over reps of (the time of `batch` back-to-back calls) / batch:
  /// the rate of a kernel queued behind others, as in a model's stream,
  /// without the gap between one event and the launch after it.
  template <typename F>
  double batch_median_ms(int reps, int batch, F&& f) {
    return median_ms(reps,
                     [&] {
                       for (int i = 0; i < batch; ++i) f();
                     }) /
           batch;
  }
};

}  // namespace qvg::bench
