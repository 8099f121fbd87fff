// Internal device-level API of the CUDA QVG/RTN backend: encode and decode
// on device buffers, stream-ordered. The Codec front (cuda_codec.cu) and the
// benchmark use it. Layouts: docs/FORMAT.md.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "cuda/check.h"
#include "cuda/qvg_layout.h"
#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg::cuda {

/// The decode kernels of group quantization (code=int; every one gives the
/// same bits). `automatic` (what the codecs run): `lines` where it applies
/// (decode_lines.cuh: dim 64 or 128, at most 4 stages, under 2^30 values
/// per head and 2^31 ids), else `vals16` (one thread per 16 consecutive
/// values, any shape). code=cq has one kernel (decode_cq.cuh), which
/// `automatic` runs.
enum class DecodeKernel { automatic, lines, vals16 };

/// Device buffers for the parts of one encoded tensor, sized by allocate().
/// centroids holds the centroids part's bytes (BF16 values, or FP8 codes
/// and FP32 scales: centroid_part_bytes, then with code=cq the codebooks:
/// codebook_part_bytes; an even count).
struct DeviceParts {
  DeviceBuffer<uint8_t> codes, scales, ids;
  DeviceBuffer<float> span_scales;
  DeviceBuffer<uint16_t> centroids;
  int64_t fp8_codes = -1;  ///< FP8 centroids: bytes of codes before the scales (allocate()); -1: BF16
  int64_t book_offset = -1;  ///< code=cq: byte offset of the codebooks in centroids (allocate()); -1: code=int
  int64_t book_scales_offset = -1;  ///< code=cq, FP8 codebooks: byte offset of their FP32 scales; -1: none
  void allocate(const QvgShape& sh);
  QvgParts view() const;
  /// Allocations from the stream-ordered pool on s (DeviceBuffer::use_pool).
  void use_pool(cudaStream_t s) {
    codes.use_pool(s);
    scales.use_pool(s);
    ids.use_pool(s);
    span_scales.use_pool(s);
    centroids.use_pool(s);
  }
  /// Bytes of every part (what a decode reads).
  size_t bytes() const {
    return codes.bytes() + scales.bytes() + ids.bytes() + span_scales.bytes() + centroids.bytes();
  }
};

/// Host bytes -> a device buffer of exactly that many bytes (qvg::Error on
/// a size mismatch). Stream-ordered.
template <typename T>
void upload_bytes(DeviceBuffer<T>& dst, const std::vector<uint8_t>& src, cudaStream_t s) {
  QVG_CHECK(src.size() == dst.bytes(), "part size mismatch: ", src.size(), " bytes vs ", dst.bytes(), " on the device");
  if (!src.empty()) QVG_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.data(), src.size(), cudaMemcpyHostToDevice, s));
}

/// A device buffer's bytes -> dst (resized to them). Stream-ordered.
template <typename T>
void download_bytes(const DeviceBuffer<T>& src, std::vector<uint8_t>& dst, cudaStream_t s) {
  dst.resize(src.bytes());
  if (!dst.empty()) QVG_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.get(), dst.size(), cudaMemcpyDeviceToHost, s));
}

/// The parts of an encoded qvg / rtn tensor (host) into device buffers
/// allocated for sh. Stream-ordered. Throws (qvg::Error) before copying a
/// part whose size does not match sh, a span scale that is not finite and
/// positive or a centroid id not below C, as the CPU decode does.
void upload_parts(const EncodedTensor& e, const QvgShape& sh, DeviceParts& d, cudaStream_t s);
/// The reverse: every part of d into e's byte vectors; returns once they are
/// on the host (synchronises s).
void download_parts(const DeviceParts& d, EncodedTensor& e, cudaStream_t s);

/// Throws qvg::Error unless the fused decode takes c's method and formats
/// (MethodTraits::group_quantized: qvg with either residual code, rtn). The
/// GPU encoder takes those the device encodes (device_encodes(c), code=cq
/// included).
void check_device_config(const CodecConfig& c);

/// The shape struct of a config and tensor dims; validates (qvg::Error)
/// what the decode needs.
QvgShape make_shape(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim);

/// make_shape, and what the GPU encoder needs besides: k-means (stages > 0)
/// takes head dims 64 and 128 only.
QvgShape make_encode_shape(const CodecConfig& c, int64_t heads, int64_t tokens, int64_t dim);

