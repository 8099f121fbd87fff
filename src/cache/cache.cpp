// StreamingKVCache: the span policy, read, memory statistics (include/qvg/cache.h).
#include <algorithm>
#include <chrono>

#include "cache/cache_impl.h"
#include "cache/cache_skeleton.h"
#include "core/codecs.h"
#include "qvg/methods.h"
#include "qvg/half.h"

namespace qvg {

// ---- config ----------------------------------------------------------------------

CacheConfig CacheConfig::self_forcing(const std::string& key_spec, const std::string& value_spec) {
  CacheConfig c;
  c.key = parse_codec_spec(key_spec);
  c.value = parse_codec_spec(value_spec);
  c.chunk_tokens = 3 * 1560;
  return c;
}

const char* tail_format_name(TailFormat f) { return f == TailFormat::bf16 ? "bf16" : "f32"; }

void validate(const CacheConfig& c) {
  QVG_CHECK(c.layers >= 1 && c.layers <= 65536, "cache config: layers must be 1..65536, got ", c.layers);
  QVG_CHECK(c.heads >= 1 && c.heads <= 65536, "cache config: heads must be 1..65536, got ", c.heads);
  QVG_CHECK(c.dim >= 1 && c.dim <= 65536, "cache config: dim must be 1..65536, got ", c.dim);
  try {
    validate(c.key, c.dim);
    validate(c.value, c.dim);
  } catch (const Error& e) {
    QVG_CHECK(false, "cache config: ", e.what());
  }
  QVG_CHECK(c.chunk_tokens >= 0, "cache config: chunk_tokens must be >= 0, got ", c.chunk_tokens);
  const SpanPolicy& p = c.policy;
  QVG_CHECK(p.quant_factor >= 1, "cache config: quant_factor must be >= 1, got ", p.quant_factor);
  QVG_CHECK(p.keep_recent >= 0, "cache config: keep_recent must be >= 0, got ", p.keep_recent);
  QVG_CHECK(p.sink >= 0, "cache config: sink must be >= 0, got ", p.sink);
  QVG_CHECK(p.window_chunks >= 0, "cache config: window_chunks must be >= 0, got ", p.window_chunks);
  QVG_CHECK(p.window_tokens >= 0, "cache config: window_tokens must be >= 0, got ", p.window_tokens);
  QVG_CHECK(c.rope.mode == RopeMode::none || c.rope.mode == RopeMode::rope_1d || c.rope.mode == RopeMode::wan_3d,
            "cache config: unknown RoPE mode ", static_cast<int>(c.rope.mode));
  QVG_CHECK(c.rope.pairing == RopePairing::interleaved || c.rope.pairing == RopePairing::half,
            "cache config: unknown RoPE pairing ", static_cast<int>(c.rope.pairing));
  validate(c.rope, c.dim);
  QVG_CHECK(c.tail == TailFormat::bf16 || c.tail == TailFormat::f32, "cache config: unknown tail format ",
            static_cast<int>(c.tail));
}

namespace {

template <typename T>
void same_field(const T& a, const T& b, const std::string& what, const char* field) {
  QVG_CHECK(a == b, what, ": ", field, " differs (", a, " vs ", b, ")");
}

void check_same_codec(const CodecConfig& a, const CodecConfig& b, const std::string& what) {
  same_field(a.name, b.name, what, "name");
  std::string diff;
  QVG_CHECK(same_codec(a, b, &diff), what, ": ", diff, " differs (", codec_spec(a), " vs ", codec_spec(b), ")");
}

}  // namespace

void check_same_config(const CacheConfig& a, const CacheConfig& b, const std::string& what) {
  same_field(a.layers, b.layers, what, "layers");
  same_field(a.heads, b.heads, what, "heads");
  same_field(a.dim, b.dim, what, "dim");
  check_same_codec(a.key, b.key, what + ": key codec");
  check_same_codec(a.value, b.value, what + ": value codec");
  same_field(a.chunk_tokens, b.chunk_tokens, what, "chunk_tokens");
  same_field(a.policy.quant_factor, b.policy.quant_factor, what, "quant_factor");
  same_field(a.policy.keep_recent, b.policy.keep_recent, what, "keep_recent");
  same_field(a.policy.sink, b.policy.sink, what, "sink");
  same_field(a.policy.window_chunks, b.policy.window_chunks, what, "window_chunks");
  same_field(a.policy.window_tokens, b.policy.window_tokens, what, "window_tokens");
  same_field(std::string(rope_mode_name(a.rope.mode)), std::string(rope_mode_name(b.rope.mode)), what, "RoPE mode");
  same_field(a.rope.theta, b.rope.theta, what, "RoPE theta");
  same_field(static_cast<int>(a.rope.pairing), static_cast<int>(b.rope.pairing), what, "RoPE pairing");
  same_field(static_cast<int>(a.tail), static_cast<int>(b.tail), what, "tail format");
  same_field(a.warm_start, b.warm_start, what, "warm_start");
}

// ---- helpers ---------------------------------------------------------------------

void tail_encode(const HeadTensorView& x, TailFormat f, std::vector<uint8_t>& out) {
  out.resize(static_cast<size_t>(x.numel()) * (f == TailFormat::bf16 ? 2 : 4));
  size_t i = 0;
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t n = 0; n < x.tokens; ++n) {
      const float* r = x.row(h, n);
      if (f == TailFormat::bf16)
        for (int64_t d = 0; d < x.dim; ++d) put_u16(out, i++, bf16_from_float(r[d]));
      else
        for (int64_t d = 0; d < x.dim; ++d) put_f32(out, i++, r[d]);
    }
}

