// Conversions the module's bindings share: NumPy arrays to and from the
// library's [heads, tokens, dim] tensors (through its own conversion of stored
// tensors: qvg/io.h), argument parsing, byte reports as dicts.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>
#include <vector>

#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/io.h"
#include "qvg/metrics.h"

namespace qvg::python {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

inline qvg::TensorRole parse_role(const std::string& role) {
  if (role == "key") return qvg::TensorRole::key;
  if (role == "value") return qvg::TensorRole::value;
  throw qvg::Error("role must be \"key\" or \"value\", got \"" + role + "\"");
}

inline qvg::Backend parse_device(const std::string& device) {
  if (device == "cpu") return qvg::Backend::cpu;
  if (device == "cuda") return qvg::Backend::cuda;
  throw qvg::Error("device must be \"cpu\" or \"cuda\", got \"" + device + "\"");
}

/// Worker threads as the library takes them (0 = all cores); negative counts are refused.
inline int check_threads(int threads) {
  if (threads < 0) throw qvg::Error("threads must be >= 0 (0 = all cores), got " + std::to_string(threads));
  return threads;
}

/// A float array [A, B, D] or [1, A, B, D] in `layout` -> [heads, tokens, dim],
/// through the library's conversion of stored tensors (its checks and messages).
inline qvg::HeadTensor to_tensor(const FloatArray& a, qvg::KvLayout layout, const char* what) {
  qvg::RawTensorView t;
  t.dtype = qvg::DType::f32;
  t.shape.assign(a.shape(), a.shape() + a.ndim());
  t.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.data()), static_cast<size_t>(a.nbytes()));
  return qvg::to_head_tensor(t, layout, what);  // one pass from the array's memory
}

/// [heads, tokens, dim] -> a new float32 array [A, B, D] in `layout`.
inline py::array_t<float> to_array(const qvg::HeadTensor& x, qvg::KvLayout layout) {
  const qvg::RawTensor t = qvg::from_head_tensor(x, layout, qvg::DType::f32);
  py::array_t<float> out(std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()));
  if (!t.bytes.empty()) std::memcpy(out.mutable_data(), t.bytes.data(), t.bytes.size());
  return out;
}

/// A PartBytes as a dict of part name -> bytes.
inline py::dict part_bytes(const qvg::PartBytes& b) {
  py::dict d;
  for (const qvg::PartField& p : qvg::kPartFields) d[p.name] = b.*p.bytes;
  return d;
}

/// Error statistics as a dict: mse, rel_l2, snr_db, max_abs.
inline py::dict error_dict(const qvg::ErrorStats& s) {
  py::dict d;
  d["mse"] = s.mse;
  d["rel_l2"] = s.rel_l2;
  d["snr_db"] = s.snr_db;
  d["max_abs"] = s.max_abs;
  return d;
}

/// A cache config from the keyword arguments qvg.StreamingKVCache and
/// qvg.DeviceKVCache take (cache_bindings.cpp).
qvg::CacheConfig make_cache_config(int layers, int heads, int dim, const std::string& key, const std::string& value,
                                   int64_t chunk_tokens, int quant_factor, int keep_recent, int sink,
                                   int64_t window_chunks, int64_t window_tokens, const std::string& rope,
                                   double rope_theta, const std::string& rope_pairing, const std::string& tail,
                                   bool warm_start, int64_t first_head);
/// A span report, an append's report ({chunk, spans, evicted}) and a
/// layer's memory as dicts (cache_bindings.cpp).
py::dict span_dict(const qvg::SpanReport& r);
py::dict report_dict(const qvg::AppendReport& r);
py::dict memory_dict(const qvg::LayerMemory& m, const qvg::CacheConfig& c);

/// The streaming cache's bindings (cache_bindings.cpp).
void bind_cache(py::module_& m);

/// The configuration of spec's family chosen for a budget of `bits` bits per
/// value on spans of tokens x dim (qvg::choose_for_budget_any_format);
/// throws qvg::Error naming the family's cheapest when it cannot reach it
/// (budget_bindings.cpp).
qvg::CodecConfig budget_config(const std::string& spec, double bits, int64_t tokens, int64_t dim);

/// qvg.choose (budget_bindings.cpp).
void bind_budget(py::module_& m);

/// qvg.DeviceKVCache (device_cache_bindings.cpp).
void bind_device_cache(py::module_& m);

/// qvg.DeviceCodec and qvg.DeviceEncodedTensor (device_bindings.cpp).
void bind_device(py::module_& m);

}  // namespace qvg::python
