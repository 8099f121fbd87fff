// CUDA error checking and an owning device buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "qvg/common.h"

/// Throws qvg::Error naming the call, file:line and CUDA's message.
#define QVG_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t qvg_err_ = (expr);                                                       \
    if (qvg_err_ != cudaSuccess)                                                               \
      ::qvg::detail::fail(#expr, "CUDA error in ", #expr, " at ", __FILE__, ":", __LINE__, ": ", \
                          cudaGetErrorName(qvg_err_), ": ", cudaGetErrorString(qvg_err_));     \
  } while (0)

namespace qvg::cuda {

/// Makes the current device's default memory pool keep freed memory for
/// reuse (release threshold: unlimited), so that cudaMallocAsync after a
/// cudaFreeAsync does not go back to the driver. Once per device.
void keep_pool_memory();

/// cudaMalloc'ed array of n T; freed on destruction; move-only. In pool
/// mode (use_pool) its memory comes from the device's stream-ordered pool
/// (cudaMallocAsync / cudaFreeAsync on that stream): no device-wide
/// synchronization on allocation or release. Outside it the memory only
/// grows: a resize to fewer elements keeps the allocation (cudaFree
/// synchronizes the device, and scratch sized by alternating shapes, e.g.
/// encode_batch's groups, would free and allocate at every call).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        cap_(std::exchange(o.cap_, 0)),
        pooled_(o.pooled_),
        pool_stream_(o.pool_stream_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
      pooled_ = o.pooled_;
      pool_stream_ = o.pool_stream_;
    }
    return *this;
  }
  /// From now on, allocate from the stream-ordered pool on stream s and
  /// release there (the buffer's memory is then usable on s, and on other
  /// streams ordered after its allocation; s must outlive the buffer).
  void use_pool(cudaStream_t s) {
    release();
    pooled_ = true;
    pool_stream_ = s;
  }
  /// n elements from now on (contents are not kept when it reallocates): in
  /// pool mode a new allocation whenever n differs; outside it one only when
  /// n exceeds the capacity (0 frees).
  void resize(size_t n) {
    if (n == n_) return;
    if (!pooled_ && n > 0 && n <= cap_) {
      n_ = n;
      return;
    }
    release();
    if (n > 0) {
      if (pooled_)
        QVG_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), n * sizeof(T), pool_stream_));
      else
        QVG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
    }
    n_ = cap_ = n;
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  /// The bytes allocated (>= bytes() outside pool mode).
  size_t capacity_bytes() const { return cap_ * sizeof(T); }
  void upload(const T* host, size_t n, cudaStream_t s = nullptr) {
    resize(n);
    if (n) QVG_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  void download(T* host, size_t n, cudaStream_t s = nullptr) const {
    QVG_CHECK(n <= n_, "device buffer holds ", n_, " elements, asked for ", n);
    if (n) QVG_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  }

 private:
  void release() noexcept {
    if (ptr_) {
      if (pooled_)
        cudaFreeAsync(ptr_, pool_stream_);
      else
        cudaFree(ptr_);
    }
    ptr_ = nullptr;
    n_ = cap_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
  size_t cap_ = 0;  ///< elements allocated
  bool pooled_ = false;
  cudaStream_t pool_stream_ = nullptr;
};

}  // namespace qvg::cuda
