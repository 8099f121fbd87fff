// The qvg reference video model (docs/MODEL.md) run in C++: a small
// autoregressive video diffusion transformer whose KV cache of clean past
// chunks is a StreamingKVCache, so any codec (bf16, rtn, kivi, quarot, qvg,
// qvg-pro, INT4 variants) can hold it.
//
// Everything is fp32 on the CPU (Eigen matmuls, explicit loops elsewhere),
// threaded over fixed token blocks and heads (bit-identical for any thread
// count); the bf16 weights are widened once at load. The runtime matches the PyTorch
// reference's golden outputs (models/golden/golden.safetensors) to ~3e-6
// (docs/RUNTIME.md, tests/test_model.cpp).
//
// Layouts (MODEL.md §1-2):
//   frames  [T, frame, frame, 3]  (frame, row, column, RGB), model space [-1, 1]
//   tokens  [L, patch_dim]        L = tokens_per_chunk = chunk_frames * grid^2,
//                                 token n = f*grid^2 + r*grid + c, value (py*patch + px)*3 + ch
//   K/V     HeadTensor [heads, tokens, head_dim]
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qvg/cache.h"
#include "qvg/cuda.h"
#include "qvg/rope.h"
#include "qvg/tensor.h"

namespace qvg {

/// Architecture of the reference model (the `config` JSON in the weights'
/// metadata; defaults = the shipped model).
struct ModelConfig {
  int frame = 64;          ///< frame height = width, pixels
  int patch = 4;           ///< patch size, pixels
  int channels = 3;        ///< RGB
  int dim = 256;           ///< model width = heads * head_dim
  int heads = 2;
  int head_dim = 128;
  int layers = 6;
  int mlp_dim = 1024;
  int chunk_frames = 3;    ///< frames per autoregressive chunk
  int freq_dim = 256;      ///< sinusoidal timestep embedding size (even)
  double eps = 1e-6;       ///< LayerNorm and RMSNorm epsilon
  double rope_theta = 10000.0;
  double t_scale = 1000.0; ///< t in [0, 1] is multiplied by this before the sinusoid

  int grid() const { return frame / patch; }  ///< patches per side (16)
  int tokens_per_frame() const { return grid() * grid(); }  ///< 256
  int tokens_per_chunk() const { return tokens_per_frame() * chunk_frames; }  ///< 768
  int patch_dim() const { return patch * patch * channels; }  ///< 48
  int64_t frame_values() const { return int64_t{frame} * frame * channels; }  ///< 12,288
};

/// Throws qvg::Error naming the first inconsistent field.
void validate(const ModelConfig& c);

/// Parses the metadata JSON (`{"frame": 64, ...}`); missing keys keep their
/// defaults, unknown keys are ignored. Throws qvg::Error on malformed JSON.
ModelConfig parse_model_config(const std::string& json);

/// A linear layer: y = x W^T + b, W [out, in] row-major, b [out].
struct Linear {
  int in = 0, out = 0;
  std::vector<float> w, b;
};

/// The weights of one block (names `blocks.{i}.*`).
struct BlockWeights {
  Linear ada;                 ///< [6*dim, dim]: shift/scale/gate attn, shift/scale/gate mlp
  Linear q, k, v, o;          ///< [dim, dim]
  std::vector<float> norm_q;  ///< [dim] RMSNorm weight
  std::vector<float> norm_k;  ///< [dim]
  Linear fc1;                 ///< [mlp_dim, dim]
  Linear fc2;                 ///< [dim, mlp_dim]
};

/// All weights, float32.
struct ModelWeights {
  Linear patch_embed;  ///< [dim, patch_dim]
  Linear t_fc1;        ///< [dim, freq_dim]
  Linear t_fc2;        ///< [dim, dim]
  std::vector<BlockWeights> blocks;
  Linear final_ada;    ///< [2*dim, dim]
  Linear final;        ///< [patch_dim, dim]
};

/// The tensor names and shapes a weights file for `c` must hold (106 for the
/// shipped model), in the order of MODEL.md §3.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_weight_shapes(const ModelConfig& c);

/// What one layer computed for a chunk, each [heads, L, head_dim].
struct LayerKV {
  HeadTensor q;      ///< queries after RoPE (only when ForwardOptions::record_q)
  HeadTensor k_pre;  ///< keys after RMSNorm, before RoPE
  HeadTensor k;      ///< keys after RoPE
  HeadTensor v;      ///< values
};

/// The K/V of earlier (clean) chunks a chunk attends to, per layer:
/// post-RoPE keys and values [heads, N, head_dim]; N = 0 (or no layers at all)
/// for no context. All layers must have the same N.
struct KVContext {
  std::vector<HeadTensor> k, v;
  int64_t tokens() const { return k.empty() ? 0 : k[0].tokens; }
};

struct ForwardOptions {
  bool record_q = false;  ///< fill LayerKV::q
  /// Threads of the pass (0 = all cores). The work is cut into fixed blocks of
  /// 96 tokens (and head x query block in attention) whatever the count, so
  /// the result is bit-identical for any number of threads.
  int threads = 1;
};

/// The reference model with its weights. Immutable after load; forward is
/// const and may run concurrently from several threads.
class Model {
 public:
  /// Loads and validates a weights file: every expected tensor present with its
  /// shape (from the metadata's config, or the defaults when absent), a float
  /// dtype (bf16 as shipped; f16 / f32 accepted), finite values, no unexpected
  /// tensor, `format` metadata (when present) "qvg-reference-video-dit-v1".
  /// Throws qvg::Error naming the file and the tensor.
  static Model load(const std::string& path);

