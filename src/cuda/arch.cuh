// What a kernel has on the architecture it is compiled for, and which
// compiled form runs on the current device.
//
// A fat binary carries machine code per architecture (and PTX for the
// newest); the driver loads the best match for the device: sm_90a code on
// Hopper, sm_80 code on Ampere and Ada, PTX compiled at load elsewhere. A
// kernel compiled for an architecture before sm_90 has no thread-block
// clusters, so its cluster code is left out there and the host takes
// another path (kernel_has_clusters).
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"

// Device passes before sm_90 lack clusters; the host pass sees every kernel.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define QVG_HAVE_CLUSTERS 1
#else
#define QVG_HAVE_CLUSTERS 0
#endif

namespace qvg::cuda {

/// Whether the form of `kernel` that runs on the current device was compiled
/// for sm_90 or later (so its cluster code is there): the PTX version it was
/// built from, which is that of its machine code too. A build for sm_80 run
/// on a Hopper GPU loads the sm_80 PTX compiled at load: false.
inline bool kernel_has_clusters(const void* kernel) {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // no image for this device: the launch reports it
    return false;
  }
  return a.ptxVersion >= 90;
}

/// The shared memory a block of the current device may use (opt-in).
inline int smem_optin() {
  int dev = 0, bytes = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  QVG_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

}  // namespace qvg::cuda
