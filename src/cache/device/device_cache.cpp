// DeviceKVCache (include/qvg/device_cache.h): StreamingKVCache's policy
// (span_plan.h) and append skeleton (cache_skeleton.h) over state in device
// memory. Chunks are BF16 [heads][tokens][dim] buffers; spans are
// DeviceEncodedTensors; the positions of a layer's live tokens are one int32
// buffer kept in token order (rebuilt by each append from the previous one
// and the new chunk's); the RoPE cos/sin table covers a coordinate range that
// grows (doubling) when a chunk falls outside it. Built only with CUDA
// (no_device_cache.cpp beside it has the stubs).
//
// Overlapped encodes: the cache's stream waits for an event recorded on the
// caller's stream after each append's input is in place (so it also follows
// every read queued before the append), then gathers, encodes and frees
// spans; the encoded parts come from the pool on that stream. A span's
// chunks keep their BF16 buffers, which read() uses while they exist, until
// the layer's next append makes the caller's stream wait for the encode's
// event and frees them there (where they were allocated).
//
// Contiguous views (view_memory.h for the pages and ranges): a chunk is
// full precision either in the layer's own pages (DChunk::slot: its first
// row there, token-major) or in its own buffers (token-major too in this
// mode: a chunk held before an encoded one, such as a sink chunk). The
// chunks in the own pages are always a suffix of the live chunks at rows
// 0, 1, ... in order once an append or flush has returned (compact());
// view() writes the chunks before them (spans decoded, buffers copied) into
// the shared rows just below the boundary (device_views.cpp).
//
// The state (Impl and its records): device_cache_impl.h.
#include "cache/device/device_cache_impl.h"

