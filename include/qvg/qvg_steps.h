// QVG (and RTN, its S = 0 case): the steps of the encoder exposed for tests
// and for checking other backends against the reference.
#pragma once

#include <cstdint>
#include <vector>

#include "qvg/codec.h"

namespace qvg {

/// The part of QVG encode that follows k-means: given every stage's centroids
/// (BF16 bits, little-endian, [stages][heads][C][dim]) and ids ([stages]
/// [heads][tokens]), subtract the stages in order (P_s+1 = P_s - C_s[ids_s]
/// in float with the BF16-rounded centroids, P_0 = X, rounded to BF16 while
/// another stage follows: docs/FORMAT.md, Encode 1) and group-quantize the
/// residual R = P_S.
/// A backend given the same centroids and ids must produce the same bytes.
EncodedTensor qvg_encode_given_centroids_ref(const HeadTensor& x, const CodecConfig& c,
                                             std::vector<uint8_t> centroids, std::vector<uint8_t> ids,
                                             TensorRole role = TensorRole::key, int threads = 0);

/// Bits per value of a QVG/RTN encoding by formula:
/// b + 8*sb/B + 8*S/D + cb*S*C/N + 32/(N*D), with sb = scale bytes (1 FP8, 2
/// FP16), cb = 16 bits per BF16 centroid value and the last term the per-head
/// FP32 span scale; with centroid_format=fp8, cb = 8 plus 32*S/(N*D) for the
/// FP32 centroid scale of every stage and head. code=cq: the first two terms
/// become 8*ceil((D/G)*log2(K)/8)/D (indices) + 8/D (FP8 token scales), plus
/// (cb*K*D + 32 with fp8)/(N*D) for the codebooks (docs/FORMAT.md).
double qvg_bits_per_value_formula(const CodecConfig& c, int64_t tokens, int64_t dim);

/// k-means seed of stage s, head h: seed + 1000003 * s + h.
uint64_t qvg_kmeans_seed(const CodecConfig& c, int stage, int64_t head);

}  // namespace qvg
