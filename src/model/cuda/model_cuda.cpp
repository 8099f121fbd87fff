// CudaModel (include/qvg/model_cuda.h): the reference model's forward pass on
// a CUDA device. Host side: weights, buffers, cuBLAS calls, the order of
// MODEL.md §6. The kernels are in model_kernels.cu.
//
// Device layouts (fp32, row-major):
//   h, y, tmp, o   [L, d]                 the residual stream and scratch
//   qkv            [L, 3 d]               y [Wq | Wk | Wv]^T, before the bias
//   q_all, kpre    [layers, H, L, hd]     this pass's queries (post-RoPE) and pre-RoPE keys
//   kall, vall     [layers, H, N, hd]     N = N0 + L: rows 0..N0-1 the context (set_context),
//                                         rows N0.. this pass's post-RoPE keys / values
//   scores         [H, L, N]              one layer's attention probabilities
//   mod            [(6 layers + 2) d]     every block's adaLN vectors, then the final shift/scale
#include "qvg/model_cuda.h"

#include <cublas_v2.h>

#include <cmath>
#include <string>

#include "cuda/check.h"
#include "model/cuda/model_kernels.h"

/// Throws qvg::Error naming the call, file:line and cuBLAS's message.
#define QVG_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                               \
    const cublasStatus_t qvg_st_ = (expr);                                                           \
    if (qvg_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      ::qvg::detail::fail(#expr, "cuBLAS error in ", #expr, " at ", __FILE__, ":", __LINE__, ": ",   \
                          cublasGetStatusName(qvg_st_), ": ", cublasGetStatusString(qvg_st_));       \
  } while (0)

