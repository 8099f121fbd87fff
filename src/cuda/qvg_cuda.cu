#include <algorithm>
#include <chrono>
#include <type_traits>

#include "cpu/codecs.h"
#include "cuda/assign_tc.cuh"
#include "cuda/decode_lines.cuh"
#include "cuda/decode_tile.cuh"
#include "cuda/kmeans_kernels.cuh"
#include "cuda/kmeanspp.cuh"
#include "cuda/qvg_cuda.h"
#include "cuda/qvg_kernels.cuh"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "qvg/qvg.h"
#include "util/parallel.h"

namespace qvg::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
struct Tag {
  using type = T;
};

unsigned blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

void check_launch() { QVG_CUDA_CHECK(cudaGetLastError()); }

// The tiled encode kernels (qvg_kernels.cuh) cover up to kTileMaxStages
// stages (with D = 64 or 128, as k-means needs) and heads of fewer than 2^30
// values (32-bit offsets); the one-thread-per-16-values kernels cover the rest.
bool encode_tile_ok(const QvgShape& sh) {
  return sh.stages <= kTileMaxStages && (sh.stages == 0 || sh.dim == 64 || sh.dim == 128) && sh.heads <= 65535 &&
         sh.tokens * sh.dim < (int64_t{1} << 30);
}

dim3 encode_tile_grid(const QvgShape& sh) {
  constexpr int64_t kPerBlock = int64_t{kEncTileThreads} * kEncTileUnits;
  const int64_t units = sh.tokens * (sh.dim / 16);
  return dim3(static_cast<unsigned>((units + kPerBlock - 1) / kPerBlock), static_cast<unsigned>(sh.heads));
}

/// p with its centroids and ids moved to stage s's (the rest as it is): with
/// a one-stage shape, a view of stage s alone.
QvgParts stage_parts(QvgParts p, const QvgShape& sh, int s) {
  p.centroids += static_cast<int64_t>(s) * sh.heads * sh.centroids * sh.dim;
  p.ids += static_cast<int64_t>(s) * sh.heads * sh.tokens;
  return p;
}

