// k-means along tokens on the GPU, all heads of a tensor in each launch
// (the assignment: assign_tc.cuh). The update sums each
// cluster's members in exact 64-bit fixed point (qvg/fixed_sum.h), in either
// of two kernels: centroid_bucket_sum_kernel (the encoder's: a block sorts
// its rows by cluster in shared memory, warps sum a cluster's rows in
// registers) or centroid_sum_kernel (x read once in order, per-block sums in
// shared memory with integer atomics). Integer addition is associative, so
// both give the CPU reference's bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <cub/block/block_scan.cuh>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "cuda/random_rows.cuh"
#include "qvg/fixed_sum.h"
#include "qvg/half.h"
#include "util/rng.h"

namespace qvg::cuda {

/// to_fixed(x, e) in single precision, for heads with -e in [-126, 100]
/// (every head but those of largest |x| below about 2^-(38 + L)); scale =
/// 2^-e as a float. The same integer as to_fixed_scaled, with one
/// conversion instead of two (conversions run at 16 a clock per SM on sm_90,
/// a quarter of the double multiplies' rate): where |x * 2^-e| >= 2^-126
/// the float product is exact (x has at most 24 significant bits and the
/// product is below 2^62), so both round the same real number to nearest
/// even; below 2^-126 both give 0, whatever the float product's rounding or a
/// flush of a subnormal x to zero (x * 2^-e < 2^-126 * 2^100 < 1/2).
__device__ __forceinline__ int64_t to_fixed_float(float x, float scale) {
  return __float2ll_rn(__fmul_rn(x, scale));
}

/// Whether to_fixed_float serves a head with quantum 2^e.
__host__ __device__ constexpr bool fixed_float_ok(int e) { return -e >= -126 && -e <= 100; }

/// Cluster sums of the k-means update in exact fixed point (qvg/fixed_sum.h):
/// sums[h][c][k] += sum of to_fixed(x[h][n][k], e_h) over the rows n with
/// ids[h][n] == c, counts[h][c] += their number, for the heads with
/// active[h] != 0 (all if active is null). Integer addition is associative:
/// any order of the atomics below gives the CPU loop's bits.
///
/// The loop it replaces (kmeans.cpp):
///   for n: c = ids[n]; ++count[c]; for k: sum[c][k] += to_fixed(x[n][k], e)
///
/// x is read once, in order, without a sort: block (blockIdx.x, h) owns
/// dimensions [32 s, 32 s + 32) of head h (s = blockIdx.x % (D / 32)) for a
/// chunk of chunk_rows rows (blockIdx.x / (D / 32)), and accumulates it in
/// shared memory (C x 32 sums), then adds its non-zero sums and counts to the
/// global ones with one 64-bit atomic each. The D / 32 blocks of a chunk are
/// neighbours in the grid, so together they read whole rows at about the
/// same time. A lane loads 16 bytes (V = 16 / sizeof(T) values) of the slice
/// from each of kSumRowsPerLane consecutive rows a pass, one pass ahead of
/// the one it adds; the L = 32 / V lanes of a row slice are consecutive, a
/// warp covers V rows a step, and the warp's rows of a pass are consecutive,
/// so the ids of a lane's rows are one 4-byte load (bytes where the head's
/// ids are not 4-byte aligned).
///
/// Shared-memory sums: 64-bit shared atomicAdd is not native on sm_90 (it
/// compiles to a load and an ATOMS.CAST.SPIN.64 compare-and-swap loop; the
/// 64-bit global atomicAdd is a single RED), so each sum is three 32-bit
/// words added to with native 32-bit adds that return nothing (no latency
/// to wait for; an earlier lo/hi pair whose carry came from the returned
/// old value spent most of its time waiting on it): the value u = hi 2^32
/// + mid 2^16 + lo (lo, mid in [0, 2^16), hi = u >> 32 arithmetic). The lo
/// and mid sums of at most 2^16 rows (chunk_rows <= kSumMaxChunk) are exact
/// in 32 bits; hi's may wrap: hi_sum 2^32 + mid_sum 2^16 + lo_sum mod 2^64
/// is the sum mod 2^64, which is the sum: |sum| <= 2^62. Layout [C][3][32]
/// words: cluster c's lo words at 96 c + k, mid and hi 32 and 64 words on
/// (the same banks).
///
/// Banks: at each step every lane of a warp adds to a different bank. Lane
/// (r = lane / L, q = lane % L) holds dims 32 s + q V + (0..V-1) of row r of
/// the warp's step; at step i it adds its value for dim q V + (i ^ r), whose
/// word 96 c + q V + (i ^ r) lies in bank q V + (i ^ r): for each i that is
/// a different bank for each of the 32 (r, q), whatever the rows' ids (V
/// rows a step: r < V). The lane's values are permuted in registers first
/// (value i <- value i ^ r: eight byte permutes a row, permute_words) so
/// that step i reads the same register in every lane.
///
/// Cost a value (bf16, sm_90 SASS): 16-bit unpack, permute share, FMUL, one
/// F2I (to_fixed_float), address, three shared atomics without return;
/// x is read once, and the shared-memory atomic pipe is the limit (ncu: MIO
/// throttle; docs/BENCHMARKS.md).
/// Kept for comparison (SumKernel::atomics); the encoder runs
/// centroid_bucket_sum_kernel, which has no shared-memory atomic a value.
///
/// Grid (chunks * D / 32, H); block kSumThreads; dynamic shared memory
/// centroid_sum_smem(C). chunk_rows: a multiple of kSumPassRows<T>, at most
/// kSumMaxChunk.
constexpr int kSumThreads = 512;
constexpr int64_t kSumMaxChunk = 1 << 16;  // rows a block: its lo and mid sums stay exact
constexpr int kSumDims = 32;        // dimensions per block: one bank each
constexpr int kSumRowsPerLane = 4;  // consecutive rows a lane loads per pass

/// Rows per block pass of centroid_sum_kernel<T>: 512 (16-bit T), 256 (float).
template <typename T>
constexpr int kSumPassRows = kSumThreads / (kSumDims * static_cast<int>(sizeof(T)) / 16) * kSumRowsPerLane;

/// Dynamic shared memory of centroid_sum_kernel: [C][3][32] words of sums
/// and C counts (99,328 bytes at C = 256: two blocks an SM).
constexpr size_t centroid_sum_smem(int c_count) { return static_cast<size_t>(c_count) * (3 * kSumDims + 1) * 4; }

/// Element i of the lane's V values <- element i ^ r (r < V), on the raw
/// 16-byte word: stage a exchanges within the word pairs (0, 1) and (2, 3)
/// with selector sa, stage b between them with sb (0x3210 keeps, 0x7654
/// takes the other word, 0x1032 / 0x5476 the same with 16-bit halves
/// swapped).
__device__ __forceinline__ uint4 permute_words(uint4 u, unsigned sa, unsigned sb) {
  const uint32_t a0 = __byte_perm(u.x, u.y, sa), a1 = __byte_perm(u.y, u.x, sa);
  const uint32_t a2 = __byte_perm(u.z, u.w, sa), a3 = __byte_perm(u.w, u.z, sa);
  return make_uint4(__byte_perm(a0, a2, sb), __byte_perm(a1, a3, sb), __byte_perm(a2, a0, sb),
                    __byte_perm(a3, a1, sb));
}

/// The rows [n0, n1) of centroid_sum_kernel's block into the shared sums
/// (acc) and, for the first dimension slice, counts (cnt). kFloat: the head
/// takes to_fixed_float (scale_f), else to_fixed_scaled (scale_d).
template <typename T, int D, bool kFloat>
__device__ __forceinline__ void centroid_sum_rows(const T* __restrict__ xh, const uint8_t* __restrict__ idh,
                                                  bool ids_aligned, int64_t n0, int64_t n1, int slice,
                                                  float scale_f, double scale_d, uint32_t* acc, int* cnt) {
  constexpr int kVals = 16 / static_cast<int>(sizeof(T));  // V: values per lane and row
  constexpr int kLanes = kSumDims / kVals;                  // L: lanes per row slice (4 or 8)
  constexpr int kRows = kSumRowsPerLane;
  constexpr int kPass = kSumPassRows<T>;
  static_assert(32 / kLanes == kVals, "V rows a warp step: the bank argument needs r < V");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = lane / kLanes, q = lane % kLanes;
  // Selectors of the permutation i <- i ^ r (permute_words).
  unsigned sa, sb;
  if constexpr (kVals == 8) {  // bits 0, 1 of r: halves and words within a pair; bit 2: the pairs
    sa = static_cast<unsigned>(0x5476765410323210ull >> (16 * (r & 3))) & 0xFFFFu;
    sb = (r & 4) ? 0x7654u : 0x3210u;
  } else {  // bit 0: words within a pair; bit 1: the pairs
    sa = (r & 1) ? 0x7654u : 0x3210u;
    sb = (r & 2) ? 0x7654u : 0x3210u;
  }
  int dim_bytes[kVals];  // 4 x the dimension (in the lane's V) of the value added at step i
#pragma unroll
  for (int i = 0; i < kVals; ++i) dim_bytes[i] = (i ^ r) * 4;
  const bool count = slice == 0 && q == 0;  // one lane a row counts, in the first slice's blocks
  char* lane_acc = reinterpret_cast<char*>(acc + q * kVals);  // cluster 0's low words of the lane's dimensions
  // Rows f < rows of the lane's pass: ids in the bytes of id4, x words in raw.
  auto add_rows = [&](const uint4* raw, uint32_t id4, int rows) {
#pragma unroll
    for (int f = 0; f < kRows; ++f) {
      if (f >= rows) break;
      const int c = static_cast<int>((id4 >> (8 * f)) & 255u);
      if (count) atomicAdd(cnt + c, 1);
      float v[kVals];
      word_as_float<T>(permute_words(raw[f], sa, sb), v);
      char* row_acc = lane_acc + c * (3 * kSumDims * 4);
#pragma unroll
      for (int i = 0; i < kVals; ++i) {
        const auto u = static_cast<uint64_t>(kFloat ? to_fixed_float(v[i], scale_f) : to_fixed_scaled(v[i], scale_d));
        uint32_t* w = reinterpret_cast<uint32_t*>(row_acc + dim_bytes[i]);
        atomicAdd(w, static_cast<uint32_t>(u) & 0xFFFFu);                           // lo
        atomicAdd(w + kSumDims, static_cast<uint32_t>(u >> 16) & 0xFFFFu);          // mid
        atomicAdd(w + 2 * kSumDims, static_cast<uint32_t>(u >> 32));               // hi (mod 2^32)
      }
    }
  };
  // The lane's rows of a pass: n .. n + 3 (consecutive: their ids are one
  // word). Full passes are loaded one ahead (buffers a and b in turn), so a
  // lane's next loads are in flight while it adds.
  int64_t n = n0 + warp * (kVals * kRows) + r * kRows;
  const T* const xl = xh + slice * kSumDims + q * kVals;
  auto load_pass = [&](int64_t m, uint4* raw, uint32_t& id4) {
    const uint8_t* ip = idh + m;
    if (ids_aligned) {
      id4 = __ldg(reinterpret_cast<const unsigned*>(ip));
    } else {
      id4 = 0;
#pragma unroll
      for (int f = 0; f < kRows; ++f) id4 |= static_cast<uint32_t>(__ldg(ip + f)) << (8 * f);
    }
    const T* xp = xl + m * D;
#pragma unroll
    for (int f = 0; f < kRows; ++f) raw[f] = __ldg(reinterpret_cast<const uint4*>(xp + f * D));
  };
  uint4 raw_a[kRows], raw_b[kRows];
  uint32_t id_a = 0, id_b = 0;
  bool full = n + kRows <= n1;
  if (full) load_pass(n, raw_a, id_a);
  while (full) {
    n += kPass;
    full = n + kRows <= n1;
    if (full) load_pass(n, raw_b, id_b);
    add_rows(raw_a, id_a, kRows);
    if (!full) break;
    n += kPass;
    full = n + kRows <= n1;
    if (full) load_pass(n, raw_a, id_a);
    add_rows(raw_b, id_b, kRows);
  }
  if (n < n1) {  // the lane's last pass, cut by the chunk's end
    const int rows = static_cast<int>(n1 - n);
    uint32_t id4 = 0;
#pragma unroll
    for (int f = 0; f < kRows; ++f) {
      raw_a[f] = make_uint4(0u, 0u, 0u, 0u);
      if (f < rows) {
        id4 |= static_cast<uint32_t>(__ldg(idh + n + f)) << (8 * f);
        raw_a[f] = __ldg(reinterpret_cast<const uint4*>(xl + (n + f) * D));
      }
    }
    add_rows(raw_a, id4, rows);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kSumThreads) centroid_sum_kernel(
    const T* __restrict__ x, int64_t n_tokens, int c_count, const uint8_t* __restrict__ ids, int64_t chunk_rows,
    const unsigned int* __restrict__ head_max, const int* __restrict__ active, unsigned long long* __restrict__ sums,
    int* __restrict__ counts) {
  static_assert(D % kSumDims == 0, "whole 32-dimension slices");
  constexpr int kSlices = D / kSumDims;
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  extern __shared__ uint32_t acc[];                // [C][3][32]: lo, mid, hi words
  int* cnt = reinterpret_cast<int*>(acc + c_count * 3 * kSumDims);  // [C]
  for (int i = threadIdx.x; i < c_count * (3 * kSumDims + 1); i += kSumThreads) acc[i] = 0;
  __syncthreads();
  const int slice = static_cast<int>(blockIdx.x % kSlices);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x / kSlices) * chunk_rows;
  const int64_t n1 = n0 + chunk_rows < n_tokens ? n0 + chunk_rows : n_tokens;
  const T* xh = x + static_cast<int64_t>(h) * n_tokens * D;
  const uint8_t* idh = ids + static_cast<int64_t>(h) * n_tokens;
  const bool ids_aligned = (reinterpret_cast<uintptr_t>(idh) & 3u) == 0;  // n0 and the lanes' rows are multiples of 4
  const int e = fixed_sum_exponent(__uint_as_float(head_max[h]), n_tokens);
  if (fixed_float_ok(e))  // the same for the whole block
    centroid_sum_rows<T, D, true>(xh, idh, ids_aligned, n0, n1, slice, __int_as_float((127 - e) << 23), 0.0, acc,
                                  cnt);
  else
    centroid_sum_rows<T, D, false>(xh, idh, ids_aligned, n0, n1, slice, 0.0f, ldexp(1.0, -e), acc, cnt);
  __syncthreads();
  unsigned long long* sh = sums + static_cast<int64_t>(h) * c_count * D + slice * kSumDims;
  for (int i = threadIdx.x; i < c_count * kSumDims; i += kSumThreads) {
    const int c = i / kSumDims, k = i % kSumDims;
    const uint32_t* w = acc + c * (3 * kSumDims) + k;
    const unsigned long long s = (static_cast<unsigned long long>(w[2 * kSumDims]) << 32) +
                                 (static_cast<unsigned long long>(w[kSumDims]) << 16) + w[0];
    if (s != 0) atomicAdd(sh + static_cast<int64_t>(c) * D + k, s);
  }
  if (slice == 0)
    for (int c = threadIdx.x; c < c_count; c += kSumThreads)
      if (cnt[c] != 0) atomicAdd(counts + static_cast<int64_t>(h) * c_count + c, cnt[c]);
}

/// Cluster sums of the k-means update without shared-memory atomics per
/// value: the same function as centroid_sum_kernel (sums[h][c][k] += the
/// sum of to_fixed(x[h][n][k], e_h) over the rows n with ids[h][n] == c,
/// counts[h][c] += their number, for the heads with active[h] != 0, all if
/// active is null; sums and counts zeroed by the caller), the same
/// conversions (to_fixed_float where fixed_float_ok(e), else
/// to_fixed_scaled), so the same bits as the CPU loop it replaces:
///   for n: c = ids[n]; ++count[c]; for k: sum[c][k] += to_fixed(x[n][k], e)
///
/// Block (chunk, h) owns rows [n0, n0 + rows) of head h, rows <= chunk_rows
/// <= kBucketRows (the last chunk of a head may be shorter). It sorts them by
/// cluster in shared memory, then its warps sum runs of rows of one cluster
/// in 64-bit registers:
///  1. Counting sort of the chunk's row offsets (16 bits: kBucketRows <=
///     2^16). The ids are read once into registers; a histogram over the 256
///     possible ids (per warp and step, the lanes holding the same id elect
///     one that adds their number: __match_any_sync, so a cluster that holds
///     most rows costs no serialised atomics), an exclusive scan of it
///     (cub::BlockScan) gives each cluster's start in bucket[], and a second
///     pass with the same aggregation scatters the offsets (order inside a
///     bucket arbitrary: integer sums do not depend on it). The block adds
///     the cluster sizes to counts with one atomic each.
///  2. bucket[] (cluster order) is cut into kBucketWarps equal ranges, one a
///     warp: balanced however unequal the clusters (a cluster holding every
///     row is summed by all warps, each its share). A warp walks its range
///     in groups of at most U rows of one cluster. Lane l owns dimensions
///     [V l, V l + V) (V = D / 32), so a group is U whole rows, one
///     contiguous V sizeof(T)-byte load a lane and row (kBucketLaneBytes a
///     lane and group in flight); the next group's loads are issued before
///     the current group's adds (two buffers), across cluster ends too.
///     Each value: unpack, FMUL, F2I (to_fixed_float), 64-bit add into the
///     lane's int64 sums. A subset of a head's rows cannot overflow them:
///     |sum| <= n 2^(62 - L) <= 2^62 for all n rows of the head already.
///  3. Where a cluster's run ends (or the warp's range), the lane's V sums go
///     through the warp's shared stage so that lane l then holds dimensions
///     l + 32 j: each 64-bit global atomicAdd (a native RED) of the warp
///     then covers 256 contiguous bytes (8 sectors, not 32). Zero sums are
///     skipped.
///
/// What can limit it: reading x once (the rows of a chunk are read in
/// cluster order, 256-byte pieces of a chunk, not one stream); the F2I
/// conversions (16 a clock per SM); the REDs, at most C D a chunk plus D a
/// warp boundary; the sort phase, during which the block has no loads of x
/// in flight (another block of the SM does).
///
/// Grid (chunks, H), chunk_rows <= kBucketRows rows each (launch_centroid_sum
/// picks them); block kBucketThreads; static shared memory 37 KB at D = 128
/// (29 KB at D = 64): the bucket list (2 kBucketRows bytes), 2 x 257
/// counters, the stages (8 D bytes a warp) and the scan's storage, so the
/// registers, not shared memory, bound the blocks an SM. Needs ids < C (rows
/// with larger ids are left out) and x 16-byte aligned.
///
/// 512 threads: 16 steps a thread sort a chunk of 8192 ids, and 16 warps
/// keep 32-64 KB of x in flight a block (2 KB a warp and group: 8 rows bf16,
/// 4 float at D = 128; two groups while the adds run); with 64 registers
/// (the plain bound's choice, no spills on sm_90a) two blocks an SM, 32
/// warps. 256 threads would take 32 steps a thread to sort 8192 ids (or
/// twice the chunks, so twice the REDs, for the same steps); 1024 would
/// leave one block an SM, whose sort phase then has no other block's loads
/// to overlap.
constexpr int kBucketThreads = 512;
constexpr int kBucketWarps = kBucketThreads / 32;
constexpr int kBucketRows = 8192;       // largest chunk: 16 KB of 16-bit offsets
constexpr int kBucketMinRows = 2048;    // chunks are not split below this to fill the device (C D REDs a chunk)
constexpr int kBucketBins = 256;        // every uint8 id has a bin
constexpr int kBucketLaneBytes = 64;    // bytes of x a lane loads a group: U = 64 / (V sizeof(T)) rows
static_assert(kBucketRows <= 65536, "16-bit row offsets");
static_assert(kBucketThreads >= kBucketBins && kBucketRows % kBucketThreads == 0, "a bin a thread in the scan");

/// The kBytes (4, 8 or 16) bytes of x a lane loads from one row.
template <int kBytes>
struct LaneWords {
  uint32_t w[kBytes / 4];
};

template <int kBytes>
__device__ __forceinline__ LaneWords<kBytes> load_lane_words(const void* p) {
  LaneWords<kBytes> r;
  if constexpr (kBytes == 4) {
    r.w[0] = __ldg(static_cast<const unsigned*>(p));
  } else if constexpr (kBytes == 8) {
    const uint2 u = __ldg(static_cast<const uint2*>(p));
    r.w[0] = u.x, r.w[1] = u.y;
  } else {
    static_assert(kBytes == 16, "4, 8 or 16 bytes a lane");
    const uint4 u = __ldg(static_cast<const uint4*>(p));
    r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
  }
  return r;
}

/// The V values of T in u -> float (exact), as word_as_float.
template <typename T, int V>
__device__ __forceinline__ void lane_words_as_float(const LaneWords<V * static_cast<int>(sizeof(T))>& u, float* v) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = __uint_as_float(u.w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      T lo, hi;
      *reinterpret_cast<uint16_t*>(&lo) = static_cast<uint16_t>(u.w[i] & 0xFFFFu);
      *reinterpret_cast<uint16_t*>(&hi) = static_cast<uint16_t>(u.w[i] >> 16);
      v[2 * i] = load_as_float(&lo);
      v[2 * i + 1] = load_as_float(&hi);
    }
  }
}

