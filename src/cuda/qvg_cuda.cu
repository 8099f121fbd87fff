// The QVG/RTN backend on the GPU outside k-means (kmeans_cuda.cu): parts
// on the device, the shape check, quantization, the fused decode, and the
// Encoder's stage loop. Kernels: qvg_kernels.cuh, decode_lines.cuh,
// decode_cq.cuh (code=cq).
#include <algorithm>
#include <type_traits>

#include "core/codecs.h"
#include "cuda/decode_cq.cuh"
#include "cuda/decode_lines.cuh"
#include "cuda/encode_cq.cuh"
#include "cuda/dispatch.h"
#include "cuda/qvg_cuda.h"
#include "cuda/qvg_kernels.cuh"
#include "qvg/methods.h"
#include "qvg/qvg_steps.h"

namespace qvg::cuda {

namespace {

constexpr int kThreads = 256;

// The tiled encode kernels (qvg_kernels.cuh) cover up to kTileMaxStages
// stages of BF16 centroids (with D = 64 or 128, as k-means needs) and heads of
// fewer than 2^30 values (32-bit offsets); the one-thread-per-16-values
// kernels cover the rest. (The encoder quantizes FP8-centroid tensors with
// their centroids widened to BF16, so through the tiled kernels too.)
bool encode_tile_ok(const QvgShape& sh) {
  return !sh.fp8_centroids && sh.stages <= kTileMaxStages && (sh.stages == 0 || sh.dim == 64 || sh.dim == 128) &&
         sh.heads <= 65535 && sh.tokens * sh.dim < (int64_t{1} << 30);
}

dim3 encode_tile_grid(const QvgShape& sh) {
  constexpr int64_t kPerBlock = int64_t{kEncTileThreads} * kEncTileUnits;
  const int64_t units = sh.tokens * (sh.dim / 16);
  return dim3(static_cast<unsigned>((units + kPerBlock - 1) / kPerBlock), static_cast<unsigned>(sh.heads));
}

/// Calls f(D, S) with the template constants of the tiled encode kernels for
/// sh (encode_tile_ok): without stages D is unused (0).
template <typename F>
void with_encode_tile(const QvgShape& sh, F&& f) {
  if (sh.stages == 0) return f(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
  with_head_dim(sh.dim, [&](auto d) {
    with_stages(sh.stages, [&](auto st) {
      if constexpr (decltype(st)::value > 0) f(d, st);
    });
  });
}

/// Per-head max |x minus its stages| (load_residual16's rule) into head_max (zeroed by the caller).
template <typename InT>
cudaError_t launch_absmax(const InT* x, const QvgShape& sh, QvgParts p, unsigned* head_max, cudaStream_t s) {
  if (encode_tile_ok(sh)) {
    with_encode_tile(sh, [&](auto d, auto st) {
      residual_absmax_tile_kernel<InT, decltype(d)::value, decltype(st)::value, kEncTileUnits>
          <<<encode_tile_grid(sh), kEncTileThreads, 0, s>>>(x, sh, p, head_max);
    });
  } else {
    const int64_t threads = static_cast<int64_t>(sh.heads) * sh.tokens * (sh.dim / kValsPerThread);
    residual_absmax_kernel<InT><<<blocks_for(threads), kThreads, 0, s>>>(x, sh, p, head_max);
  }
  return cudaGetLastError();
}

/// Quantize x minus its sh.stages stages (load_residual16's rule). head_max:
/// [H] scratch for max |residual|, or that maximum already (max_ready: the
/// last k-means assignment found it), which saves a pass over x.
template <int BITS, typename InT>
cudaError_t launch_quantize(const InT* x, const QvgShape& sh, QvgParts p, unsigned* head_max, bool max_ready,
                            cudaStream_t s) {
  if (!max_ready) {
    if (cudaError_t e = cudaMemsetAsync(head_max, 0, sizeof(unsigned) * sh.heads, s)) return e;
    if (cudaError_t e = launch_absmax(x, sh, p, head_max, s)) return e;
  }
  if (encode_tile_ok(sh)) {
    const int shift = block_shift(sh);
    with_encode_tile(sh, [&](auto d, auto st) {
      quantize_tile_kernel<BITS, InT, decltype(d)::value, decltype(st)::value, kEncTileUnits>
          <<<encode_tile_grid(sh), kEncTileThreads, 0, s>>>(x, sh, p, head_max, shift);
    });
  } else {
    const int64_t threads = static_cast<int64_t>(sh.heads) * sh.tokens * (sh.dim / kValsPerThread);
    quantize_kernel<BITS, InT><<<blocks_for(threads), kThreads, 0, s>>>(x, sh, p, head_max);
  }
  return cudaGetLastError();
}

/// Quantize x (of element type t) minus its sh.stages stages: launch_quantize
/// for sh's bits.
void quantize_any(const void* x, DeviceElement t, const QvgShape& sh, QvgParts p, unsigned* head_max, bool max_ready,
                  cudaStream_t s) {
  with_element(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_bits(sh.bits, [&](auto bits) {
      QVG_CUDA_CHECK(launch_quantize<decltype(bits)::value>(static_cast<const T*>(x), sh, p, head_max, max_ready, s));
    });
  });
}

template <int BITS, typename OutT>
cudaError_t launch_decode_vals16(const QvgShape& sh, QvgParts p, const DecodeRange& range, OutT* out, cudaStream_t s) {
  const unsigned grid = blocks_for(static_cast<int64_t>(sh.heads) * range.count * (sh.dim / 16));
  decode_kernel<BITS, 16, OutT><<<grid, kThreads, 0, s>>>(sh, p, out, range);
  return cudaGetLastError();
}

}  // namespace

void DeviceParts::allocate(const QvgShape& sh) {
  const int64_t rows = static_cast<int64_t>(sh.heads) * sh.tokens;
  if (sh.cq_dim > 0) {  // packed indices, one FP8 scale a token
    codes.resize(static_cast<size_t>(rows * codebook_row_bytes(sh)));
    scales.resize(static_cast<size_t>(rows));
  } else {
    codes.resize(static_cast<size_t>(rows * sh.dim * sh.bits / 8));
    scales.resize(static_cast<size_t>(rows * (sh.dim / sh.block) * scale_bytes(sh.scale_format)));
  }
  span_scales.resize(static_cast<size_t>(sh.heads));
  // An even count of bytes: D % 16 == 0 (the stages' FP8 codes and the codebooks' D K values are even counts).
  centroids.resize(static_cast<size_t>((centroid_part_bytes(sh) + codebook_part_bytes(sh)) / 2));
  fp8_codes = sh.fp8_centroids ? centroid_values(sh) : -1;
  book_offset = sh.cq_dim > 0 ? centroid_part_bytes(sh) : -1;
  book_scales_offset = sh.cq_dim > 0 && sh.fp8_books ? centroid_part_bytes(sh) + codebook_values(sh) : -1;
  ids.resize(static_cast<size_t>(static_cast<int64_t>(sh.stages) * rows));
}

void upload_parts(const EncodedTensor& e, const QvgShape& sh, DeviceParts& d, cudaStream_t s) {
  check_qvg_part_values(e);  // as the CPU decode: the kernels trust spans and ids
  d.allocate(sh);
  upload_bytes(d.codes, e.codes, s);
  upload_bytes(d.scales, e.scales, s);
  upload_bytes(d.span_scales, e.span_scales, s);
  upload_bytes(d.centroids, e.centroids, s);
  upload_bytes(d.ids, e.ids, s);
}

void download_parts(const DeviceParts& d, EncodedTensor& e, cudaStream_t s) {
  download_bytes(d.codes, e.codes, s);
  download_bytes(d.scales, e.scales, s);
  download_bytes(d.span_scales, e.span_scales, s);
  download_bytes(d.centroids, e.centroids, s);
  download_bytes(d.ids, e.ids, s);
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
}

QvgParts DeviceParts::view() const {
  QvgParts p{codes.get(), scales.get(), span_scales.get(), nullptr, ids.get()};
  if (fp8_codes >= 0) {  // the codes, then the scales
    p.cent8 = reinterpret_cast<uint8_t*>(centroids.get());
    p.cent_scales = reinterpret_cast<float*>(p.cent8 + fp8_codes);
  } else {
    p.centroids = centroids.get();
  }
  if (book_offset >= 0) {  // code=cq: the codebooks, then (FP8) a scale a head
    p.books = reinterpret_cast<uint8_t*>(centroids.get()) + book_offset;
    if (book_scales_offset >= 0)
      p.book_scales = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(centroids.get()) + book_scales_offset);
  }
  return p;
}

