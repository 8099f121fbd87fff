// Shape and device pointers of one encoded QVG/RTN tensor (host-side plain
// structs, shared by the kernels and their callers).
#pragma once

#include <cstdint>

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
};

/// log2 of the quantization block (a power of two: validate()), the shift
/// the tiled kernels index scales with.
inline int block_shift(const QvgShape& sh) {
  int shift = 0;
  while ((1 << shift) < sh.block) ++shift;
  return shift;
}

/// Device pointers to the parts (layouts: docs/FORMAT.md).
struct QvgParts {
  uint8_t* codes = nullptr;        ///< [H][N][D*b/8]
  uint8_t* scales = nullptr;       ///< [H][N][D/B] x (1 or 2 bytes)
  float* span_scales = nullptr;    ///< [H]
  uint16_t* centroids = nullptr;   ///< BF16 [S][H][C][D]
  uint8_t* ids = nullptr;          ///< [S][H][N]
};

/// p with its centroids and ids moved to stage s's (the rest as it is): with
/// a one-stage shape, a view of stage s alone.
inline QvgParts stage_parts(QvgParts p, const QvgShape& sh, int s) {
  p.centroids += static_cast<int64_t>(s) * sh.heads * sh.centroids * sh.dim;
  p.ids += static_cast<int64_t>(s) * sh.heads * sh.tokens;
  return p;
}

/// Which tokens a decode writes, and where: source tokens [begin, begin +
/// count) of every head go to rows out_offset.. of a destination holding
/// out_tokens tokens per head ([H][out_tokens][D]). The whole tensor:
/// {0, N, N, 0}.
struct DecodeRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t out_tokens = 0;
  int64_t out_offset = 0;
};

}  // namespace qvg::cuda