void tail_decode(const uint8_t* bytes, size_t n, TailFormat f, float* out) {
  if (f == TailFormat::bf16) {
    for (size_t i = 0; i < n; ++i)
      out[i] = bf16_to_float(static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = 0;
      for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(bytes[4 * i + b]) << (8 * b);
      out[i] = bits_float(u);
    }
  }
}

/// Whether every value of a full-precision chunk's bytes is finite (a loaded
/// file's: appended chunks are checked as floats).
bool tail_finite(const std::vector<uint8_t>& bytes, TailFormat f) {
  if (f == TailFormat::bf16) {
    for (size_t i = 0; i + 1 < bytes.size(); i += 2)
      if ((bytes[i + 1] & 0x7F) == 0x7F && (bytes[i] & 0x80)) return false;  // exponent all ones
  } else {
    for (size_t i = 0; i + 3 < bytes.size(); i += 4)
      if ((bytes[i + 3] & 0x7F) == 0x7F && (bytes[i + 2] & 0x80)) return false;
  }
  return true;
}

/// A loaded QVG / RTN span tensor's block scales: every one a finite FP8
/// (E4M3 has no infinity; 0x7F, 0xFF are NaN) or FP16 code. The decoders
/// trust them (the span scales they check, and load decodes every span).
void check_block_scales(const EncodedTensor& t, const std::string& where) {
  if (!method_traits(t.config.method).group_quantized) return;
  if (t.config.scale_format == ScaleFormat::fp8 || t.config.code == ResidualCode::codebook) {  // cq: FP8 a token
    for (size_t i = 0; i < t.scales.size(); ++i)
      QVG_CHECK((t.scales[i] & 0x7F) != 0x7F, where, ": block scale ", i, " is NaN (FP8 byte ", int(t.scales[i]), ")");
  } else {
    for (size_t i = 0; i + 1 < t.scales.size(); i += 2)
      QVG_CHECK((t.scales[i + 1] & 0x7C) != 0x7C, where, ": block scale ", i / 2, " is not finite (FP16)");
  }
}

StreamingKVCache::Impl::Impl(CacheConfig c, CacheOptions o) : config(std::move(c)), options(o) {
  validate(config);
  make_codecs();
  layers.resize(static_cast<size_t>(config.layers));
}

void StreamingKVCache::Impl::make_codecs() {
  key_codec = make_codec(config.key, options.backend);
  value_codec = make_codec(config.value, options.backend);
}

const Codec& StreamingKVCache::Impl::span_codec(TensorRole role, int64_t tokens) {
  std::unique_ptr<Codec>& held = role == TensorRole::key ? key_codec : value_codec;
  const CodecConfig cc = span_config(role == TensorRole::key ? config.key : config.value, tokens);
  if (!same_codec(held->config(), cc)) held = make_codec(cc, options.backend);  // C clamped to a short span
  return *held;
}

