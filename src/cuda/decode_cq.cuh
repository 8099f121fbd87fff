// Fused decode of qvg's codebook residual code (code=cq; docs/FORMAT.md,
// "The codebook residual code"): per token n of head h,
//   s = fp8(scales[h][n]) * span[h]
//   x[n][j G + t] = s * w[h][j][idx_j][t]        (j < D/G, t < G)
//   then every stage's centroid added, last stage first,
// the CPU reference's float operations in its order (cq_decode_row_ref, then
// QvgCodec::decode's stage sums), each rounded to nearest: the same bits.
//
// Work: the lines layout of decode_lines.cuh. A row (token) is D/16 units;
// unit c is the two pieces of 8 values [8c, 8c + 8) and [D/2 + 8c, D/2 +
// 8c + 8). The D/16 consecutive threads of a row slot own one unit each
// (D = 128: 8 threads a row, 4 rows a warp), and the slots of a block take
// consecutive rows, so
//   - each store instruction writes whole 32-byte sectors, the lanes of a
//     row one contiguous run of D/2 values (BF16 / FP16 output, D = 128:
//     values [0, 64) or [64, 128) of each of 4 rows, 4 whole 128-byte
//     lines);
//   - a row's packed indices are read by its neighbouring lanes: the codes
//     a warp reads are one contiguous run of (32 / (D/16)) * row_bytes bytes;
//   - a stage centroid's piece is read as the output is written (8 lanes,
//     one 128-byte line of a BF16 centroid row at D = 128);
//   - the head's codebooks (D K values, 1 or 2 bytes each) are staged in
//     shared memory once per block, each group's K codewords at an odd
//     stride in banks (cq_shared_book_stride), and the codeword gathers read
//     shared memory; where they do not fit, or a block decodes fewer than K
//     rows (decode_cq.cu), the gathers read global memory.
// A block takes rows of one head, row slot after row slot (a grid-stride
// loop over the head's range), with as many blocks as the device holds at
// once: each block stages the codebooks once and decodes many rows. Each
// thread loads the next row's scale, code words and stage ids before it
// decodes the current row.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "cuda/qvg_kernels.cuh"
#include "qvg/cuda.h"