/// One warp's range [p, p_end) of centroid_bucket_sum_kernel's bucket list
/// (phases 2 and 3). xc: row 0 of the chunk; start: the clusters' starts in
/// bucket (start[c_count] >= p_end); stage: the warp's D int64; sh: sums of
/// the head ([C][D]). kFloat: the head takes to_fixed_float (scale_f), else
/// to_fixed_scaled (scale_d).
template <typename T, int D, bool kFloat>
__device__ __forceinline__ void bucket_sum_range(const T* __restrict__ xc, const uint16_t* bucket, const int* start,
                                                 int c_count, int p, int p_end, float scale_f, double scale_d,
                                                 int64_t* stage, unsigned long long* __restrict__ sh) {
  constexpr int kV = D / 32;                                 // V: dimensions a lane
  constexpr int kBytes = kV * static_cast<int>(sizeof(T));   // bytes a lane and row
  constexpr int kU = kBucketLaneBytes / kBytes;              // U: rows a group (8 bf16 / 4 float at D = 128)
  using Words = LaneWords<kBytes>;
  const int lane = threadIdx.x & 31;
  // The cluster of position p: start[c] <= p < start[c + 1] (so not empty).
  int lo = 0, hi = c_count;  // start[lo] <= p < start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (start[mid] <= p) lo = mid;
    else hi = mid;
  }
  int c = lo;                                // cluster of the current group
  int seg_end = min(start[c + 1], p_end);    // end of its run in this range
  int m = min(kU, seg_end - p);              // rows of the current group: [p, p + m)
  int64_t acc[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) acc[i] = 0;
  const T* xl = xc + lane * kV;
  auto load = [&](int q, int rows, Words* buf) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (u < rows) buf[u] = load_lane_words<kBytes>(xl + static_cast<int>(bucket[q + u]) * D);
  };
  auto add = [&](const Words* buf, int rows) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (u >= rows) break;
      float v[kV];
      lane_words_as_float<T, kV>(buf[u], v);
