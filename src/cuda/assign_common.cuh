// Internal: what the tensor-core k-means assignment (assign_tc.cuh, whose
// head comment describes the design) shares across its parts: the tile
// constants, the logical order of the dims, the rank keys, the outputs, small
// lane helpers and the shared-memory size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "cuda/tensor_core.cuh"

namespace qvg::cuda {

constexpr int kPassTiles = 2;            // mma.sync: n8 tiles per pass (one ldmatrix.x4 per k-step)
constexpr int kAssignPass = 8 * kPassTiles;  // mma.sync: centroids per pass
constexpr int kWgN = 64;                 // wgmma: centroids per group (the N of m64nNk16)
constexpr int kAssignMaxCentroids = 256; // ids are one byte

/// Centroids staged for C: a multiple of both kinds' group sizes.
__host__ __device__ constexpr int assign_c_pad(int c_count) { return (c_count + kWgN - 1) / kWgN * kWgN; }
static_assert(kWgN % kAssignPass == 0, "a wgmma group is whole mma.sync passes");

/// Element offset of logical chunk m (dims 8 m .. 8 m + 7 in logical order)
/// of centroid c in the bf16 copy: core matrices (c / 8, m) of 8 rows x 16
/// bytes, row-major over m. So 16 logical dims of 8 centroids are two core
/// matrices 128 bytes apart (wgmma's leading-dimension offset) and the next
/// 8 centroids are D / 8 core matrices on (its stride-dimension offset).
template <int D>
__host__ __device__ constexpr int core_chunk(int c, int m) {
  return ((c >> 3) * (D / 8) + m) * 64 + (c & 7) * 8;
}

/// Chunk (8 dims) c of the D / 32 chunks that lane t of a quad owns in every
/// row: the quad's c-th loads are chunks 4 c .. 4 c + 3, 64 contiguous bytes.
__host__ __device__ constexpr int lane_chunk(int t, int c) { return 4 * c + t; }

/// The dim at logical position k (the k of the mma fragments): lane t's
/// u-th value (u = 4 j + 2 h + e for k-step j, fragment half h, element e).
__host__ __device__ constexpr int logical_dim(int k) {
  const int j = k >> 4, h = (k >> 3) & 1, t = (k >> 1) & 3, e = k & 1;
  const int u = 4 * j + 2 * h + e;
  return lane_chunk(t, u >> 3) * 8 + (u & 7);
}

template <int D>
constexpr bool logical_dims_are_a_permutation() {
  bool seen[D] = {};
  for (int k = 0; k < D; ++k) {
    const int p = logical_dim(k);
    if (p < 0 || p >= D || seen[p]) return false;
    if (k % 2 == 1 && p != logical_dim(k - 1) + 1) return false;  // pairs stay neighbours (float2 staging)
    seen[p] = true;
  }
  return true;
}
static_assert(logical_dims_are_a_permutation<64>() && logical_dims_are_a_permutation<128>(),
              "the logical order of the dims is a permutation of neighbouring pairs");

/// A rank value w with its lowest 8 mantissa bits replaced by the centroid
/// index group + j: float max / min then carry the index along. The value
/// moves by less than 2^-15 of itself, which the re-ranking margin covers;
/// among values that agree to that, the order is some fixed order of the
/// indices (such pairs are always re-ranked). One LOP3: the offset g sits in
/// a register as group = 0xFFFFFF00 | g (rank_group), j is a constant, and
/// g and j have no bit in common and none of bits 1, 2 (the lanes' 2t, set
/// after the products). With J = 0xFFFFFF00 | j, (w & group & J) | (group ^
/// J) keeps w where both masks are 1 (bits 8 up) and is 1 where exactly one
/// is (the bits of g and of j), 0 elsewhere. (w & mask) | (g + j) took two.
__device__ __forceinline__ float rank_key(float w, uint32_t group, uint32_t j) {
  const uint32_t jj = 0xFFFFFF00u | j;
  uint32_t k;
  asm("lop3.b32 %0, %1, %2, %3, 0xE6;\n" : "=r"(k) : "r"(__float_as_uint(w)), "r"(group), "r"(jj));
  return __uint_as_float(k);
}
__device__ __forceinline__ int key_index(float k) { return static_cast<int>(__float_as_uint(k) & 0xFFu); }
/// The group register of rank_key for offset g.
__device__ __forceinline__ uint32_t rank_group(int g) { return 0xFFFFFF00u | static_cast<uint32_t>(g); }

/// What one assignment writes. ids and dist are [H][N]; the maxima are per
/// head as float bits (atomicMax: exact, max is order-independent), null
/// when not wanted; the caller zeroes them for the heads that run.
struct AssignOutputs {
  uint8_t* ids = nullptr;
  float* dist = nullptr;          ///< ||x - c_id||^2 (double, rounded); null: not computed
  unsigned* x_max = nullptr;      ///< max |x|
  unsigned* resid_max = nullptr;  ///< max |x - bf16(c_id)| (the quantizer's residual)
  uint16_t* next = nullptr;       ///< [H][N][D] bf16(x - bf16(c_id)): the next stage's points; null: not written
  uint16_t* cent_bf16 = nullptr;  ///< [H][C][D] the centroids as BF16 bits (written by each head's block 0); null: not
};

/// One term of a squared distance in double: d += (x - c)^2. Every exact
/// distance (the assignment's, dist_for_empty_kernel's) adds its terms with
/// this, in the same order, so they agree bit for bit.
__device__ __forceinline__ void add_sq_diff(double& d, float x, float c) {
  const double e = static_cast<double>(x) - static_cast<double>(c);
  d = fma(e, e, d);
}

/// max(a, b) where a NaN wins (PTX max.NaN: one FMNMX, as fmaxf, which
/// drops NaN): max |x - c| then carries a NaN residual (inf - inf, after an
/// overflow upstream) to the span scale, whose check then rejects the encode.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/// The sum of v over the four lanes of a quad (xor 1, then xor 2: every
/// lane gets the same bits). All 32 lanes must call it.
template <typename V>
__device__ __forceinline__ V quad_sum(V v) {
  v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  return v + __shfl_xor_sync(0xFFFFFFFFu, v, 2);
}

/// Four floats of a 16-byte aligned row piece (one 16-byte load).
__device__ __forceinline__ void load_float4(const float* p, float (&v)[4]) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
}

