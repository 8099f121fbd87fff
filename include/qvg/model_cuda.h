// The reference model's forward pass on a CUDA device (docs/RUNTIME.md, "CUDA
// path"): the same math as Model::forward (docs/MODEL.md §6) with the weights
// uploaded once as fp32, cuBLAS for every matmul (attention scores and
// outputs as strided-batched GEMMs over heads) and small kernels of our own
// for LayerNorm + adaLN modulation, RMSNorm + 3-D RoPE, softmax, GELU-tanh,
// SiLU and the gated residuals.
//
// The KV context of a chunk (post-RoPE K and V of the earlier clean chunks,
// per layer) is uploaded once with set_context and serves every pass of the
// chunk (4 Euler steps + the clean t = 0 pass); each pass writes its own K/V
// behind it on the device. The clean pass's K (pre- and post-RoPE) and V come
// back to the host in LayerKV for StreamingKVCache::append.
//
// Numerics (CudaMath::fp32, the default): matmuls in fp32 without TF32
// (CUBLAS_COMPUTE_32F); norm statistics in float64 rounded to fp32, RoPE
// angles and rotation in float64, no fused multiply-add outside cuBLAS -- as
// the CPU runtime. It matches the golden outputs and the CPU forward to
// ~1e-6 relative (tests/test_model_cuda.cpp). Results are bit-identical from
// run to run on one device (one stream, no atomics).
//
// In builds without CUDA the class exists and its constructor throws
// qvg::Error; it also throws when no device is usable (qvg::cuda_available).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "qvg/model.h"

namespace qvg {

class CudaModel {
 public:
  /// Uploads the model's weights (fp32) to the device. `model` must outlive
  /// this object. Throws qvg::Error without a usable device.
  explicit CudaModel(const Model& model, CudaModelOptions options = {});
  ~CudaModel();
  CudaModel(CudaModel&&) noexcept;
  CudaModel& operator=(CudaModel&&) noexcept;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const Model& model() const;
  const CudaModelOptions& options() const;

  /// Uploads the K/V a chunk attends to (replacing the previous context):
  /// context.k / context.v per layer [heads, N, head_dim], post-RoPE keys; an
  /// empty context (N = 0) is allowed. Validated as Model::forward validates
  /// it; returns after the copy has finished.
  void set_context(const KVContext& context);
  /// The context straight from a streaming cache on the device
  /// (StreamingKVCache::read_device of every layer into this object's K/V
  /// buffers): no host copy of the context; the same values as
  /// set_context(read_context(cache, config)). The cache must fit the model
  /// (qvg::Error otherwise).
  void set_context(const StreamingKVCache& cache);
  /// N of the current context (0 before the first set_context).
  int64_t context_tokens() const;

  /// One chunk through the network against the current context; the same
  /// contract as Model::forward. Synchronous: returns once the velocity
  /// [L, patch_dim] (and layers_out, each HeadTensor [heads, L, head_dim]:
  /// k_pre, k, v, and q when options.record_q) are on the host.
  /// Not thread-safe (one stream and scratch buffers per object).
  std::vector<float> forward(std::span<const float> tokens, float t, int64_t frame_start,
                             std::vector<LayerKV>* layers_out = nullptr, const ForwardOptions& options = {});

  /// set_context(context), then forward: a drop-in for Model::forward.
  std::vector<float> forward(std::span<const float> tokens, float t, int64_t frame_start, const KVContext& context,
                             std::vector<LayerKV>* layers_out = nullptr, const ForwardOptions& options = {});

  /// Device bytes held (weights + context + scratch).
  int64_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qvg