double LayerMemory::ratio() const {
  const size_t kv = kv_bytes();
  return kv > 0 ? static_cast<double>(bf16_bytes) / static_cast<double>(kv) : 0.0;
}

double LayerMemory::bits_per_value(int heads, int dim) const {
  const double values = 2.0 * heads * static_cast<double>(tokens_held) * dim;
  return values > 0 ? 8.0 * static_cast<double>(kv_bytes()) / values : 0.0;
}

double LayerMemory::span_bits_per_value(int heads, int dim) const {
  if (tokens_encoded == 0) return bits_per_value(heads, dim);
  const double values = 2.0 * heads * static_cast<double>(tokens_encoded) * dim;
  return 8.0 * static_cast<double>(k.spans.total() + v.spans.total()) / values;
}

namespace {

/// Gathers the full-precision data of consecutive chunks into [heads, tokens, dim].
HeadTensor gather(const std::vector<const CacheChunk*>& chunks, bool key, int heads, int dim, TailFormat f) {
  int64_t tokens = 0;
  for (const CacheChunk* ch : chunks) tokens += ch->tokens;
  HeadTensor x(heads, tokens, dim);
  const size_t e = f == TailFormat::bf16 ? 2 : 4;
  int64_t off = 0;
  for (const CacheChunk* ch : chunks) {
    const std::vector<uint8_t>& src = key ? ch->k : ch->v;
    const size_t head_values = static_cast<size_t>(ch->tokens * dim);
    for (int h = 0; h < heads; ++h)
      tail_decode(src.data() + h * head_values * e, head_values, f, x.head(h) + off * dim);
    off += ch->tokens;
  }
  return x;
}

/// An EncodedTensor holding only what EncodeOptions::warm_start reads.
EncodedTensor warm_state_of(const EncodedTensor& e) {
  EncodedTensor w;
  w.config = e.config;
  w.role = e.role;
  w.heads = e.heads;
  w.dim = e.dim;
  w.centroids = e.centroids;
  return w;
}

}  // namespace

// ---- the cache -------------------------------------------------------------------

StreamingKVCache::StreamingKVCache(CacheConfig config, CacheOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), options)) {}
StreamingKVCache::StreamingKVCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingKVCache::~StreamingKVCache() = default;
StreamingKVCache::StreamingKVCache(StreamingKVCache&&) noexcept = default;
StreamingKVCache& StreamingKVCache::operator=(StreamingKVCache&&) noexcept = default;

const CacheConfig& StreamingKVCache::config() const { return impl_->config; }
const CacheOptions& StreamingKVCache::options() const { return impl_->options; }
void StreamingKVCache::set_options(const CacheOptions& options) {
  const bool new_backend = options.backend != impl_->options.backend;
  impl_->options = options;
  if (new_backend) impl_->make_codecs();  // encode and read on the new backend alike
}

void check_layer(const StreamingKVCache::Impl& I, int layer, const char* what) {
  check_layer_index(I.config, layer, what);
}

namespace {

void check_chunk_shape(const CacheConfig& c, int layer, int64_t heads, int64_t tokens, int64_t dim, const char* what) {
  QVG_CHECK(heads == c.heads && dim == c.dim && tokens > 0, "append (layer ", layer, "): the ", what, " chunk has shape [",
            heads, ", ", tokens, ", ", dim, "], the cache needs [", c.heads, ", T > 0, ", c.dim, "]");
}

void check_chunk(const CacheConfig& c, int layer, const HeadTensorView& x, const char* what) {
  check_chunk_shape(c, layer, x.heads, x.tokens, x.dim, what);
  x.check((std::string("append (layer ") + std::to_string(layer) + "): the " + what + " chunk").c_str());
}

}  // namespace

AppendReport StreamingKVCache::append(int layer, const HeadTensor& k, const HeadTensor& v,
                                      std::span<const int32_t> positions) {
  // The checks the view overload makes first, in its order, then the data's size.
  check_layer(*impl_, layer, "append");
  for (const HeadTensor* x : {&k, &v}) {
    const char* what = x == &k ? "key" : "value";
    check_chunk_shape(impl_->config, layer, x->heads, x->tokens, x->dim, what);
    QVG_CHECK(x->data.size() == static_cast<size_t>(x->numel()), "append (layer ", layer, "): the ", what,
              " chunk holds ", x->data.size(), " values, its shape needs ", x->numel());
  }
  return append(layer, HeadTensorView(k), HeadTensorView(v), positions);
}

