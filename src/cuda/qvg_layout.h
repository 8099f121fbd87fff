// Shape and device pointers of one encoded QVG/RTN tensor (host-side plain
// structs, shared by the kernels and their callers). Both residual codes of
// qvg: group quantization (code=int) and codebooks (code=cq, cq_dim > 0).
#pragma once

#include <cstdint>

#include "qvg/common.h"
#include "qvg/config.h"

namespace qvg::cuda {

constexpr int kValsPerThread = 16;  // each thread owns 16 consecutive values of a row
constexpr int kTileMaxStages = 4;   // stages of the tiled decode and encode kernels

/// Shape and format of one encoded QVG/RTN tensor on the device.
struct QvgShape {
  int heads = 0;
  int64_t tokens = 0;
  int dim = 0;  ///< multiple of 16
  int bits = 2;
  int block = 64;
  ScaleFormat scale_format = ScaleFormat::fp8;
  LevelRule levels = LevelRule::symmetric;
  int stages = 0;
  int centroids = 0;
  bool fp8_centroids = false;  ///< centroid_format=fp8: FP8 codes and a scale per stage and head
  /// code=cq: G channels a sub-vector (1, 2, 4 or 8; bits, block, scale
  /// format and levels unused); 0: group quantization (code=int).
  int cq_dim = 0;
  int cq_bits = 0;              ///< code=cq: bits of a codeword index, log2(K) (1..8)
  bool fp8_books = false;       ///< code=cq, centroid_format=fp8: FP8 codewords and a scale per head
};

/// code=cq: bytes of one token's packed indices, ceil(D / G * b / 8).
inline int64_t codebook_row_bytes(const QvgShape& sh) {
  return (static_cast<int64_t>(sh.dim / sh.cq_dim) * sh.cq_bits + 7) / 8;
}

/// code=cq: codeword values of every head's codebooks, H * D * K (D / G
/// books of K codewords of G values a head); 0 for code=int.
inline int64_t codebook_values(const QvgShape& sh) {
  return sh.cq_dim > 0 ? static_cast<int64_t>(sh.heads) * sh.dim * (int64_t{1} << sh.cq_bits) : 0;
}

/// code=cq: bytes of the codebook section that ends the centroids part:
/// BF16 values, or FP8 codes then an FP32 scale a head; 0 for code=int.
inline int64_t codebook_part_bytes(const QvgShape& sh) {
  if (sh.cq_dim == 0) return 0;
  return sh.fp8_books ? codebook_values(sh) + 4 * static_cast<int64_t>(sh.heads) : 2 * codebook_values(sh);
}

/// log2 of the quantization block (a power of two: validate()), the shift
/// the tiled kernels index scales with.
inline int block_shift(const QvgShape& sh) {
  int shift = 0;
  while ((1 << shift) < sh.block) ++shift;
  return shift;
}

/// Device pointers to the parts (layouts: docs/FORMAT.md). The centroids
/// part holds BF16 values (centroids) or, with FP8 centroids, E4M3 codes
/// (cent8) followed by FP32 scales (cent_scales); the other pointer is null.
struct QvgParts {
  uint8_t* codes = nullptr;        ///< [H][N][D*b/8]; code=cq: [H][N][codebook_row_bytes]
  uint8_t* scales = nullptr;       ///< [H][N][D/B] x (1 or 2 bytes); code=cq: FP8 [H][N], one a token
  float* span_scales = nullptr;    ///< [H]
  uint16_t* centroids = nullptr;   ///< BF16 [S][H][C][D]
  uint8_t* ids = nullptr;          ///< [S][H][N]
  uint8_t* cent8 = nullptr;        ///< FP8 E4M3 [S][H][C][D]
  float* cent_scales = nullptr;    ///< FP32 [S][H], powers of two
  /// code=cq: the codebooks [H][D/G][K][G] after the stage centroids: BF16
  /// values (2 bytes, little-endian) or FP8 E4M3 codes (sh.fp8_books).
  uint8_t* books = nullptr;
  float* book_scales = nullptr;    ///< code=cq, FP8 codebooks: FP32 [H], powers of two
};

/// Values of the centroids part: S * H * C * D.
inline int64_t centroid_values(const QvgShape& sh) {
  return static_cast<int64_t>(sh.stages) * sh.heads * sh.centroids * sh.dim;
}

/// Bytes of the centroids part (docs/FORMAT.md): 2 a value (BF16), or 1 a
/// value plus 4 a stage and head (FP8 codes, FP32 scales).
inline int64_t centroid_part_bytes(const QvgShape& sh) {
  return sh.fp8_centroids ? centroid_values(sh) + 4 * static_cast<int64_t>(sh.stages) * sh.heads
                          : 2 * centroid_values(sh);
}

/// p with its centroids and ids moved to stage s's (code=int) (the rest as it is): with
/// a one-stage shape, a view of stage s alone.
inline QvgParts stage_parts(QvgParts p, const QvgShape& sh, int s) {
  const int64_t cent = static_cast<int64_t>(s) * sh.heads * sh.centroids * sh.dim;
  if (p.centroids) p.centroids += cent;
  if (p.cent8) p.cent8 += cent;
  if (p.cent_scales) p.cent_scales += static_cast<int64_t>(s) * sh.heads;
  p.ids += static_cast<int64_t>(s) * sh.heads * sh.tokens;
  return p;
}

/// Which tokens a decode writes, and where: source tokens [begin, begin +
/// count) of every head go to rows out_offset.. of a destination holding
/// out_tokens rows. Head h's row r is at out + h * head_stride + r *
/// row_stride (elements); strides of 0 mean head-major [H][out_tokens][D]
/// (head_stride out_tokens * D, row_stride D). Token-major [out_tokens][H]
/// [D] (flash-attention's layout): head_stride D, row_stride H * D
/// (token_major). The whole tensor, head-major: {0, N, N, 0}.
struct DecodeRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t out_tokens = 0;
  int64_t out_offset = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;

  /// The strides in elements for rows of D values (the head-major defaults where 0).
  QVG_HD int64_t out_head_stride(int64_t D) const { return head_stride ? head_stride : out_tokens * D; }
  QVG_HD int64_t out_row_stride(int64_t D) const { return row_stride ? row_stride : D; }
  /// The element offset of head h's destination row r.
  QVG_HD int64_t out_at(int64_t h, int64_t r, int64_t D) const {
    return h * out_head_stride(D) + r * out_row_stride(D);
  }
  /// Tokens [begin, begin + count) to rows out_offset.. of a token-major
  /// destination of out_tokens rows of `heads` heads of D values.
  static DecodeRange token_major(int64_t begin, int64_t count, int64_t out_tokens, int64_t out_offset, int64_t heads,
                                 int64_t D) {
    return DecodeRange{begin, count, out_tokens, out_offset, D, heads * D};
  }
};

}  // namespace qvg::cuda