namespace qvg::cuda {

constexpr int kCqThreads = 256;        // threads a block
constexpr int kCqPiece = 8;            // values a piece; a unit is two pieces (16 values)
constexpr int kCqPrefetchStages = 4;   // stages whose ids are loaded ahead (one byte each of a word)
constexpr int kCqMinBlocks = 4;        // launch bounds: 64 registers a thread, 1024 threads an SM

/// Code words a thread loads for one piece of G-value sub-vectors: the
/// piece's 8 / G indices of up to 8 bits from any bit of a word (G = 1: up
/// to 64 bits, 3 words; G >= 2: up to 32 bits, 2 words).
template <int G>
constexpr int kCqPieceWords = G == 1 ? 3 : 2;

/// Byte stride of one group's K codewords (cw bytes each) in shared memory:
/// an odd number of codewords (cw >= 8) or of 4-byte words (cw <= 4), so the
/// groups start in different banks; aligned to the codeword for every load
/// width (cw = 8, 16: a multiple of cw; cw <= 4: of 4).
__host__ __device__ constexpr int cq_shared_book_stride(int k, int cw) {
  return cw >= 8 ? cw * (k | 1) : 4 * (((k * cw + 3) / 4) | 1);
}

/// One FP8 E4M3 code as a float (the hardware conversion through FP16:
/// exact for every code, as qvg/fp8.h's fp8_e4m3_to_float).
__device__ __forceinline__ float fp8_code_value(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

/// Word i (little-endian 32 bits) of the codes part, `bytes` long from
/// `codes` (4-byte aligned): one 4-byte load where the word lies inside the
/// part, else the bytes of it that do (the others 0: never read as an index).
__device__ __forceinline__ uint32_t code_word(const uint8_t* codes, int64_t i, int64_t bytes) {
  const int64_t at = 4 * i;
  if (at + 4 <= bytes) return __ldg(reinterpret_cast<const unsigned int*>(codes) + i);
  uint32_t w = 0;
  for (int k = 0; k < 4; ++k)
    if (at + k < bytes) w |= static_cast<uint32_t>(__ldg(codes + at + k)) << (8 * k);
  return w;
}

/// What a thread reads of a row before decoding it (load_cq_row), so that it
/// can load the next row while it decodes this one.
template <int G>
struct CqRowLoads {
  uint32_t words[2][kCqPieceWords<G>];  ///< [piece][k]: the aligned code words from the piece's first index
  uint32_t shift[2];                    ///< [piece]: bit of words[piece][0] where the piece's first index starts
  uint32_t scale = 0;                   ///< the token's FP8 scale code
  uint32_t ids = 0;                     ///< byte st: the token's centroid id of stage st (st < kCqPrefetchStages)
};

/// What a thread needs of its head, the same for every row it decodes.
struct CqHead {
  int h = 0;
  int b = 0;                  ///< bits an index
  int row_bits = 0;           ///< bits of a token's packed indices: 8 * codebook_row_bytes
  int64_t code_bytes = 0;     ///< bytes of the codes part
  float span = 0;             ///< span_scales[h]
  float book_scale = 0;       ///< FP8 codebooks: the head's codebook scale
  const uint8_t* books = nullptr;  ///< group j's codeword k at books + j * book_stride + k * G * (1 or 2)
  int book_stride = 0;
};

/// The row's scale code, the code words of unit c's two pieces and the
/// centroid ids of the first kCqPrefetchStages stages. Row r of the range.
template <int G>
__device__ __forceinline__ CqRowLoads<G> load_cq_row(const CqHead& hd, const QvgShape& sh, const QvgParts& p,
                                                     const DecodeRange& range, int64_t r, int c) {
  CqRowLoads<G> in;
  const int64_t n = range.begin + r;
  const int64_t row = static_cast<int64_t>(hd.h) * sh.tokens + n;
  in.scale = __ldg(p.scales + row);
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int col = q * (sh.dim / 2) + kCqPiece * c;  // the piece's first channel
    const int64_t pos = row * hd.row_bits + static_cast<int64_t>(col / G) * hd.b;
    in.shift[q] = static_cast<uint32_t>(pos & 31);
#pragma unroll
    for (int k = 0; k < kCqPieceWords<G>; ++k) in.words[q][k] = code_word(p.codes, (pos >> 5) + k, hd.code_bytes);
  }
  const int prefetched = sh.stages < kCqPrefetchStages ? sh.stages : kCqPrefetchStages;
  for (int st = 0; st < prefetched; ++st)
    in.ids |= static_cast<uint32_t>(__ldg(p.ids + (static_cast<int64_t>(st) * sh.heads + hd.h) * sh.tokens + n))
              << (8 * st);
  return in;
}

/// The 8 / G indices of b bits of one piece (idx[i]: index i) from its code
/// words: bit t of index i at bit shift + i b + t of the words (the packing
/// of cq_pack_indices_ref, LSB first).
template <int G>
__device__ __forceinline__ void piece_indices(const uint32_t (&w)[kCqPieceWords<G>], uint32_t shift, int b,
                                              uint32_t (&idx)[kCqPiece / G]) {
  const uint32_t mask = (1u << b) - 1u;
  if constexpr (G == 1) {
    const uint64_t bits = (static_cast<uint64_t>(__funnelshift_r(w[1], w[2], shift)) << 32) |
                          __funnelshift_r(w[0], w[1], shift);
#pragma unroll
    for (int i = 0; i < kCqPiece; ++i) idx[i] = static_cast<uint32_t>(bits >> (i * b)) & mask;
  } else {
    const uint32_t bits = __funnelshift_r(w[0], w[1], shift);
#pragma unroll
    for (int i = 0; i < kCqPiece / G; ++i) idx[i] = (bits >> (i * b)) & mask;
  }
}

/// A W-sized load from shared memory (SMEM) or through the read-only cache.
template <typename W, bool SMEM>
__device__ __forceinline__ W load_book_word(const uint8_t* p) {
  if constexpr (SMEM)
    return *reinterpret_cast<const W*>(p);
  else
    return __ldg(reinterpret_cast<const W*>(p));
}

/// Two FP8 codes (bytes 0 and 1 of w) as floats times scale: the CPU's
/// fp8_e4m3_to_float(code) * scale (exact conversion, one rounded product).
__device__ __forceinline__ void fp8_pair_times(uint32_t w, float scale, float* out) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xFFFFu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  out[0] = __fmul_rn(f.x, scale);
  out[1] = __fmul_rn(f.y, scale);
}

/// Two BF16 values (halves of w, the low one first) as floats (exact).
__device__ __forceinline__ void bf16_pair(uint32_t w, float* out) {
  out[0] = __uint_as_float(w << 16);
  out[1] = __uint_as_float(w & 0xFFFF0000u);
}