AppendReport StreamingKVCache::append(int layer, const HeadTensorView& k, const HeadTensorView& v,
                                      std::span<const int32_t> positions) {
  Impl& I = *impl_;
  const CacheConfig& c = I.config;
  const SpanPolicy& p = c.policy;
  // ---- validate (nothing changes before this block has passed) ----
  check_layer(I, layer, "append");
  check_chunk(c, layer, k, "key");
  check_chunk(c, layer, v, "value");
  check_chunk_tokens(c, layer, k.tokens, v.tokens);
  const int64_t T = k.tokens;
  const int pd = rope_position_dims(c.rope.mode);
  if (pd > 0)
    QVG_CHECK(positions.size() == static_cast<size_t>(T * pd), "append (layer ", layer, "): RoPE-on-read (",
              rope_mode_name(c.rope.mode), ") needs ", pd, " positions per token (", T * pd, " values), got ",
              positions.size());
  // The span codecs' magnitude policy, per chunk (a span's largest magnitude
  // is its chunks'): refused here, not when a later append encodes the span.
  // Messages name the chunk (the layer's next index) as well as the place in it.
  const int64_t next = I.layers[static_cast<size_t>(layer)].next_chunk;
  const std::string chunk_name = "append (layer " + std::to_string(layer) + ", chunk " + std::to_string(next) + "): ";
  float k_max = 0, v_max = 0;
  try {
    k_max = check_finite(k, "the key chunk");
    v_max = check_finite(v, "the value chunk");
  } catch (const Error& e) {
    QVG_CHECK(false, chunk_name, e.what());
  }
  const std::string where = "append (layer " + std::to_string(layer) + "): the ";
  check_magnitude(c.key, k_max, where + "key chunk: ");
  check_magnitude(c.value, v_max, where + "value chunk: ");

  CacheLayer& L = I.layers[static_cast<size_t>(layer)];
  L.chunks.reserve(L.chunks.size() + 1);  // capacity only: push_back below cannot throw

  CacheChunk nc;
  tail_encode(k, c.tail, nc.k);
  tail_encode(v, c.tail, nc.v);
  // Finite floats above BF16's largest value round to infinity there (and a
  // saved file holding them would not load); f32 keeps them as they are.
  QVG_CHECK(c.tail != TailFormat::bf16 || (tail_finite(nc.k, c.tail) && tail_finite(nc.v, c.tail)), "append (layer ", layer,
            "): a value overflows the cache's BF16 full-precision format (|x| above 3.39e38)");
  if (pd > 0) nc.positions.assign(positions.begin(), positions.end());

  // ---- plan: slots index L.chunks; slot L.chunks.size() is the new chunk ----
  LayerAppend<CacheLayer, CacheChunk, CacheSpan> step(p, L, nc, T);
  const std::vector<std::vector<size_t>>& groups = step.plan().groups;

  // ---- encode the new spans into locals ----
  AppendReport rep;
  rep.chunk = nc.index;
  std::vector<CacheSpan> new_spans;
  std::optional<EncodedTensor> warm_k, warm_v;
  if (!groups.empty()) {
    warm_k = L.warm_k;
    warm_v = L.warm_v;
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::vector<const CacheChunk*> chunks;
    for (size_t s : groups[gi]) chunks.push_back(&step.at(s));
    CacheSpan sp = step.form_span(gi);
    SpanReport sr = step.report(layer, sp);
    const auto t0 = std::chrono::steady_clock::now();
    for (const bool key : {true, false}) {
      const HeadTensor x = gather(chunks, key, c.heads, c.dim, c.tail);
      const Codec& codec = I.span_codec(key ? TensorRole::key : TensorRole::value, sp.tokens);
      const CodecConfig& cc = codec.config();
      std::optional<EncodedTensor>& warm = key ? warm_k : warm_v;
      EncodeOptions eo;
      eo.role = key ? TensorRole::key : TensorRole::value;
      eo.threads = I.options.threads;
      const bool use_warm = starts_warm(c, cc, warm ? &warm->config : nullptr);
      if (use_warm) eo.warm_start = &*warm;
      EncodeReport er;
      EncodedTensor enc = codec.encode(x, eo, &er);
      if (c.warm_start && runs_kmeans(cc)) warm = warm_state_of(enc);
      if (runs_kmeans(cc)) sr.centroids = cc.kmeans.centroids;
      if (I.options.measure_span_error) {
        HeadTensor rec;
        codec.decode(enc, rec, I.options.threads);
        (key ? sr.k_error : sr.v_error) = compare(x, rec);
      }
      (key ? sr.k_warm_started : sr.v_warm_started) = use_warm;
      (key ? sr.k_bytes : sr.v_bytes) = enc.bytes();
      (key ? sr.k : sr.v) = std::move(er);
      (key ? sp.k : sp.v) = std::move(enc);
    }
    sr.encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    new_spans.push_back(std::move(sp));
    rep.spans.push_back(std::move(sr));
  }
  rep.evicted = step.evicted();
  step.reserve(new_spans.size());

  // ---- commit: no allocation below this line ----
  step.commit(
      new_spans,
      [](CacheChunk& ch, const CacheSpan&) {  // its data now lives in the span
        std::vector<uint8_t>().swap(ch.k);
        std::vector<uint8_t>().swap(ch.v);
        ch.device.reset();
      },
      [](const CacheSpan&) {});
  if (!groups.empty()) {
    L.warm_k = std::move(warm_k);
    L.warm_v = std::move(warm_v);
  }
  // Free evicted full-precision chunks, and spans none of whose chunks is live.
  drop_unreachable(L.chunks, L.spans);
  return rep;
}

