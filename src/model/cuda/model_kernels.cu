// Kernels of the reference model's CUDA forward (model_kernels.h). Compiled
// with -fmad=false: every a * b + c below is rounded twice, as on the CPU
// (built with -ffp-contract=off).
#include <cfloat>
#include <cmath>

#include "model/cuda/model_kernels.h"

namespace qvg::cuda {

namespace {

constexpr int kThreads = 256;  // every row kernel: one block of 256 threads per row
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size must be whole warps");

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduces v over the block in a fixed order (warp shuffles, then the warps'
/// partials in warp 0); every thread gets the result. `scratch` holds 32 T.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const T r = scratch[0];
  __syncthreads();  // scratch may be reused right after
  return r;
}

__device__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi); the CPU's order of operations
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__global__ void bias_act_kernel(float* y, int64_t rows, int cols, const float* bias, Act act) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = y[i] + bias[i % cols];
    if (act == Act::silu)
      v = v / (1.0f + expf(-v));
    else if (act == Act::gelu_tanh)
      v = gelu_tanh(v);
    y[i] = v;
  }
}

// grid: rows; block: kThreads
__global__ void ln_modulate_kernel(const float* h, int d, double eps, const float* shift, const float* scale,
                                   float* out) {
  __shared__ double scratch[32];
  const float* x = h + blockIdx.x * int64_t{d};
  double s = 0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) s += x[j];
  const double mean = block_reduce(s, SumOp{}, 0.0, scratch) / d;
  double v = 0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) v += (x[j] - mean) * (x[j] - mean);
  const double var = block_reduce(v, SumOp{}, 0.0, scratch) / d;
  const float m = static_cast<float>(mean);
  const float rstd = static_cast<float>(1.0 / sqrt(var + eps));
  float* y = out + blockIdx.x * int64_t{d};
  for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] = ((x[j] - m) * rstd) * (1.0f + scale[j]) + shift[j];
}

// grid: L (one token per block); block: kThreads; dynamic shared: 2 d floats
__global__ void qkv_post_kernel(const float* qkv, int64_t L, int heads, int head_dim, double eps, const float* bias,
                                const float* norm_q, const float* norm_k, const int32_t* pos, const double* freq,
                                const int32_t* coord, float* q_out, float* kpre_out, float* k_out, float* v_out,
                                int64_t kv_head_stride, int64_t kv_row0) {
  extern __shared__ float sm[];
  __shared__ double scratch[32];
  const int d = heads * head_dim;
  float* sq = sm;      // [d] q of this token, then normalized
  float* sk = sm + d;  // [d] k
  const int64_t n = blockIdx.x;
  const float* row = qkv + n * 3 * d;
  double ssq = 0, ssk = 0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float q = row[j] + bias[j], k = row[d + j] + bias[d + j];
    sq[j] = q;
    sk[j] = k;
    ssq += static_cast<double>(q) * q;
    ssk += static_cast<double>(k) * k;
  }
  ssq = block_reduce(ssq, SumOp{}, 0.0, scratch);
  ssk = block_reduce(ssk, SumOp{}, 0.0, scratch);
  const float inv_q = static_cast<float>(1.0 / sqrt(ssq / d + eps));
  const float inv_k = static_cast<float>(1.0 / sqrt(ssk / d + eps));
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    sq[j] = (sq[j] * inv_q) * norm_q[j];
    sk[j] = (sk[j] * inv_k) * norm_k[j];
  }
  __syncthreads();
  const int32_t* p = pos + n * 3;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const int h = j / head_dim, dd = j % head_dim, pair = dd / 2;
    const int a = h * head_dim + 2 * pair;  // channels (a, a + 1) form the pair
    const double angle = static_cast<double>(p[coord[pair]]) * freq[pair];
    const double cs = cos(angle), sn = sin(angle);
    const double qa = sq[a], qb = sq[a + 1], ka = sk[a], kb = sk[a + 1];
    // (a + ib) * (cos + i sin), as apply_rope
    const float qr = static_cast<float>((dd & 1) ? qa * sn + qb * cs : qa * cs - qb * sn);
    const float kr = static_cast<float>((dd & 1) ? ka * sn + kb * cs : ka * cs - kb * sn);
    const int64_t own = (h * L + n) * head_dim + dd;
    const int64_t kv = h * kv_head_stride + (kv_row0 + n) * head_dim + dd;
    q_out[own] = qr;
    kpre_out[own] = sk[j];
    k_out[kv] = kr;
    v_out[kv] = row[2 * d + j] + bias[2 * d + j];
  }
}

