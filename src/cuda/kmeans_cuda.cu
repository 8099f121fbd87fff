// k-means of the QVG encode on the GPU: the launchers of the update and
// assignment kernels and the Encoder's k-means steps (start, assign,
// update, convergence). Kernels: assign_tc.cuh, d2_start.cuh, kmeans_kernels.cuh,
// kmeans_reseed.cuh, kmeanspp.cuh. The CPU reference (src/reference/kmeans.cpp) is the specification.
#include <algorithm>
#include <chrono>

#include "cuda/arch.cuh"
#include "cuda/assign_tc.cuh"
#include "cuda/d2_start.cuh"
#include "cuda/dispatch.h"
#include "cuda/kmeans_kernels.cuh"
#include "cuda/kmeans_reseed.cuh"
#include "cuda/kmeanspp.cuh"
#include "cuda/qvg_cuda.h"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "qvg/qvg_steps.h"
#include "util/parallel.h"

namespace qvg::cuda {

namespace {

constexpr int kThreads = 256;

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
cudaError_t launch_centroid_sum(const T* x, int64_t n, int c, int heads, const uint8_t* ids, const unsigned* head_max,
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
    return cudaGetLastError();
  }
  const size_t smem = centroid_sum_smem(c);
  auto* kernel = centroid_sum_kernel<T, D>;
  // Every launch: the attributes belong to the current device's context. All
  // of L1 as shared memory (x is streamed once, L1 holds nothing worth
  // keeping): two blocks an SM at C = 256.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
    return e;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared))
    return e;
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
  return cudaGetLastError();
}

/// The tensor-core assignment of every active head (assign_tc.cuh), its
/// per-head maxima zeroed first: those of every head (a head that stopped
/// before gets its max |residual| from stopped_head_outputs_kernel next).
template <int D, typename T>
cudaError_t launch_assign(const T* x, int64_t n, const float* cent, int c, int heads, const int* active,
                          const AssignOutputs& o, cudaStream_t s) {
  QVG_CHECK(heads <= 65535, "k-means on the GPU: at most 65535 heads per tensor, got ", heads);
  QVG_CHECK(c >= 1 && c <= kAssignMaxCentroids, "k-means on the GPU: 1 to ", kAssignMaxCentroids, " centroids, got ", c);
  for (unsigned* m : {o.x_max, o.resid_max})
    if (m)
      if (cudaError_t e = cudaMemsetAsync(m, 0, sizeof(unsigned) * heads, s)) return e;
  return launch_assign_tc<D, T>(x, n, cent, c, heads, active, o, s);
}

/// stopped_head_outputs_kernel over the heads with active[h] == 0: blocks a
/// head as many as fill the device once (the heads that still ran return at
/// once), at least one, at most one a kernel step of rows.
template <int D, typename T>
cudaError_t launch_stopped_head_outputs(const T* x, int64_t n, const float* cent, int c, int heads,
                                        const uint8_t* ids, const int* active, const AssignOutputs& o,
                                        cudaStream_t s) {
  constexpr int kRows = kStoppedThreads / (D / 8);
  const int64_t fill = resident_blocks(stopped_head_outputs_kernel<D, T>, kStoppedThreads, 0, "k-means outputs");
  const int64_t per_head = std::clamp<int64_t>(fill / heads, 1, (n + kRows - 1) / kRows);
  stopped_head_outputs_kernel<D, T><<<dim3(static_cast<unsigned>(per_head), static_cast<unsigned>(heads)),
                                      kStoppedThreads, 0, s>>>(x, n, cent, c, ids, active, o);
  return cudaGetLastError();
}

}  // namespace

void centroid_sums(const void* x, DeviceElement dtype, int heads, int64_t n, int d, int c, const uint8_t* ids,
                   const unsigned* head_max, const int* active, unsigned long long* sums, int* counts,
                   cudaStream_t s, SumKernel kernel, int64_t chunk_rows) {
  QVG_CHECK(d == 64 || d == 128, "k-means update on the GPU: D = 64 or 128, got ", d);
  with_element(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_head_dim(d, [&](auto dim) {
      QVG_CUDA_CHECK((launch_centroid_sum<decltype(dim)::value>(static_cast<const T*>(x), n, c, heads, ids, head_max,
                                                                active, sums, counts, s, kernel, chunk_rows)));
    });
  });
}