CacheRead StreamingKVCache::read(int layer) const {
  const Impl& I = *impl_;
  const CacheConfig& c = I.config;
  check_layer(I, layer, "read");
  const CacheLayer& L = I.layers[static_cast<size_t>(layer)];
  QVG_CHECK(L.next_chunk > 0, "read: layer ", layer, " is empty (no chunk has been appended to it)");
  const int64_t n = live_token_count(L);
  CacheRead out;
  out.k = HeadTensor(c.heads, n, c.dim);
  out.v = HeadTensor(c.heads, n, c.dim);
  const int pd = rope_position_dims(c.rope.mode);
  out.positions.reserve(static_cast<size_t>(n * pd));
  const size_t e = I.tail_value_bytes();
  HeadTensor dk, dv;
  int64_t decoded = -1;
  int64_t off = 0;
  for (const CacheChunk& ch : L.chunks) {
    if (!ch.live) continue;
    const int64_t t = ch.tokens;
    if (ch.span < 0) {
      const size_t head_values = static_cast<size_t>(t * c.dim);
      for (int h = 0; h < c.heads; ++h) {
        tail_decode(ch.k.data() + h * head_values * e, head_values, c.tail, out.k.head(h) + off * c.dim);
        tail_decode(ch.v.data() + h * head_values * e, head_values, c.tail, out.v.head(h) + off * c.dim);
      }
    } else {
      if (decoded != ch.span) {
        const auto it = std::find_if(L.spans.begin(), L.spans.end(), [&](const CacheSpan& s) { return s.id == ch.span; });
        QVG_CHECK(it != L.spans.end(), "read: layer ", layer, ": span ", ch.span, " is missing (corrupt state)");
        I.key_codec->decode(it->k, dk, I.options.threads);
        I.value_codec->decode(it->v, dv, I.options.threads);
        decoded = ch.span;
      }
      for (int h = 0; h < c.heads; ++h) {
        std::copy_n(dk.head(h) + ch.span_offset * c.dim, t * c.dim, out.k.head(h) + off * c.dim);
        std::copy_n(dv.head(h) + ch.span_offset * c.dim, t * c.dim, out.v.head(h) + off * c.dim);
      }
    }
    out.chunks.push_back(ch.index);
    out.chunk_tokens.push_back(t);
    out.positions.insert(out.positions.end(), ch.positions.begin(), ch.positions.end());
    off += t;
  }
  if (pd > 0) apply_rope(out.k, out.positions, c.rope);
  return out;
}