/// Calls f(D, S) with the template constants of the tiled encode kernels for
/// sh (encode_tile_ok): without stages D is unused (0).
template <int D, typename F>
void with_encode_tile_stages(int stages, F&& f) {
  switch (stages) {
    case 1: return f(std::integral_constant<int, D>{}, std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, D>{}, std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, D>{}, std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, D>{}, std::integral_constant<int, 4>{});  // <= kTileMaxStages
  }
}
template <typename F>
void with_encode_tile(const QvgShape& sh, F&& f) {
  static_assert(kTileMaxStages == 4, "with_encode_tile_stages lists 1 to 4 stages");
  if (sh.stages == 0)
    f(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
  else if (sh.dim == 64)
    with_encode_tile_stages<64>(sh.stages, f);
  else
    with_encode_tile_stages<128>(sh.stages, f);
}

/// Per-head max |x minus its stages| (load_residual16's rule) into head_max (zeroed by the caller).
template <typename InT>
void launch_absmax(const InT* x, const QvgShape& sh, QvgParts p, unsigned* head_max, cudaStream_t s) {
  if (encode_tile_ok(sh)) {
    with_encode_tile(sh, [&](auto d, auto st) {
      residual_absmax_tile_kernel<InT, decltype(d)::value, decltype(st)::value, kEncTileUnits>
          <<<encode_tile_grid(sh), kEncTileThreads, 0, s>>>(x, sh, p, head_max);
    });
  } else {
    const int64_t threads = static_cast<int64_t>(sh.heads) * sh.tokens * (sh.dim / kValsPerThread);
    residual_absmax_kernel<InT><<<blocks_for(threads), kThreads, 0, s>>>(x, sh, p, head_max);
  }
  check_launch();
}

template <int BITS, typename InT>
void launch_quantize(const InT* x, const QvgShape& sh, QvgParts p, unsigned* head_max, bool max_ready, cudaStream_t s) {
  if (!max_ready) {
    QVG_CUDA_CHECK(cudaMemsetAsync(head_max, 0, sizeof(unsigned) * sh.heads, s));
    launch_absmax(x, sh, p, head_max, s);
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
  check_launch();
}

/// out = bf16(x minus its one stage) (sh.stages == 1; D = 64 or 128:
/// k-means): the next stage's points, where the assignment does not write them.
template <typename InT>
void launch_residual(const InT* x, const QvgShape& sh, QvgParts p, uint16_t* out, cudaStream_t s) {
  if (encode_tile_ok(sh)) {
    constexpr int64_t kPerBlock = int64_t{kEncTileThreads} * kResidPieces;
    const dim3 grid(static_cast<unsigned>((sh.tokens * (sh.dim / 4) + kPerBlock - 1) / kPerBlock),
                    static_cast<unsigned>(sh.heads));
    if (sh.dim == 64)
      residual_tile_kernel<InT, 64, kResidPieces><<<grid, kEncTileThreads, 0, s>>>(x, sh, p, out);
    else
      residual_tile_kernel<InT, 128, kResidPieces><<<grid, kEncTileThreads, 0, s>>>(x, sh, p, out);
  } else {
    const int64_t threads = static_cast<int64_t>(sh.heads) * sh.tokens * (sh.dim / kValsPerThread);
    residual_of_kernel<<<blocks_for(threads), kThreads, 0, s>>>(x, sh, p, out);
  }
  check_launch();
}

/// Blocks of `kernel` (threads and smem bytes of shared memory each) the
/// current device holds at once; qvg::Error naming `what` when none fits.
template <typename Kernel>
int64_t resident_blocks(Kernel* kernel, int threads, size_t smem, const char* what) {
  int dev = 0, sms = 0, per_sm = 0;
  QVG_CUDA_CHECK(cudaGetDevice(&dev));
  QVG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  QVG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  QVG_CHECK(per_sm >= 1, what, ": no block of ", threads, " threads and ", smem, " bytes of shared memory fits an SM");
  return static_cast<int64_t>(sms) * per_sm;
}

/// Sums and counts of every cluster of the active heads of x ([H][N][D] of T)
/// by ids ([H][N]), added to sums ([H][C][D]) and counts ([H][C]), zeroed by
/// the caller, with either kernel (the same bits; automatic: SumKernel).
///
/// buckets (centroid_bucket_sum_kernel): chunks of at most kBucketRows rows
/// (its 16-bit offsets and shared bucket list), and more where the heads
/// alone do not fill the device once (sms x blocks an SM / H chunks a head),
/// but not below kBucketMinRows rows (each chunk adds up to C x D sums with
/// global atomics); the rows shared out evenly (the last chunk at most
/// chunks - 1 rows short), so that the blocks of a wave take about the same
/// time. At LongCat (H = 32, N = 29640, 132 SMs x 2 blocks): 8 chunks of
/// 3705 rows, 256 blocks in one wave. chunk_rows > 0 (tests) fixes the
/// chunk instead.
///
/// atomics (centroid_sum_kernel): chunks per head as many as fill the device
/// once (every block then flushes its sums once), at least one.
template <int D, typename T>
void launch_centroid_sum(const T* x, int64_t n, int c, int heads, const uint8_t* ids, const unsigned* head_max,
                         const int* active, unsigned long long* sums, int* counts, cudaStream_t s,
                         SumKernel which = SumKernel::automatic, int64_t fixed_chunk = 0) {
  if (which == SumKernel::automatic) which = sizeof(T) == 2 ? SumKernel::buckets : SumKernel::atomics;
  QVG_CHECK(c >= 1 && c <= 256 && heads >= 1 && heads <= 65535 && n >= 1, "k-means update on the GPU: ", heads,
            " heads (1 to 65535), ", n, " rows, ", c, " centroids (1 to 256)");
  QVG_CHECK(fixed_chunk >= 0 && fixed_chunk <= kBucketRows, "k-means update: chunks of 1 to ", kBucketRows,
            " rows, got ", fixed_chunk);
  if (which == SumKernel::buckets) {
    auto* kernel = centroid_bucket_sum_kernel<T, D>;
    const int64_t least = (n + kBucketRows - 1) / kBucketRows;
    const int64_t fill =
        std::max<int64_t>(1, resident_blocks(kernel, kBucketThreads, 0, "k-means update (buckets)") / heads);
    const int64_t chunks = std::max(least, std::min(fill, (n + kBucketMinRows - 1) / kBucketMinRows));
    const int64_t chunk_rows = fixed_chunk > 0 ? fixed_chunk : (n + chunks - 1) / chunks;
    const int64_t blocks = (n + chunk_rows - 1) / chunk_rows;
    QVG_CHECK(blocks <= 0x7FFFFFFF, "k-means update: ", n, " rows are too many");
    kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)), kBucketThreads, 0, s>>>(
        x, n, c, ids, static_cast<int>(chunk_rows), head_max, active, sums, counts);
    check_launch();
    return;
  }
  const size_t smem = centroid_sum_smem(c);
  auto* kernel = centroid_sum_kernel<T, D>;
  // Every launch: the attributes belong to the current device's context. All
  // of L1 as shared memory (x is streamed once, L1 holds nothing worth
  // keeping): two blocks an SM at C = 256.
  QVG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  QVG_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  constexpr int kSlices = D / kSumDims;
  constexpr int64_t kPass = kSumPassRows<T>;
  const int64_t passes = (n + kPass - 1) / kPass;
  const int64_t fill =
      resident_blocks(kernel, kSumThreads, smem, "k-means update (atomics)") / (static_cast<int64_t>(heads) * kSlices);
  constexpr int64_t kMaxPasses = kSumMaxChunk / kPass;  // a block's lo and mid sums stay exact
  const int64_t want = std::clamp<int64_t>(std::max(fill, (passes + kMaxPasses - 1) / kMaxPasses), 1, passes);
  const int64_t chunk_rows = (passes + want - 1) / want * kPass;  // whole passes, at most kSumMaxChunk
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  kernel<<<dim3(static_cast<unsigned>(chunks * kSlices), static_cast<unsigned>(heads)), kSumThreads, smem, s>>>(
      x, n, c, ids, chunk_rows, head_max, active, sums, counts);
  check_launch();
}