namespace qvg {

DeviceKVCache::DeviceKVCache(CacheConfig config, DeviceCacheOptions options) : impl_(std::make_unique<Impl>()) {
  cuda::check_device();
  validate(config);
  QVG_CHECK(config.tail == TailFormat::bf16, "DeviceKVCache holds full-precision chunks in BF16 (tail must be bf16)");
  QVG_CHECK(!(options.overlap_encode && options.batch_encodes),
            "DeviceKVCache: overlap_encode and batch_encodes cannot be combined");
  impl_->config = std::move(config);
  impl_->options = options;
  impl_->device = cuda_current_device();
  impl_->layers.resize(static_cast<size_t>(impl_->config.layers));
  cuda::keep_pool_memory();
  if (options.contiguous_views) {
    const CacheConfig& c = impl_->config;
    QVG_CHECK(c.rope.mode == RopeMode::none, "DeviceKVCache: contiguous_views holds keys as attention reads them; "
              "RoPE on read (rope ", rope_mode_name(c.rope.mode), ") is not offered with it (append roped keys with "
              "rope none)");
    QVG_CHECK((int64_t{c.heads} * c.dim) % 8 == 0, "DeviceKVCache: contiguous_views needs rows of a multiple of 16 "
              "bytes (heads x dim a multiple of 8, BF16), got ", c.heads, " x ", c.dim);
    std::string why;
    QVG_CHECK(cuda::view_memory_supported(impl_->device, &why), "DeviceKVCache: contiguous_views needs CUDA virtual "
              "memory management: ", why);
    impl_->views = std::make_unique<Views>(impl_->device, c.layers, impl_->row_bytes());
  }
}
DeviceKVCache::~DeviceKVCache() = default;
DeviceKVCache::DeviceKVCache(DeviceKVCache&&) noexcept = default;
DeviceKVCache& DeviceKVCache::operator=(DeviceKVCache&&) noexcept = default;

const CacheConfig& DeviceKVCache::config() const { return impl_->config; }
const DeviceCacheOptions& DeviceKVCache::options() const { return impl_->options; }
int DeviceKVCache::device() const { return impl_->device; }

namespace {

/// Whether a span encoded with cc starts from warm (starts_warm).
bool warm_usable(const CacheConfig& c, const CodecConfig& cc, const DeviceEncodedTensor& warm) {
  return starts_warm(c, cc, warm.empty() ? nullptr : &warm.config());
}

void check_view(const CacheConfig& c, int layer, const DeviceChunkView& x, const char* what) {
  QVG_CHECK(x.data != nullptr, "append (layer ", layer, "): the ", what, " chunk is null");
  QVG_CHECK(x.heads == c.heads && x.dim == c.dim && x.tokens > 0, "append (layer ", layer, "): the ", what,
            " chunk has shape [", x.heads, ", ", x.tokens, ", ", x.dim, "], the cache needs [", c.heads, ", T > 0, ",
            c.dim, "]");
  QVG_CHECK(x.head_stride >= 0 && x.token_stride >= 0, "append (layer ", layer, "): the ", what,
            " chunk has negative strides");
}

}  // namespace

AppendReport DeviceKVCache::append(int layer, const DeviceChunkView& k, const DeviceChunkView& v,
                                   const ChunkPositions& positions, void* stream) {
  Impl& I = *impl_;
  const CacheConfig& c = I.config;
  const cudaStream_t s = as_stream(stream);
  // ---- validate (nothing changes before this block has passed) ----
  check_layer_index(c, layer, "append");
  check_view(c, layer, k, "key");
  check_view(c, layer, v, "value");
  check_chunk_tokens(c, layer, k.tokens, v.tokens);
  const int64_t T = k.tokens;
  const int pd = I.pd();
  int32_t lo[3] = {0, 0, 0}, hi[3] = {-1, -1, -1};
  if (pd > 0) {
    if (positions.first < 0) {
      QVG_CHECK(positions.host.size() == static_cast<size_t>(T * pd), "append (layer ", layer, "): RoPE-on-read (",
                rope_mode_name(c.rope.mode), ") needs ", pd, " positions per token (", T * pd,
                " values) or a grid, got ", positions.host.size(), " values");
      for (int d = 0; d < pd; ++d)
        for (int64_t n = 0; n < T; ++n) {
          const int32_t x = positions.host[static_cast<size_t>(n * pd + d)];
          if (n == 0 || x < lo[d]) lo[d] = x;
          if (n == 0 || x > hi[d]) hi[d] = x;
        }
    } else if (pd == 3) {
      QVG_CHECK(positions.height > 0 && positions.width > 0 && T % (positions.height * positions.width) == 0,
                "append (layer ", layer, "): a chunk of ", T, " tokens is not whole frames of a ", positions.height,
                " x ", positions.width, " grid");
      const int64_t last = positions.first + T / (positions.height * positions.width) - 1;
      QVG_CHECK(last <= INT32_MAX && positions.height <= INT32_MAX && positions.width <= INT32_MAX, "append (layer ",
                layer, "): grid positions overflow int32");
      lo[0] = static_cast<int32_t>(positions.first), hi[0] = static_cast<int32_t>(last);
      hi[1] = static_cast<int32_t>(positions.height - 1), hi[2] = static_cast<int32_t>(positions.width - 1);
    } else {
      QVG_CHECK(positions.first + T - 1 <= INT32_MAX, "append (layer ", layer, "): positions overflow int32");
      lo[0] = static_cast<int32_t>(positions.first), hi[0] = static_cast<int32_t>(positions.first + T - 1);
    }
  }

  DLayer& L = I.layers[static_cast<size_t>(layer)];
  const bool in_place = std::exchange(I.append_in_place, false);  // append_extra: the chunk is in the slot
  // contiguous_views: the new chunk's rows in the own pages (after the rows
  // in use, or the slot of the last view()); pages first, before any change.
  const int64_t place = in_place ? L.extra_at : L.region_end;
  if (I.views && !in_place) I.views->ensure(layer, 0, place + T);
  if (I.pending > 0 && L.next_chunk > I.pending_last_chunk) flush(stream);  // a later chunk starts
  if (L.awaiting) {  // the last append's overlapped encodes: wait for them, drop the BF16 copies
    L.encoded.wait(s);
    for (DChunk& ch : L.chunks)
      if (ch.span >= 0) Impl::release(ch);
    L.awaiting = false;
  }
  L.chunks.reserve(L.chunks.size() + 1);
  DChunk nc;
  if (I.views) {  // token-major in the own pages (flush and the drop above moved rows only below `place`)
    nc.slot = place;
    if (!in_place) {
      const int64_t hd = int64_t{c.heads} * c.dim;
      auto* kd = reinterpret_cast<uint16_t*>(I.views->own_rows(layer, 0) + static_cast<size_t>(place) * I.row_bytes());
      auto* vd = reinterpret_cast<uint16_t*>(I.views->own_rows(layer, 1) + static_cast<size_t>(place) * I.row_bytes());
      cuda::gather_bf16_to(k.data, k.type, c.heads, T, c.dim, k.head_stride, k.token_stride, kd, c.dim, hd, s);
      cuda::gather_bf16_to(v.data, v.type, c.heads, T, c.dim, v.head_stride, v.token_stride, vd, c.dim, hd, s);
    }
  } else {
    const size_t values = static_cast<size_t>(c.heads) * static_cast<size_t>(T) * static_cast<size_t>(c.dim);
    nc.k = pooled<uint16_t>(values, s);
    nc.v = pooled<uint16_t>(values, s);
    cuda::gather_bf16(k.data, k.type, c.heads, T, c.dim, k.head_stride, k.token_stride, nc.k.get(), s);
    cuda::gather_bf16(v.data, v.type, c.heads, T, c.dim, v.head_stride, v.token_stride, nc.v.get(), s);
  }
  // Where spans are encoded (and their memory allocated and freed).
  const bool overlap = I.options.overlap_encode;
  const cudaStream_t es = overlap ? I.own.get() : s;
  if (overlap) {
    I.input.record(s);
    I.input.wait(es);
  }

  // ---- plan: slots index L.chunks; slot new_slot is the new chunk ----
  LayerAppend<DLayer, DChunk, DSpan> step(c.policy, L, nc, T);
  const AppendPlan& plan = step.plan();
  const size_t new_slot = step.new_slot();

  // ---- encode the new spans into locals ----
  AppendReport rep;
  rep.chunk = nc.index;
  std::vector<DSpan> new_spans;
  DeviceEncodedTensor warm_k = L.warm_k, warm_v = L.warm_v;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const std::vector<size_t>& g = plan.groups[gi];
    DSpan sp = step.form_span(gi);
    SpanReport sr = step.report(layer, sp);
    if (I.options.batch_encodes) {  // encoded by flush(); the report says what it will hold
      // A span waiting before this one leaves its centroids for it.
      const bool pending_before = !new_spans.empty() || std::any_of(L.spans.begin(), L.spans.end(),
                                                                    [](const DSpan& x) { return x.pending; });
      for (const bool key : {true, false}) {
        const TensorRole role = key ? TensorRole::key : TensorRole::value;
        const CodecConfig cc = span_config(key ? c.key : c.value, sp.tokens);
        const bool use_warm = pending_before ? c.warm_start && runs_kmeans(cc)
                                             : warm_usable(c, cc, key ? L.warm_k : L.warm_v);
        if (runs_kmeans(cc)) sr.centroids = cc.kmeans.centroids;
        (key ? sr.k_warm_started : sr.v_warm_started) = use_warm;
        (key ? sr.k_bytes : sr.v_bytes) = expected_part_bytes(cc, role, c.heads, sp.tokens, c.dim);
      }
      sp.pending = true;
      new_spans.push_back(std::move(sp));
      rep.spans.push_back(std::move(sr));
      continue;
    }
    uint16_t* x = ensure(I.gather, static_cast<size_t>(c.heads) * sp.tokens * c.dim, es);
    for (const bool key : {true, false}) {
      int64_t off = 0;
      for (size_t sl : g) {
        const DChunk& ch = step.at(sl);
        I.gather_chunk(layer, ch, key, x, sp.tokens, off, es);
        off += ch.tokens;
      }
      const TensorRole role = key ? TensorRole::key : TensorRole::value;
      const DeviceCodec& codec = I.span_codec(role, sp.tokens);
      const CodecConfig& cc = codec.config();
      DeviceEncodedTensor& warm = key ? warm_k : warm_v;
      const bool use_warm = warm_usable(c, cc, warm);
      DeviceEncodedTensor enc =
          codec.encode(x, DeviceElement::bf16, c.heads, sp.tokens, c.dim, role, es, use_warm ? &warm : nullptr);
      if (c.warm_start && runs_kmeans(cc)) warm = enc.warm_state(es);
      if (runs_kmeans(cc)) sr.centroids = cc.kmeans.centroids;
      (key ? sr.k_warm_started : sr.v_warm_started) = use_warm;
      (key ? sr.k_bytes : sr.v_bytes) = enc.bytes();
      (key ? sp.k : sp.v) = std::move(enc);
    }
    new_spans.push_back(std::move(sp));
    rep.spans.push_back(std::move(sr));
  }
  rep.evicted = step.evicted();
  if (overlap && !plan.groups.empty()) L.encoded.record(es);

