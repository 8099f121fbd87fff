// Shared by the GPU tests (label gpu): skip with the reason where no CUDA
// device is usable (builds without CUDA included).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "qvg/cuda.h"

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string qvg_why_;                                                      \
    if (!::qvg::cuda_available(&qvg_why_)) GTEST_SKIP() << "no GPU here: " << qvg_why_; \
  } while (0)