template <typename InT>
void quantize_bits(const InT* x, const QvgShape& sh, QvgParts p, unsigned* head_max, bool max_ready, cudaStream_t s) {
  if (sh.bits == 2)
    launch_quantize<2>(x, sh, p, head_max, max_ready, s);
  else
    launch_quantize<4>(x, sh, p, head_max, max_ready, s);
}

/// Quantize x minus its sh.stages stages (load_residual16's rule). head_max: [H] scratch for max
/// |residual|, or that maximum already (max_ready: the last k-means
/// assignment found it), which saves a pass over x.
void quantize_any(const void* x, DeviceDType t, const QvgShape& sh, QvgParts p, unsigned* head_max, bool max_ready,
                  cudaStream_t s) {
  switch (t) {
    case DeviceDType::f32: return quantize_bits(static_cast<const float*>(x), sh, p, head_max, max_ready, s);
    case DeviceDType::bf16: return quantize_bits(static_cast<const __nv_bfloat16*>(x), sh, p, head_max, max_ready, s);
    case DeviceDType::f16: return quantize_bits(static_cast<const __half*>(x), sh, p, head_max, max_ready, s);
  }
}

template <int D, typename T>
void launch_assign(const T* x, int64_t n, const float* cent, const float* cnorm, int c, int heads, const int* active,
                   uint8_t* ids, float* dist, cudaStream_t s) {
  const size_t smem = 2 * D * kAssignTokens * sizeof(float);
  // Every launch: the attribute belongs to the current device's context.
  QVG_CUDA_CHECK(cudaFuncSetAttribute(assign_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((n + kAssignTokens - 1) / kAssignTokens), static_cast<unsigned>(heads));
  assign_kernel<D, T><<<grid, kAssignThreads, smem, s>>>(x, n, cent, cnorm, c, active, ids, dist);
  check_launch();
}

template <int D, typename T>
void run_assign_tc(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                      const AssignOutputs& o, cudaStream_t s) {
  QVG_CHECK(heads <= 65535, "k-means on the GPU: at most 65535 heads per tensor, got ", heads);
  QVG_CHECK(c >= 1 && c <= kAssignMaxCentroids, "k-means on the GPU: 1 to ", kAssignMaxCentroids, " centroids, got ", c);
  for (unsigned* m : {o.x_max, o.resid_max}) {
    if (!m) continue;
    zero_active_kernel<<<blocks_for(heads), kThreads, 0, s>>>(m, active, heads);
    check_launch();
  }
  QVG_CUDA_CHECK((launch_assign_tc<D, T>(x, n, cent, c, heads, active, o, s)));
}

template <int BITS, int D, int S, typename OutT>
void launch_decode_tile_ds(const QvgShape& sh, QvgParts p, const DecodeRange& range, OutT* out, cudaStream_t s) {
  constexpr int U = tile_units(S);
  constexpr int kPerBlock = kTileThreads * U;
  const int64_t units = range.count * (D / 16);
  const dim3 grid(static_cast<unsigned>((units + kPerBlock - 1) / kPerBlock), static_cast<unsigned>(sh.heads));
  decode_tile_kernel<BITS, D, S, U, OutT, 16, tile_split(S), tile_min_blocks(S)>
      <<<grid, kTileThreads, 0, s>>>(sh, p, out, range, block_shift(sh));
}

template <int BITS, int D, int S, typename OutT>
void launch_decode_lines_ds(const QvgShape& sh, QvgParts p, const DecodeRange& range, OutT* out, cudaStream_t s) {
  constexpr int U = lines_rows(S);
  constexpr int kRowsPerBlock = kTileThreads / (D / 16) * U;
  const dim3 grid(static_cast<unsigned>((range.count + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(sh.heads));
  decode_lines_kernel<BITS, D, S, U, OutT, lines_min_blocks(S)>
      <<<grid, kTileThreads, 0, s>>>(sh, p, out, range, block_shift(sh));
}

/// Calls launch(D, S) with the tiled decode kernels' template constants for
/// sh (dim 64 or 128, at most kTileMaxStages stages: checked by the caller),
/// as std::integral_constant values.
template <typename F>
void with_decode_tile(const QvgShape& sh, F&& launch) {
  static_assert(kTileMaxStages == 4, "with_decode_tile lists 0 to 4 stages");
  auto stages = [&](auto d) {
    switch (sh.stages) {
      case 0: return launch(d, std::integral_constant<int, 0>{});
      case 1: return launch(d, std::integral_constant<int, 1>{});
      case 2: return launch(d, std::integral_constant<int, 2>{});
      case 3: return launch(d, std::integral_constant<int, 3>{});
      default: return launch(d, std::integral_constant<int, 4>{});
    }
  };
  if (sh.dim == 64)
    stages(std::integral_constant<int, 64>{});
  else
    stages(std::integral_constant<int, 128>{});
}

}  // namespace

void DeviceParts::allocate(const QvgShape& sh) {
  const int64_t rows = static_cast<int64_t>(sh.heads) * sh.tokens;
  codes.resize(static_cast<size_t>(rows * sh.dim * sh.bits / 8));
  scales.resize(static_cast<size_t>(rows * (sh.dim / sh.block) * scale_bytes(sh.scale_format)));
  span_scales.resize(static_cast<size_t>(sh.heads));
  centroids.resize(static_cast<size_t>(static_cast<int64_t>(sh.stages) * sh.heads * sh.centroids * sh.dim));
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
  return QvgParts{codes.get(), scales.get(), span_scales.get(), centroids.get(), ids.get()};
}

QvgShape make_shape(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim) {
  QVG_CHECK(c.method == Method::qvg || c.method == Method::rtn, c.name,
            ": the CUDA backend implements qvg and rtn so far");
  validate(c, dim);
  QVG_CHECK(c.centroid_format == CentroidFormat::bf16, c.name,
            ": the CUDA backend stores BF16 centroids only (centroid_format=fp8 runs on the CPU backend)");
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
  if (sh.stages > 0) {
    QVG_CHECK(dim == 64 || dim == 128, c.name, ": GPU k-means supports dim 64 and 128, got ", dim);
    QVG_CHECK(sh.centroids <= tokens, c.name, ": centroids (", sh.centroids, ") exceed the tokens (", tokens, ")");
  }
  return sh;
}

void centroid_sums(const void* x, DeviceDType dtype, int heads, int64_t n, int d, int c, const uint8_t* ids,
                   const unsigned* head_max, const int* active, unsigned long long* sums, int* counts,
                   cudaStream_t s, SumKernel kernel, int64_t chunk_rows) {
  QVG_CHECK(d == 64 || d == 128, "k-means update on the GPU: D = 64 or 128, got ", d);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xt = static_cast<const T*>(x);
    if (d == 64)
      launch_centroid_sum<64>(xt, n, c, heads, ids, head_max, active, sums, counts, s, kernel, chunk_rows);
    else
      launch_centroid_sum<128>(xt, n, c, heads, ids, head_max, active, sums, counts, s, kernel, chunk_rows);
  };
  switch (dtype) {
    case DeviceDType::f32: return run(Tag<float>{});
    case DeviceDType::bf16: return run(Tag<__nv_bfloat16>{});
    case DeviceDType::f16: return run(Tag<__half>{});
  }
}

void random_rows(int64_t n, int c, int heads, uint64_t seed_base, int64_t* rows, cudaStream_t s) {
  QVG_CHECK(c >= 1 && c <= 256 && c <= n, "k-means: cannot draw ", c, " distinct rows from ", n, " (at most 256)");
  QVG_CHECK(heads >= 1, "k-means random start: ", heads, " heads");
  random_rows_kernel<<<static_cast<unsigned>(heads), 256, 0, s>>>(n, c, seed_base, rows);
  check_launch();
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
  check_launch();
}

uint64_t fp8_e4m3_rule_mismatches(uint32_t* first, cudaStream_t s) {
  DeviceBuffer<unsigned long long> count(1);
  DeviceBuffer<unsigned> lowest(1);
  QVG_CUDA_CHECK(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), s));
  QVG_CUDA_CHECK(cudaMemsetAsync(lowest.get(), 0xFF, sizeof(unsigned), s));
  fp8_rule_mismatch_kernel<<<4096, kThreads, 0, s>>>(count.get(), lowest.get());
  check_launch();
  unsigned long long c = 0;
  unsigned f = 0;
  QVG_CUDA_CHECK(cudaMemcpyAsync(&c, count.get(), sizeof c, cudaMemcpyDeviceToHost, s));
  QVG_CUDA_CHECK(cudaMemcpyAsync(&f, lowest.get(), sizeof f, cudaMemcpyDeviceToHost, s));
  QVG_CUDA_CHECK(cudaStreamSynchronize(s));
  if (first) *first = f;
  return c;
}