  /// From weights already in memory (validated like load).
  Model(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  /// The file's `__metadata__` (empty when built from memory).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// One chunk through the network (MODEL.md §6).
  /// @param tokens       [L, patch_dim], L = config().tokens_per_chunk()
  /// @param t            the chunk's timestep in [0, 1] (0 = clean)
  /// @param frame_start  absolute index of the chunk's first frame (RoPE time)
  /// @param context      K/V of earlier clean chunks (attended before the
  ///                     chunk's own tokens); may be empty
  /// @param layers_out   if non-null, receives config().layers LayerKV
  /// @return the predicted velocity [L, patch_dim]
  std::vector<float> forward(std::span<const float> tokens, float t, int64_t frame_start,
                             const KVContext& context, std::vector<LayerKV>* layers_out = nullptr,
                             const ForwardOptions& options = {}) const;

  /// RoPE positions (frame, row, col) of a chunk starting at frame_start:
  /// L * 3 int32, token order.
  std::vector<int32_t> chunk_positions(int64_t frame_start) const;
  /// The model's RoPE (3-D, theta, interleaved pairs), for a pre-RoPE cache.
  RopeConfig rope() const { return RopeConfig{RopeMode::wan_3d, config_.rope_theta, RopePairing::interleaved}; }

 private:
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  std::map<std::string, std::string> metadata_;
};

// ---- pixels and tokens -------------------------------------------------------

/// x = u8 / 127.5 - 1 (fp32: division, then subtraction).
std::vector<float> pixels_to_model(std::span<const uint8_t> u8);
/// u8 = round_half_even((clamp(x, -1, 1) + 1) * 127.5) in fp32.
std::vector<uint8_t> model_to_pixels(std::span<const float> x);

/// frames [chunk_frames, frame, frame, 3] -> tokens [L, patch_dim] (MODEL.md §2).
std::vector<float> patchify(std::span<const float> frames, const ModelConfig& c);
/// tokens [L, patch_dim] -> frames [chunk_frames, frame, frame, 3] (inverse of patchify).
std::vector<float> unpatchify(std::span<const float> tokens, const ModelConfig& c);

// ---- the model's KV cache ------------------------------------------------------

/// A cache config for the model: layers, heads, head_dim and chunk_tokens from
/// `c`, codecs from specs (parse_codec_spec, e.g. "qvg", "bf16", "kivi"),
/// keys cached before RoPE (RoPE on read) when pre_rope, else post-RoPE keys.
/// The spec "none" (or "exact") for both K and V gives a lossless cache:
/// float32 tail, no span ever encoded (quant_factor = 2^30); that is the
/// float cache the golden test uses.
CacheConfig model_cache_config(const ModelConfig& c, const std::string& key_spec,
                               const std::string& value_spec, bool pre_rope = true,
                               const SpanPolicy& policy = {});

/// The sinusoidal embedding of t (MODEL.md §4): [cos(a_0..), sin(a_0..)],
/// a_i = (t * t_scale) * exp(-ln(10000) i / (freq_dim / 2)), in fp32 as the
/// reference computes it. Both runtimes (CPU and CUDA) use this one.
std::vector<float> timestep_embedding(float t, const ModelConfig& c);

/// qvg::Error unless the cache has the model's layers, heads and head_dim.
void check_cache_fits(const CacheConfig& cache, const ModelConfig& model);

/// All layers' live K/V (post-RoPE keys) of a cache; empty when nothing has
/// been appended yet. Throws qvg::Error when the cache's layers, heads or dim
/// differ from the model's.
KVContext read_context(const StreamingKVCache& cache, const ModelConfig& c);

/// Appends one clean chunk's K/V (from a t = 0 forward) to every layer:
/// pre-RoPE keys with their positions when the cache does RoPE on read (its
/// RoPE must equal the model's), post-RoPE keys otherwise. Layers are checked
/// before the first append. Returns each layer's AppendReport.
std::vector<AppendReport> append_chunk(StreamingKVCache& cache, const Model& model, const std::vector<LayerKV>& kv,
                  int64_t frame_start);

// ---- sampler ---------------------------------------------------------------------

/// Euler schedule t_0 = 1 > ... > t_steps = 0: s_k = 1 - k/steps,
/// t_k = shift*s_k / (1 + (shift-1)*s_k), in float64 (MODEL.md §8).
std::vector<double> sampler_timesteps(int steps, double shift = 1.0);

/// Standard normal noise [n] from a seed: splitmix64 + Box-Muller in float64,
/// rounded to float32. Deterministic on every platform; NOT torch's generator
/// (golden runs take their noise from the golden file).
std::vector<float> gaussian_noise(int64_t n, uint64_t seed);

/// Matmul precision of the CUDA forward (CudaModel). Everything that is not a
/// matmul (norms, RoPE, softmax, GELU, residuals) is fp32 in every mode.
enum class CudaMath {
  fp32,  ///< cuBLAS CUBLAS_COMPUTE_32F, no TF32: matches the CPU / golden to fp32 accuracy
  tf32,  ///< CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores, 10-bit mantissa inputs
  bf16,  ///< CUBLAS_COMPUTE_32F_FAST_16BF: tensor cores with inputs down-converted to bf16 *or
         ///< better*: cuBLAS 13.0 on the H200 picks the same TF32 kernels as tf32 here
};
/// "fp32", "tf32", "bf16"; parse_cuda_math throws qvg::Error for anything else.
const char* cuda_math_name(CudaMath m);
CudaMath parse_cuda_math(const std::string& name);
/// "cpu", "cuda"; parse_backend throws qvg::Error for anything else.
const char* backend_name(Backend b);
Backend parse_backend(const std::string& name);

/// Options of the CUDA forward (include/qvg/model_cuda.h).
struct CudaModelOptions {
  CudaMath math = CudaMath::fp32;  ///< matmul precision; fp32 = the golden's accuracy
  int device = -1;                 ///< CUDA device ordinal; -1 = the current device
};

struct SamplerConfig {
  int steps = 4;       ///< Euler steps per chunk
  double shift = 1.0;  ///< schedule shift (1 = uniform)
  /// Where the network runs. cuda: a CudaModel (weights uploaded once, the
  /// chunk's context uploaded -- or read on the device, see
  /// device_context_read -- once per chunk, the clean pass's K/V downloaded
  /// for the append); the cache stays the StreamingKVCache. Without a
  /// CUDA build or device the Sampler's constructor throws qvg::Error.
  Backend backend = Backend::cpu;
  CudaModelOptions cuda;  ///< used when backend == cuda
  int threads = 1;     ///< threads of each network pass (ForwardOptions::threads; 0 = all cores)
  /// With backend cuda and a cache whose codecs run on the GPU
  /// (CacheOptions::backend == cuda): read the context on the device
  /// (StreamingKVCache::read_device straight into the network's K/V buffers)
  /// instead of reading it on the host and uploading it. Same values.
  bool device_context_read = true;
};

/// Timing and cache work of one chunk.
struct ChunkReport {
  int64_t chunk = 0;          ///< index of the chunk in the video (context chunks included)
  int64_t frame_start = 0;
  double read_seconds = 0;    ///< reading (decoding) the cache; on cuda also its upload to the device
  double forward_seconds = 0; ///< network passes (steps + the clean pass); on cuda up to the
                              ///< clean K/V on the host (every pass synchronizes)
  double append_seconds = 0;  ///< appending (and encoding spans)
  std::vector<AppendReport> appends;  ///< per layer: spans encoded, chunks evicted
};

class CudaModel;  // qvg/model_cuda.h

/// Chunk-by-chunk generation (MODEL.md §7-8) with the KV cache in a
/// StreamingKVCache. The cache is read once per chunk (it is read-only during
/// the chunk's Euler steps) and the chunk's clean K/V are appended after it.
/// With config.backend == Backend::cuda the network runs on the GPU (the
/// context read from the cache is uploaded once per chunk).
class Sampler {
 public:
  /// The cache must have the model's layers, heads and head_dim, and start
  /// empty (frame positions count from the sampler's first chunk).
  Sampler(const Model& model, StreamingKVCache& cache, SamplerConfig config = {});
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) = delete;