/// k-means options of one encode on the GPU.
struct GpuKMeansOptions {
  KMeansParams params;
  /// Read the per-head error back after every iteration: heads stop as on
  /// the CPU (relative drop <= tol) and the statistics are filled. Off: every
  /// head runs max_iter iterations with no host synchronisation.
  bool check_convergence = true;
  /// With check_convergence: decide on the device (one kernel sums each
  /// head's error after every assignment but the last and applies the CPU's
  /// rule, clearing the head's active flag), so nothing waits for the host;
  /// every one of max_iter iterations is still launched, converged heads'
  /// blocks return at once, and after the last assignment one kernel writes
  /// the result (max |R|, next points, stored centroids) of the heads that
  /// stopped before it. Ignored when statistics are asked for (they need
  /// the host).
  bool device_convergence = false;
  /// Warm start: BF16 centroids [S][H][C][D] on the device (or null).
  const uint16_t* warm_bf16 = nullptr;
  /// Warm start from FP8 centroids: a centroids part of the encode's shape
  /// (FP8 codes, then FP32 scales) on the device (or null), widened exactly.
  const uint8_t* warm_fp8 = nullptr;
  /// Sets the warm start to a centroids part of shape sh on the device, read
  /// as sh stores its centroids (FP8 codes and scales, or BF16 values).
  void warm_from_part(const QvgShape& sh, const void* part) {
    if (sh.fp8_centroids)
      warm_fp8 = static_cast<const uint8_t*>(part);
    else
      warm_bf16 = static_cast<const uint16_t*>(part);
  }

  /// Several tensors encoded as one (DeviceCodec::encode_batch): the heads
  /// of one tensor. Head h draws its start with the seed of head h %
  /// seed_period (qvg_kmeans_seed), as if each tensor were encoded alone;
  /// 0: the heads are one tensor.
  int seed_period = 0;

  /// Exactly params.max_iter iterations for every head, no host
  /// synchronisation (the benchmarks' setting).
  static GpuKMeansOptions fixed_iterations(const KMeansParams& params) {
    GpuKMeansOptions km;
    km.params = params;
    km.check_convergence = false;
    return km;
  }
};

/// The kernels of the k-means update's cluster sums (kmeans_kernels.cuh; the
/// same bits). `buckets`: each block sorts its chunk of rows by cluster in
/// shared memory and warps sum a cluster's rows in registers. `atomics`: x
/// read in order, every value added to shared-memory sums with three 32-bit
/// atomics. `automatic` (the encoder's): buckets for 16-bit x, atomics for
/// float x (the faster of the two for each on the H200: docs/BENCHMARKS.md).
enum class SumKernel { automatic, buckets, atomics };

/// The k-means update's cluster sums, the kernel the encoder runs (exposed
/// mainly for tests): for the heads with active[h] != 0 (every head when
/// active is null), adds to sums[h][c][k] the exact fixed-point sum
/// (qvg/fixed_sum.h: to_fixed with fixed_sum_exponent(head max, n)) of
/// x[h][i][k] over the rows i with ids[h][i] == c, and to counts[h][c] their
/// number. x: [H][N][D] of dtype (16-byte aligned), D = 64 or 128; ids:
/// [H][N], each below C; head_max: [H], the float bits of each head's max
/// |x|; sums: [H][C][D]; counts: [H][C]; 1 <= C <= 256, H <= 65535; all on
/// the device. chunk_rows: rows a block of the buckets kernel (1 to 8192;
/// 0: the launcher's choice, chunks that fill the device), for tests of the
/// chunk edges; the atomics kernel ignores it. Stream-ordered.
void centroid_sums(const void* x, DeviceElement dtype, int heads, int64_t n, int d, int c, const uint8_t* ids,
                   const unsigned* head_max, const int* active, unsigned long long* sums, int* counts,
                   cudaStream_t stream, SumKernel kernel = SumKernel::automatic, int64_t chunk_rows = 0);

/// rows[h][i] = kmeans_random_rows(n, c, seed_base + h % period)[i] for h <
/// heads (the random start of the encoder's k-means; exposed mainly for
/// tests; period 0: heads). rows: [H][C] on the device; 1 <= C <= min(n,
/// 256). Stream-ordered.
void random_rows(int64_t n, int c, int heads, uint64_t seed_base, int64_t* rows, cudaStream_t stream, int period = 0);

/// FP8 E4M3 on the device (exposed for tests): out[i] = fp8_e4m3_from_float(x[i])
/// as device code computes it (the hardware conversion). x, out: n values on
/// the device. Stream-ordered.
void fp8_e4m3_encode(const float* x, int64_t n, uint8_t* out, cudaStream_t stream);

/// How many of the 2^32 float bit patterns the device's fp8_e4m3_from_float
/// encodes differently from fp8_e4m3_from_float_rule (also run on the device);
/// *first: the lowest such pattern (0xFFFFFFFF when there is none or it is
/// that one). Synchronizes the stream.
uint64_t fp8_e4m3_rule_mismatches(uint32_t* first, cudaStream_t stream);