void Encoder::quantize_given(const void* x, DeviceDType dtype, const QvgShape& sh, DeviceParts& parts,
                             cudaStream_t stream) {
  head_max_.resize(static_cast<size_t>(sh.heads));
  quantize_any(x, dtype, sh, parts.view(), head_max_.get(), false, stream);
}

void Encoder::encode(const void* x, DeviceDType dtype, const QvgShape& sh, const GpuKMeansOptions& km,
                     DeviceParts& parts, cudaStream_t stream, std::vector<KMeansStats>* stats) {
  parts.allocate(sh);
  head_max_.resize(static_cast<size_t>(sh.heads));
  if (sh.stages == 0) {
    quantize_any(x, dtype, sh, parts.view(), head_max_.get(), false, stream);
    return;
  }
  // max_iter < 0 would skip the final assignment that writes the ids' max
  // |R|, the next points and the stored centroids.
  QVG_CHECK(km.params.max_iter >= 0, "k-means on the GPU: max_iter must be >= 0, got ", km.params.max_iter);
  if (stats) stats->assign(static_cast<size_t>(sh.stages) * sh.heads, KMeansStats{});
  QvgParts p = parts.view();
  // Stage 0 clusters the input as it is (bf16 / f16 / f32: no float copy);
  // stage s > 0 the BF16 points bf16(points(s-1) - bf16(c(s-1))), which the
  // last assignment of stage s - 1 writes (the CPU reference's rule). The
  // residual R is the last stage's points minus its centroids, so the last
  // stage's final assignment also finds the quantizer's max |R|.
  const int64_t values = static_cast<int64_t>(sh.heads) * sh.tokens * sh.dim;
  if (sh.stages > 1) {
    points_.resize(static_cast<size_t>(values));
    next_points_.resize(static_cast<size_t>(values));
  }
  uint16_t* next = sh.stages > 1 ? next_points_.get() : nullptr;
  unsigned* last_max = sh.stages == 1 ? head_max_.get() : nullptr;
  bool max_ready = false;  // head_max_ holds max |R|
  switch (dtype) {
    case DeviceDType::f32:
      max_ready = kmeans_stage(static_cast<const float*>(x), sh, 0, km, p, stream, stats, last_max, next);
      break;
    case DeviceDType::bf16:
      max_ready = kmeans_stage(static_cast<const __nv_bfloat16*>(x), sh, 0, km, p, stream, stats, last_max, next);
      break;
    case DeviceDType::f16:
      max_ready = kmeans_stage(static_cast<const __half*>(x), sh, 0, km, p, stream, stats, last_max, next);
      break;
  }
  for (int s = 1; s < sh.stages; ++s) {
    std::swap(points_, next_points_);  // points_: this stage's points
    const bool last = s + 1 == sh.stages;
    next = last ? nullptr : next_points_.get();
    max_ready = kmeans_stage(reinterpret_cast<const __nv_bfloat16*>(points_.get()), sh, s, km, p, stream, stats,
                             last ? head_max_.get() : nullptr, next);
  }
  if (sh.stages == 1) {
    quantize_any(x, dtype, sh, p, head_max_.get(), max_ready, stream);
    return;
  }
  // R = the last stage's points minus its centroids: quantize those points
  // as a one-stage tensor of the last stage (the same bits as x through
  // every stage: load_residual16's rule, which quantize_given runs).
  QvgShape one = sh;
  one.stages = 1;
  quantize_any(points_.get(), DeviceDType::bf16, one, stage_parts(p, sh, sh.stages - 1), head_max_.get(), max_ready,
               stream);
}