/// The lane's D / 4 values of a row (chunks lane_chunk(t, c)) as float.
template <int D, typename T>
__device__ __forceinline__ void load_lane_row(const T* __restrict__ xrow, int t, float* xv) {
#pragma unroll
  for (int c = 0; c < D / 32; ++c) load8_as_float(xrow + lane_chunk(t, c) * 8, xv + 8 * c);
}

/// Shared memory of assign_tc_kernel for C centroids: bf16 (logical order,
/// core matrices), float (dim order, padded rows) where kFloatInSmem, and
/// per centroid -||c||^2 / 2, ||c||, ||c - bf16(c)|| and a hash of its
/// values; without the float rows, one row of D zeros (the padded rows).
template <int D, bool kFloatInSmem = true>
constexpr size_t assign_tc_smem(int c_count) {
  return static_cast<size_t>(assign_c_pad(c_count)) *
             (D * 2 + (kFloatInSmem ? (D + 4) * sizeof(float) : 0) + 4 * sizeof(float)) +
         (kFloatInSmem ? 0 : D * sizeof(float));
}

/// Rows of x one loop unit of assign_tc_kernel covers, and the warps that
/// share it: a warpgroup's 64 rows (wgmma), or a warp's 32 (mma.sync).
template <bool kWg>
constexpr int kUnitRows = kWg ? 64 : 32;
template <bool kWg>
constexpr int kUnitWarps = kWg ? 4 : 1;
/// m16 tiles (16 rows) of a unit per warp.
template <bool kWg>
constexpr int kUnitTiles = kWg ? 1 : 2;
/// Independent (best, second) chains per row while ranking the products,
/// merged after them: with two (wgmma: registers to spare), twice the
/// independent FMNMX a lane has in flight.
template <bool kWg>
constexpr int kRankChains = kWg ? 2 : 1;

/// What the caller of an assignment asked for (AssignOutputs' pointers that
/// are not null).
struct AssignWants {
  bool dist, xmax, rmax, next;
  bool resid;  ///< x - bf16(c) of the pick: its max or the next points
  __device__ __forceinline__ explicit AssignWants(const AssignOutputs& out)
      : dist(out.dist != nullptr),
        xmax(out.x_max != nullptr),
        rmax(out.resid_max != nullptr),
        next(out.next != nullptr),
        resid(rmax || next) {}
};

}  // namespace qvg::cuda