int64_t StreamingKVCache::chunks_appended(int layer) const {
  check_layer(*impl_, layer, "chunks_appended");
  return impl_->layers[static_cast<size_t>(layer)].next_chunk;
}

int64_t StreamingKVCache::tokens_appended(int layer) const {
  check_layer(*impl_, layer, "tokens_appended");
  return impl_->layers[static_cast<size_t>(layer)].next_token;
}

int64_t StreamingKVCache::live_tokens(int layer) const {
  check_layer(*impl_, layer, "live_tokens");
  return live_token_count(impl_->layers[static_cast<size_t>(layer)]);
}

std::vector<std::pair<int64_t, int64_t>> StreamingKVCache::live_chunks(int layer) const {
  check_layer(*impl_, layer, "live_chunks");
  const CacheLayer& L = impl_->layers[static_cast<size_t>(layer)];
  QVG_CHECK(L.next_chunk > 0, "live_chunks: layer ", layer, " is empty (no chunk has been appended to it)");
  return live_chunk_list(L);
}

int64_t StreamingKVCache::spans_encoded(int layer) const {
  check_layer(*impl_, layer, "spans_encoded");
  return impl_->layers[static_cast<size_t>(layer)].next_span;
}


LayerMemory StreamingKVCache::layer_memory(int layer) const {
  check_layer(*impl_, layer, "layer_memory");
  const CacheConfig& c = impl_->config;
  const CacheLayer& L = impl_->layers[static_cast<size_t>(layer)];
  LayerMemory m = count_layer(
      L, c,
      [](const CacheChunk& ch, LayerMemory& mem) {
        mem.k.tail += ch.k.size();
        mem.v.tail += ch.v.size();
        mem.positions += ch.positions.size() * sizeof(int32_t);
      },
      [](const CacheSpan& sp, LayerMemory& mem) {
        add_parts(mem.k.spans, sp.k.bytes());
        add_parts(mem.v.spans, sp.v.bytes());
        return true;
      });
  if (L.warm_k) m.warm_start += L.warm_k->centroids.size();
  if (L.warm_v) m.warm_start += L.warm_v->centroids.size();
  return m;
}

MemoryStats StreamingKVCache::memory() const {
  return sum_layers(impl_->config.layers, [&](int l) { return layer_memory(l); });
}

// ---- state invariants (load) --------------------------------------------------------