void check_device_config(const CodecConfig& c) {
  QVG_CHECK(method_traits(c.method).group_quantized, c.name, ": the GPU encoder and fused decode implement ",
            method_names_where([](const MethodTraits& t) { return t.group_quantized; }), ", not ",
            method_name(c.method));
}

QvgShape make_shape(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim) {
  check_device_config(c);
  validate(c, dim);
  QVG_CHECK(heads > 0 && tokens > 0, c.name, ": empty tensor [", heads, ", ", tokens, ", ", dim, "]");
  QVG_CHECK(dim % kValsPerThread == 0, c.name, ": the CUDA backend needs dim a multiple of 16, got ", dim);
  QvgShape sh;
  sh.heads = static_cast<int>(heads);
  sh.tokens = tokens;
  sh.dim = static_cast<int>(dim);
  sh.bits = c.bits;
  sh.block = c.block;
  sh.scale_format = c.scale_format;
  sh.levels = c.levels;
  sh.stages = smoothing_stages(c);
  sh.centroids = sh.stages > 0 ? c.kmeans.centroids : 0;
  sh.fp8_centroids = sh.stages > 0 && c.centroid_format == CentroidFormat::fp8;
  if (uses_codebooks(c)) {  // validate(): G in {1, 2, 4, 8} divides D, K a power of two in 2..256
    sh.cq_dim = c.cq_dim;
    while ((1 << sh.cq_bits) < c.cq_codewords) ++sh.cq_bits;
    sh.fp8_books = c.centroid_format == CentroidFormat::fp8;
    QVG_CHECK(heads <= 65535, c.name, ": the CUDA decode of code=cq takes at most 65535 heads, got ", heads);
  }
  if (sh.stages > 0)
    QVG_CHECK(sh.centroids <= tokens, c.name, ": centroids (", sh.centroids, ") exceed the tokens (", tokens, ")");
  return sh;
}