  /// Encodes a real chunk as clean context (one t = 0 pass, then append).
  /// @param frames     [chunk_frames, frame, frame, 3], model space
  /// @param layers_out if non-null, the chunk's per-layer Q/K/V (q recorded)
  ChunkReport add_context(std::span<const float> frames, std::vector<LayerKV>* layers_out = nullptr);

  /// Generates the next chunk from `noise` [L, patch_dim] (t = 1) by Euler
  /// steps, clamps it, appends its clean K/V, and returns its frames
  /// [chunk_frames, frame, frame, 3] in model space.
  /// @param steps_out  if non-null, receives x after each Euler step
  ///                   (before the clamp), each [L, patch_dim]
  std::vector<float> generate(std::span<const float> noise, ChunkReport* report = nullptr,
                              std::vector<std::vector<float>>* steps_out = nullptr);

  int64_t chunks_done() const { return chunks_; }
  int64_t next_frame() const { return chunks_ * model_.config().chunk_frames; }
  const std::vector<double>& timesteps() const { return ts_; }
  Backend backend() const { return config_.backend; }

 private:
  /// Reads the cache for a chunk (and uploads it to the device on cuda).
  KVContext read_chunk_context(ChunkReport& rep);
  /// One network pass on the configured backend.
  std::vector<float> forward(std::span<const float> x, float t, int64_t frame_start, const KVContext& ctx,
                             std::vector<LayerKV>* layers_out, bool record_q = false);

  const Model& model_;
  StreamingKVCache& cache_;
  SamplerConfig config_;
  std::vector<double> ts_;
  int64_t chunks_ = 0;
  std::unique_ptr<CudaModel> gpu_;  ///< set when config_.backend == cuda
};

}  // namespace qvg
