// Internal: qvg's codebook residual code (code=cq), the CPU reference. The
// bytes: docs/FORMAT.md, "code=cq". Per head h of an encoding [H, N, D] with
// G = cq_dim, K = cq_codewords, b = log2(K):
//   span_scales  FP32 [H]: the head's largest token RMS / 448 (1 when 0)
//   scales       FP8 E4M3 [H][N]: token i's RMS / span scale
//   codes        [H][N][ceil(D / G * b / 8)]: sub-vector j's codeword index
//                at bits j*b .. j*b+b-1 of the row, LSB first
//   centroids    after the stage centroids (and their FP8 scales): the
//                codebooks [H][D/G][K][G] as BF16 values, or as FP8 E4M3
//                codes followed by one FP32 power-of-two scale per head [H]
// Decode: x[i][j*G + t] = s_i * w_hj[idx_ij][t] (+ the stages' centroids),
// s_i = fp8(scales[h][i]) * span_h, w the stored codewords.
#pragma once

#include <cstdint>
#include <vector>

#include "qvg/codec.h"

namespace qvg {

/// Bits of one codeword index: log2(cq_codewords).
int cq_index_bits(const CodecConfig& c);

/// Bytes of one token's packed indices: ceil(dim / cq_dim * index bits / 8).
int64_t cq_row_bytes(const CodecConfig& c, int64_t dim);

/// Stored values of one head's codebooks: dim * cq_codewords (dim / G books
/// of K codewords of G values).
int64_t cq_head_codebook_values(const CodecConfig& c, int64_t dim);

/// Bytes of the codebook section of the centroids part of `heads` heads:
/// values times 2 (BF16) or 1 (FP8) plus 4 a head (FP8's scales).
size_t cq_codebook_bytes(const CodecConfig& c, int64_t heads, int64_t dim);

/// Packs n indices of b bits (1..8), index j at bits j*b .. j*b+b-1, LSB
/// first, into out[ceil(n * b / 8)] (unused high bits of the last byte 0).
void cq_pack_indices_ref(const uint8_t* idx, int64_t n, int b, uint8_t* out);
/// The inverse of cq_pack_indices_ref: n indices of b bits from in.
void cq_unpack_indices_ref(const uint8_t* in, int64_t n, int b, uint8_t* idx);

/// The seed of the k-means that trains head h's codebook of channel group j:
/// kmeans.seed + 1000003 * (9 + j) + h (the stages use 1000003 * stage, < 9).
uint64_t cq_kmeans_seed(const CodecConfig& c, int64_t group, int64_t head);

/// Each of the n sub-vectors u (n x g floats)'s nearest codeword of book (k
/// x g): idx[i] = the first w minimizing cq_sq_dist(u_i, book_w) (strict <:
/// ties to the lowest index); dist[i] that distance (float) where dist is
/// not null. The float steps: src/util/cq_arith.h (the CUDA encoder's too).
void cq_assign_ref(const float* u, int64_t n, int g, const float* book, int k, uint8_t* idx, float* dist = nullptr);

/// The codebook k-means of code=cq on rows x g points x (finite), c <= min(
/// rows, 256) centroids, into book (c x g, BF16 values). Every step is exact
/// or one stated float rounding, so the GPU gives the same bits:
///  - start: the points kmeans_random_rows(rows, c, seed), rounded to BF16;
///  - assignment: cq_assign_ref (float distances, ties to the lowest index);
///    the error T = the sum of the distances in 64-bit fixed point
///    (qvg/fixed_sum.h, exponent from the largest distance and rows), as a
///    double (cq_total);
///  - up to max_iter iterations: each centroid the BF16-rounded mean of its
///    points (kmeans_ref's fixed-point sums: exponent from max |x| and
///    rows); an empty one, in index order, takes the farthest point (largest
///    distance, lowest index on ties) no earlier empty one took this
///    iteration, rounded to BF16; then the assignment again; stop when
///    cq_converged(T before, T after, tol).
/// kmeans_ref's rules but for the start (random rows, whatever kmeans.init)
/// and the distance (the direct float sum, not ||c||^2 - 2 x.c by Eigen's
/// product, whose order of summation depends on the shapes).
void cq_train_codebook_ref(const float* x, int64_t rows, int g, int c, int max_iter, double tol, uint64_t seed,
                           float* book);

/// Encodes head h's residual r (tokens x dim floats, finite) into e's codes,
/// scales, span scale and codebook section (e sized by qvg_expected_bytes).
/// The codebook of group j: cq_train_codebook_ref (e.config.kmeans'
/// max_iter and tol; seed cq_kmeans_seed) with min(K, rows) centroids on the
/// group's normalized sub-vectors, at most 64 K of them (every ceil(N / 64
/// K)-th token's, from token 0); codewords past the rows copy codeword 0.
/// Each sub-vector's index: cq_assign_ref against the stored (rounded)
/// codewords.
void cq_encode_head_ref(EncodedTensor& e, int64_t h, const std::vector<float>& r);

/// Head h's stored codewords as decode uses them: [D/G][K][G] floats.
std::vector<float> cq_head_codebooks(const EncodedTensor& e, int64_t h);

/// Writes token i of head h's decoded residual into row[dim]: s_i * w.
/// books: cq_head_codebooks(e, h); span: the head's span scale.
void cq_decode_row_ref(const EncodedTensor& e, int64_t h, int64_t i, const float* books, float span, float* row);

/// The FP8 codebook scales of e (centroid_format=fp8) are finite and
/// positive; qvg::Error naming the head otherwise.
void check_cq_codebook_scales(const EncodedTensor& e);

}  // namespace qvg