/// The G values of one codeword at p as floats: BF16 values (G * 2 bytes,
/// aligned to that), or FP8 codes (G bytes) times the head's codebook scale.
/// Global FP8 codewords are 4-byte aligned at most (the part's alignment):
/// 4-byte loads there; shared ones of 8 bytes are 8-byte aligned.
template <int G, bool F8, bool SMEM>
__device__ __forceinline__ void load_codeword(const uint8_t* p, float scale, float* out) {
  if constexpr (!F8) {
    if constexpr (G == 8) {
      const uint4 a = load_book_word<uint4, SMEM>(p);
      bf16_pair(a.x, out);
      bf16_pair(a.y, out + 2);
      bf16_pair(a.z, out + 4);
      bf16_pair(a.w, out + 6);
    } else if constexpr (G == 4) {
      const uint2 a = load_book_word<uint2, SMEM>(p);
      bf16_pair(a.x, out);
      bf16_pair(a.y, out + 2);
    } else if constexpr (G == 2) {
      bf16_pair(load_book_word<unsigned int, SMEM>(p), out);
    } else {
      out[0] = __uint_as_float(static_cast<uint32_t>(load_book_word<unsigned short, SMEM>(p)) << 16);
    }
  } else {
    if constexpr (G == 8) {
      uint32_t w[2];
      if constexpr (SMEM) {
        const uint2 a = load_book_word<uint2, true>(p);
        w[0] = a.x;
        w[1] = a.y;
      } else {
        w[0] = load_book_word<unsigned int, false>(p);
        w[1] = load_book_word<unsigned int, false>(p + 4);
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        fp8_pair_times(w[k], scale, out + 4 * k);
        fp8_pair_times(w[k] >> 16, scale, out + 4 * k + 2);
      }
    } else if constexpr (G == 4) {
      const uint32_t w = load_book_word<unsigned int, SMEM>(p);
      fp8_pair_times(w, scale, out);
      fp8_pair_times(w >> 16, scale, out + 2);
    } else if constexpr (G == 2) {
      fp8_pair_times(load_book_word<unsigned short, SMEM>(p), scale, out);
    } else {
      out[0] = __fmul_rn(fp8_code_value(load_book_word<unsigned char, SMEM>(p)), scale);
    }
  }
}

/// Stage st's centroid `id` of head h at the two pieces of a unit (columns
/// col0 and col1, 8 values each) as stored: 8 BF16 values (a uint4) or 8 FP8
/// codes (a uint2) a piece, and the FP8 codes' scale (the stage and head's);
/// add_centroid converts them.
template <bool F8>
struct CqCentroid {
  using Word = std::conditional_t<F8, uint2, uint4>;
  Word piece[2];
  float scale = 0;
};

template <bool F8>
__device__ __forceinline__ CqCentroid<F8> load_centroid(const QvgShape& sh, const QvgParts& p, int st, int h,
                                                        uint32_t id, int col0, int col1) {
  using Word = typename CqCentroid<F8>::Word;
  CqCentroid<F8> c;
  const int64_t at = ((static_cast<int64_t>(st) * sh.heads + h) * sh.centroids + id) * sh.dim;
  if constexpr (F8) {
    c.scale = __ldg(p.cent_scales + static_cast<int64_t>(st) * sh.heads + h);
    c.piece[0] = __ldg(reinterpret_cast<const Word*>(p.cent8 + at + col0));
    c.piece[1] = __ldg(reinterpret_cast<const Word*>(p.cent8 + at + col1));
  } else {
    c.piece[0] = __ldg(reinterpret_cast<const Word*>(p.centroids + at + col0));
    c.piece[1] = __ldg(reinterpret_cast<const Word*>(p.centroids + at + col1));
  }
  return c;
}

/// v[k] += value k of the centroid (v[0..7]: piece 0), one rounded sum each:
/// BF16 values exactly, FP8 codes times the scale (exact conversion, one
/// rounded product: load_fp8_vals's values).
template <bool F8>
__device__ __forceinline__ void add_centroid(const CqCentroid<F8>& c, float* v) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    float x[kCqPiece];
    if constexpr (F8) {
      fp8_pair_times(c.piece[q].x, c.scale, x);
      fp8_pair_times(c.piece[q].x >> 16, c.scale, x + 2);
      fp8_pair_times(c.piece[q].y, c.scale, x + 4);
      fp8_pair_times(c.piece[q].y >> 16, c.scale, x + 6);
    } else {
      bf16_pair(c.piece[q].x, x);
      bf16_pair(c.piece[q].y, x + 2);
      bf16_pair(c.piece[q].z, x + 4);
      bf16_pair(c.piece[q].w, x + 6);
    }