QvgShape make_encode_shape(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim) {
  const QvgShape sh = make_shape(c, heads, tokens, dim);
  QVG_CHECK(sh.stages == 0 || dim == 64 || dim == 128, c.name, ": GPU k-means supports dim 64 and 128, got ", dim);
  return sh;
}

namespace {
__global__ void fp8_encode_kernel(const float* __restrict__ x, int64_t n, uint8_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = fp8_e4m3_from_float(x[i]);
}

// Every bit pattern once: pattern = (block, thread, step) enumerated in a
// grid-stride loop over 2^32.
__global__ void fp8_rule_mismatch_kernel(unsigned long long* count, unsigned* first) {
  unsigned long long local = 0;
  unsigned lowest = 0xFFFFFFFFu;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t u = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; u <= 0xFFFFFFFFull; u += stride) {
    const unsigned b = static_cast<unsigned>(u);
    const float v = __uint_as_float(b);
    if (fp8_e4m3_from_float(v) != fp8_e4m3_from_float_rule(v)) {
      ++local;
      lowest = min(lowest, b);
    }
  }
  if (local) {
    atomicAdd(count, local);
    atomicMin(first, lowest);
  }
}
}  // namespace

void fp8_e4m3_encode(const float* x, int64_t n, uint8_t* out, cudaStream_t s) {
  QVG_CHECK(n >= 0, "fp8_e4m3_encode: ", n, " values");
  if (n == 0) return;
  fp8_encode_kernel<<<static_cast<unsigned>(std::min<int64_t>(blocks_for(n), 65535)), kThreads, 0, s>>>(x, n, out);
  QVG_CUDA_CHECK(cudaGetLastError());
}