namespace qvg {

using cuda::DeviceBuffer;

namespace {

/// A linear layer on the device: W [out, in], b [out].
struct DevLinear {
  int in = 0, out = 0;
  DeviceBuffer<float> w, b;
};

struct DevBlock {
  DevLinear qkv;  ///< [3 d, d]: q, k, v rows stacked
  DevLinear o, fc1, fc2;
  DeviceBuffer<float> norm_q, norm_k;
};


cublasComputeType_t compute_type(CudaMath m) {
  switch (m) {
    case CudaMath::fp32:
      return CUBLAS_COMPUTE_32F;
    case CudaMath::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case CudaMath::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace

struct CudaModel::Impl {
  const Model* model = nullptr;
  CudaModelOptions options;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;

  DevLinear patch_embed, t_fc1, t_fc2, cond_all, final;
  std::vector<DevBlock> blocks;
  DeviceBuffer<double> rope_freq;    // [hd / 2]
  DeviceBuffer<int32_t> rope_coord;  // [hd / 2]

  int64_t n0 = 0;  // context tokens
  DeviceBuffer<float> kall, vall, scores;
  DeviceBuffer<float> tokens, e, c1, cond, mod, h, y, qkv, o, tmp, mlp, out, q_all, kpre_all;
  DeviceBuffer<int32_t> pos;

  ~Impl() {
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }

  /// Sizes kall / vall / scores for a context of N0 tokens (rows 0..N0-1 of
  /// each [layer][head] block of N = N0 + L rows).
  void size_context(int64_t N0) {
    const ModelConfig& c = model->config();
    const int64_t L = c.tokens_per_chunk(), N = N0 + L, H = c.heads, hd = c.head_dim;
    const size_t kv = static_cast<size_t>(c.layers * H * N * hd);
    kall.resize(kv);
    vall.resize(kv);
    scores.resize(static_cast<size_t>(H * L * N));
    n0 = N0;
  }

  void use_device() const {
    if (options.device >= 0) QVG_CUDA_CHECK(cudaSetDevice(options.device));
  }

  template <typename T>
  void upload(DeviceBuffer<T>& dst, const std::vector<T>& src) {
    dst.upload(src.data(), src.size(), stream);
  }

  DevLinear upload_linear(const std::vector<const Linear*>& parts) {
    DevLinear d;
    std::vector<float> w, b;
    for (const Linear* l : parts) {
      d.in = l->in;
      d.out += l->out;
      w.insert(w.end(), l->w.begin(), l->w.end());
      b.insert(b.end(), l->b.begin(), l->b.end());
    }
    upload(d.w, w);
    upload(d.b, b);
    return d;
  }

  /// y [n, l.out] = x [n, l.in] W^T (no bias). Row-major y^T = W x^T in
  /// cuBLAS's column-major terms: C (out x n) = op(A)=W^T^T (out x in) * B (in x n).
  void gemm_xwt(const float* x, int64_t n, const DevLinear& l, float* yout) {
    const float one = 1.0f, zero = 0.0f;
    QVG_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, l.out, static_cast<int>(n), l.in, &one, l.w.get(),
                                  CUDA_R_32F, l.in, x, CUDA_R_32F, l.in, &zero, yout, CUDA_R_32F, l.out, compute,
                                  CUBLAS_GEMM_DEFAULT));
  }

  void check_context(const KVContext& context) const {
    const ModelConfig& c = model->config();
    const int64_t N0 = context.tokens();
    if (context.k.empty() && context.v.empty()) return;
    QVG_CHECK(context.k.size() == static_cast<size_t>(c.layers) && context.v.size() == context.k.size(),
              "CUDA model forward: context has ", context.k.size(), " / ", context.v.size(), " layers, model has ",
              c.layers);
    for (int i = 0; i < c.layers; ++i) {
      const HeadTensor& k = context.k[static_cast<size_t>(i)];
      const HeadTensor& v = context.v[static_cast<size_t>(i)];
      QVG_CHECK(k.heads == c.heads && k.dim == c.head_dim && k.tokens == N0 && v.same_shape(k) &&
                    k.data.size() == static_cast<size_t>(k.numel()) && v.data.size() == k.data.size(),
                "CUDA model forward: context layer ", i, " is K [", k.heads, ", ", k.tokens, ", ", k.dim, "], V [",
                v.heads, ", ", v.tokens, ", ", v.dim, "], expected [", c.heads, ", ", N0, ", ", c.head_dim, "]");
    }
  }
};

CudaModel::CudaModel(const Model& model, CudaModelOptions options) : impl_(std::make_unique<Impl>()) {
  std::string why;
  QVG_CHECK(cuda_available(&why), "CUDA model: ", why);
  Impl& m = *impl_;
  m.model = &model;
  m.options = options;
  if (options.device >= 0) {
    int n = 0;
    QVG_CUDA_CHECK(cudaGetDeviceCount(&n));
    QVG_CHECK(options.device < n, "CUDA model: device ", options.device, " does not exist (", n, " devices)");
  }
  m.use_device();
  m.compute = compute_type(options.math);
  QVG_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  QVG_CUBLAS_CHECK(cublasCreate(&m.blas));
  QVG_CUBLAS_CHECK(cublasSetStream(m.blas, m.stream));
  // fp32: no TF32 anywhere (the compute type says so; the math mode too).
  QVG_CUBLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));

  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  m.patch_embed = m.upload_linear({&W.patch_embed});
  m.t_fc1 = m.upload_linear({&W.t_fc1});
  m.t_fc2 = m.upload_linear({&W.t_fc2});
  std::vector<const Linear*> conds;
  for (const BlockWeights& b : W.blocks) conds.push_back(&b.ada);
  conds.push_back(&W.final_ada);
  m.cond_all = m.upload_linear(conds);  // [(6 layers + 2) d, d]
  m.final = m.upload_linear({&W.final});
  for (const BlockWeights& b : W.blocks) {
    DevBlock d;
    d.qkv = m.upload_linear({&b.q, &b.k, &b.v});
    d.o = m.upload_linear({&b.o});
    d.fc1 = m.upload_linear({&b.fc1});
    d.fc2 = m.upload_linear({&b.fc2});
    m.upload(d.norm_q, b.norm_q);
    m.upload(d.norm_k, b.norm_k);
    m.blocks.push_back(std::move(d));
  }

  // RoPE pairs as apply_rope builds them (the model's RoPE: 3-D, interleaved):
  // time, height, width parts, pair j of a part of n channels turns at theta^(-2j/n).
  const RopeConfig rc = model.rope();
  QVG_CHECK(rc.mode == RopeMode::wan_3d && rc.pairing == RopePairing::interleaved,
            "CUDA model: only the 3-D interleaved RoPE of the reference model is implemented");
  const WanRopeSplit split = wan_rope_split(c.head_dim);
  std::vector<double> freq;
  std::vector<int32_t> coord;
  int coord_i = 0;
  for (int n : {split.time, split.height, split.width}) {
    for (int j = 0; j < n / 2; ++j) {
      freq.push_back(1.0 / std::pow(rc.theta, static_cast<double>(2 * j) / static_cast<double>(n)));
      coord.push_back(coord_i);
    }
    ++coord_i;
  }
  QVG_CHECK(freq.size() * 2 == static_cast<size_t>(c.head_dim), "CUDA model: RoPE parts of head_dim ", c.head_dim,
            " are not whole pairs");
  m.upload(m.rope_freq, freq);
  m.upload(m.rope_coord, coord);