// grid: rows; block: kThreads
__global__ void softmax_rows_kernel(float* s, int64_t n, float divisor) {
  __shared__ float scratch[32];
  float* row = s + blockIdx.x * n;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j] / divisor);
  mx = block_reduce(mx, MaxOp{}, -FLT_MAX, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(row[j] / divisor - mx);
    row[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, SumOp{}, 0.0f, scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) row[j] = row[j] / sum;
}

__global__ void gated_residual_kernel(float* h, const float* y, int64_t rows, int d, const float* bias,
                                      const float* gate) {
  const int64_t n = rows * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int j = static_cast<int>(i % d);
    h[i] = h[i] + (y[i] + bias[j]) * gate[j];
  }
}

/// Blocks for a grid-stride loop over n elements.
unsigned elementwise_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

bool grid_ok(int64_t rows) { return rows >= 0 && rows <= 0x7fffffff; }

}  // namespace

cudaError_t launch_bias_act(float* y, int64_t rows, int cols, const float* bias, Act act, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  bias_act_kernel<<<elementwise_blocks(rows * cols), kThreads, 0, stream>>>(y, rows, cols, bias, act);
  return cudaGetLastError();
}

cudaError_t launch_ln_modulate(const float* h, int64_t rows, int d, double eps, const float* shift,
                               const float* scale, float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (!grid_ok(rows) || d <= 0) return cudaErrorInvalidValue;
  ln_modulate_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(h, d, eps, shift, scale, out);
  return cudaGetLastError();
}

cudaError_t launch_qkv_post(const float* qkv, int64_t L, int heads, int head_dim, double eps, const float* bias,
                            const float* norm_q, const float* norm_k, const int32_t* pos, const double* freq,
                            const int32_t* coord, float* q_out, float* kpre_out, float* k_out, float* v_out,
                            int64_t kv_head_stride, int64_t kv_row0, cudaStream_t stream) {
  if (L == 0) return cudaSuccess;
  if (!grid_ok(L) || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  const size_t shared = 2 * sizeof(float) * static_cast<size_t>(heads) * head_dim;
  if (shared > 48 * 1024) return cudaErrorInvalidValue;  // d up to 6,144 channels
  qkv_post_kernel<<<static_cast<unsigned>(L), kThreads, shared, stream>>>(
      qkv, L, heads, head_dim, eps, bias, norm_q, norm_k, pos, freq, coord, q_out, kpre_out, k_out, v_out,
      kv_head_stride, kv_row0);
  return cudaGetLastError();
}

cudaError_t launch_softmax_rows(float* s, int64_t rows, int64_t n, float divisor, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  if (!grid_ok(rows)) return cudaErrorInvalidValue;
  softmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(s, n, divisor);
  return cudaGetLastError();
}

cudaError_t launch_gated_residual(float* h, const float* y, int64_t rows, int d, const float* bias,
                                  const float* gate, cudaStream_t stream) {
  if (rows <= 0 || d <= 0) return cudaSuccess;
  gated_residual_kernel<<<elementwise_blocks(rows * d), kThreads, 0, stream>>>(h, y, rows, d, bias, gate);
  return cudaGetLastError();
}

}  // namespace qvg::cuda