#pragma unroll
      for (int i = 0; i < kV; ++i)
        acc[i] += kFloat ? to_fixed_float(v[i], scale_f) : to_fixed_scaled(v[i], scale_d);
    }
  };
  auto flush = [&](int cl) {  // lane l: dims V l + i -> stage -> dims l + 32 j
#pragma unroll
    for (int i = 0; i < kV; ++i) stage[lane * kV + i] = acc[i], acc[i] = 0;
    __syncwarp();
    unsigned long long* sc = sh + cl * D + lane;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t s = stage[lane + 32 * j];
      if (s != 0) atomicAdd(sc + 32 * j, static_cast<unsigned long long>(s));  // two's complement: mod 2^64
    }
    __syncwarp();  // the stage is free again
  };
  // Issue the next group's loads into nxt, add cur, flush where cur ends its
  // cluster's run; false when the range is done.
  auto step = [&](const Words* cur, Words* nxt) {
    const int q = p + m, cl = c;
    const bool run_done = q == seg_end;
    if (run_done && q < p_end) {  // the next non-empty cluster (q < start[c_count])
      ++c;
      while (start[c + 1] <= q) ++c;
      seg_end = min(start[c + 1], p_end);
    }
    const int nm = q < p_end ? min(kU, seg_end - q) : 0;
    load(q, nm, nxt);
    add(cur, m);
    if (run_done) flush(cl);
    p = q, m = nm;
    return nm > 0;
  };
  Words a[kU], b[kU];
  load(p, m, a);
  while (step(a, b) && step(b, a)) {
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kBucketThreads) centroid_bucket_sum_kernel(
    const T* __restrict__ x, int64_t n_tokens, int c_count, const uint8_t* __restrict__ ids, int chunk_rows,
    const unsigned int* __restrict__ head_max, const int* __restrict__ active, unsigned long long* __restrict__ sums,
    int* __restrict__ counts) {
  static_assert(D == 64 || D == 128, "V = D / 32 dimensions a lane: 2 or 4");
  using Scan = cub::BlockScan<int, kBucketThreads>;
  constexpr int kSteps = kBucketRows / kBucketThreads;  // ids a thread
  static_assert(kSteps % 4 == 0, "ids packed four a register");
  __shared__ uint16_t bucket[kBucketRows];               // row offsets, by cluster
  __shared__ int cursor[kBucketBins];                    // histogram, then scatter cursors
  __shared__ int start[kBucketBins + 1];                 // bucket c: [start[c], start[c + 1])
  __shared__ __align__(16) int64_t stage[kBucketWarps][D];
  __shared__ typename Scan::TempStorage scan_tmp;
  const int h = blockIdx.y;
  if (active && !active[h]) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int e = fixed_sum_exponent(__uint_as_float(head_max[h]), n_tokens);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * chunk_rows;
  const int rows = static_cast<int>(n_tokens - n0 < chunk_rows ? n_tokens - n0 : chunk_rows);
  const uint8_t* idc = ids + static_cast<int64_t>(h) * n_tokens + n0;
  if (tid < kBucketBins) cursor[tid] = 0;
  // Row j kBucketThreads + tid's id in byte j % 4 of id4[j / 4] (0 past the
  // chunk's end); the id a step takes part in the warp's matching with:
  // kBucketBins past the end (a group of its own, never counted).
  uint32_t id4[kSteps / 4];
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int r = j * kBucketThreads + tid;
    const uint32_t v = r < rows ? static_cast<uint32_t>(__ldg(idc + r)) : 0u;
    id4[j / 4] = (j % 4 ? id4[j / 4] : 0u) | v << (8 * (j % 4));
  }
  auto id_of = [&](int j) {
    return j * kBucketThreads + tid < rows ? (id4[j / 4] >> (8 * (j % 4))) & 255u : static_cast<unsigned>(kBucketBins);
  };
  __syncthreads();
  const unsigned below = (1u << lane) - 1u;  // the lanes under this one
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    if (j * kBucketThreads + warp * 32 >= rows) break;  // the same for the whole warp
    const unsigned id = id_of(j);
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, id);  // the lanes with the same id
    if (id < kBucketBins && (peers & below) == 0) atomicAdd(cursor + id, __popc(peers));
  }
  __syncthreads();
  const int size = tid < kBucketBins ? cursor[tid] : 0;
  int first = 0;
  Scan(scan_tmp).ExclusiveSum(size, first);
  if (tid < kBucketBins) start[tid] = first, cursor[tid] = first;  // each thread its own bin: no race
  if (tid == kBucketBins - 1) start[kBucketBins] = first + size;
  if (tid < c_count && size != 0) atomicAdd(counts + static_cast<int64_t>(h) * c_count + tid, size);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    if (j * kBucketThreads + warp * 32 >= rows) break;
    const unsigned id = id_of(j);
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, id);
    const int leader = __ffs(peers) - 1;
    int base = 0;
    if (lane == leader && id < kBucketBins) base = atomicAdd(cursor + id, __popc(peers));
    base = __shfl_sync(0xFFFFFFFFu, base, leader);
    if (id < kBucketBins) bucket[base + __popc(peers & below)] = static_cast<uint16_t>(j * kBucketThreads + tid);
  }
  __syncthreads();
  const int valid = start[c_count];  // rows with ids below C: all of them
  const int per_warp = (valid + kBucketWarps - 1) / kBucketWarps;
  const int p = min(warp * per_warp, valid), p_end = min(p + per_warp, valid);
  if (p >= p_end) return;
  const T* xc = x + (static_cast<int64_t>(h) * n_tokens + n0) * D;
  unsigned long long* sh = sums + static_cast<int64_t>(h) * c_count * D;
  if (fixed_float_ok(e))  // the same for the whole block
    bucket_sum_range<T, D, true>(xc, bucket, start, c_count, p, p_end, __int_as_float((127 - e) << 23), 0.0,
                                 stage[warp], sh);
  else
    bucket_sum_range<T, D, false>(xc, bucket, start, c_count, p, p_end, 0.0f, ldexp(1.0, -e), stage[warp], sh);
}

