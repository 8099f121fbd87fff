// Shared by the GPU tests (label gpu): skip with the reason where no CUDA
// device is usable (builds without CUDA included).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "qvg/cuda.h"

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string qvg_why_;                                                      \
    if (!::qvg::cuda_available(&qvg_why_)) GTEST_SKIP() << "no GPU here: " << qvg_why_; \
  } while (0)

namespace qvg {

/// n values of type T copied from device memory at d (qvg::cuda_copy_to_host).
template <typename T>
std::vector<T> download(const void* d, size_t n) {
  std::vector<T> h(n);
  cuda_copy_to_host(h.data(), d, n * sizeof(T));
  return h;
}

}  // namespace qvg
