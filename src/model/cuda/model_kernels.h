// The reference model's own CUDA kernels (everything of MODEL.md §6 that is
// not a matmul; cuBLAS does those): host launchers that take a stream and
// return the launch's cudaError_t. Plain C++ (no device code), so the host
// side (model_cuda.cpp, C++20) can include it.
//
// Numerics follow the CPU runtime (src/model/model.cpp): norm statistics in
// float64 rounded to fp32, RoPE angles and rotation in float64, elementwise
// math in fp32 in the CPU's order; model_kernels.cu is compiled with
// -fmad=false so no multiply-add is fused. Every kernel is deterministic
// (fixed-order block reductions, no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qvg::cuda {

/// Elementwise function after a bias add.
enum class Act { none, silu, gelu_tanh };

/// y[r, j] = act(y[r, j] + bias[j]), in place.
/// @param y     [rows, cols]
/// @param bias  [cols]
cudaError_t launch_bias_act(float* y, int64_t rows, int cols, const float* bias, Act act, cudaStream_t stream);

/// LayerNorm without affine (biased variance, eps) of each row, then adaLN
/// modulation: out = ((x - mean) * rstd) * (1 + scale) + shift.
/// @param h      [rows, d]
/// @param shift  [d], scale [d]
/// @param out    [rows, d]
cudaError_t launch_ln_modulate(const float* h, int64_t rows, int d, double eps, const float* shift,
                               const float* scale, float* out, cudaStream_t stream);

/// After the fused Q/K/V projection of one layer: bias, RMSNorm of q and k
/// over all d = heads * head_dim channels, the head split, and RoPE of q and
/// k (interleaved pairs (2p, 2p+1); pair p turns by pos[n][coord[p]] * freq[p]).
/// @param qkv        [L, 3 d]: x Wq^T | x Wk^T | x Wv^T (no bias yet)
/// @param bias       [3 d]: bq | bk | bv
/// @param norm_q     [d], norm_k [d]: RMSNorm weights
/// @param pos        [L, 3] int32 (frame, row, col) of each token
/// @param freq       [head_dim / 2] float64, coord [head_dim / 2] in 0..2
/// @param q_out      [heads, L, head_dim]: q after RoPE
/// @param kpre_out   [heads, L, head_dim]: k after RMSNorm, before RoPE
/// @param k_out      head h, token n at k_out[h * kv_head_stride + (kv_row0 + n) * head_dim]: k after RoPE
/// @param v_out      same layout as k_out: v
cudaError_t launch_qkv_post(const float* qkv, int64_t L, int heads, int head_dim, double eps, const float* bias,
                            const float* norm_q, const float* norm_k, const int32_t* pos, const double* freq,
                            const int32_t* coord, float* q_out, float* kpre_out, float* k_out, float* v_out,
                            int64_t kv_head_stride, int64_t kv_row0, cudaStream_t stream);

/// Softmax of each row of s after dividing it by `divisor` (the attention's
/// sqrt(head_dim), divided as the reference does), in place.
/// @param s  [rows, n]
cudaError_t launch_softmax_rows(float* s, int64_t rows, int64_t n, float divisor, cudaStream_t stream);

/// Gated residual: h[r, j] += (y[r, j] + bias[j]) * gate[j].
/// @param h     [rows, d], y [rows, d]
/// @param bias  [d], gate [d]
cudaError_t launch_gated_residual(float* h, const float* y, int64_t rows, int d, const float* bias,
                                  const float* gate, cudaStream_t stream);

}  // namespace qvg::cuda