  const size_t L = static_cast<size_t>(c.tokens_per_chunk()), d = static_cast<size_t>(c.dim);
  const size_t per_layer = static_cast<size_t>(c.heads) * L * c.head_dim;
  m.tokens.resize(L * c.patch_dim());
  m.e.resize(static_cast<size_t>(c.freq_dim));
  m.c1.resize(d);
  m.cond.resize(d);
  m.mod.resize(static_cast<size_t>(m.cond_all.out));
  m.h.resize(L * d);
  m.y.resize(L * d);
  m.qkv.resize(3 * L * d);
  m.o.resize(L * d);
  m.tmp.resize(L * d);
  m.mlp.resize(L * c.mlp_dim);
  m.out.resize(L * c.patch_dim());
  m.q_all.resize(per_layer * c.layers);
  m.kpre_all.resize(per_layer * c.layers);
  m.pos.resize(L * 3);
  set_context(KVContext{});  // N0 = 0; allocates kall / vall / scores
}

CudaModel::~CudaModel() = default;
CudaModel::CudaModel(CudaModel&&) noexcept = default;
CudaModel& CudaModel::operator=(CudaModel&&) noexcept = default;

const Model& CudaModel::model() const { return *impl_->model; }
const CudaModelOptions& CudaModel::options() const { return impl_->options; }
int64_t CudaModel::context_tokens() const { return impl_->n0; }

int64_t CudaModel::device_bytes() const {
  const Impl& m = *impl_;
  int64_t b = 0;
  auto lin = [&](const DevLinear& l) { b += static_cast<int64_t>(l.w.bytes() + l.b.bytes()); };
  lin(m.patch_embed), lin(m.t_fc1), lin(m.t_fc2), lin(m.cond_all), lin(m.final);
  for (const DevBlock& k : m.blocks) {
    lin(k.qkv), lin(k.o), lin(k.fc1), lin(k.fc2);
    b += static_cast<int64_t>(k.norm_q.bytes() + k.norm_k.bytes());
  }
  for (const DeviceBuffer<float>* x : {&m.kall, &m.vall, &m.scores, &m.tokens, &m.e, &m.c1, &m.cond, &m.mod, &m.h,
                                       &m.y, &m.qkv, &m.o, &m.tmp, &m.mlp, &m.out, &m.q_all, &m.kpre_all})
    b += static_cast<int64_t>(x->bytes());
  return b + static_cast<int64_t>(m.rope_freq.bytes() + m.rope_coord.bytes() + m.pos.bytes());
}

