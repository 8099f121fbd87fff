// qvg.DeviceKVCache: the streaming cache with its state on a CUDA device
// (include/qvg/device_cache.h), fed and read through DLPack on the caller's
// stream. qvg.torch builds its PyTorch cache on it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "cache_queries.h"
#include "convert.h"
#include "dlpack.h"
#include "qvg/device_cache.h"

namespace qvg::python {

namespace {

using PositionArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

using PyDeviceCache = LockedCache<qvg::DeviceKVCache>;

/// A read destination: a contiguous CUDA tensor [heads, rows, dim] or [1, heads, rows, dim].
DeviceInput destination(const py::object& x, void* stream, const qvg::CacheConfig& c, const char* what) {
  const auto t = import_dlpack(x, what, dlpack_stream(stream));
  if (!t->on_cuda()) throw qvg::Error(std::string(what) + ": DeviceKVCache.read writes into a CUDA tensor");
  const DeviceInput d = device_input(*t, what);
  if (d.heads != c.heads || d.dim != c.dim)
    throw qvg::Error(std::string(what) + ": shape [" + std::to_string(d.heads) + ", " + std::to_string(d.tokens) +
                     ", " + std::to_string(d.dim) + "] does not fit the cache's [" + std::to_string(c.heads) +
                     ", rows, " + std::to_string(c.dim) + "]");
  return d;
}

}  // namespace

void bind_device_cache(py::module_& m) {
  py::class_<PyDeviceCache> cls(m, "DeviceKVCache",
                            "The streaming KV cache with its state on the current CUDA device: chunks appended from "
                            "CUDA tensors, the live K and V read into CUDA tensors, on the caller's stream "
                            "(qvg/device_cache.h; the PyTorch front end is qvg.torch).");
  cls.def(py::init([](int layers, int heads, int dim, const std::string& key, const std::string& value,
                       int64_t chunk_tokens, int quant_factor, int keep_recent, int sink, int64_t window_chunks,
                       int64_t window_tokens, const std::string& rope, double rope_theta,
                       const std::string& rope_pairing, bool warm_start, bool overlap_encode, int64_t first_head,
                       bool batch_encodes, bool contiguous_views) {
             return std::make_unique<PyDeviceCache>(
                 make_cache_config(layers, heads, dim, key, value, chunk_tokens, quant_factor, keep_recent, sink,
                                   window_chunks, window_tokens, rope, rope_theta, rope_pairing, "bf16", warm_start,
                                   first_head),
                 qvg::DeviceCacheOptions{.overlap_encode = overlap_encode, .batch_encodes = batch_encodes,
                                         .contiguous_views = contiguous_views});
           }),
           py::arg("layers"), py::arg("heads"), py::arg("dim"), py::kw_only(), py::arg("key") = "qvg",
           py::arg("value") = "qvg", py::arg("chunk_tokens") = 0, py::arg("quant_factor") = 8,
           py::arg("keep_recent") = 0, py::arg("sink") = 0, py::arg("window_chunks") = 0, py::arg("window_tokens") = 0,
           py::arg("rope") = "none", py::arg("rope_theta") = 10000.0, py::arg("rope_pairing") = "interleaved",
           py::arg("warm_start") = true, py::arg("overlap_encode") = false, py::arg("first_head") = 0,
           py::arg("batch_encodes") = false, py::arg("contiguous_views") = false,
           "The policy and codecs of qvg.StreamingKVCache (same arguments, first_head included); full-precision "
           "chunks held in BF16. "
           "overlap_encode: encode spans on a stream of the cache's own while the caller goes on; a span's "
           "chunks are read in BF16 until the layer's next append (qvg/device_cache.h). batch_encodes: spans are "
           "encoded together, every layer's at once, by flush() or the first append of a later chunk; until then "
           "their chunks are read in BF16. contiguous_views: view() hands out each layer's K and V as contiguous "
           "token-major BF16 rows that attention reads in place (CUDA virtual memory; rope \"none\" only).")
      .def(
          "append",
          [](PyDeviceCache& c, int layer, const py::object& k, const py::object& v, const std::string& layout,
             const std::optional<PositionArray>& positions, const std::optional<int64_t>& first, int64_t height,
             int64_t width, const py::object& stream) {
            void* s = stream_of(stream);
            const qvg::KvLayout l = qvg::parse_layout(layout);
            const auto kt = import_dlpack(k, "k", dlpack_stream(s)), vt = import_dlpack(v, "v", dlpack_stream(s));
            if (!kt->on_cuda() || !vt->on_cuda())
              throw qvg::Error("DeviceKVCache.append takes CUDA tensors (qvg.StreamingKVCache takes host arrays)");
            const qvg::DeviceChunkView kv = device_chunk(*kt, l, "k"), vv = device_chunk(*vt, l, "v");
            qvg::ChunkPositions pos;
            if (positions && first) throw qvg::Error("append: give positions or a grid (first=...), not both");
            if (positions) pos.host = std::span<const int32_t>(positions->data(), static_cast<size_t>(positions->size()));
            if (first) {
              if (*first < 0) throw qvg::Error("append: first must be >= 0, got " + std::to_string(*first));
              pos.first = *first;
              pos.height = height;
              pos.width = width;
            }
            return report_dict(c.run_mut([&](qvg::DeviceKVCache& cc) { return cc.append(layer, kv, vv, pos, s); }));
          },
          py::arg("layer"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("layout") = "htd",
          py::arg("positions") = py::none(), py::arg("first") = py::none(), py::arg("height") = 0,
          py::arg("width") = 0, py::arg("stream") = py::none(),
          "Adds one chunk (CUDA tensors, layout \"htd\" [heads, T, dim] or \"thd\" [T, heads, dim], a batch of 1 "
          "allowed in front, any strides with contiguous channels; float32, bfloat16 or float16) to a layer on "
          "`stream`. With RoPE on read: positions (host int32, as StreamingKVCache.append takes them) or a grid "
          "made on the device: first (first frame for rope \"3d\", with height and width of the latent grid; first "
          "position for \"1d\"). Returns {chunk, spans, evicted}; the cache is unchanged on an error.")
      .def(
          "read",
          [](const PyDeviceCache& c, int layer, const py::object& k_out, const py::object& v_out,
             const py::object& stream) {
            void* s = stream_of(stream);
            const qvg::CacheConfig& cfg = c.cache.config();
            const DeviceInput k = destination(k_out, s, cfg, "k_out"), v = destination(v_out, s, cfg, "v_out");
            if (k.type != v.type || k.tokens != v.tokens)
              throw qvg::Error("read: k_out and v_out must have the same dtype and shape");
            return c.run([&](const qvg::DeviceKVCache& cc) {
              return cc.read(layer, const_cast<void*>(k.data), const_cast<void*>(v.data), k.type, k.tokens, s);
            });
          },
          py::arg("layer"), py::arg("k_out"), py::arg("v_out"), py::kw_only(), py::arg("stream") = py::none(),
          "Writes the layer's live K and V into rows 0 .. n-1 of k_out and v_out (contiguous CUDA tensors [heads, "
          "rows, dim] or [1, heads, rows, dim], rows >= n, both bfloat16 or both float32) on `stream`, keys rotated "
          "with RoPE on read; returns n. No synchronization.")
      .def(
          "view",
          [](PyDeviceCache& c, int layer, int64_t extra, const py::object& stream) {
            void* s = stream_of(stream);
            const qvg::DeviceKVView w = c.run_mut([&](qvg::DeviceKVCache& cc) { return cc.view(layer, extra, s); });
            return py::make_tuple(reinterpret_cast<uintptr_t>(w.k), reinterpret_cast<uintptr_t>(w.v), w.rows,
                                  w.extra);
          },
          py::arg("layer"), py::kw_only(), py::arg("extra") = 0, py::arg("stream") = py::none(),
          "contiguous_views: (k address, v address, rows, extra): the layer's K and V as contiguous token-major "
          "BF16 [rows + extra, heads, dim] in device memory the cache owns (valid until its next call rewrites "
          "them; mapped until the cache is destroyed), rows of history then a slot of `extra` rows for the "
          "caller's chunk. Queued on `stream`.")
      .def(
          "append_extra",
          [](PyDeviceCache& c, int layer, int64_t tokens, const py::object& stream) {
            void* s = stream_of(stream);
            return report_dict(c.run_mut([&](qvg::DeviceKVCache& cc) { return cc.append_extra(layer, tokens, s); }));
          },
          py::arg("layer"), py::arg("tokens"), py::kw_only(), py::arg("stream") = py::none(),
          "contiguous_views: appends the first `tokens` rows of the slot of the layer's last view() (as the caller "
          "wrote them) as the layer's next chunk, without copying them. Returns {chunk, spans, evicted}.")
      .def_property_readonly("view_memory",
                             [](const PyDeviceCache& c) {
                               const qvg::ViewMemory m =
                                   c.run([](const qvg::DeviceKVCache& cc) { return cc.view_memory(); });
                               py::dict d;
                               d["own"] = m.own_bytes;
                               d["shared"] = m.shared_bytes;
                               d["reserved"] = m.reserved_bytes;
                               d["reservations"] = m.reservations;
                               return d;
                             })
      .def(
          "flush",
          [](PyDeviceCache& c, const py::object& stream) {
            void* s = stream_of(stream);
            c.run_mut([&](qvg::DeviceKVCache& cc) { cc.flush(s); });
          },
          py::kw_only(), py::arg("stream") = py::none(),
          "batch_encodes: encodes every pending span now (each wave's K of all layers in one batch, its V in "
          "another) on `stream`; a no-op without pending spans.")
      .def_property_readonly("pending_spans",
                             [](const PyDeviceCache& c) {
                               return c.run([](const qvg::DeviceKVCache& cc) { return cc.pending_spans(); });
                             })
      .def_property_readonly("scratch_bytes",
                             [](const PyDeviceCache& c) {
                               return c.run([](const qvg::DeviceKVCache& cc) { return cc.scratch_bytes(); });
                             })
      .def_property_readonly("layers", [](const PyDeviceCache& c) { return c.cache.config().layers; })
      .def_property_readonly("heads", [](const PyDeviceCache& c) { return c.cache.config().heads; })
      .def_property_readonly("dim", [](const PyDeviceCache& c) { return c.cache.config().dim; })
      .def_property_readonly("chunk_tokens", [](const PyDeviceCache& c) { return c.cache.config().chunk_tokens; })
      .def_property_readonly("rope", [](const PyDeviceCache& c) { return rope_mode_name(c.cache.config().rope.mode); })
      .def_property_readonly("key", [](const PyDeviceCache& c) { return codec_spec(c.cache.config().key); })
      .def_property_readonly("value", [](const PyDeviceCache& c) { return codec_spec(c.cache.config().value); })
      .def_property_readonly("device", [](const PyDeviceCache& c) { return c.cache.device(); });
  bind_layer_queries<PyDeviceCache, qvg::DeviceKVCache>(cls);
}

}  // namespace qvg::python
