// What the bindings of qvg.StreamingKVCache and qvg.DeviceKVCache share: the
// cache held with its lock, and the per-layer queries (live_chunks, the
// counters, memory), bound once for both cache types.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "convert.h"

namespace qvg::python {

/// A cache and its lock. The caches have one writer at a time, and their
/// methods run with the GIL released, so every call holds `mu` (taken after
/// the GIL is released and let go before it is taken back: no lock order to
/// deadlock on) while it touches the cache.
template <class Cache>
struct LockedCache {
  Cache cache;
  mutable std::mutex mu;
  template <class Arg, class... Rest>
    requires(!std::is_same_v<std::decay_t<Arg>, LockedCache>)  // not a copy: the lock is not copyable
  explicit LockedCache(Arg&& arg, Rest&&... rest) : cache(std::forward<Arg>(arg), std::forward<Rest>(rest)...) {}

  /// f(cache) without the GIL, under the lock; its result is plain C++.
  template <typename F>
  auto run(F&& f) const {
    py::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(mu);
    return f(cache);
  }
  template <typename F>
  auto run_mut(F&& f) {
    py::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(mu);
    return f(cache);
  }
};

template <class Py, class Cache>
void bind_layer_queries(py::class_<Py>& cls) {
  auto query = [](int64_t (Cache::*q)(int) const) {
    return [q](const Py& c, int layer) { return c.run([&](const Cache& cc) { return (cc.*q)(layer); }); };
  };
  cls.def(
         "live_chunks",
         [](const Py& c, int layer) {
           const auto live = c.run([&](const Cache& cc) { return cc.live_chunks(layer); });
           std::vector<int64_t> chunks, tokens;
           for (const auto& [index, n] : live) {
             chunks.push_back(index);
             tokens.push_back(n);
           }
           return py::make_tuple(chunks, tokens);
         },
         py::arg("layer"), "(indices of the live chunks, their token counts), in order; decodes nothing.")
      .def("chunks_appended", query(&Cache::chunks_appended), py::arg("layer"))
      .def("tokens_appended", query(&Cache::tokens_appended), py::arg("layer"))
      .def("live_tokens", query(&Cache::live_tokens), py::arg("layer"))
      .def("spans_encoded", query(&Cache::spans_encoded), py::arg("layer"))
      .def(
          "memory",
          [](const Py& c, std::optional<int> layer) {
            const qvg::LayerMemory mem =
                c.run([&](const Cache& cc) { return layer ? cc.layer_memory(*layer) : cc.memory().total; });
            return memory_dict(mem, c.cache.config());
          },
          py::arg("layer") = py::none(),
          "Exact bytes of one layer (or of all layers), by role and part, with token counts, the ratio to a "
          "BF16 cache and the bits per K/V value.");
}

}  // namespace qvg::python
