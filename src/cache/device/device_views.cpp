// DeviceKVCache's contiguous views (DeviceCacheOptions::contiguous_views;
// the design: device_cache.cpp's opening comment): the own pages kept in
// order after appends and flushes, view() writing the rows before them,
// append_extra taking a chunk from the view's slot, and the memory report.
#include "cache/device/device_cache_impl.h"

namespace qvg {

namespace {

/// Rows [from, from + n) of a token-major buffer of `row`-byte rows moved
/// down to [to, to + n) (to < from), in pieces that do not overlap.
void move_rows_down(uint8_t* base, int64_t from, int64_t to, int64_t n, size_t row, cudaStream_t s) {
  const int64_t shift = from - to;
  for (int64_t done = 0; done < n; done += shift) {
    const int64_t len = std::min(shift, n - done);
    QVG_CUDA_CHECK(cudaMemcpyAsync(base + static_cast<size_t>(to + done) * row, base + static_cast<size_t>(from + done) * row,
                                   static_cast<size_t>(len) * row, cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace

void DeviceKVCache::Impl::compact(int layer, cudaStream_t s, const Event* before_moves) {
  DLayer& L = layers[static_cast<size_t>(layer)];
  const size_t row = row_bytes();
  const size_t values = row / 2;  // a row's BF16 values
  ptrdiff_t last_out = -1;
  for (size_t i = 0; i < L.chunks.size(); ++i) {
    DChunk& ch = L.chunks[i];
    if (!ch.live && ch.slot >= 0) ch.slot = -1;  // evicted: its rows go
    if (ch.live && ch.slot < 0) last_out = static_cast<ptrdiff_t>(i);
  }
  for (ptrdiff_t i = 0; i < last_out; ++i) {
    DChunk& ch = L.chunks[static_cast<size_t>(i)];
    if (!ch.live || ch.slot < 0) continue;
    for (int r = 0; r < 2; ++r) {
      DeviceBuffer<uint16_t> b = pooled<uint16_t>(values * static_cast<size_t>(ch.tokens), s);
      QVG_CUDA_CHECK(cudaMemcpyAsync(b.get(), views->own_rows(layer, r) + static_cast<size_t>(ch.slot) * row,
                                     static_cast<size_t>(ch.tokens) * row, cudaMemcpyDeviceToDevice, s));
      (r == 0 ? ch.k : ch.v) = std::move(b);
    }
    ch.slot = -1;
  }
  int64_t to = 0;
  bool waited = false;
  for (size_t i = static_cast<size_t>(last_out + 1); i < L.chunks.size(); ++i) {
    DChunk& ch = L.chunks[i];
    if (!ch.live) continue;
    QVG_CHECK(ch.slot >= to, "layer ", layer, ": chunk ", ch.index, " at row ", ch.slot, " of the own pages, below ",
              to, " (corrupt state)");
    if (ch.slot != to) {
      if (before_moves && !waited) before_moves->wait(s), waited = true;
      for (int r = 0; r < 2; ++r) move_rows_down(views->own_rows(layer, r), ch.slot, to, ch.tokens, row, s);
      ch.slot = to;
    }
    to += ch.tokens;
  }
  L.region_end = to;
}

AppendReport DeviceKVCache::append_extra(int layer, int64_t tokens, void* stream) {
  Impl& I = *impl_;
  const CacheConfig& c = I.config;
  QVG_CHECK(I.views != nullptr, "append_extra: the cache was made without contiguous_views (DeviceCacheOptions)");
  check_layer_index(c, layer, "append_extra");
  const DLayer& L = I.layers[static_cast<size_t>(layer)];
  QVG_CHECK(L.extra_at >= 0 && L.extra_rows > 0, "append_extra (layer ", layer, "): the last call on this layer was "
            "not a view() with a slot (extra > 0)");
  QVG_CHECK(tokens > 0 && tokens <= L.extra_rows, "append_extra (layer ", layer, "): ", tokens, " tokens, the slot of "
            "the last view() has ", L.extra_rows);
  QVG_CHECK(L.extra_at >= L.region_end, "append_extra (layer ", layer, "): the slot overlaps the rows in use (corrupt "
            "state)");
  const size_t at = static_cast<size_t>(L.extra_at) * I.row_bytes();
  const DeviceChunkView k{I.views->own_rows(layer, 0) + at, DeviceElement::bf16, c.heads, tokens, c.dim, c.dim,
                          int64_t{c.heads} * c.dim};
  const DeviceChunkView v{I.views->own_rows(layer, 1) + at, DeviceElement::bf16, c.heads, tokens, c.dim, c.dim,
                          int64_t{c.heads} * c.dim};
  I.append_in_place = true;  // append() takes it (and clears it) before anything can throw after validation
  try {
    return append(layer, k, v, ChunkPositions{}, stream);
  } catch (...) {
    I.append_in_place = false;
    throw;
  }
}

DeviceKVView DeviceKVCache::Impl::write_view(int layer, int64_t extra, void* stream, int64_t* own_rows) const {
  const Impl& I = *this;
  const CacheConfig& c = I.config;
  const cudaStream_t s = as_stream(stream);
  const DLayer& L = I.layers[static_cast<size_t>(layer)];
  // The live chunks: those before the own pages' (S rows, written below the
  // boundary now), then the own pages' (R rows at rows 0, 1, ... in order).
  int64_t S = 0, R = 0;
  size_t first_own = L.chunks.size();
  for (size_t i = 0; i < L.chunks.size(); ++i) {
    const DChunk& ch = L.chunks[i];
    if (!ch.live) continue;
    if (ch.slot >= 0) {
      QVG_CHECK(ch.slot == R, "view: layer ", layer, ": chunk ", ch.index, " at row ", ch.slot, " of the own pages, "
                "expected ", R, " (corrupt state)");
      if (first_own == L.chunks.size()) first_own = i;
      R += ch.tokens;
    } else {
      QVG_CHECK(first_own == L.chunks.size(), "view: layer ", layer, ": chunk ", ch.index, " is outside the own pages"
                " after one inside them (corrupt state)");
      S += ch.tokens;
    }
  }
  I.views->ensure(layer, S, R + extra);
  const size_t row = I.row_bytes();
  const int64_t hd = int64_t{c.heads} * c.dim;
  uint8_t* start[2] = {I.views->own_rows(layer, 0) - static_cast<size_t>(S) * row,
                       I.views->own_rows(layer, 1) - static_cast<size_t>(S) * row};
  int64_t off = 0;
  for (size_t i = 0; i < first_own;) {
    const DChunk& ch = L.chunks[i];
    if (!ch.live) {
      ++i;
      continue;
    }
    if (ch.k.get() != nullptr) {  // full precision in buffers of its own (token-major)
      for (int r = 0; r < 2; ++r)
        QVG_CUDA_CHECK(cudaMemcpyAsync(start[r] + static_cast<size_t>(off) * row, (r == 0 ? ch.k : ch.v).get(),
                                       static_cast<size_t>(ch.tokens) * row, cudaMemcpyDeviceToDevice, s));
      off += ch.tokens;
      ++i;
      continue;
    }
    // The run of consecutive live chunks of this span: one ranged decode.
    size_t j = i;
    int64_t count = 0;
    while (j < first_own && L.chunks[j].live && L.chunks[j].span == ch.span &&
           L.chunks[j].span_offset == ch.span_offset + count)
      count += L.chunks[j++].tokens;
    const auto sp = std::find_if(L.spans.begin(), L.spans.end(), [&](const DSpan& x) { return x.id == ch.span; });
    QVG_CHECK(sp != L.spans.end() && !sp->pending, "view: layer ", layer, ": span ", ch.span,
              " is missing or not encoded (corrupt state)");
    for (int r = 0; r < 2; ++r) {
      const DeviceEncodedTensor& e = r == 0 ? sp->k : sp->v;
      const DeviceCodec& codec = I.read_codec(r == 0 ? TensorRole::key : TensorRole::value);
      if (method_traits(e.config().method).group_quantized) {
        codec.decode_rows_token_major(e, start[r], DeviceElement::bf16, S, off, stream, ch.span_offset, count);
        continue;
      }
      // A whole decode (head-major), then the rows wanted, transposed.
      auto* w = reinterpret_cast<uint16_t*>(ensure(I.whole, static_cast<size_t>(e.tokens()) * row, s));
      codec.decode(e, w, DeviceElement::bf16, stream);
      cuda::gather_bf16_to(w + ch.span_offset * c.dim, DeviceElement::bf16, c.heads, count, c.dim,
                           e.tokens() * c.dim, c.dim, reinterpret_cast<uint16_t*>(start[r] + static_cast<size_t>(off) * row),
                           c.dim, hd, s);
    }
    off += count;
    i = j;
  }
  QVG_CHECK(off == S, "view: layer ", layer, ": wrote ", off, " of ", S, " rows (corrupt state)");
  *own_rows = R;
  return DeviceKVView{start[0], start[1], S + R, extra};
}

DeviceKVView DeviceKVCache::view(int layer, int64_t extra, void* stream) {
  Impl& I = *impl_;
  QVG_CHECK(I.views != nullptr, "view: the cache was made without contiguous_views (DeviceCacheOptions)");
  check_layer_index(I.config, layer, "view");
  QVG_CHECK(extra >= 0, "view (layer ", layer, "): extra must be >= 0, got ", extra);
  int64_t own_rows = 0;
  const DeviceKVView w = I.write_view(layer, extra, stream, &own_rows);
  DLayer& L = I.layers[static_cast<size_t>(layer)];
  L.extra_at = own_rows;
  L.extra_rows = extra;
  return w;
}

ViewMemory DeviceKVCache::view_memory() const {
  const Impl& I = *impl_;
  ViewMemory m;
  if (!I.views) return m;
  const Views& w = *I.views;
  for (const size_t b : w.own_bytes) m.own_bytes += static_cast<int64_t>(2 * b);
  m.shared_bytes = static_cast<int64_t>(2 * w.shared_bytes);
  for (int r = 0; r < 2; ++r)
    for (const auto& range : w.ranges[r]) {
      m.reserved_bytes += static_cast<int64_t>(range->reserved_bytes());
      m.reservations += range->reservations();
    }
  return m;
}

}  // namespace qvg