  // The live positions after this append, in token order: the old buffer's
  // rows of the chunks that stay live, then the new chunk's.
  DeviceBuffer<int32_t> live_pos;
  if (pd > 0) {
    int64_t n = T;
    for (size_t sl = 0; sl < new_slot; ++sl) n += L.chunks[sl].live ? L.chunks[sl].tokens : 0;
    for (size_t sl : plan.evict) n -= step.at(sl).tokens;
    live_pos = pooled<int32_t>(static_cast<size_t>(n * pd), s);
    int64_t from = 0, to = 0;
    for (size_t sl = 0; sl < new_slot; ++sl) {
      const DChunk& ch = L.chunks[sl];
      if (!ch.live) continue;
      if (std::find(plan.evict.begin(), plan.evict.end(), sl) == plan.evict.end()) {
        QVG_CUDA_CHECK(cudaMemcpyAsync(live_pos.get() + to * pd, L.live_positions.get() + from * pd,
                                       static_cast<size_t>(ch.tokens * pd) * sizeof(int32_t),
                                       cudaMemcpyDeviceToDevice, s));
        to += ch.tokens;
      }
      from += ch.tokens;
    }
    if (positions.first < 0)
      QVG_CUDA_CHECK(cudaMemcpyAsync(live_pos.get() + to * pd, positions.host.data(),
                                     positions.host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    else
      cuda::grid_positions(live_pos.get() + to * pd, T, pd, positions.first, positions.height, positions.width, s);
    I.cover(lo, hi, s);
  }
  step.reserve(new_spans.size());

  // ---- commit ----
  step.commit(
      new_spans,
      [&](DChunk& ch, const DSpan& sp) {  // encoded now: its BF16 copies go (overlapped / batched: later)
        if (!overlap && !sp.pending) Impl::release(ch);
      },
      [&](const DSpan& sp) {
        if (sp.pending) {
          ++I.pending;
          I.pending_last_chunk = std::max(I.pending_last_chunk, sp.first_chunk + sp.chunks - 1);
        }
      });
  L.awaiting = overlap && !plan.groups.empty();
  if (!plan.groups.empty() && !I.options.batch_encodes) {
    L.warm_k = std::move(warm_k);
    L.warm_v = std::move(warm_v);
  }
  if (pd > 0) L.live_positions = std::move(live_pos);
  drop_unreachable(L.chunks, L.spans);
  if (I.options.batch_encodes) I.pending = pending_spans();
  if (I.views) {
    I.compact(layer, s, L.awaiting ? &L.encoded : nullptr);
    L.extra_at = -1;
    L.extra_rows = 0;
  }
  return rep;
}

int64_t DeviceKVCache::pending_spans() const {
  int64_t n = 0;
  for (const DLayer& L : impl_->layers)
    n += std::count_if(L.spans.begin(), L.spans.end(), [](const DSpan& sp) { return sp.pending; });
  return n;
}

void DeviceKVCache::flush(void* stream) {
  Impl& I = *impl_;
  const CacheConfig& c = I.config;
  const cudaStream_t s = as_stream(stream);
  struct Item {
    DLayer* layer;
    DSpan* span;
  };
  for (;;) {
    // A wave: the oldest pending span of every layer (a layer's later
    // pending span starts warm from this one's centroids).
    std::vector<Item> wave;
    for (DLayer& L : I.layers)
      for (DSpan& sp : L.spans)
        if (sp.pending) {
          wave.push_back({&L, &sp});
          break;
        }
    if (wave.empty()) break;
    for (const bool key : {true, false}) {
      const TensorRole role = key ? TensorRole::key : TensorRole::value;
      std::vector<char> done(wave.size(), 0);
      for (size_t a = 0; a < wave.size(); ++a) {
        if (done[a]) continue;
        // One batch: the wave's spans of a's length whose layers have (or
        // lack) a warm start as a's does (encode_batch takes all or none).
        const int64_t T = wave[a].span->tokens;
        const DeviceCodec& codec = I.span_codec(role, T);
        const CodecConfig cc = codec.config();
        auto warm_of = [&](const DLayer& L) -> const DeviceEncodedTensor* {
          const DeviceEncodedTensor& w = key ? L.warm_k : L.warm_v;
          return warm_usable(c, cc, w) ? &w : nullptr;
        };
        const bool warm = warm_of(*wave[a].layer) != nullptr;
        std::vector<size_t> members;
        for (size_t b = a; b < wave.size(); ++b)
          if (!done[b] && wave[b].span->tokens == T && (warm_of(*wave[b].layer) != nullptr) == warm) {
            members.push_back(b);
            done[b] = true;
          }
        const size_t per = static_cast<size_t>(std::max<int64_t>(1, DeviceCodec::kBatchRows / (c.heads * T)));
        const int64_t values = int64_t{c.heads} * T * c.dim;  // a tensor
        for (size_t m0 = 0; m0 < members.size(); m0 += per) {
          const size_t n = std::min(per, members.size() - m0);
          uint16_t* x = ensure(I.gather, n * static_cast<size_t>(values), s);
          std::vector<const DeviceEncodedTensor*> warms;
          for (size_t i = 0; i < n; ++i) {
            const Item& it = wave[members[m0 + i]];
            int64_t off = 0;
            const int li = static_cast<int>(it.layer - I.layers.data());
            for (const DChunk& ch : it.layer->chunks) {
              if (ch.span != it.span->id) continue;
              I.gather_chunk(li, ch, key, x + static_cast<int64_t>(i) * values, T, off, s);
              off += ch.tokens;
            }
            QVG_CHECK(off == T, "flush: span ", it.span->id, " has ", off, " of its ", T, " tokens (corrupt state)");
            warms.push_back(warm_of(*it.layer));
          }
          std::vector<DeviceEncodedTensor> enc = codec.encode_batch(
              x, DeviceElement::bf16, static_cast<int64_t>(n), c.heads, T, c.dim, role, stream, warm ? warms.data() : nullptr);
          for (size_t i = 0; i < n; ++i) {
            const Item& it = wave[members[m0 + i]];
            if (c.warm_start && runs_kmeans(cc)) (key ? it.layer->warm_k : it.layer->warm_v) = enc[i].warm_state(stream);
            (key ? it.span->k : it.span->v) = std::move(enc[i]);
          }
        }
      }
    }
    for (const Item& it : wave) {  // encoded: the chunks' BF16 copies go
      it.span->pending = false;
      for (DChunk& ch : it.layer->chunks)
        if (ch.span == it.span->id) Impl::release(ch);
      if (I.views) I.compact(static_cast<int>(it.layer - I.layers.data()), s, nullptr);
    }
  }
  I.pending = 0;
  I.pending_last_chunk = -1;
}

int64_t DeviceKVCache::read(int layer, void* k_out, void* v_out, DeviceElement type, int64_t row_stride,
                            void* stream) const {
  const Impl& I = *impl_;
  const CacheConfig& c = I.config;
  const cudaStream_t s = as_stream(stream);
  check_layer_index(c, layer, "read");
  const DLayer& L = I.layers[static_cast<size_t>(layer)];
  QVG_CHECK(L.next_chunk > 0, "read: layer ", layer, " is empty (no chunk has been appended to it)");
  QVG_CHECK(type == DeviceElement::bf16 || type == DeviceElement::f32, "read: the output must be bf16 or f32");
  const int64_t n = live_tokens(layer);
  QVG_CHECK(row_stride >= n, "read: layer ", layer, " holds ", n, " live tokens, the destination has rows for ",
            row_stride);
  const size_t elt = element_bytes(type);
  QVG_CHECK(k_out != nullptr && v_out != nullptr && reinterpret_cast<uintptr_t>(k_out) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(v_out) % 16 == 0 && (static_cast<size_t>(c.dim) * elt) % 16 == 0,
            "read: the destinations must be non-null and 16-byte aligned, with rows of a multiple of 16 bytes (dim ",
            c.dim, ")");
  if (I.views) {  // through the view: its token-major rows into head-major ones
    QVG_CHECK(type == DeviceElement::bf16, "read: a cache with contiguous_views reads bf16 only (view() is BF16)");
    // The view's rows without a slot; the slot of the caller's last view() (the rows it writes before
    // append_extra) stays as it was.
    int64_t own_rows = 0;
    const DeviceKVView w = I.write_view(layer, 0, stream, &own_rows);
    const int64_t hd = int64_t{c.heads} * c.dim;
    cuda::gather_bf16_to(w.k, DeviceElement::bf16, c.heads, n, c.dim, c.dim, hd, static_cast<uint16_t*>(k_out),
                         row_stride * c.dim, c.dim, s);
    cuda::gather_bf16_to(w.v, DeviceElement::bf16, c.heads, n, c.dim, c.dim, hd, static_cast<uint16_t*>(v_out),
                         row_stride * c.dim, c.dim, s);
    return n;
  }
  const int pd = I.pd();
  // Keys: straight into k_out, or (bf16 with RoPE) into float rows rotated into k_out.
  const bool via_float = pd > 0 && type == DeviceElement::bf16;
  void* k_dst = k_out;
  DeviceElement k_type = type;
  int64_t k_stride = row_stride;
  if (via_float) {
    k_dst = ensure(I.rotate, static_cast<size_t>(c.heads) * n * c.dim, s);
    k_type = DeviceElement::f32;
    k_stride = n;
  }
  auto read_role = [&](const DeviceEncodedTensor& e, TensorRole role, int64_t begin, int64_t count, void* dst,
                       DeviceElement t, int64_t stride, int64_t off) {
    const DeviceCodec& codec = I.read_codec(role);
    if (method_traits(e.config().method).group_quantized) {  // the range decode reads this format
      codec.decode_rows(e, dst, t, stride, off, stream, begin, count);
      return;
    }
    // A whole decode, then the rows wanted.
    const size_t row = static_cast<size_t>(c.dim) * element_bytes(t);
    uint8_t* w = ensure(I.whole, static_cast<size_t>(c.heads) * e.tokens() * row, s);
    codec.decode(e, w, t, stream);
    QVG_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(dst) + off * row, stride * row, w + begin * row,
                                     e.tokens() * row, count * row, static_cast<size_t>(c.heads),
                                     cudaMemcpyDeviceToDevice, s));
  };
  int64_t off = 0;
  for (size_t i = 0; i < L.chunks.size();) {
    const DChunk& ch = L.chunks[i];
    if (!ch.live) {
      ++i;
      continue;
    }
    if (ch.k.get() != nullptr) {  // full precision, or a span being encoded (overlap_encode)
      copy_bf16_rows(ch.k.get(), ch.tokens, 0, ch.tokens, c.heads, c.dim, k_dst, k_type, k_stride, off, s);
      copy_bf16_rows(ch.v.get(), ch.tokens, 0, ch.tokens, c.heads, c.dim, v_out, type, row_stride, off, s);
      off += ch.tokens;
      ++i;
      continue;
    }
    // The run of consecutive live chunks of this span: one ranged decode.
    size_t j = i;
    int64_t count = 0;
    while (j < L.chunks.size() && L.chunks[j].live && L.chunks[j].span == ch.span &&
           L.chunks[j].span_offset == ch.span_offset + count)
      count += L.chunks[j++].tokens;
    const auto sp = std::find_if(L.spans.begin(), L.spans.end(), [&](const DSpan& x) { return x.id == ch.span; });
    QVG_CHECK(sp != L.spans.end(), "read: layer ", layer, ": span ", ch.span, " is missing (corrupt state)");
    read_role(sp->k, TensorRole::key, ch.span_offset, count, k_dst, k_type, k_stride, off);
    read_role(sp->v, TensorRole::value, ch.span_offset, count, v_out, type, row_stride, off);
    off += count;
    i = j;
  }
  if (pd > 0 && n > 0) {
    const DeviceRopeTable& t = I.rope;
    cuda::RopePlanView view;
    view.a = t.a.get(), view.b = t.b.get(), view.coord = t.coord.get(), view.base = t.base.get();
    view.cos = t.cos.get(), view.sin = t.sin.get(), view.positions = L.live_positions.get();
    view.pairs = t.pairs;
    view.position_dims = t.position_dims;
    std::copy(t.lo, t.lo + 3, view.lo);
    view.per_token = false;
    cuda::rope_rotate_to(static_cast<const float*>(k_dst), k_stride, k_out, type == DeviceElement::bf16, row_stride,
                         c.heads, n, c.dim, view, s);
  }
  return n;
}