template <typename T>
bool Encoder::kmeans_stage(const T* data, const QvgShape& sh, int stage, const GpuKMeansOptions& km, QvgParts parts,
                           cudaStream_t stream, std::vector<KMeansStats>* stats, unsigned* resid_max, uint16_t* next) {
  if (km.fp32_assign) resid_max = nullptr;
  const int H = sh.heads, C = sh.centroids, D = sh.dim;
  const int64_t N = sh.tokens;
  const auto t0 = std::chrono::steady_clock::now();
  cent_.resize(static_cast<size_t>(H) * C * D);
  cnorm_.resize(static_cast<size_t>(H) * C);
  dist_.resize(static_cast<size_t>(H * N));
  // The update's sums [H][C][D] and counts [H][C] in one buffer: one memset.
  const int64_t n_sums = static_cast<int64_t>(H) * C * D;
  sums_.resize(static_cast<size_t>(n_sums + (static_cast<int64_t>(H) * C + 1) / 2));
  unsigned long long* sums = sums_.get();
  int* counts = reinterpret_cast<int*>(sums + n_sums);
  kmeans_max_.resize(static_cast<size_t>(H));
  active_.resize(static_cast<size_t>(H));
  reseeded_.resize(static_cast<size_t>(H));
  taken_.resize(static_cast<size_t>(H * N));
  mse_.resize(static_cast<size_t>(H));
  const QvgParts here = stage_parts(parts, sh, stage);
  uint8_t* ids = here.ids;
  uint16_t* cent_bf16 = here.centroids;

  // Start: warm (previous span's BF16 centroids), random rows (same rows as
  // the CPU), or k-means++ on the stage's points (the CPU reference's rule).
  KMeansParams kp = km.params;
  CodecConfig seeds;
  seeds.kmeans.seed = kp.seed;
  if (km.warm_bf16) {
    const uint16_t* w = km.warm_bf16 + static_cast<int64_t>(stage) * H * C * D;
    // BF16 -> float: a BF16 value is the top half of its float.
    std::vector<uint16_t> hb(static_cast<size_t>(H) * C * D);
    QVG_CUDA_CHECK(cudaMemcpyAsync(hb.data(), w, hb.size() * 2, cudaMemcpyDeviceToHost, stream));
    QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> hf(hb.size());
    for (size_t i = 0; i < hb.size(); ++i) hf[i] = bf16_to_float(hb[i]);
    cent_.upload(hf.data(), hf.size(), stream);
  } else if (kp.init == KMeansInit::random) {
    // kmeans_random_rows of every head, drawn on the device (seeds
    // qvg_kmeans_seed(stage, h) = base + h).
    const uint64_t seed_base = qvg_kmeans_seed(seeds, stage, 0);
    QVG_CHECK(qvg_kmeans_seed(seeds, stage, H - 1) == seed_base + static_cast<uint64_t>(H - 1),
              "k-means seeds are not consecutive across heads");
    rows_.resize(static_cast<size_t>(H) * C);
    random_rows(N, C, H, seed_base, rows_.get(), stream);
    gather_rows_kernel<<<blocks_for(static_cast<int64_t>(H) * C * D), kThreads, 0, stream>>>(data, N, D, C, rows_.get(),
                                                                                            H, cent_.get());
    check_launch();
  } else {
    // k-means++: its start (the subsample, the first centre, their draws:
    // kmeanspp_start, as the CPU reference) on the host, its C - 1
    // sequential steps on the device (kmeanspp_kernel).
    QVG_CHECK(N <= INT32_MAX && H <= 65535, "k-means++ on the GPU: ", N, " tokens (at most 2^31 - 1), ", H,
              " heads (at most 65535)");
    std::vector<uint64_t> pp_seeds(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) pp_seeds[h] = qvg_kmeans_seed(seeds, stage, h);
    // The heads' starts are independent (each one O(N)): on all cores where
    // they add up to enough work to pay for the threads (at LongCat, 32
    // heads of 29,640 rows took 5.6 ms on one core). The same bytes either way.
    std::vector<KMeansPPStart> starts(static_cast<size_t>(H));
    const int threads = static_cast<int64_t>(H) * N >= (int64_t{1} << 18) ? 0 : 1;
    parallel_for(H, threads, [&](int64_t h) { starts[static_cast<size_t>(h)] = kmeanspp_start(N, C, pp_seeds[h]); });
    // m and the draws are the same for every head: they depend on N and C only.
    const int m = static_cast<int>(starts[0].rows.size());
    const uint64_t draws = starts[0].draws;
    std::vector<int> pp_rows(static_cast<size_t>(H) * m);
    std::vector<int64_t> pp_first(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) {
      std::copy(starts[h].rows.begin(), starts[h].rows.end(), pp_rows.begin() + static_cast<int64_t>(h) * m);
      pp_first[h] = starts[h].first;
    }
    pp_rows_.upload(pp_rows.data(), pp_rows.size(), stream);
    pp_first_.upload(pp_first.data(), pp_first.size(), stream);
    pp_seeds_.upload(pp_seeds.data(), pp_seeds.size(), stream);
    const dim3 grid(kPPBlocks, static_cast<unsigned>(H));
    if (D == 64)
      kmeanspp_kernel<T, 64><<<grid, kPPThreads, kmeanspp_smem(m), stream>>>(
          data, N, pp_rows_.get(), m, C, pp_first_.get(), pp_seeds_.get(), draws, cent_.get());
    else
      kmeanspp_kernel<T, 128><<<grid, kPPThreads, kmeanspp_smem(m), stream>>>(
          data, N, pp_rows_.get(), m, C, pp_first_.get(), pp_seeds_.get(), draws, cent_.get());
    check_launch();
  }

  // Largest |x| of each head's points: the fixed-point quantum of the update
  // sums. The tensor-core assignment finds it on its first pass.
  if (km.fp32_assign) {  // (the tensor-core assignment zeroes and finds it itself)
    QVG_CUDA_CHECK(cudaMemsetAsync(kmeans_max_.get(), 0, kmeans_max_.bytes(), stream));
    QvgShape flat = sh;
    flat.stages = 0;
    launch_absmax(data, flat, QvgParts{}, kmeans_max_.get(), stream);
  }
  // Heads still iterating: all of them without the convergence check (null).
  std::vector<int> active_host(static_cast<size_t>(H), 1);
  if (km.check_convergence) active_.upload(active_host.data(), active_host.size(), stream);
  const int* active = km.check_convergence ? active_.get() : nullptr;
  QVG_CUDA_CHECK(cudaMemsetAsync(reseeded_.get(), 0, sizeof(int) * H, stream));
  // Exact distances of every row: the convergence check's mean (and the
  // fp32 assignment computes them anyway). Otherwise only the empty-cluster
  // rule needs them, for the heads with an empty cluster (dist_for_empty).
  const bool dist_in_assign = km.check_convergence || km.fp32_assign;
  int assignments = 0;
  auto assign = [&] {
    const bool first = assignments++ == 0;
    if (km.fp32_assign) {
      centroid_norms_kernel<<<blocks_for(static_cast<int64_t>(H) * C * 32), kThreads, 0, stream>>>(cent_.get(), H, C, D,
                                                                                                  cnorm_.get());
      check_launch();
      if (D == 64)
        launch_assign<64>(data, N, cent_.get(), cnorm_.get(), C, H, active, ids, dist_.get(), stream);
      else
        launch_assign<128>(data, N, cent_.get(), cnorm_.get(), C, H, active, ids, dist_.get(), stream);
    } else {
      AssignOutputs o;
      o.ids = ids;
      o.dist = dist_in_assign ? dist_.get() : nullptr;
      o.x_max = first ? kmeans_max_.get() : nullptr;
      // The quantizer's max |residual| is that of the final assignment: with
      // a fixed iteration count only the last one needs it.
      const bool may_be_last = km.check_convergence || assignments == kp.max_iter + 1;
      o.resid_max = may_be_last ? resid_max : nullptr;
      o.next = may_be_last ? next : nullptr;  // a head's last write is its final assignment's
      o.cent_bf16 = may_be_last ? cent_bf16 : nullptr;  // the centroids it used: the stored ones
      if (D == 64)
        run_assign_tc<64>(data, N, cent_.get(), C, H, active, o, stream);
      else
        run_assign_tc<128>(data, N, cent_.get(), C, H, active, o, stream);
    }
    if (km.check_convergence) {
      head_mse_kernel<<<H, 1024, 0, stream>>>(dist_.get(), N, D, mse_.get());
      check_launch();
    }
  };
  std::vector<double> mse_host(static_cast<size_t>(H)), prev(static_cast<size_t>(H));
  auto record = [&](int it) {
    if (!km.check_convergence) return;
    mse_.download(mse_host.data(), mse_host.size(), stream);
    QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
    bool changed = false;
    for (int h = 0; h < H; ++h) {
      if (!active_host[h]) continue;
      if (stats) {
        auto& st = (*stats)[static_cast<size_t>(stage) * H + h];
        st.mse.push_back(mse_host[h]);
        st.iterations = it;
        st.warm_started = km.warm_bf16 != nullptr;
      }
      if (it > 0 && prev[h] - mse_host[h] <= kp.tol * prev[h]) {
        active_host[h] = 0;
        changed = true;
      }
      prev[h] = mse_host[h];
    }
    if (changed) active_.upload(active_host.data(), active_host.size(), stream);
  };
  assign();
  record(0);
  // Sums and counts start at 0 once a stage: each update's mean kernel
  // clears the sums it reads, the reseed kernel the counts (no memset and
  // its gap an iteration).
  if (kp.max_iter > 0) QVG_CUDA_CHECK(cudaMemsetAsync(sums_.get(), 0, sums_.bytes(), stream));
  for (int it = 1; it <= kp.max_iter; ++it) {
    if (km.check_convergence && std::none_of(active_host.begin(), active_host.end(), [](int a) { return a != 0; }))
      break;
    if (D == 64)
      launch_centroid_sum<64>(data, N, C, H, ids, kmeans_max_.get(), active, sums, counts, stream);
    else
      launch_centroid_sum<128>(data, N, C, H, ids, kmeans_max_.get(), active, sums, counts, stream);
    if (!dist_in_assign) {  // distances to the old centroids, before the means replace them
      // Blocks of heads without an empty cluster return at once; those with
      // one (a few, when any) get enough blocks to read their rows at speed:
      // with 16 a head, this kernel averaged 9.7 us over QVG-Pro's 20 updates
      // in bench_cuda (LongCat, random start), whose later stages had empty
      // clusters (2.5 us where none had).
      const dim3 grid(static_cast<unsigned>(std::min<int64_t>((N + 63) / 64, 128)), static_cast<unsigned>(H));
      if (D == 64)
        dist_for_empty_kernel<64><<<grid, 256, 0, stream>>>(data, N, cent_.get(), C, ids, counts, active,
                                                            dist_.get());
      else
        dist_for_empty_kernel<128><<<grid, 256, 0, stream>>>(data, N, cent_.get(), C, ids, counts, active,
                                                             dist_.get());
      check_launch();
    }
    centroid_mean_kernel<<<blocks_for(static_cast<int64_t>(H) * C * 32), kThreads, 0, stream>>>(
        sums, counts, H, N, D, C, kmeans_max_.get(), active, cent_.get());
    check_launch();
    reseed_empty_kernel<T><<<H, 1024, 0, stream>>>(data, N, D, C, counts, dist_.get(), active, taken_.get(),
                                                cent_.get(), reseeded_.get());
    check_launch();
    assign();
    record(it);
  }
  if (km.fp32_assign) {  // (the tensor-core assignment writes them as it stages them)
    to_bf16_kernel<<<blocks_for(static_cast<int64_t>(H) * C * D), kThreads, 0, stream>>>(
        cent_.get(), static_cast<int64_t>(H) * C * D, cent_bf16);
    check_launch();
  }
  if (stats) {
    std::vector<int> re(static_cast<size_t>(H));
    reseeded_.download(re.data(), re.size(), stream);
    QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int h = 0; h < H; ++h) {
      auto& st = (*stats)[static_cast<size_t>(stage) * H + h];
      st.empty_reassigned = re[h];
      st.seconds = sec / H;
    }
  }
  if (next && km.fp32_assign) {  // the tensor-core assignment writes them itself
    QvgShape one = sh;
    one.stages = 1;
    launch_residual(data, one, here, next, stream);
  }
  return resid_max != nullptr;
}