/// Throws qvg::Error ("CUDA backend: <reason>") when no device is usable.
void check_device();

/// x ([heads, tokens, dim] of `type` in device memory) as a host float
/// tensor, copied on `stream` (waits for it); bf16 / f16 widened exactly.
HeadTensor download_as_float(const void* x, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                             cudaStream_t stream);

/// The lowest index i < n whose value x[i] (dtype, device memory) is not
/// finite, with that value in *value (optional); -1 when every value is
/// finite; *max_abs (optional): the largest magnitude when every value is
/// finite. Synchronizes the stream (device_tensor.cu).
int64_t first_nonfinite(const void* x, DeviceElement dtype, int64_t n, float* value, cudaStream_t stream,
                        float* max_abs = nullptr);

/// Scratch memory reused across encodes.
class Encoder {
 public:
  /// Encode x ([H][N][D] of dtype on the device) into parts (allocated here).
  /// stats (optional): [S*H] k-means statistics, filled when
  /// check_convergence. Stream-ordered; returns after queueing unless
  /// statistics or a warm start (copied through the host) need the host; a
  /// k-means++ start draws its subsample on the host (kmeanspp_start) and
  /// uploads it first.
  void encode(const void* x, DeviceElement dtype, const QvgShape& sh, const GpuKMeansOptions& km, DeviceParts& parts,
              cudaStream_t stream, std::vector<KMeansStats>* stats = nullptr);

  /// Quantize with every stage's centroids and ids already in parts
  /// (qvg_encode_given_centroids_ref on the GPU).
  void quantize_given(const void* x, DeviceElement dtype, const QvgShape& sh, DeviceParts& parts, cudaStream_t stream);

 private:
  /// k-means of one stage on `data` ([H][N][D]: the input for stage 0, BF16
  /// points after it), writing the stage's ids and BF16 centroids into
  /// parts. resid_max (optional, [H]): per head, max |data - bf16(centroid)|
  /// over the final assignment, as float bits: the quantizer's span-scale
  /// input when this is the last stage (R = data - bf16(centroid): docs/
  /// FORMAT.md, Encode 1). next (optional, [H][N][D] BF16): the next stage's
  /// points bf16(data - bf16(centroid)). The steps: kmeans_start, then
  /// assignments and updates (kmeans_assign, kmeans_update) until every head
  /// converged or max_iter updates ran. Only the last assignment (or, for a
  /// head that stopped before it, one pass after the loop:
  /// stopped_head_outputs_kernel) writes resid_max, next and the stored
  /// centroids.
  template <typename T>
  void kmeans_stage(const T* data, const QvgShape& sh, int stage, const GpuKMeansOptions& km, QvgParts parts,
                    cudaStream_t stream, std::vector<KMeansStats>* stats, unsigned* resid_max, uint16_t* next);
  /// The starting centroids of stage `stage` into cent_ (float [H][C][D]):
  /// the warm start's BF16 centroids, random rows (the CPU's rows) or
  /// a sampled start, k-means++ or d2_rounds (the CPU reference's rules).
  template <typename T>
  void kmeans_start(const T* data, const QvgShape& sh, int stage, const GpuKMeansOptions& km, cudaStream_t stream);
  /// One update of the active heads: the clusters' exact sums and counts,
  /// the distances an empty cluster's reseed needs (where the assignment did
  /// not write them), the means, the reseed of empty clusters.
  template <typename T>
  void kmeans_update(const T* data, const QvgShape& sh, const uint8_t* ids, const int* active, bool dist_ready,
                     cudaStream_t stream);
  /// Per-head convergence after assignment `it` (host): appends each active
  /// head's error to stats, deactivates heads whose relative drop is <= tol.
  void kmeans_converged(const QvgShape& sh, int stage, int it, const GpuKMeansOptions& km, cudaStream_t stream,
                        std::vector<KMeansStats>* stats);
  std::vector<int> active_host_;   // heads still iterating (kmeans_converged)
  std::vector<double> mse_host_, mse_prev_;
  DeviceBuffer<double> mse_prev_dev_;  // device_convergence: the last error of each head
  /// FP8 centroids: each stage's k-means as with BF16 centroids (ids, and
  /// its BF16 centroids into cent_bf16_), then the centroids to FP8
  /// (pack_fp8_centroids), then the stage's residual with the FP8 values: the
  /// next stage's points, or after the last stage the quantizer's input.
  /// points_ and next_points_ are sized by the caller (encode).
  template <typename T>
  void encode_fp8_stages(const T* x, const QvgShape& sh, const GpuKMeansOptions& km, QvgParts p, cudaStream_t stream,
                         std::vector<KMeansStats>* stats);
  DeviceBuffer<uint16_t> points_, next_points_;  // BF16 points of stages 1..S-1
  DeviceBuffer<uint16_t> cent_bf16_;             // FP8 centroids: k-means' BF16 centroids [S][H][C][D], then
                                                 // the stored FP8 values widened to BF16 (the quantizer's)
  DeviceBuffer<uint16_t> warm_bf16_;             // an FP8 warm start widened to BF16 [S][H][C][D]
  DeviceBuffer<float> cent_, dist_;
  DeviceBuffer<uint32_t> head_max_, kmeans_max_;
  DeviceBuffer<unsigned long long> sums_;
  DeviceBuffer<int> active_, reseeded_;
  DeviceBuffer<double> mse_;
  DeviceBuffer<int64_t> rows_;  // random start rows [H][C]
  /// A sampled start of one stage (kmeanspp_start or kmeans_d2_start of
  /// every head) on the device, for n tokens, c centroids, h heads, the
  /// stage's first seed and the rule.
  struct PPStart {
    int64_t n = -1;
    int c = 0, h = 0, m = 0;
    uint64_t seed0 = 0, draws = 0;
    KMeansInit init = KMeansInit::kmeanspp;
    int period = 0;
    DeviceBuffer<int> rows;         // samples [H][m]
    DeviceBuffer<int64_t> first;    // first centre of each head
    DeviceBuffer<uint64_t> seeds;   // each head's seed
    std::vector<KMeansPPStart> host;   // the starts of heads 0 .. period - 1 (head h: host[h % period])
    std::vector<uint64_t> host_seeds;  // each head's seed
  };
  /// The start from the sample on the host (kmeans_start_from_sample) into
  /// cent_, where the device's form of the start kernel has no clusters.
  template <typename T>
  void start_on_host(const T* data, const QvgShape& sh, const PPStart& pp, cudaStream_t stream);
  DeviceBuffer<float> sample_;  // start_on_host: the sample rows of a group of heads
  /// code=cq: the residual x minus sh.stages stages (load_residual16's rule)
  /// coded by codebooks into p (token scales, span scales, codebooks,
  /// packed indices): cq_encode_head_ref's steps, src/cuda/encode_cq.cuh.
  /// km: its params' max_iter, tol and seed, and seed_period.
  void encode_cq(const void* x, DeviceElement dtype, const QvgShape& sh, QvgParts p, const GpuKMeansOptions& km,
                 cudaStream_t stream);
  DeviceBuffer<float> cq_rms_, cq_u_, cq_books_, cq_dist_;  // [H][N], [H][D/G][N][G], [H][D/G][K][G], [H][D/G][rows]
  DeviceBuffer<uint8_t> cq_ids_, cq_idx_;                   // [H][D/G][rows], [H][N][D/G]
  std::vector<PPStart> pp_;  // by stage
};