/// New centroid = bf16(fixed-point sum / count) (fixed_mean, rounded as the
/// CPU reference's; empty clusters are
/// left for the reseed kernel), and the sums it read back to 0 (the next
/// update's start: the encoder zeroes sums and counts once a stage, and the
/// reseed kernel the counts after it). One warp per (head, cluster): the head's
/// exponent and the cluster's count are read once, and lanes take
/// consecutive dims (no 64-bit index divisions). The sums (up to 4 a lane)
/// are loaded with the count, before its test and the head's maximum, so the
/// warp waits for memory once, not D / 32 times. Grid: ceil(H C / (block /
/// 32)) blocks.
static __global__ void centroid_mean_kernel(unsigned long long* __restrict__ sums, const int* __restrict__ counts,
                                     int heads, int64_t n_tokens, int d, int c_count,
                                     const unsigned int* __restrict__ head_max, const int* __restrict__ active,
                                     float* __restrict__ cent) {
  constexpr int kPer = 4;  // sums a lane a pass: D <= 128 in one pass
  const int slot = static_cast<int>((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (slot >= heads * c_count) return;  // heads * C <= 65535 * 256
  const int h = slot / c_count;
  const int64_t base = static_cast<int64_t>(slot) * d;
  for (int k0 = 0; k0 < d; k0 += 32 * kPer) {
    unsigned long long v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int k = k0 + lane + 32 * i;
      v[i] = k < d ? sums[base + k] : 0ull;
    }
    const int count = counts[slot];
    if ((active && !active[h]) || count == 0) return;  // the same for the warp
    const int e = fixed_sum_exponent(__uint_as_float(head_max[h]), n_tokens);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int k = k0 + lane + 32 * i;
      if (k >= d) break;
      cent[base + k] = round_bf16(fixed_mean(static_cast<int64_t>(v[i]), e, count));  // BF16 values
      sums[base + k] = 0;
    }
  }
}