int64_t DeviceKVCache::chunks_appended(int layer) const {
  check_layer_index(impl_->config, layer, "chunks_appended");
  return impl_->layers[static_cast<size_t>(layer)].next_chunk;
}

int64_t DeviceKVCache::tokens_appended(int layer) const {
  check_layer_index(impl_->config, layer, "tokens_appended");
  return impl_->layers[static_cast<size_t>(layer)].next_token;
}

int64_t DeviceKVCache::live_tokens(int layer) const {
  check_layer_index(impl_->config, layer, "live_tokens");
  return live_token_count(impl_->layers[static_cast<size_t>(layer)]);
}

std::vector<std::pair<int64_t, int64_t>> DeviceKVCache::live_chunks(int layer) const {
  check_layer_index(impl_->config, layer, "live_chunks");
  return live_chunk_list(impl_->layers[static_cast<size_t>(layer)]);
}

int64_t DeviceKVCache::spans_encoded(int layer) const {
  check_layer_index(impl_->config, layer, "spans_encoded");
  return impl_->layers[static_cast<size_t>(layer)].next_span;
}

LayerMemory DeviceKVCache::layer_memory(int layer) const {
  check_layer_index(impl_->config, layer, "layer_memory");
  const CacheConfig& c = impl_->config;
  const DLayer& L = impl_->layers[static_cast<size_t>(layer)];
  LayerMemory m = count_layer(
      L, c,
      [&](const DChunk& ch, LayerMemory& mem) {
        const size_t own = ch.slot >= 0 ? static_cast<size_t>(ch.tokens) * impl_->row_bytes() : 0;  // in the own pages
        mem.k.tail += ch.k.bytes() + own;
        mem.v.tail += ch.v.bytes() + own;
      },
      [](const DSpan& sp, LayerMemory& mem) {
        if (sp.pending) return false;  // its chunks are counted as BF16
        add_parts(mem.k.spans, sp.k.bytes());
        add_parts(mem.v.spans, sp.v.bytes());
        return true;
      });
  m.positions += L.live_positions.bytes();
  if (!L.warm_k.empty()) m.warm_start += L.warm_k.bytes().total();
  if (!L.warm_v.empty()) m.warm_start += L.warm_v.bytes().total();
  return m;
}

MemoryStats DeviceKVCache::memory() const {
  return sum_layers(impl_->config.layers, [&](int l) { return layer_memory(l); });
}

int64_t DeviceKVCache::scratch_bytes() const {
  const Impl& I = *impl_;
  return static_cast<int64_t>(I.gather.bytes() + I.rotate.bytes() + I.whole.bytes()) + I.rope.bytes();
}

}  // namespace qvg