/// Fused decode into out ([H][N][D] of dtype on the device) with the chosen
/// kernel (every kernel gives the same bits).
void decode(const QvgShape& sh, QvgParts parts, void* out, DeviceElement dtype, cudaStream_t stream,
            DecodeKernel kernel = DecodeKernel::automatic);

/// Throws unless range's destination strides are >= 0 and multiples of 16
/// bytes for elements of element_bytes (`what` names the caller).
void check_out_strides(const DecodeRange& range, size_t element_bytes, const char* what);

/// Whether the lines decode kernel takes `count` tokens of a tensor of
/// shape sh (DecodeKernel::automatic runs it where it does).
bool lines_decode_fits(const QvgShape& sh, int64_t count);

/// Decode of a token range of every head into a larger destination (see
/// DecodeRange: head-major or token-major rows), e.g. one span straight into
/// a layer's K/V buffer. qvg::Error when the range does not fit or the
/// strides are not multiples of 16 bytes.
void decode_range(const QvgShape& sh, QvgParts parts, const DecodeRange& range, void* out, DeviceElement dtype,
                  cudaStream_t stream, DecodeKernel kernel = DecodeKernel::automatic);

/// The FP8 centroids of a centroids part (sh's layout: FP8 codes, FP32
/// scales) as BF16 bits [S][H][C][D] (exact: every code times its power-of-two
/// scale is a BF16 value). Stream-ordered.
void widen_fp8_centroids(const QvgShape& sh, const uint8_t* part, uint16_t* out, cudaStream_t stream);

/// BF16 bits [heads][tokens][dim] on the device -> float rows of a larger
/// destination (see DecodeRange). Exact. Stream-ordered.
void widen_bf16_range(const uint16_t* src, int heads, int64_t tokens, int dim, const DecodeRange& range, float* out,
                      cudaStream_t stream);

}  // namespace qvg::cuda