void CudaModel::set_context(const KVContext& context) {
  Impl& m = *impl_;
  m.check_context(context);
  m.use_device();
  const ModelConfig& c = m.model->config();
  const int64_t N0 = context.tokens(), N = N0 + c.tokens_per_chunk(), H = c.heads, hd = c.head_dim;
  m.size_context(N0);
  if (N0 > 0) {
    for (int li = 0; li < c.layers; ++li)
      for (int64_t hh = 0; hh < H; ++hh) {
        const size_t at = static_cast<size_t>(((li * H + hh) * N) * hd), n = static_cast<size_t>(N0 * hd) * 4;
        QVG_CUDA_CHECK(cudaMemcpyAsync(m.kall.get() + at, context.k[static_cast<size_t>(li)].head(hh), n,
                                       cudaMemcpyHostToDevice, m.stream));
        QVG_CUDA_CHECK(cudaMemcpyAsync(m.vall.get() + at, context.v[static_cast<size_t>(li)].head(hh), n,
                                       cudaMemcpyHostToDevice, m.stream));
      }
  }
  QVG_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaModel::set_context(const StreamingKVCache& cache) {
  Impl& m = *impl_;
  const ModelConfig& c = m.model->config();
  check_cache_fits(cache.config(), c);
  m.use_device();
  const int64_t N0 = cache.chunks_appended(0) == 0 ? 0 : cache.live_tokens(0);
  for (int li = 1; li < c.layers; ++li)
    QVG_CHECK((cache.chunks_appended(li) == 0 ? 0 : cache.live_tokens(li)) == N0, "CUDA model: cache layer ", li,
              " holds a different number of tokens than layer 0 (", N0, ")");
  const int64_t N = N0 + c.tokens_per_chunk(), H = c.heads, hd = c.head_dim;
  m.size_context(N0);
  if (N0 > 0)
    for (int li = 0; li < c.layers; ++li) {
      const size_t at = static_cast<size_t>(li * H * N * hd);
      cache.read_device(li, m.kall.get() + at, m.vall.get() + at, N, m.stream);
    }
  QVG_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

std::vector<float> CudaModel::forward(std::span<const float> tokens, float t, int64_t frame_start,
                                      const KVContext& context, std::vector<LayerKV>* layers_out,
                                      const ForwardOptions& options) {
  set_context(context);
  return forward(tokens, t, frame_start, layers_out, options);
}

std::vector<float> CudaModel::forward(std::span<const float> tokens, float t, int64_t frame_start,
                                      std::vector<LayerKV>* layers_out, const ForwardOptions& options) {
  Impl& m = *impl_;
  const Model& model = *m.model;
  const ModelConfig& c = model.config();
  const int64_t L = c.tokens_per_chunk();
  const int d = c.dim, H = c.heads, hd = c.head_dim;
  QVG_CHECK(tokens.size() == static_cast<size_t>(L * c.patch_dim()), "CUDA model forward: tokens hold ",
            tokens.size(), " values, a chunk needs ", L, " x ", c.patch_dim());
  QVG_CHECK(std::isfinite(t) && t >= 0.0f && t <= 1.0f, "CUDA model forward: t must be in [0, 1], got ", t);
  QVG_CHECK(frame_start >= 0, "CUDA model forward: negative frame_start ", frame_start);
  m.use_device();
  cudaStream_t s = m.stream;
  const int64_t N0 = m.n0, N = N0 + L;

  m.tokens.upload(tokens.data(), tokens.size(), s);
  const std::vector<float> e = timestep_embedding(t, c);
  m.e.upload(e.data(), e.size(), s);
  const std::vector<int32_t> pos = model.chunk_positions(frame_start);
  m.pos.upload(pos.data(), pos.size(), s);

  // Timestep conditioning: c = SiLU(t_fc2(SiLU(t_fc1(e)))); every block's
  // adaLN vectors and the final shift/scale in one GEMM.
  m.gemm_xwt(m.e.get(), 1, m.t_fc1, m.c1.get());
  QVG_CUDA_CHECK(cuda::launch_bias_act(m.c1.get(), 1, d, m.t_fc1.b.get(), cuda::Act::silu, s));
  m.gemm_xwt(m.c1.get(), 1, m.t_fc2, m.cond.get());
  QVG_CUDA_CHECK(cuda::launch_bias_act(m.cond.get(), 1, d, m.t_fc2.b.get(), cuda::Act::silu, s));
  m.gemm_xwt(m.cond.get(), 1, m.cond_all, m.mod.get());
  QVG_CUDA_CHECK(cuda::launch_bias_act(m.mod.get(), 1, m.cond_all.out, m.cond_all.b.get(), cuda::Act::none, s));

  m.gemm_xwt(m.tokens.get(), L, m.patch_embed, m.h.get());
  QVG_CUDA_CHECK(cuda::launch_bias_act(m.h.get(), L, d, m.patch_embed.b.get(), cuda::Act::none, s));

  const float sqrt_d = static_cast<float>(std::sqrt(static_cast<double>(hd)));
  const float one = 1.0f, zero = 0.0f;
  const int64_t per_layer = static_cast<int64_t>(H) * L * hd, kv_layer = static_cast<int64_t>(H) * N * hd;
  for (int li = 0; li < c.layers; ++li) {
    const DevBlock& B = m.blocks[static_cast<size_t>(li)];
    const float* md = m.mod.get() + static_cast<int64_t>(li) * 6 * d;
    const float *shift_a = md, *scale_a = md + d, *gate_a = md + 2 * d;
    const float *shift_m = md + 3 * d, *scale_m = md + 4 * d, *gate_m = md + 5 * d;
    float* q = m.q_all.get() + li * per_layer;
    float* kpre = m.kpre_all.get() + li * per_layer;
    float* K = m.kall.get() + li * kv_layer;
    float* V = m.vall.get() + li * kv_layer;

    QVG_CUDA_CHECK(cuda::launch_ln_modulate(m.h.get(), L, d, c.eps, shift_a, scale_a, m.y.get(), s));
    m.gemm_xwt(m.y.get(), L, B.qkv, m.qkv.get());
    QVG_CUDA_CHECK(cuda::launch_qkv_post(m.qkv.get(), L, H, hd, c.eps, B.qkv.b.get(), B.norm_q.get(),
                                         B.norm_k.get(), m.pos.get(), m.rope_freq.get(), m.rope_coord.get(), q, kpre,
                                         K, V, N * hd, N0, s));
    // Scores per head, row-major S_h [L, N] = q_h K_h^T: column-major
    // S_h^T (N x L) = K_h (N x hd, stored as hd x N) ^T * q_h^T (hd x L).
    QVG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        m.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(L), hd, &one, K, CUDA_R_32F, hd,
        N * hd, q, CUDA_R_32F, hd, L * hd, &zero, m.scores.get(), CUDA_R_32F, static_cast<int>(N), L * N, H,
        m.compute, CUBLAS_GEMM_DEFAULT));
    QVG_CUDA_CHECK(cuda::launch_softmax_rows(m.scores.get(), static_cast<int64_t>(H) * L, N, sqrt_d, s));
    // o[:, h hd : (h+1) hd] = P_h V_h: column-major o_h^T (hd x L, ld d) =
    // V_h^T (hd x N, ld hd) * P_h^T (N x L, ld N).
    QVG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        m.blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, static_cast<int>(L), static_cast<int>(N), &one, V, CUDA_R_32F, hd,
        N * hd, m.scores.get(), CUDA_R_32F, static_cast<int>(N), L * N, &zero, m.o.get(), CUDA_R_32F, d, hd, H,
        m.compute, CUBLAS_GEMM_DEFAULT));
    m.gemm_xwt(m.o.get(), L, B.o, m.tmp.get());
    QVG_CUDA_CHECK(cuda::launch_gated_residual(m.h.get(), m.tmp.get(), L, d, B.o.b.get(), gate_a, s));

    QVG_CUDA_CHECK(cuda::launch_ln_modulate(m.h.get(), L, d, c.eps, shift_m, scale_m, m.y.get(), s));
    m.gemm_xwt(m.y.get(), L, B.fc1, m.mlp.get());
    QVG_CUDA_CHECK(cuda::launch_bias_act(m.mlp.get(), L, c.mlp_dim, B.fc1.b.get(), cuda::Act::gelu_tanh, s));
    m.gemm_xwt(m.mlp.get(), L, B.fc2, m.tmp.get());
    QVG_CUDA_CHECK(cuda::launch_gated_residual(m.h.get(), m.tmp.get(), L, d, B.fc2.b.get(), gate_m, s));
  }
  const float* fm = m.mod.get() + static_cast<int64_t>(c.layers) * 6 * d;  // shift, scale
  QVG_CUDA_CHECK(cuda::launch_ln_modulate(m.h.get(), L, d, c.eps, fm, fm + d, m.y.get(), s));
  m.gemm_xwt(m.y.get(), L, m.final, m.out.get());
  QVG_CUDA_CHECK(cuda::launch_bias_act(m.out.get(), L, c.patch_dim(), m.final.b.get(), cuda::Act::none, s));

  std::vector<float> velocity(static_cast<size_t>(L * c.patch_dim()));
  m.out.download(velocity.data(), velocity.size(), s);
  if (layers_out) {
    layers_out->assign(static_cast<size_t>(c.layers), LayerKV{});
    const size_t bytes = static_cast<size_t>(L * hd) * 4;
    for (int li = 0; li < c.layers; ++li) {
      LayerKV& r = (*layers_out)[static_cast<size_t>(li)];
      r.k_pre = HeadTensor(H, L, hd);
      r.k = HeadTensor(H, L, hd);
      r.v = HeadTensor(H, L, hd);
      QVG_CUDA_CHECK(cudaMemcpyAsync(r.k_pre.data.data(), m.kpre_all.get() + li * per_layer, per_layer * 4,
                                     cudaMemcpyDeviceToHost, s));
      if (options.record_q) {
        r.q = HeadTensor(H, L, hd);
        QVG_CUDA_CHECK(cudaMemcpyAsync(r.q.data.data(), m.q_all.get() + li * per_layer, per_layer * 4,
                                       cudaMemcpyDeviceToHost, s));
      }
      for (int hh = 0; hh < H; ++hh) {
        const int64_t at = li * kv_layer + (hh * N + N0) * hd;
        QVG_CUDA_CHECK(cudaMemcpyAsync(r.k.head(hh), m.kall.get() + at, bytes, cudaMemcpyDeviceToHost, s));
        QVG_CUDA_CHECK(cudaMemcpyAsync(r.v.head(hh), m.vall.get() + at, bytes, cudaMemcpyDeviceToHost, s));
      }
    }
  }
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
  return velocity;
}

}  // namespace qvg