/// Threads of the per-head error's block (head_mse_kernel, head_converged_kernel).
constexpr int kMseThreads = 1024;

/// The sum of head h's distances dh[0 .. n) in double, in a fixed order (the
/// same bits every run): thread t adds dh[t], dh[t + 1024], ... in turn, then
/// a tree over the threads (s[t] += s[t + w], w = 512 .. 1). The loop it
/// replaces, with its loads issued kAhead at a time (the adds keep their
/// order, so the bits are the same):
///   for (i = t; i < n; i += 1024) acc += dh[i]
/// The whole block (kMseThreads) calls it; thread 0 gets the sum. s: shared,
/// kMseThreads doubles.
__device__ __forceinline__ double head_dist_sum(const float* __restrict__ dh, int64_t n, double* s) {
  constexpr int kAhead = 8;
  double acc = 0.0;
  int64_t i = threadIdx.x;
  for (; i + (kAhead - 1) * kMseThreads < n; i += kAhead * kMseThreads) {
    float v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) v[j] = __ldg(dh + i + j * kMseThreads);
#pragma unroll
    for (int j = 0; j < kAhead; ++j) acc = __dadd_rn(acc, static_cast<double>(v[j]));
  }
  for (; i < n; i += kMseThreads) acc = __dadd_rn(acc, static_cast<double>(__ldg(dh + i)));
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kMseThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  return s[0];
}