void random_rows(int64_t n, int c, int heads, uint64_t seed_base, int64_t* rows, cudaStream_t s, int period) {
  QVG_CHECK(c >= 1 && c <= 256 && c <= n, "k-means: cannot draw ", c, " distinct rows from ", n, " (at most 256)");
  QVG_CHECK(heads >= 1 && period >= 0, "k-means random start: ", heads, " heads, seed period ", period);
  random_rows_kernel<<<static_cast<unsigned>(heads), 256, 0, s>>>(n, c, seed_base, period > 0 ? period : heads, rows);
  QVG_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void Encoder::kmeans_start(const T* data, const QvgShape& sh, int stage, const GpuKMeansOptions& km,
                           cudaStream_t stream) {
  const int H = sh.heads, C = sh.centroids, D = sh.dim;
  const int64_t N = sh.tokens;
  CodecConfig seeds;
  seeds.kmeans.seed = km.params.seed;
  // Heads of one tensor: head h draws with head h % period's seed (GpuKMeansOptions::seed_period).
  const int period = km.seed_period > 0 ? km.seed_period : H;
  QVG_CHECK(H % period == 0, "k-means start: ", H, " heads are not whole tensors of ", period);
  if (km.warm_bf16) {
    // The previous span's BF16 centroids of this stage, widened on the device (exact).
    const int64_t rows = static_cast<int64_t>(H) * C;
    widen_bf16_range(km.warm_bf16 + static_cast<int64_t>(stage) * rows * D, 1, rows, D, DecodeRange{0, rows, rows, 0},
                     cent_.get(), stream);
  } else if (km.params.init == KMeansInit::random) {
    // kmeans_random_rows of every head, drawn on the device (seeds
    // qvg_kmeans_seed(stage, h % period) = base + h % period).
    const uint64_t seed_base = qvg_kmeans_seed(seeds, stage, 0);
    QVG_CHECK(qvg_kmeans_seed(seeds, stage, period - 1) == seed_base + static_cast<uint64_t>(period - 1),
              "k-means seeds are not consecutive across heads");
    rows_.resize(static_cast<size_t>(H) * C);
    random_rows(N, C, H, seed_base, rows_.get(), stream, period);
    gather_rows_kernel<<<blocks_for(static_cast<int64_t>(H) * C * D), kThreads, 0, stream>>>(data, N, D, C, rows_.get(),
                                                                                            H, cent_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
  } else {
    // k-means++ or d2_rounds: the start (the subsample, the first centre,
    // their draws: kmeanspp_start or kmeans_d2_start, as the CPU reference)
    // on the host, the draws of the centres on the device (kmeanspp_kernel:
    // C - 1 sequential steps; d2_start_kernel: a few rounds).
    const bool d2 = km.params.init == KMeansInit::d2_rounds;
    QVG_CHECK(N <= INT32_MAX && H <= 65535, "k-means start on the GPU: ", N, " tokens (at most 2^31 - 1), ", H,
              " heads (at most 65535)");
    // The start depends on N, C and the seeds only (not on the data): drawn
    // and uploaded once per stage and shape, then reused (no host work or
    // upload in a stream of same-sized spans).
    if (pp_.size() <= static_cast<size_t>(stage)) pp_.resize(static_cast<size_t>(stage) + 1);
    PPStart& pp = pp_[static_cast<size_t>(stage)];
    const uint64_t seed0 = qvg_kmeans_seed(seeds, stage, 0);
    if (pp.n != N || pp.c != C || pp.h != H || pp.seed0 != seed0 || pp.init != km.params.init || pp.period != period) {
      std::vector<uint64_t> pp_seeds(static_cast<size_t>(H));
      for (int h = 0; h < H; ++h) pp_seeds[h] = qvg_kmeans_seed(seeds, stage, h % period);
      // The heads' starts are independent (each one O(N)) and the same for
      // every tensor (one per head of a tensor): on all cores where they add
      // up to at least 2^18 rows, on one below. The same bytes either way.
      std::vector<KMeansPPStart> starts(static_cast<size_t>(period));
      const int threads = static_cast<int64_t>(period) * N >= (int64_t{1} << 18) ? 0 : 1;
      parallel_for(period, threads, [&](int64_t h) {
        starts[static_cast<size_t>(h)] = d2 ? kmeans_d2_start(N, C, pp_seeds[h]) : kmeanspp_start(N, C, pp_seeds[h]);
      });
      // m and the draws are the same for every head: they depend on N and C only.
      pp.m = static_cast<int>(starts[0].rows.size());
      pp.draws = starts[0].draws;
      std::vector<int> pp_rows(static_cast<size_t>(H) * pp.m);
      std::vector<int64_t> pp_first(static_cast<size_t>(H));
      for (int h = 0; h < H; ++h) {
        const KMeansPPStart& st = starts[static_cast<size_t>(h % period)];
        std::copy(st.rows.begin(), st.rows.end(), pp_rows.begin() + static_cast<int64_t>(h) * pp.m);
        pp_first[h] = st.first;
      }
      pp.rows.upload(pp_rows.data(), pp_rows.size(), stream);
      pp.first.upload(pp_first.data(), pp_first.size(), stream);
      pp.seeds.upload(pp_seeds.data(), pp_seeds.size(), stream);
      QVG_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors go out of scope
      pp.host = std::move(starts);
      pp.host_seeds = std::move(pp_seeds);
      pp.n = N;
      pp.c = C;
      pp.h = H;
      pp.seed0 = seed0;
      pp.init = km.params.init;
      pp.period = period;
    }
    const int m = pp.m;
    with_head_dim(D, [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      const void* kernel = d2 ? reinterpret_cast<const void*>(d2_start_kernel<T, kD>)
                              : reinterpret_cast<const void*>(kmeanspp_kernel<T, kD>);
      const size_t smem = d2 ? d2_smem<kD>(m) : kmeanspp_smem(m);
      if (!kernel_has_clusters(kernel) || smem > static_cast<size_t>(smem_optin())) {
        start_on_host(data, sh, pp, stream);
      } else if (d2) {
        QVG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        d2_start_kernel<T, kD><<<dim3(kD2Blocks, static_cast<unsigned>(H)), kD2Threads, smem, stream>>>(
            data, N, pp.rows.get(), m, C, pp.first.get(), pp.seeds.get(), pp.draws, cent_.get());
      } else {
        kmeanspp_kernel<T, kD><<<dim3(kPPBlocks, static_cast<unsigned>(H)), kPPThreads, smem, stream>>>(
            data, N, pp.rows.get(), m, C, pp.first.get(), pp.seeds.get(), pp.draws, cent_.get());
      }
    });
    QVG_CUDA_CHECK(cudaGetLastError());
  }
}

// Before sm_90 (no thread-block clusters), or where a block's shared memory
// cannot hold the kernel's slice of the sample, the start runs on the host: the
// sample rows gathered on the device (exact values) and downloaded in groups
// of heads of at most 2^24 floats, each head's start by the CPU reference
// from its sample (all cores), the centroids rounded to BF16 as kmeans_ref
// rounds them, uploaded into cent_. The same centroids as the CPU reference.
template <typename T>
void Encoder::start_on_host(const T* data, const QvgShape& sh, const PPStart& pp, cudaStream_t stream) {
  const int H = sh.heads, C = sh.centroids, D = sh.dim, m = pp.m;
  const int64_t N = sh.tokens;
  const int64_t per_head = static_cast<int64_t>(m) * D;
  const int group = static_cast<int>(std::clamp<int64_t>((int64_t{1} << 24) / per_head, 1, H));
  std::vector<float> sample(static_cast<size_t>(group * per_head));
  std::vector<float> cent(static_cast<size_t>(H) * C * D);
  sample_.resize(sample.size());
  for (int h0 = 0; h0 < H; h0 += group) {
    const int g = std::min(group, H - h0);
    gather_rows_kernel<T, int, false><<<blocks_for(g * per_head), kThreads, 0, stream>>>(
        data + static_cast<int64_t>(h0) * N * D, N, D, m, pp.rows.get() + static_cast<int64_t>(h0) * m, g,
        sample_.get());
    QVG_CUDA_CHECK(cudaGetLastError());
    sample_.download(sample.data(), static_cast<size_t>(g * per_head), stream);
    QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
    parallel_for(g, 0, [&](int64_t i) {
      const int64_t h = h0 + i;
      const std::vector<float> c = kmeans_start_from_sample(sample.data() + i * per_head, D, C, pp.init,
                                                             pp.host[static_cast<size_t>(h % pp.period)],
                                                             pp.host_seeds[static_cast<size_t>(h)]);
      std::transform(c.begin(), c.end(), cent.begin() + h * C * D, round_bf16);
    });
  }
  QVG_CUDA_CHECK(cudaMemcpyAsync(cent_.get(), cent.data(), cent.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  QVG_CUDA_CHECK(cudaStreamSynchronize(stream));  // cent goes out of scope
}

template <typename T>
void Encoder::kmeans_update(const T* data, const QvgShape& sh, const uint8_t* ids, const int* active,
                            bool dist_ready, cudaStream_t stream) {
  const int H = sh.heads, C = sh.centroids, D = sh.dim;
  const int64_t N = sh.tokens;
  const int64_t n_sums = static_cast<int64_t>(H) * C * D;
  unsigned long long* sums = sums_.get();
  int* counts = reinterpret_cast<int*>(sums + n_sums);
  with_head_dim(D, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    QVG_CUDA_CHECK((launch_centroid_sum<kD>(data, N, C, H, ids, kmeans_max_.get(), active, sums, counts, stream)));
    if (!dist_ready) {  // distances to the old centroids, before the means replace them
      // Blocks of heads without an empty cluster return at once; those with
      // one get up to 128 blocks a head to read their rows.
      const dim3 grid(static_cast<unsigned>(std::min<int64_t>((N + 63) / 64, 128)), static_cast<unsigned>(H));
      dist_for_empty_kernel<kD><<<grid, 256, 0, stream>>>(data, N, cent_.get(), C, ids, counts, active, dist_.get());
      QVG_CUDA_CHECK(cudaGetLastError());
    }
  });
  centroid_mean_kernel<<<blocks_for(static_cast<int64_t>(H) * C * 32), kThreads, 0, stream>>>(
      sums, counts, H, N, D, C, kmeans_max_.get(), active, cent_.get());
  QVG_CUDA_CHECK(cudaGetLastError());
  reseed_empty_kernel<T><<<H, kReseedThreads, 0, stream>>>(data, N, D, C, counts, dist_.get(), active, cent_.get(),
                                                           reseeded_.get());
  QVG_CUDA_CHECK(cudaGetLastError());
}

void Encoder::kmeans_converged(const QvgShape& sh, int stage, int it, const GpuKMeansOptions& km, cudaStream_t stream,
                               std::vector<KMeansStats>* stats) {
  const int H = sh.heads;
  mse_.download(mse_host_.data(), mse_host_.size(), stream);
  QVG_CUDA_CHECK(cudaStreamSynchronize(stream));
  bool changed = false;
  for (int h = 0; h < H; ++h) {
    if (!active_host_[h]) continue;
    if (stats) {
      auto& st = (*stats)[static_cast<size_t>(stage) * H + h];
      st.mse.push_back(mse_host_[h]);
      st.iterations = it;
      st.warm_started = km.warm_bf16 != nullptr;
    }
    if (it > 0 && mse_prev_[h] - mse_host_[h] <= km.params.tol * mse_prev_[h]) {
      active_host_[h] = 0;
      changed = true;
    }
    mse_prev_[h] = mse_host_[h];
  }
  if (changed) active_.upload(active_host_.data(), active_host_.size(), stream);
}

template <typename T>
void Encoder::kmeans_stage(const T* data, const QvgShape& sh, int stage, const GpuKMeansOptions& km, QvgParts parts,
                           cudaStream_t stream, std::vector<KMeansStats>* stats, unsigned* resid_max, uint16_t* next) {
  const int H = sh.heads, C = sh.centroids, D = sh.dim;
  const int64_t N = sh.tokens;
  const auto t0 = std::chrono::steady_clock::now();
  cent_.resize(static_cast<size_t>(H) * C * D);
  dist_.resize(static_cast<size_t>(H * N));
  // The update's sums [H][C][D] and counts [H][C] in one buffer: one memset.
  const int64_t n_sums = static_cast<int64_t>(H) * C * D;
  sums_.resize(static_cast<size_t>(n_sums + (static_cast<int64_t>(H) * C + 1) / 2));
  kmeans_max_.resize(static_cast<size_t>(H));
  active_.resize(static_cast<size_t>(H));
  reseeded_.resize(static_cast<size_t>(H));
  mse_.resize(static_cast<size_t>(H));
  const QvgParts here = stage_parts(parts, sh, stage);

  kmeans_start(data, sh, stage, km, stream);
  const int max_iter = km.params.max_iter;
  // The stopping rule (check_convergence) decided on the device, or on the
  // host (kmeans_converged: a download and a synchronisation an assignment).
  const bool on_device = km.check_convergence && km.device_convergence && !stats;
  const bool on_host = km.check_convergence && !on_device;
  if (on_host) {
    active_host_.assign(static_cast<size_t>(H), 1);
    mse_host_.assign(static_cast<size_t>(H), 0.0);
    mse_prev_.assign(static_cast<size_t>(H), 0.0);
    active_.upload(active_host_.data(), active_host_.size(), stream);
  }
  if (on_device) mse_prev_dev_.resize(static_cast<size_t>(H));
  // Heads still iterating: all of them without the rule (null). On the
  // device the first assignment runs every head (null) and the rule's kernel
  // after it sets the list.
  const int* active = km.check_convergence ? active_.get() : nullptr;
  QVG_CUDA_CHECK(cudaMemsetAsync(reseeded_.get(), 0, sizeof(int) * H, stream));
  // Assignment `it` (0 .. max_iter). Per assignment: the ids, and where the
  // rule follows, every row's exact distance (the rule's error, and the
  // farthest rows of the empty-cluster rule in the update after it; without
  // the rule only heads with an empty cluster need them: dist_for_empty_kernel
  // in kmeans_update). What only the result needs (max |R|, the next stage's
  // points, the stored centroids) is written once: by the final assignment
  // (it == max_iter) for the heads it runs, and by finish() for the heads
  // that stopped before it.
  auto assign = [&](int it) {
    const bool last = it == max_iter;
    const bool rule = on_host || (on_device && !last);  // the rule follows (on the host: also the statistics)
    AssignOutputs o;
    o.ids = here.ids;
    o.dist = rule ? dist_.get() : nullptr;
    // Largest |x| of each head's points (the fixed-point quantum of the
    // update sums): found by the first assignment.
    o.x_max = it == 0 ? kmeans_max_.get() : nullptr;
    o.resid_max = last ? resid_max : nullptr;
    o.next = last ? next : nullptr;
    o.cent_bf16 = last ? here.centroids : nullptr;  // the centroids the final assignment used: the stored ones
    const int* run = on_device && it == 0 ? nullptr : active;
    with_head_dim(D, [&](auto dim) {
      QVG_CUDA_CHECK((launch_assign<decltype(dim)::value>(data, N, cent_.get(), C, H, run, o, stream)));
    });
    if (on_host) {
      head_mse_kernel<<<H, kMseThreads, 0, stream>>>(dist_.get(), N, D, mse_.get());
      QVG_CUDA_CHECK(cudaGetLastError());
    } else if (rule) {
      head_converged_kernel<<<H, kMseThreads, 0, stream>>>(dist_.get(), N, D, mse_prev_dev_.get(), active_.get(),
                                                           km.params.tol, it);
      QVG_CUDA_CHECK(cudaGetLastError());
    }
  };
  // The result of the heads that stopped before assignment max_iter (the
  // rule cleared their flag), from their final assignment's ids and
  // centroids, which no later step changed. all_stopped: no assignment
  // max_iter ran (the host rule stopped every head), so no maximum was zeroed.
  auto finish = [&](bool all_stopped) {
    if (!km.check_convergence || max_iter == 0) return;
    AssignOutputs o;
    o.resid_max = resid_max;
    o.next = next;
    o.cent_bf16 = here.centroids;
    if (all_stopped && resid_max) QVG_CUDA_CHECK(cudaMemsetAsync(resid_max, 0, sizeof(unsigned) * H, stream));
    with_head_dim(D, [&](auto dim) {
      QVG_CUDA_CHECK((launch_stopped_head_outputs<decltype(dim)::value>(data, N, cent_.get(), C, H, here.ids,
                                                                        active_.get(), o, stream)));
    });
  };
  // Sums and counts start at 0 once a stage: each update's mean kernel
  // clears the sums it reads, the reseed kernel the counts.
  if (max_iter > 0) QVG_CUDA_CHECK(cudaMemsetAsync(sums_.get(), 0, sums_.bytes(), stream));
  bool all_stopped = false;
  for (int it = 0; it <= max_iter; ++it) {
    if (it > 0) {
      if (on_host && std::none_of(active_host_.begin(), active_host_.end(), [](int a) { return a != 0; })) {
        all_stopped = true;
        break;
      }
      kmeans_update(data, sh, here.ids, active, km.check_convergence, stream);
    }
    assign(it);
    if (it == max_iter) finish(false);  // before the host rule clears more flags
    if (on_host) kmeans_converged(sh, stage, it, km, stream, stats);
  }
  if (all_stopped) finish(true);
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
}

// Encoder::encode (qvg_cuda.cu) runs stage 0 on the input's element type and
// later stages on BF16 points.
#define QVG_KMEANS_STAGE(T)                                                                                        \
  template void Encoder::kmeans_stage<T>(const T*, const QvgShape&, int, const GpuKMeansOptions&, QvgParts,       \
                                         cudaStream_t, std::vector<KMeansStats>*, unsigned*, uint16_t*);
QVG_KMEANS_STAGE(float)
QVG_KMEANS_STAGE(__nv_bfloat16)
QVG_KMEANS_STAGE(__half)
#undef QVG_KMEANS_STAGE

}  // namespace qvg::cuda
