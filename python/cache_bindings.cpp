// qvg.StreamingKVCache: the streaming cache (include/qvg/cache.h) on NumPy
// arrays. Chunks in, spans encoded by the policy, the layer's K and V out in
// token order; reports and memory as dicts; save / load.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "cache_queries.h"
#include "convert.h"
#include "dlpack.h"
#include "qvg/cache.h"
#include "qvg/methods.h"

namespace qvg::python {

namespace {

using PositionArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

qvg::TailFormat parse_tail(const std::string& s) {
  if (s == "bf16") return qvg::TailFormat::bf16;
  if (s == "f32") return qvg::TailFormat::f32;
  throw qvg::Error("tail must be \"bf16\" or \"f32\", got \"" + s + "\"");
}

qvg::RopePairing parse_pairing(const std::string& s) {
  if (s == "interleaved") return qvg::RopePairing::interleaved;
  if (s == "half") return qvg::RopePairing::half;
  throw qvg::Error("rope_pairing must be \"interleaved\" or \"half\", got \"" + s + "\"");
}

qvg::CacheOptions make_options(int threads, const std::string& device, bool measure_span_error) {
  qvg::CacheOptions o;
  o.threads = check_threads(threads);
  o.backend = parse_device(device);
  o.measure_span_error = measure_span_error;
  return o;
}

}  // namespace

py::dict span_dict(const qvg::SpanReport& r) {
  py::dict d;
  d["layer"] = r.layer;
  d["span"] = r.span;
  d["first_chunk"] = r.first_chunk;
  d["chunks"] = r.chunks;
  d["first_token"] = r.first_token;
  d["tokens"] = r.tokens;
  d["centroids"] = r.centroids;
  d["k_warm_started"] = r.k_warm_started;
  d["v_warm_started"] = r.v_warm_started;
  d["encode_seconds"] = r.encode_seconds;
  d["k_bytes"] = part_bytes(r.k_bytes);
  d["v_bytes"] = part_bytes(r.v_bytes);
  d["k_error"] = r.k_error ? py::object(error_dict(*r.k_error)) : py::object(py::none());
  d["v_error"] = r.v_error ? py::object(error_dict(*r.v_error)) : py::object(py::none());
  return d;
}

py::dict report_dict(const qvg::AppendReport& r) {
  py::dict d;
  d["chunk"] = r.chunk;
  py::list spans;
  for (const qvg::SpanReport& sr : r.spans) spans.append(span_dict(sr));
  d["spans"] = spans;
  d["evicted"] = r.evicted;
  return d;
}

py::dict memory_dict(const qvg::LayerMemory& m, const qvg::CacheConfig& c) {
  py::dict d;
  d["k_spans"] = part_bytes(m.k.spans);
  d["v_spans"] = part_bytes(m.v.spans);
  d["k_tail"] = m.k.tail;
  d["v_tail"] = m.v.tail;
  d["positions"] = m.positions;
  d["warm_start"] = m.warm_start;
  d["tokens_live"] = m.tokens_live;
  d["tokens_held"] = m.tokens_held;
  d["tokens_encoded"] = m.tokens_encoded;
  d["spans"] = m.spans;
  d["bf16_bytes"] = m.bf16_bytes;
  d["kv_bytes"] = m.kv_bytes();
  d["total"] = m.total();
  d["ratio"] = m.ratio();
  d["bits_per_value"] = m.bits_per_value(c.heads, c.dim);
  return d;
}

qvg::CacheConfig make_cache_config(int layers, int heads, int dim, const std::string& key, const std::string& value,
                                   int64_t chunk_tokens, int quant_factor, int keep_recent, int sink,
                                   int64_t window_chunks, int64_t window_tokens, const std::string& rope,
                                   double rope_theta, const std::string& rope_pairing, const std::string& tail,
                                   bool warm_start, int64_t first_head) {
  qvg::CacheConfig c;
  c.layers = layers;
  c.heads = heads;
  c.dim = dim;
  c.key = qvg::config_for_heads(qvg::parse_codec_spec(key), first_head);
  c.value = qvg::config_for_heads(qvg::parse_codec_spec(value), first_head);
  c.chunk_tokens = chunk_tokens;
  c.policy.quant_factor = quant_factor;
  c.policy.keep_recent = keep_recent;
  c.policy.sink = sink;
  c.policy.window_chunks = window_chunks;
  c.policy.window_tokens = window_tokens;
  c.rope.mode = qvg::parse_rope_mode(rope);
  c.rope.theta = rope_theta;
  c.rope.pairing = parse_pairing(rope_pairing);
  c.tail = parse_tail(tail);
  c.warm_start = warm_start;
  return c;
}

namespace {

using PyCache = LockedCache<qvg::StreamingKVCache>;

/// A binding of a cheap per-layer query of the cache (chunks_appended, ...), under its lock.
}  // namespace

void bind_cache(py::module_& m) {
  py::class_<PyCache> cls(m, "StreamingKVCache",
                          "The streaming KV cache of a chunk-by-chunk generator (docs/PYTHON.md).");
  cls.def(py::init([](int layers, int heads, int dim, const std::string& key, const std::string& value,
                       int64_t chunk_tokens, int quant_factor, int keep_recent, int sink, int64_t window_chunks,
                       int64_t window_tokens, const std::string& rope, double rope_theta,
                       const std::string& rope_pairing, const std::string& tail, bool warm_start, int threads,
                       const std::string& device, bool measure_span_error, int64_t first_head) {
             const qvg::CacheConfig c =
                 make_cache_config(layers, heads, dim, key, value, chunk_tokens, quant_factor, keep_recent, sink,
                                   window_chunks, window_tokens, rope, rope_theta, rope_pairing, tail, warm_start,
                                   first_head);
             return std::make_unique<PyCache>(
                 qvg::StreamingKVCache(c, make_options(threads, device, measure_span_error)));
           }),
           py::arg("layers"), py::arg("heads"), py::arg("dim"), py::kw_only(), py::arg("key") = "qvg",
           py::arg("value") = "qvg", py::arg("chunk_tokens") = 0, py::arg("quant_factor") = 8,
           py::arg("keep_recent") = 0, py::arg("sink") = 0, py::arg("window_chunks") = 0, py::arg("window_tokens") = 0,
           py::arg("rope") = "none", py::arg("rope_theta") = 10000.0, py::arg("rope_pairing") = "interleaved",
           py::arg("tail") = "bf16", py::arg("warm_start") = true, py::arg("threads") = 0, py::arg("device") = "cpu",
           py::arg("measure_span_error") = false, py::arg("first_head") = 0,
           "key / value: codec specs of the spans. Spans of quant_factor chunks are encoded once quant_factor + "
           "keep_recent chunks are pending; sink chunks are never encoded nor evicted; window_chunks / "
           "window_tokens evict the oldest non-sink chunks. rope \"1d\" or \"3d\": keys are appended before RoPE "
           "with their positions and rotated on read. tail: how unencoded chunks are held (\"bf16\" or \"f32\"). "
           "first_head: the model's index of this cache's first head, for a cache of some of its heads (head-"
           "sharded parallelism): its spans then equal those heads of a cache of all heads byte for byte.")
      .def(
          "append",
          [](PyCache& c, int layer, const py::object& k, const py::object& v,
             const std::optional<PositionArray>& positions, const std::string& layout) {
            const qvg::KvLayout l = qvg::parse_layout(layout);
            const qvg::HeadTensor kt = host_input(k, l, "k", "the cache's append"),
                                  vt = host_input(v, l, "v", "the cache's append");
            std::span<const int32_t> pos;
            if (positions) pos = std::span<const int32_t>(positions->data(), static_cast<size_t>(positions->size()));
            return report_dict(c.run_mut([&](qvg::StreamingKVCache& cc) { return cc.append(layer, kt, vt, pos); }));
          },
          py::arg("layer"), py::arg("k"), py::arg("v"), py::arg("positions") = py::none(), py::arg("layout") = "htd",
          "Adds one chunk ([heads, T, dim] K and V) to a layer and applies the span policy. positions: T x 3 "
          "(rope \"3d\": t, y, x) or T (rope \"1d\") int32 values, required with RoPE on read. Returns what it did: "
          "{chunk, spans: [span reports], evicted: [chunks]}. On an error the cache is unchanged.")
      .def(
          "read",
          [](const PyCache& c, int layer, const std::string& layout) {
            const qvg::KvLayout l = qvg::parse_layout(layout);
            const qvg::CacheRead r = c.run([&](const qvg::StreamingKVCache& cc) { return cc.read(layer); });
            return py::make_tuple(to_array(r.k, l), to_array(r.v, l));
          },
          py::arg("layer"), py::arg("layout") = "htd",
          "The layer's live K and V (float32), in token order; keys rotated when RoPE on read is on.")
      .def(
          "read_device",
          [](const PyCache& c, int layer) {
            std::string why;
            if (!qvg::cuda_available(&why)) throw qvg::Error("read_device: " + why);
            DeviceArray k, v;
            c.run([&](const qvg::StreamingKVCache& cc) {
              const int64_t n = cc.live_tokens(layer);
              const qvg::CacheConfig& cfg = cc.config();
              for (DeviceArray* a : {&k, &v}) {
                a->shape = {static_cast<int64_t>(cfg.heads), n, static_cast<int64_t>(cfg.dim)};
                a->device = qvg::cuda_current_device();
                a->memory = qvg::cuda_allocate(std::max<size_t>(a->nbytes(), 4));
              }
              cc.read_device(layer, static_cast<float*>(k.memory.get()), static_cast<float*>(v.memory.get()), n);
            });
            return py::make_tuple(py::cast(std::move(k)), py::cast(std::move(v)));
          },
          py::arg("layer"),
          "read(layer) into device memory: K and V as float32 qvg.DeviceArray [heads, live tokens, dim] (the same "
          "bits read() returns; qvg and rtn spans are decoded on the device, keys rotated there).")
      .def(
          "save",
          [](const PyCache& c, const std::string& path) {
            c.run([&](const qvg::StreamingKVCache& cc) {
              cc.save(path);
              return 0;
            });
          },
          py::arg("path"), "Writes the whole cache (to a unique temporary file beside path, synced, then renamed over it).")
      .def_static(
          "load",
          [](const std::string& path, int threads, const std::string& device) {
            const qvg::CacheOptions o = make_options(threads, device, false);
            py::gil_scoped_release unlocked;
            return std::make_unique<PyCache>(qvg::StreamingKVCache::load(path, o));
          },
          py::arg("path"), py::kw_only(), py::arg("threads") = 0, py::arg("device") = "cpu",
          "Reads a cache written by save(), validating everything; raises ValueError naming the problem.")
      .def_property_readonly("layers", [](const PyCache& c) { return c.cache.config().layers; })
      .def_property_readonly("heads", [](const PyCache& c) { return c.cache.config().heads; })
      .def_property_readonly("dim", [](const PyCache& c) { return c.cache.config().dim; });
  bind_layer_queries<PyCache, qvg::StreamingKVCache>(cls);
}

}  // namespace qvg::python