/// Mean squared distance per head (head_dist_sum / (N D)): mse[h] for every
/// head. Grid H; block kMseThreads.
static __global__ void __launch_bounds__(kMseThreads)
    head_mse_kernel(const float* __restrict__ dist, int64_t n_tokens, int d, double* __restrict__ mse) {
  __shared__ double s[kMseThreads];
  const int h = blockIdx.x;
  const double sum = head_dist_sum(dist + static_cast<int64_t>(h) * n_tokens, n_tokens, s);
  if (threadIdx.x == 0) mse[h] = sum / static_cast<double>(n_tokens * d);
}

/// Device-side convergence (GpuKMeansOptions::device_convergence) after
/// assignment `it`: head_mse_kernel's error and the CPU's rule
/// (kmeans_converged's) in one kernel. it == 0: every head active, prev[h]
/// its error. it > 0: a head still active stops (active[h] = 0) once its
/// error fell by at most tol of the last one, prev[h] its error; inactive
/// heads return at once (their distances were not written). Grid H; block
/// kMseThreads.
static __global__ void __launch_bounds__(kMseThreads)
    head_converged_kernel(const float* __restrict__ dist, int64_t n_tokens, int d, double* __restrict__ prev,
                          int* __restrict__ active, double tol, int it) {
  __shared__ double s[kMseThreads];
  const int h = blockIdx.x;
  if (it > 0 && !active[h]) return;  // the same for the block
  const double sum = head_dist_sum(dist + static_cast<int64_t>(h) * n_tokens, n_tokens, s);
  if (threadIdx.x != 0) return;
  const double mse = sum / static_cast<double>(n_tokens * d);
  if (it == 0)
    active[h] = 1;
  else if (__dsub_rn(prev[h], mse) <= __dmul_rn(tol, prev[h]))
    active[h] = 0;
  prev[h] = mse;
}

