// Tensors in device memory: the current device, allocation, and the
// finiteness check of a device input (cuda_encode_device, cuda_codec.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/qvg_cuda.h"
#include "qvg/cuda.h"
#include "qvg/half.h"

namespace qvg {

namespace cuda {

namespace {

template <typename T>
__device__ __forceinline__ float element_as_float(const void* x, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return static_cast<const float*>(x)[i];
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  else
    return __half2float(static_cast<const __half*>(x)[i]);
}

/// out[0] = min(out[0], i) over the i < n with x[i] not finite; out[1] =
/// max(out[1], bits of |x[i]|) over the finite values a thread saw before
/// its first non-finite one (grid-stride; non-negative floats order as their
/// bits).
template <typename T>
__global__ void first_nonfinite_kernel(const void* __restrict__ x, int64_t n, unsigned long long* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float m = 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = element_as_float<T>(x, i);
    if (!isfinite(v)) {
      atomicMin(out, static_cast<unsigned long long>(i));
      break;  // a later i of this thread is larger
    }
    m = fmaxf(m, fabsf(v));
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) atomicMax(out + 1, static_cast<unsigned long long>(__float_as_uint(m)));
}

}  // namespace

int64_t first_nonfinite(const void* x, DeviceElement dtype, int64_t n, float* value, cudaStream_t stream,
                        float* max_abs) {
  DeviceBuffer<unsigned long long> first(2);  // the first index, the largest |x|'s bits
  const unsigned long long none = ~0ull, start[2] = {none, 0ull};
  QVG_CUDA_CHECK(cudaMemcpyAsync(first.get(), start, sizeof start, cudaMemcpyHostToDevice, stream));
  int sms = 0, dev = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  QVG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{sms} * 8);
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(blocks, 1));
  if (dtype == DeviceElement::f32)
    first_nonfinite_kernel<float><<<grid, 256, 0, stream>>>(x, n, first.get());
  else if (dtype == DeviceElement::bf16)
    first_nonfinite_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(x, n, first.get());
  else
    first_nonfinite_kernel<__half><<<grid, 256, 0, stream>>>(x, n, first.get());
  QVG_CUDA_CHECK(cudaGetLastError());
  unsigned long long got[2] = {none, 0ull};
  QVG_CUDA_CHECK(cudaMemcpyAsync(got, first.get(), sizeof got, cudaMemcpyDeviceToHost, stream));
  QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
  const unsigned long long at = got[0];
  if (max_abs) {
    const uint32_t bits = static_cast<uint32_t>(got[1]);
    std::memcpy(max_abs, &bits, 4);
  }
  if (at == none) return -1;
  const size_t es = element_bytes(dtype);
  uint32_t raw = 0;
  QVG_CUDA_CHECK(cudaMemcpy(&raw, static_cast<const char*>(x) + at * es, es, cudaMemcpyDeviceToHost));
  if (value) {
    if (dtype == DeviceElement::f32)
      std::memcpy(value, &raw, 4);
    else if (dtype == DeviceElement::bf16)
      *value = __bfloat162float(__nv_bfloat16_raw{static_cast<unsigned short>(raw)});
    else
      *value = __half2float(__half_raw{static_cast<unsigned short>(raw)});
  }
  return static_cast<int64_t>(at);
}

void check_device() {
  std::string why;
  QVG_CHECK(cuda_available(&why), "CUDA backend: ", why);
}

HeadTensor download_as_float(const void* x, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                             cudaStream_t stream) {
  HeadTensor h(heads, tokens, dim);
  const size_t n = h.data.size();
  if (type == DeviceElement::f32) {
    QVG_CUDA_CHECK(cudaMemcpyAsync(h.data.data(), x, n * 4, cudaMemcpyDeviceToHost, stream));
    QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
  }
  std::vector<uint16_t> raw(n);
  QVG_CUDA_CHECK(cudaMemcpyAsync(raw.data(), x, n * 2, cudaMemcpyDeviceToHost, stream));
  QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < n; ++i)
    h.data[i] = type == DeviceElement::bf16 ? bf16_to_float(raw[i]) : fp16_to_float(raw[i]);
  return h;
}

void keep_pool_memory() {
  static std::mutex mutex;
  static std::vector<int> done;
  int dev = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mutex);
  if (std::find(done.begin(), done.end(), dev) != done.end()) return;
  cudaMemPool_t pool;
  QVG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t keep = UINT64_MAX;
  QVG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  done.push_back(dev);
}

}  // namespace cuda

int cuda_current_device() {
  int dev = -1;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

std::shared_ptr<void> cuda_allocate(size_t bytes) {
  QVG_CHECK(bytes > 0, "cuda_allocate: 0 bytes");
  void* p = nullptr;
  QVG_CUDA_CHECK(cudaMalloc(&p, bytes));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

std::shared_ptr<void> cuda_allocate_async(size_t bytes, void* stream) {
  QVG_CHECK(bytes > 0, "cuda_allocate_async: 0 bytes");
  cuda::keep_pool_memory();
  const auto s = static_cast<cudaStream_t>(stream);
  void* p = nullptr;
  QVG_CUDA_CHECK(cudaMallocAsync(&p, bytes, s));
  return std::shared_ptr<void>(p, [s](void* q) { cudaFreeAsync(q, s); });
}

size_t cuda_release_pool_memory() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {  // no device: no pool
    (void)cudaGetLastError();
    return 0;
  }
  int dev = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool;
  QVG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t before = 0, after = 0;
  QVG_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &before));
  QVG_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  QVG_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &after));
  return before > after ? static_cast<size_t>(before - after) : 0;
}

void cuda_synchronize(void* stream) { QVG_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

void cuda_copy_to_host(void* host, const void* device, size_t bytes) {
  if (bytes) QVG_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace qvg