uint64_t fp8_e4m3_rule_mismatches(uint32_t* first, cudaStream_t s) {
  DeviceBuffer<unsigned long long> count(1);
  DeviceBuffer<unsigned> lowest(1);
  QVG_CUDA_CHECK(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), s));
  QVG_CUDA_CHECK(cudaMemsetAsync(lowest.get(), 0xFF, sizeof(unsigned), s));
  fp8_rule_mismatch_kernel<<<4096, kThreads, 0, s>>>(count.get(), lowest.get());
  QVG_CUDA_CHECK(cudaGetLastError());
  unsigned long long c = 0;
  unsigned f = 0;
  QVG_CUDA_CHECK(cudaMemcpyAsync(&c, count.get(), sizeof c, cudaMemcpyDeviceToHost, s));
  QVG_CUDA_CHECK(cudaMemcpyAsync(&f, lowest.get(), sizeof f, cudaMemcpyDeviceToHost, s));
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
  if (first) *first = f;
  return c;
}

namespace {
/// quantize_given codes the residual by group quantization only (code=cq
/// trains its codebooks in encode).
void check_encodes(const QvgShape& sh) {
  QVG_CHECK(sh.cq_dim == 0, "quantize_given does not take code=cq (codebook residual code): Encoder::encode does");
}
}  // namespace

void Encoder::quantize_given(const void* x, DeviceElement dtype, const QvgShape& sh, DeviceParts& parts,
                             cudaStream_t stream) {
  check_encodes(sh);
  head_max_.resize(static_cast<size_t>(sh.heads));
  quantize_any(x, dtype, sh, parts.view(), head_max_.get(), false, stream);
}

void Encoder::encode(const void* x, DeviceElement dtype, const QvgShape& sh, const GpuKMeansOptions& km,
                     DeviceParts& parts, cudaStream_t stream, std::vector<KMeansStats>* stats) {
  parts.allocate(sh);
  head_max_.resize(static_cast<size_t>(sh.heads));
  if (sh.stages == 0 && sh.cq_dim > 0) {
    encode_cq(x, dtype, sh, parts.view(), km, stream);
    return;
  }
  if (sh.stages == 0) {
    quantize_any(x, dtype, sh, parts.view(), head_max_.get(), false, stream);
    return;
  }
  // max_iter < 0 would skip the final assignment that writes the ids' max
  // |R|, the next points and the stored centroids.
  QVG_CHECK(km.params.max_iter >= 0, "k-means on the GPU: max_iter must be >= 0, got ", km.params.max_iter);
  if (stats) stats->assign(static_cast<size_t>(sh.stages) * sh.heads, KMeansStats{});
  QvgParts p = parts.view();
  GpuKMeansOptions kmo = km;
  if (km.warm_fp8) {  // the k-means start reads BF16 centroids
    warm_bf16_.resize(static_cast<size_t>(centroid_values(sh)));
    widen_fp8_centroids(sh, km.warm_fp8, warm_bf16_.get(), stream);
    kmo.warm_bf16 = warm_bf16_.get();
    kmo.warm_fp8 = nullptr;
  }
  const int64_t values = static_cast<int64_t>(sh.heads) * sh.tokens * sh.dim;
  if (sh.stages > 1) {
    points_.resize(static_cast<size_t>(values));
    next_points_.resize(static_cast<size_t>(values));
  }
  if (sh.fp8_centroids) {
    with_element(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      encode_fp8_stages(static_cast<const T*>(x), sh, kmo, p, stream, stats);
    });
  } else {
    // Stage 0 clusters the input as it is (bf16 / f16 / f32: no float copy);
    // stage s > 0 the BF16 points bf16(points(s-1) - bf16(c(s-1))), which the
    // last assignment of stage s - 1 writes (the CPU reference's rule). The
    // residual R is the last stage's points minus its centroids, so the last
    // stage's final assignment also finds the quantizer's max |R| (head_max_).
    with_element(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      kmeans_stage(static_cast<const T*>(x), sh, 0, kmo, p, stream, stats, sh.stages == 1 ? head_max_.get() : nullptr,
                   sh.stages > 1 ? next_points_.get() : nullptr);
    });
    for (int s = 1; s < sh.stages; ++s) {
      std::swap(points_, next_points_);  // points_: this stage's points
      const bool last = s + 1 == sh.stages;
      kmeans_stage(reinterpret_cast<const __nv_bfloat16*>(points_.get()), sh, s, kmo, p, stream, stats,
                   last ? head_max_.get() : nullptr, last ? nullptr : next_points_.get());
    }
  }
  // max |R| is ready where the last BF16 k-means assignment found it; with
  // FP8 centroids R is formed after the FP8 rounding, so the quantizer finds it.
  const bool max_ready = !sh.fp8_centroids;
  // The quantizer subtracts the stored centroids. FP8 ones are widened back to
  // BF16 first: an E4M3 value times a power of two is a BF16 value, so the
  // BF16-centroid (tiled) kernels form the same residual from them.
  QvgShape qsh = sh;
  QvgParts qp = p;
  if (sh.fp8_centroids) {
    widen_fp8_centroids(sh, p.cent8, cent_bf16_.get(), stream);
    qsh.fp8_centroids = false;
    qp.centroids = cent_bf16_.get();
    qp.cent8 = nullptr;
    qp.cent_scales = nullptr;
  }
  if (sh.cq_dim > 0) {  // the residual x minus every stage (load_residual16), coded by codebooks
    encode_cq(x, dtype, qsh, qp, km, stream);
    return;
  }
  if (sh.stages == 1) {
    quantize_any(x, dtype, qsh, qp, head_max_.get(), max_ready, stream);
    return;
  }
  // R = the last stage's points minus its centroids: quantize those points
  // as a one-stage tensor of the last stage (the same bits as x through
  // every stage: load_residual16's rule, which quantize_given runs).
  QvgShape one = qsh;
  one.stages = 1;
  quantize_any(points_.get(), DeviceElement::bf16, one, stage_parts(qp, qsh, sh.stages - 1), head_max_.get(),
               max_ready, stream);
}