void check_layer_state(const StreamingKVCache::Impl& I, int layer) {
  const CacheConfig& c = I.config;
  const SpanPolicy& p = c.policy;
  const CacheLayer& L = I.layers[static_cast<size_t>(layer)];
  const std::string where = "layer " + std::to_string(layer);
  const int pd = rope_position_dims(c.rope.mode);
  const size_t e = I.tail_value_bytes();
  QVG_CHECK(L.next_chunk >= 0 && L.next_token >= 0 && L.next_span >= 0, where, ": negative counters");
  QVG_CHECK((L.next_chunk == 0) == L.chunks.empty(), where, ": ", L.chunks.size(), " chunks held after ",
            L.next_chunk, " appended");
  QVG_CHECK(L.next_chunk > 0 || (L.spans.empty() && L.next_token == 0 && L.next_span == 0 && !L.warm_k && !L.warm_v),
            where, ": state held without any chunk appended");
  // What the policy can have produced: a span takes quant_factor non-sink
  // chunks; without a window nothing is evicted (a fuzzing find: both loaded).
  const int64_t non_sink = L.next_chunk - std::min<int64_t>(p.sink, L.next_chunk);
  QVG_CHECK(L.next_span <= non_sink / p.quant_factor, where, ": ", L.next_span, " spans encoded from ", non_sink,
            " non-sink chunks (spans of ", p.quant_factor, ")");
  if (p.window_chunks == 0 && p.window_tokens == 0) {
    QVG_CHECK(static_cast<int64_t>(L.chunks.size()) == L.next_chunk, where, ": ", L.chunks.size(), " chunks held of ",
              L.next_chunk, " appended, and without a window none is evicted");
    for (const CacheChunk& ch : L.chunks)
      QVG_CHECK(ch.live, where, ", chunk ", ch.index, ": evicted, but the policy has no window");
  }
  // Chunks: increasing indices, consistent token offsets, the newest last.
  for (size_t i = 0; i < L.chunks.size(); ++i) {
    const CacheChunk& ch = L.chunks[i];
    const std::string cw = where + ", chunk " + std::to_string(ch.index);
    QVG_CHECK(ch.index >= 0 && ch.index < L.next_chunk, cw, ": index out of range (", L.next_chunk, " appended)");
    QVG_CHECK(ch.tokens > 0 && ch.first_token >= 0 && ch.first_token + ch.tokens <= L.next_token, cw,
              ": tokens [", ch.first_token, ", +", ch.tokens, ") outside the ", L.next_token, " appended");
    if (c.chunk_tokens > 0) QVG_CHECK(ch.tokens == c.chunk_tokens, cw, ": ", ch.tokens, " tokens, chunks have ", c.chunk_tokens);
    if (i > 0) {
      const CacheChunk& pr = L.chunks[i - 1];
      QVG_CHECK(ch.index > pr.index, cw, ": chunks out of order");
      QVG_CHECK(ch.first_token >= pr.first_token + pr.tokens, cw, ": overlaps the previous chunk");
      if (ch.index == pr.index + 1)
        QVG_CHECK(ch.first_token == pr.first_token + pr.tokens, cw, ": first token ", ch.first_token,
                  " does not follow chunk ", pr.index);
    }
    QVG_CHECK(ch.positions.size() == static_cast<size_t>(ch.tokens * pd), cw, ": ", ch.positions.size(),
              " positions, needs ", ch.tokens * pd);
    if (ch.span < 0) {
      QVG_CHECK(ch.span == -1, cw, ": bad span id ", ch.span);
      QVG_CHECK(ch.live, cw, ": an evicted full-precision chunk is held");
      const size_t need = static_cast<size_t>(int64_t{c.heads} * ch.tokens * c.dim) * e;
      QVG_CHECK(ch.k.size() == need && ch.v.size() == need, cw, ": full-precision data has ", ch.k.size(), " / ",
                ch.v.size(), " bytes, needs ", need);
      QVG_CHECK(tail_finite(ch.k, c.tail) && tail_finite(ch.v, c.tail), cw,
                ": full-precision data holds a non-finite value");
    } else {
      QVG_CHECK(ch.k.empty() && ch.v.empty(), cw, ": holds full-precision data although in span ", ch.span);
      QVG_CHECK(ch.index >= p.sink, cw, ": a sink chunk is in a span");
    }
  }
  if (!L.chunks.empty()) {
    const CacheChunk& last = L.chunks.back();
    QVG_CHECK(last.index == L.next_chunk - 1 && last.live && last.first_token + last.tokens == L.next_token, where,
              ": the newest chunk (", L.next_chunk - 1, ") is not held live at the end");
  }
  // Sink chunks: held, live, full precision.
  const int64_t sinks = std::min<int64_t>(p.sink, L.next_chunk);
  for (int64_t s = 0; s < sinks; ++s)
    QVG_CHECK(static_cast<size_t>(s) < L.chunks.size() && L.chunks[static_cast<size_t>(s)].index == s &&
                  L.chunks[static_cast<size_t>(s)].live && L.chunks[static_cast<size_t>(s)].span < 0,
              where, ": sink chunk ", s, " is not held live in full precision");
  // Non-sink chunks: [evicted ones inside spans] [live ones in spans] [live pending], oldest first.
  int phase = 0;
  int64_t live_count = 0, live_tokens = 0, pending = 0;
  for (const CacheChunk& ch : L.chunks) {
    if (ch.index < p.sink) continue;
    const int ph = !ch.live ? 0 : (ch.span >= 0 ? 1 : 2);
    QVG_CHECK(ph >= phase, where, ", chunk ", ch.index, ": chunk order breaks the policy (evicted / encoded / pending)");
    phase = ph;
    if (ch.live) {
      ++live_count;
      live_tokens += ch.tokens;
    }
    if (ph == 2) ++pending;
  }
  QVG_CHECK(pending < int64_t{p.quant_factor} + p.keep_recent, where, ": ", pending,
            " chunks wait in full precision, the policy encodes at ", p.quant_factor + p.keep_recent);
  if (p.window_chunks > 0) QVG_CHECK(live_count <= p.window_chunks, where, ": ", live_count, " live chunks exceed the window");
  if (p.window_tokens > 0)
    QVG_CHECK(live_count <= 1 || live_tokens <= p.window_tokens, where, ": ", live_tokens, " live tokens exceed the window");
  // Spans: increasing ids; each covers its chunks exactly; each has a live chunk.
  for (size_t i = 0; i < L.spans.size(); ++i) {
    const CacheSpan& sp = L.spans[i];
    const std::string sw = where + ", span " + std::to_string(sp.id);
    QVG_CHECK(sp.id >= 0 && sp.id < L.next_span, sw, ": id out of range (", L.next_span, " encoded)");
    if (i > 0) QVG_CHECK(sp.id > L.spans[i - 1].id, sw, ": spans out of order");
    QVG_CHECK(sp.chunks == p.quant_factor, sw, ": covers ", sp.chunks, " chunks, the policy makes spans of ",
              p.quant_factor);
    int64_t seen = 0, tokens = 0;
    bool live = false;
    for (const CacheChunk& ch : L.chunks) {
      if (ch.span != sp.id) continue;
      QVG_CHECK(ch.index == sp.first_chunk + seen && ch.span_offset == tokens, sw, ": chunk ", ch.index,
                " is not its chunk ", sp.first_chunk + seen, " at offset ", tokens);
      if (seen == 0) QVG_CHECK(ch.first_token == sp.first_token, sw, ": first token mismatch");
      tokens += ch.tokens;
      live = live || ch.live;
      ++seen;
    }
    QVG_CHECK(seen == sp.chunks && tokens == sp.tokens, sw, ": holds ", seen, " chunks / ", tokens,
              " tokens, records ", sp.chunks, " / ", sp.tokens);
    QVG_CHECK(live, sw, ": held although all its chunks are evicted");
    for (const bool key : {true, false}) {
      const EncodedTensor& t = key ? sp.k : sp.v;
      QVG_CHECK(t.heads == c.heads && t.tokens == sp.tokens && t.dim == c.dim, sw, ": encoded shape mismatch");
      QVG_CHECK(t.role == (key ? TensorRole::key : TensorRole::value), sw, ": encoded role mismatch");
      check_block_scales(t, sw + (key ? ", keys" : ", values"));
    }
  }
  for (const CacheChunk& ch : L.chunks)
    if (ch.span >= 0)
      QVG_CHECK(std::any_of(L.spans.begin(), L.spans.end(), [&](const CacheSpan& s) { return s.id == ch.span; }),
                where, ", chunk ", ch.index, ": refers to span ", ch.span, ", which is not held");
  // Warm-start state.
  for (const bool key : {true, false}) {
    const std::optional<EncodedTensor>& w = key ? L.warm_k : L.warm_v;
    if (!w) continue;
    const CodecConfig& base = key ? c.key : c.value;
    const char* role = key ? "key" : "value";
    QVG_CHECK(c.warm_start && runs_kmeans(base), where, ": ", role, " warm-start state held, the config has none");
    QVG_CHECK(L.next_span > 0, where, ": ", role, " warm-start state before any span");
    const int cn = w->config.kmeans.centroids;
    QVG_CHECK(cn >= 1 && cn <= base.kmeans.centroids, where, ": ", role, " warm-start centroids ", cn, " out of range");
    const size_t need = qvg_expected_bytes(config_with_centroids(base, cn), c.heads, cn, c.dim).centroids;
    QVG_CHECK(w->heads == c.heads && w->dim == c.dim && w->centroids.size() == need, where, ": ", role,
              " warm-start state has ", w->centroids.size(), " bytes, needs ", need);
    if (base.centroid_format == CentroidFormat::bf16)
      check_bf16_finite(w->centroids, where + ": " + role + " warm-start centroid");
    else
      check_fp8_centroids(w->centroids, static_cast<size_t>(smoothing_stages(base)) * c.heads * cn * c.dim,
                          where + ": " + role + " warm-start state",
                          static_cast<size_t>(smoothing_stages(base)) * c.heads * (cn * c.dim + 4));
  }
}

}  // namespace qvg