#pragma unroll
    for (int k = 0; k < kCqPiece; ++k) v[q * kCqPiece + k] = __fadd_rn(v[q * kCqPiece + k], x[k]);
  }
}

/// The centroid id of stage st of token n: from the prefetched word, or
/// loaded (st >= kCqPrefetchStages).
__device__ __forceinline__ uint32_t stage_id(const QvgShape& sh, const QvgParts& p, int h, int64_t n, uint32_t ids,
                                             int st) {
  if (st < kCqPrefetchStages) return (ids >> (8 * st)) & 0xFFu;
  return __ldg(p.ids + (static_cast<int64_t>(st) * sh.heads + h) * sh.tokens + n);
}

/// Unit c of row r of the range from its loads: codewords times the scale,
/// the stages' centroids added last stage first, 16 values stored.
template <int G, bool F8, bool SMEM, typename OutT>
__device__ __forceinline__ void decode_cq_unit(const CqHead& hd, const QvgShape& sh, const QvgParts& p,
                                               OutT* __restrict__ out, const DecodeRange& range, int64_t r, int c,
                                               const CqRowLoads<G>& in) {
  constexpr int kCw = G * (F8 ? 1 : 2);  // bytes a codeword
  const int64_t n = range.begin + r;
  const int col[2] = {kCqPiece * c, sh.dim / 2 + kCqPiece * c};

  // 1. The codewords of both pieces, times s.
  float v[2 * kCqPiece];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    uint32_t idx[kCqPiece / G];
    piece_indices<G>(in.words[q], in.shift[q], hd.b, idx);
    const uint8_t* book = hd.books + (col[q] / G) * hd.book_stride;  // the piece's first group
#pragma unroll
    for (int i = 0; i < kCqPiece / G; ++i)
      load_codeword<G, F8, SMEM>(book + i * hd.book_stride + idx[i] * kCw, hd.book_scale, v + q * kCqPiece + i * G);
  }
  const float s = __fmul_rn(fp8_code_value(in.scale), hd.span);
#pragma unroll
  for (int k = 0; k < 2 * kCqPiece; ++k) v[k] = __fmul_rn(s, v[k]);

  // 2. The stages' centroids, last stage first (the reference's order).
  // (Their loads follow the gathers: loaded ahead of them, the centroid
  // words made the BF16-codebook kernels spill at 64 registers a thread.)
  for (int st = sh.stages - 1; st >= 0; --st)
    add_centroid<F8>(load_centroid<F8>(sh, p, st, hd.h, stage_id(sh, p, hd.h, n, in.ids, st), col[0], col[1]), v);
  OutT* o = out + range.out_at(hd.h, range.out_offset + r, sh.dim);
  store_vals<OutT, kCqPiece>(o + col[0], v);
  store_vals<OutT, kCqPiece>(o + col[1], v + kCqPiece);
}

/// The block's rows of head hd.h: thread t is lane t % L of row slot t / L
/// (L = min(D/16, kCqThreads) lanes a slot); slot s of block x takes rows
/// x S + s, x S + s + X S, ... (S slots a block, X blocks a head), lane l
/// units l, l + L, ... of each. Each (row, unit) is loaded one step ahead.
template <int G, bool F8, bool SMEM, typename OutT>
__device__ __forceinline__ void decode_cq_rows(const CqHead& hd, const QvgShape& sh, const QvgParts& p,
                                               OutT* __restrict__ out, const DecodeRange& range) {
  const int units = sh.dim / 16;
  const int lanes = units < kCqThreads ? units : kCqThreads;
  const int slots = kCqThreads / lanes;
  const int slot = static_cast<int>(threadIdx.x) / lanes, lane = static_cast<int>(threadIdx.x) % lanes;
  if (slot >= slots) return;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * slots;
  int64_t r = static_cast<int64_t>(blockIdx.x) * slots + slot;
  int c = lane;
  if (r >= range.count) return;
  CqRowLoads<G> cur = load_cq_row<G>(hd, sh, p, range, r, c);
  for (;;) {
    int64_t r2 = r;
    int c2 = c + lanes;
    if (c2 >= units) {
      c2 = lane;
      r2 += row_step;
    }
    const bool more = r2 < range.count;
    CqRowLoads<G> next{};
    if (more) next = load_cq_row<G>(hd, sh, p, range, r2, c2);
    decode_cq_unit<G, F8, SMEM, OutT>(hd, sh, p, out, range, r, c, cur);
    if (!more) break;
    r = r2;
    c = c2;
    cur = next;
  }
}