/// The rows kmeans_random_rows(n, C, seed_base + h % period) draws, for
/// every head h (block_random_row). rows: [H][C]. One block of 256 per head,
/// thread i for step i; C <= 256.
static __global__ void random_rows_kernel(int64_t n, int c, uint64_t seed_base, int period, int64_t* __restrict__ rows) {
  __shared__ int64_t js[256];
  __shared__ int prev[256];
  const int i = threadIdx.x, h = blockIdx.x;
  const int64_t v = block_random_row(i, n, c, seed_base + static_cast<uint64_t>(h % period), js, prev);
  if (i < c) rows[static_cast<int64_t>(h) * c + i] = v;
}

/// Gather rows of x: cent[h][c] = bf16(x[h][rows[h*C + c]]) (the random
/// start's centroids), or the exact values where kBf16 is false (a sample).
template <typename T, typename Index = int64_t, bool kBf16 = true>
__global__ void gather_rows_kernel(const T* __restrict__ x, int64_t n_tokens, int d, int c_count,
                                   const Index* __restrict__ rows, int heads, float* __restrict__ cent) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(heads) * c_count * d) return;
  const int64_t hc = g / d;
  const int k = static_cast<int>(g % d);
  const int h = static_cast<int>(hc / c_count);
  const float v = load_as_float(x + (static_cast<int64_t>(h) * n_tokens + rows[hc]) * d + k);
  cent[g] = kBf16 ? round_bf16(v) : v;
}

}  // namespace qvg::cuda