void decode(const QvgShape& sh, QvgParts p, void* out, DeviceDType dtype, cudaStream_t s, DecodeKernel kernel) {
  decode_range(sh, p, DecodeRange{0, sh.tokens, sh.tokens, 0}, out, dtype, s, kernel);
}

void decode_range(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceDType dtype,
                  cudaStream_t s, DecodeKernel kernel) {
  QVG_CHECK(range.begin >= 0 && range.count >= 0 && range.begin + range.count <= sh.tokens && range.out_offset >= 0 &&
                range.out_offset + range.count <= range.out_tokens,
            "decode: tokens [", range.begin, ", +", range.count, ") of ", sh.tokens, " to rows ", range.out_offset,
            ".. of ", range.out_tokens, " do not fit");
  if (range.count == 0) return;
  const bool whole = range.begin == 0 && range.count == sh.tokens && range.out_tokens == sh.tokens;
  QVG_CHECK(kernel != DecodeKernel::rows || whole, "decode: the rows kernel decodes whole tensors only");
  const bool d_ok = sh.dim == 64 || sh.dim == 128;
  const bool rows_ok = d_ok && sh.tokens < (int64_t{1} << 30);
  const bool tile_ok = d_ok && sh.stages <= kTileMaxStages && range.count * sh.dim < (int64_t{1} << 30) &&
                       sh.heads <= 65535 &&  // grid.y
                       int64_t{sh.stages} * sh.heads * sh.centroids * sh.dim < (int64_t{1} << 31);  // split units
  const bool lines_ok = tile_ok && int64_t{sh.stages} * sh.heads * sh.tokens < (int64_t{1} << 31);  // id offsets
  if (kernel == DecodeKernel::automatic) kernel = lines_ok ? DecodeKernel::lines : DecodeKernel::vals16;
  QVG_CHECK(kernel != DecodeKernel::rows || rows_ok, "decode: the rows kernel needs dim 64 or 128, got ", sh.dim);
  QVG_CHECK(kernel != DecodeKernel::tile || tile_ok, "decode: the tile kernel needs dim 64 or 128, at most ",
            kTileMaxStages, " stages, at most 65535 heads, under 2^30 values per head and under 2^31 centroid values;"
            " got dim ", sh.dim, ", ", sh.stages, " stages, ", sh.heads, " heads, ", range.count, " tokens, ",
            sh.centroids, " centroids");
  QVG_CHECK(kernel != DecodeKernel::lines || lines_ok, "decode: the lines kernel needs what the tile kernel needs"
            " and under 2^31 ids; got dim ", sh.dim, ", ", sh.stages, " stages, ", sh.heads, " heads, ", range.count,
            " of ", sh.tokens, " tokens, ", sh.centroids, " centroids");
  constexpr int kRows = 4;  // rows per thread of the rows kernel
  auto launch = [&](auto bits_tag, auto out_tag) {
    constexpr int B = decltype(bits_tag)::value;
    using OutT = typename decltype(out_tag)::type;
    OutT* o = static_cast<OutT*>(out);
    if (kernel == DecodeKernel::tile) {
      with_decode_tile(sh, [&](auto d, auto st) {
        launch_decode_tile_ds<B, decltype(d)::value, decltype(st)::value>(sh, p, range, o, s);
      });
      return;
    }
    if (kernel == DecodeKernel::lines) {
      with_decode_tile(sh, [&](auto d, auto st) {
        launch_decode_lines_ds<B, decltype(d)::value, decltype(st)::value>(sh, p, range, o, s);
      });
      return;
    }
    if (kernel == DecodeKernel::rows) {
      const int64_t rows_per_block = int64_t{kRows} * (32 / (sh.dim / 8)) * (kThreads / 32);
      const dim3 grid(static_cast<unsigned>((sh.tokens + rows_per_block - 1) / rows_per_block),
                      static_cast<unsigned>(sh.heads));
      if (sh.dim == 64)
        decode_rows_kernel<B, kRows, 64, OutT><<<grid, kThreads, 0, s>>>(sh, p, o);
      else
        decode_rows_kernel<B, kRows, 128, OutT><<<grid, kThreads, 0, s>>>(sh, p, o);
      return;
    }
    const int vals = kernel == DecodeKernel::vals8 ? 8 : 16;
    const unsigned grid = blocks_for(static_cast<int64_t>(sh.heads) * range.count * (sh.dim / vals));
    if (vals == 8)
      decode_kernel<B, 8, OutT><<<grid, kThreads, 0, s>>>(sh, p, o, range);
    else
      decode_kernel<B, 16, OutT><<<grid, kThreads, 0, s>>>(sh, p, o, range);
  };
  auto go = [&](auto bits_tag) {
    switch (dtype) {
      case DeviceDType::f32: launch(bits_tag, Tag<float>{}); break;
      case DeviceDType::bf16: launch(bits_tag, Tag<__nv_bfloat16>{}); break;
      case DeviceDType::f16: launch(bits_tag, Tag<__half>{}); break;
    }
  };
  if (sh.bits == 2)
    go(std::integral_constant<int, 2>{});
  else
    go(std::integral_constant<int, 4>{});
  check_launch();
}

void widen_bf16_range(const uint16_t* src, int heads, int64_t tokens, int dim, const DecodeRange& range, float* out,
                      cudaStream_t s) {
  QVG_CHECK(dim % 8 == 0, "widen_bf16_range: dim must be a multiple of 8, got ", dim);
  QVG_CHECK(range.begin >= 0 && range.count >= 0 && range.begin + range.count <= tokens && range.out_offset >= 0 &&
                range.out_offset + range.count <= range.out_tokens,
            "widen_bf16_range: tokens [", range.begin, ", +", range.count, ") of ", tokens, " to rows ",
            range.out_offset, ".. of ", range.out_tokens, " do not fit");
  const int64_t threads = static_cast<int64_t>(heads) * range.count * (dim / 8);
  if (threads == 0) return;
  widen_bf16_kernel<<<blocks_for(threads), kThreads, 0, s>>>(src, heads, tokens, dim, range, out);
  check_launch();
}

}  // namespace qvg::cuda