/// Copies a head's codebooks from src (groups of group_bytes bytes, 4-byte
/// aligned) to dst in shared memory, group j at j * stride (a multiple of
/// 4). With the whole block; the caller synchronizes.
__device__ __forceinline__ void stage_books(const uint8_t* src, uint8_t* dst, int groups, int group_bytes,
                                            int stride) {
  if (group_bytes % 4 == 0) {
    const int words = group_bytes / 4;
    const int total = groups * words;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int j = i / words;
      reinterpret_cast<uint32_t*>(dst + j * stride)[i - j * words] =
          __ldg(reinterpret_cast<const unsigned int*>(src) + i);
    }
  } else {  // books of 2 bytes (FP8, G = 1, K = 2)
    const int total = groups * group_bytes;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int j = i / group_bytes;
      dst[j * stride + i - j * group_bytes] = __ldg(src + i);
    }
  }
}

/// Grid: (X, H), block kCqThreads; the launcher's X blocks a head at most
/// fill the device once (decode_cq_rows: which rows a thread takes).
/// book_stride > 0: the head's codebooks are staged in shared memory
/// ((D/G) * book_stride bytes of dynamic shared memory), group j at j *
/// book_stride (cq_shared_book_stride); 0: gathered from global memory.
/// G = sh.cq_dim, F8 = sh.fp8_books (the stages' centroids are FP8 too where
/// there are stages: one centroid_format); the index width sh.cq_bits is read
/// at run time. Preconditions (the launcher's): D % 16 == 0; H <= 65535; the
/// parts of DeviceParts::view() (codes 4-byte aligned, BF16 codebooks
/// 16-byte aligned, FP8 ones 4-byte, centroids 16-byte (BF16) or 8-byte
/// (FP8)); out 16-byte aligned.
template <int G, bool F8, typename OutT>
__global__ void __launch_bounds__(kCqThreads, kCqMinBlocks) decode_cq_kernel(QvgShape sh, QvgParts p, OutT* __restrict__ out,
                                                              DecodeRange range, int book_stride) {
  static_assert(G == 1 || G == 2 || G == 4 || G == 8, "cq_dim: 1, 2, 4 or 8");
  extern __shared__ __align__(16) uint8_t cq_books[];
  constexpr int kCw = G * (F8 ? 1 : 2);  // bytes a codeword
  CqHead hd;
  hd.h = blockIdx.y;
  hd.b = sh.cq_bits;
  const int k = 1 << sh.cq_bits;
  const int groups = sh.dim / G;
  hd.row_bits = 8 * ((groups * sh.cq_bits + 7) / 8);  // 8 * codebook_row_bytes(sh)
  hd.code_bytes = static_cast<int64_t>(sh.heads) * sh.tokens * (hd.row_bits / 8);
  hd.span = __ldg(p.span_scales + hd.h);
  hd.book_scale = F8 ? __ldg(p.book_scales + hd.h) : 0.0f;
  const uint8_t* books = p.books + static_cast<int64_t>(hd.h) * groups * k * kCw;
  if (book_stride > 0) {
    stage_books(books, cq_books, groups, k * kCw, book_stride);
    __syncthreads();
    hd.books = cq_books;
    hd.book_stride = book_stride;
    decode_cq_rows<G, F8, true, OutT>(hd, sh, p, out, range);
  } else {
    hd.books = books;
    hd.book_stride = k * kCw;
    decode_cq_rows<G, F8, false, OutT>(hd, sh, p, out, range);
  }
}

/// The code=cq decode of a token range (decode_cq.cu): decode_cq_kernel for
/// sh's G, codebook format and the output type, the codebooks in shared
/// memory where they fit and a block decodes at least K rows. Throws
/// qvg::Error for a shape it does not take (checked by make_shape and
/// decode_range first).
void decode_cq(const QvgShape& sh, QvgParts p, const DecodeRange& range, void* out, DeviceElement dtype,
               cudaStream_t s);

}  // namespace qvg::cuda