void Encoder::encode_cq(const void* x, DeviceElement dtype, const QvgShape& sh, QvgParts p,
                        const GpuKMeansOptions& kmo, cudaStream_t stream) {
  const KMeansParams& km = kmo.params;
  const int64_t n = sh.tokens, g = sh.cq_dim, groups = sh.dim / g, k = int64_t{1} << sh.cq_bits;
  const int64_t rows_all = static_cast<int64_t>(sh.heads) * n;
  QVG_CHECK(sh.heads <= 65535 && groups <= 65535, "code=cq on the GPU: at most 65535 heads and channel groups");
  QVG_CHECK(km.max_iter >= 0, "code=cq on the GPU: max_iter must be >= 0, got ", km.max_iter);
  // The sample (cq_encode_head_ref): every stride-th token, at most 64 K rows.
  CqTrainArgs a;
  a.tokens = n;
  const int64_t want = std::min<int64_t>(n, 64 * k);
  a.stride = (n + want - 1) / want;
  a.rows = (n + a.stride - 1) / a.stride;
  a.c = static_cast<int>(std::min<int64_t>(k, a.rows));
  a.k = static_cast<int>(k);
  a.max_iter = km.max_iter;
  a.tol = km.tol;
  a.seed = km.seed;
  a.seed_period = kmo.seed_period;
  head_max_.resize(static_cast<size_t>(sh.heads));
  cq_rms_.resize(static_cast<size_t>(rows_all));
  cq_u_.resize(static_cast<size_t>(rows_all * sh.dim));
  cq_books_.resize(static_cast<size_t>(sh.heads * sh.dim * k));
  cq_dist_.resize(static_cast<size_t>(sh.heads * groups * a.rows));
  cq_ids_.resize(static_cast<size_t>(sh.heads * groups * a.rows));
  cq_idx_.resize(static_cast<size_t>(rows_all * groups));
  QVG_CUDA_CHECK(cudaMemsetAsync(head_max_.get(), 0, sizeof(unsigned) * sh.heads, stream));
  with_element(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xt = static_cast<const T*>(x);
    cq_rms_kernel<T><<<blocks_for(rows_all), kCqEncThreads, 0, stream>>>(xt, sh, p, cq_rms_.get(), head_max_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
    cq_normalize_kernel<T><<<blocks_for(rows_all * (sh.dim / kValsPerThread)), kCqEncThreads, 0, stream>>>(
        xt, sh, p, cq_rms_.get(), head_max_.get(), cq_u_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
  });
  with_cq_dim(sh.cq_dim, [&](auto gc) {
    constexpr int G = decltype(gc)::value;
    cq_train_kernel<G><<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(sh.heads)), kCqEncThreads, 0,
                         stream>>>(cq_u_.get(), a, cq_dist_.get(), cq_ids_.get(), cq_books_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
    cq_store_books_kernel<<<static_cast<unsigned>(sh.heads), kCqEncThreads, 0, stream>>>(sh, p, cq_books_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
    const dim3 grid(static_cast<unsigned>((n + kCqEncThreads - 1) / kCqEncThreads), static_cast<unsigned>(groups),
                    static_cast<unsigned>(sh.heads));
    cq_assign_kernel<G><<<grid, kCqEncThreads, 0, stream>>>(cq_u_.get(), cq_books_.get(), n, a.k, cq_idx_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
  });
  cq_pack_kernel<<<blocks_for(rows_all), kCqEncThreads, 0, stream>>>(sh, cq_idx_.get(), p.codes);
  QVG_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void Encoder::encode_fp8_stages(const T* x, const QvgShape& sh, const GpuKMeansOptions& km, QvgParts p,
                                cudaStream_t stream, std::vector<KMeansStats>* stats) {
  const int64_t per_stage = static_cast<int64_t>(sh.heads) * sh.centroids * sh.dim;
  const int64_t values = static_cast<int64_t>(sh.heads) * sh.tokens * sh.dim;
  cent_bf16_.resize(static_cast<size_t>(per_stage * sh.stages));  // points_, next_points_: sized by encode()
  QvgParts kp = p;  // k-means writes the ids into p, its BF16 centroids into cent_bf16_
  kp.centroids = cent_bf16_.get();
  kp.cent8 = nullptr;
  kp.cent_scales = nullptr;
  QvgShape one = sh;
  one.stages = 1;
  for (int s = 0; s < sh.stages; ++s) {
    const QvgParts here = stage_parts(p, sh, s);
    auto run = [&](const auto* data) {
      kmeans_stage(data, sh, s, km, kp, stream, stats, nullptr, nullptr);
      pack_fp8_centroids_kernel<<<static_cast<unsigned>(sh.heads), 256, 0, stream>>>(
          cent_bf16_.get() + s * per_stage, static_cast<int64_t>(sh.centroids) * sh.dim, here.cent8, here.cent_scales);
      QVG_CUDA_CHECK(cudaGetLastError());
      if (s + 1 < sh.stages) {
        stage_points_kernel<<<blocks_for(values / kValsPerThread), kThreads, 0, stream>>>(data, one, here,
                                                                                          next_points_.get());
        QVG_CUDA_CHECK(cudaGetLastError());
      }
    };
    if (s == 0)
      run(x);
    else
      run(reinterpret_cast<const __nv_bfloat16*>(points_.get()));
    if (s + 1 < sh.stages) std::swap(points_, next_points_);  // points_: the next stage's
  }
}

void widen_fp8_centroids(const QvgShape& sh, const uint8_t* part, uint16_t* out, cudaStream_t s) {
  QVG_CHECK(sh.dim % 8 == 0, "widen_fp8_centroids: dim must be a multiple of 8, got ", sh.dim);
  const int64_t values = centroid_values(sh);
  if (values == 0) return;
  widen_fp8_centroids_kernel<<<blocks_for(values / 8), kThreads, 0, s>>>(
      part, reinterpret_cast<const float*>(part + values), values, static_cast<int64_t>(sh.centroids) * sh.dim, out);
  QVG_CUDA_CHECK(cudaGetLastError());
}

void check_out_strides(const DecodeRange& range, size_t element_bytes, const char* what) {
  QVG_CHECK(range.head_stride >= 0 && range.row_stride >= 0 &&
                (static_cast<size_t>(range.head_stride) * element_bytes) % 16 == 0 &&
                (static_cast<size_t>(range.row_stride) * element_bytes) % 16 == 0,
            what, ": destination strides (head ", range.head_stride, ", row ", range.row_stride,
            " elements) must be >= 0 and multiples of 16 bytes (0: head-major)");
}

void decode(const QvgShape& sh, QvgParts p, void* out, DeviceElement dtype, cudaStream_t s, DecodeKernel kernel) {
  decode_range(sh, p, DecodeRange{0, sh.tokens, sh.tokens, 0}, out, dtype, s, kernel);
}

bool lines_decode_fits(const QvgShape& sh, int64_t count) {
  return (sh.dim == 64 || sh.dim == 128) && sh.stages <= kTileMaxStages && count * sh.dim < (int64_t{1} << 30) &&
         sh.heads <= 65535 &&                                                                   // grid.y
         int64_t{sh.stages} * sh.heads * sh.centroids * sh.dim < (int64_t{1} << 31) &&         // centroid offsets
         int64_t{sh.stages} * sh.heads * sh.tokens < (int64_t{1} << 31);                        // id offsets
}

void decode_range(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
                  cudaStream_t s, DecodeKernel kernel) {
  QVG_CHECK(range.begin >= 0 && range.count >= 0 && range.begin + range.count <= sh.tokens && range.out_offset >= 0 &&
                range.out_offset + range.count <= range.out_tokens,
            "decode: tokens [", range.begin, ", +", range.count, ") of ", sh.tokens, " to rows ", range.out_offset,
            ".. of ", range.out_tokens, " do not fit");
  check_out_strides(range, element_bytes(dtype), "decode");
  if (range.count == 0) return;
  if (sh.cq_dim > 0) {
    QVG_CHECK(kernel == DecodeKernel::automatic, "decode: a code=cq tensor has one decode kernel (automatic)");
    decode_cq(sh, p, range, out, dtype, s);
    return;
  }
  const bool lines_ok = lines_decode_fits(sh, range.count);
  if (kernel == DecodeKernel::automatic) kernel = lines_ok ? DecodeKernel::lines : DecodeKernel::vals16;
  QVG_CHECK(kernel != DecodeKernel::lines || lines_ok, "decode: the lines kernel needs dim 64 or 128, at most ",
            kTileMaxStages, " stages, at most 65535 heads, under 2^30 values per head, under 2^31 centroid values"
            " and under 2^31 ids; got dim ", sh.dim, ", ", sh.stages, " stages, ", sh.heads, " heads, ", range.count,
            " of ", sh.tokens, " tokens, ", sh.centroids, " centroids");
  if (kernel == DecodeKernel::lines && sh.fp8_centroids) {
    decode_lines_fp8c(sh, p, range, out, dtype, s, block_shift(sh));
    return;
  }
  with_element(dtype, [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    OutT* o = static_cast<OutT*>(out);
    with_bits(sh.bits, [&](auto bits) {
      constexpr int B = decltype(bits)::value;
      if (kernel == DecodeKernel::vals16) {
        QVG_CUDA_CHECK(launch_decode_vals16<B>(sh, p, range, o, s));
        return;
      }
      with_head_dim(sh.dim, [&](auto d) {
        with_stages(sh.stages, [&](auto st) {
          QVG_CUDA_CHECK((launch_decode_lines<B, decltype(d)::value, decltype(st)::value, false>(sh, p, range, o, s,
                                                                                                 block_shift(sh))));
        });
      });
    });
  });
}

void widen_bf16_range(const uint16_t* src, int heads, int64_t tokens, int dim, const DecodeRange& range, float* out,
                      cudaStream_t s) {
  QVG_CHECK(dim % 8 == 0, "widen_bf16_range: dim must be a multiple of 8, got ", dim);
  QVG_CHECK(range.begin >= 0 && range.count >= 0 && range.begin + range.count <= tokens && range.out_offset >= 0 &&
                range.out_offset + range.count <= range.out_tokens,
            "widen_bf16_range: tokens [", range.begin, ", +", range.count, ") of ", tokens, " to rows ",
            range.out_offset, ".. of ", range.out_tokens, " do not fit");
  check_out_strides(range, sizeof(float), "widen_bf16_range");
  const int64_t threads = static_cast<int64_t>(heads) * range.count * (dim / 8);
  if (threads == 0) return;
  widen_bf16_kernel<<<blocks_for(threads), kThreads, 0, s>>>(src, heads, tokens, dim, range, out);
  QVG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qvg::cuda
