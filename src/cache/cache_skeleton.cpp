// The checks both caches share (cache_skeleton.h).
#include "cache/cache_skeleton.h"

#include "cache/cache_impl.h"

namespace qvg {

void check_layer_index(const CacheConfig& c, int layer, const char* what) {
  QVG_CHECK(layer >= 0 && layer < c.layers, what, ": layer ", layer, " is out of range (the cache has ", c.layers,
            c.layers == 1 ? " layer)" : " layers)");
}

void check_chunk_tokens(const CacheConfig& c, int layer, int64_t k_tokens, int64_t v_tokens) {
  QVG_CHECK(k_tokens == v_tokens, "append (layer ", layer, "): key chunk has ", k_tokens, " tokens, value chunk ",
            v_tokens);
  if (c.chunk_tokens > 0)
    QVG_CHECK(k_tokens == c.chunk_tokens, "append (layer ", layer, "): chunk has ", k_tokens,
              " tokens, the cache takes chunks of ", c.chunk_tokens);
}

bool starts_warm(const CacheConfig& c, const CodecConfig& cc, const CodecConfig* warm) {
  return c.warm_start && runs_kmeans(cc) && warm != nullptr && warm->kmeans.centroids == cc.kmeans.centroids;
}

}  // namespace qvg
