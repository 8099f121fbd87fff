// The extension of the Python package `qvg` (pybind11; python/qvg/__init__.py
// re-exports it): the codecs on NumPy arrays.
//   codec = qvg.Codec("qvg-pro")                 # any spec `qvg methods` lists
//   enc = codec.encode(k, role="key")            # float array [heads, tokens, dim]
//   k_hat = codec.decode(enc)                    # float32, same shape and layout
//   enc.bits_per_value, enc.part_bytes, qvg.compare(k, k_hat)
// A thin front end over include/qvg/: every check and every byte is the C++
// library's. qvg::Error becomes ValueError; encode and decode release the GIL.
// The streaming cache: cache_bindings.cpp. Reference: docs/PYTHON.md.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "convert.h"
#include "dlpack.h"
#include "qvg/budget.h"
#include "qvg/codec.h"
#include "qvg/config.h"
#include "qvg/cuda.h"
#include "qvg/metrics.h"
#include "qvg/serialize.h"

namespace py = pybind11;
using namespace qvg::python;

namespace {

/// A codec and the spec it was made from.
struct PyCodec {
  std::string spec;
  qvg::CodecConfig config;
  qvg::Backend backend;
  std::unique_ptr<qvg::Codec> codec;
};

py::dict parts(const qvg::EncodedTensor& e) {
  py::dict d;
  for (const qvg::PartField& p : qvg::kPartFields) {
    const std::vector<uint8_t>& v = e.*p.data;
    d[p.name] = py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  }
  return d;
}

/// The Python type name of o, for messages.
std::string type_name(const py::handle& o) { return py::str(py::type::of(o).attr("__name__")).cast<std::string>(); }

/// One size of a pickled shape: a Python int in [1, 2^63); wrong types raise
/// TypeError, values outside the range ValueError, each naming the shape.
int64_t state_size(const py::handle& v, const std::string& shape) {
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw py::type_error("EncodedTensor state: shape " + shape + " holds a " + type_name(v) + "; sizes are ints");
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0)
    throw qvg::Error("EncodedTensor state: shape " + shape + " holds a size outside the int64 range");
  if (x < 0) throw qvg::Error("EncodedTensor state: shape " + shape + " holds a negative size");
  if (x == 0) throw qvg::Error("EncodedTensor state: shape " + shape + " is empty (a size is 0)");
  return static_cast<int64_t>(x);
}

/// __setstate__: (spec, role, shape, parts) -> an EncodedTensor whose parts are
/// checked here, values included (qvg::check_encoded_tensor), so a damaged state
/// is refused when it is loaded rather than decoded to NaN.
qvg::EncodedTensor encoded_from_state(const py::tuple& t) {
  if (t.size() != 4) throw qvg::Error("EncodedTensor state: expected 4 fields, got " + std::to_string(t.size()));
  if (!py::isinstance<py::str>(t[0]))
    throw py::type_error("EncodedTensor state: the spec is a " + type_name(t[0]) + ", not a str");
  if (!py::isinstance<py::str>(t[1]))
    throw py::type_error("EncodedTensor state: the role is a " + type_name(t[1]) + ", not the str \"key\" or \"value\"");
  if (!py::isinstance<py::tuple>(t[2]) && !py::isinstance<py::list>(t[2]))
    throw py::type_error("EncodedTensor state: the shape is a " + type_name(t[2]) + ", not a tuple of 3 ints");
  if (!py::isinstance<py::dict>(t[3]))
    throw py::type_error("EncodedTensor state: the parts are a " + type_name(t[3]) + ", not a dict of bytes");
  qvg::EncodedTensor e;
  e.config = qvg::parse_codec_spec(t[0].cast<std::string>());
  e.role = parse_role(t[1].cast<std::string>());
  const py::sequence shape = t[2].cast<py::sequence>();
  const std::string shape_text = py::repr(t[2]).cast<std::string>();
  if (shape.size() != 3)
    throw qvg::Error("EncodedTensor state: shape " + shape_text + " has " + std::to_string(shape.size()) +
                     " sizes, not 3 (heads, tokens, dim)");
  e.heads = state_size(shape[0], shape_text);
  e.tokens = state_size(shape[1], shape_text);
  e.dim = state_size(shape[2], shape_text);
  qvg::validate(e.config, e.dim);
  const auto d = t[3].cast<py::dict>();
  for (const auto& [name, member, unused] : qvg::kPartFields) {
    if (!d.contains(name)) throw qvg::Error(std::string("EncodedTensor state: no part '") + name + "'");
    const py::object part = d[name];
    if (!py::isinstance<py::bytes>(part))
      throw py::type_error(std::string("EncodedTensor state: part '") + name + "' is a " + type_name(part) +
                           ", not bytes");
    const std::string b = part.cast<std::string>();
    (e.*member).assign(b.begin(), b.end());
  }
  {
    py::gil_scoped_release unlocked;
    qvg::check_encoded_tensor(e);
  }
  return e;
}

/// warnings.warn (UserWarning) when an encoding stores more bits per value
/// than qvg::bits_warning_limit allows its config. Needs the GIL.
void warn_bits(const qvg::CodecConfig& c, double bits_per_value, int64_t tokens) {
  const std::string w = qvg::bits_warning(c, bits_per_value, tokens);
  if (!w.empty() && PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1) != 0) throw py::error_already_set();
}

}  // namespace

PYBIND11_MODULE(_qvg, m) {
  m.doc() =
      "qvg: KV-cache compression for autoregressive video diffusion (Quant VideoGen), CPU reference "
      "and CUDA backend. See docs/PYTHON.md.";
  m.attr("__version__") = QVG_VERSION;
  py::register_exception<qvg::Error>(m, "Error", PyExc_ValueError);

  m.def("presets", &qvg::codec_presets, "The codec presets a spec may start with (\"qvg\", \"qvg-pro\", ...).");
  m.def(
      "describe", [](const std::string& spec) { return qvg::describe(qvg::parse_codec_spec(spec)); }, py::arg("spec"),
      "A spec's configuration in short: \"INT2 B64 fp8 S1 C256\".");
  m.def(
      "cuda_available",
      [] {
        std::string why;
        const bool ok = qvg::cuda_available(&why);
        return py::make_tuple(ok, why);
      },
      "(True, \"\") when the CUDA backend is built and a device is usable, else (False, reason).");
  m.def(
      "empty_cache", [] { return qvg::cuda_release_pool_memory(); },
      "Returns the unused memory of the current CUDA device's stream-ordered pool (where qvg's device caches "
      "and encodings live; qvg keeps freed memory for reuse) to the driver, as torch.cuda.empty_cache() does for "
      "PyTorch's; returns the bytes released (0 without CUDA). Call it after dropping a large cache when "
      "PyTorch needs the memory.");
  m.def(
      "compare",
      [](const py::object& ref, const py::object& rec, const std::string& layout) {
        const qvg::KvLayout l = qvg::parse_layout(layout);
        const qvg::HeadTensor a = host_input(ref, l, "ref", "compare"), b = host_input(rec, l, "rec", "compare");
        if (!a.same_shape(b)) throw qvg::Error("compare: ref and rec have different shapes");
        return error_dict(qvg::compare(a, b));
      },
      py::arg("ref"), py::arg("rec"), py::arg("layout") = "htd",
      "Errors of a reconstruction against its reference (accumulated in double): mse, rel_l2, snr_db, max_abs.");

  py::class_<qvg::EncodedTensor>(m, "EncodedTensor", "One encoded K or V tensor (docs/FORMAT.md).")
      .def_property_readonly("shape",
                             [](const qvg::EncodedTensor& e) { return py::make_tuple(e.heads, e.tokens, e.dim); })
      .def_property_readonly(
          "role",
          [](const qvg::EncodedTensor& e) { return std::string(e.role == qvg::TensorRole::key ? "key" : "value"); })
      .def_property_readonly("bits_per_value", &qvg::EncodedTensor::bits_per_value,
                             "Stored bits per value, every byte of every part counted.")
      .def_property_readonly("ratio_to_bf16", &qvg::EncodedTensor::ratio_to_bf16, "BF16 size / encoded size.")
      .def_property_readonly("nbytes", [](const qvg::EncodedTensor& e) { return e.bytes().total(); })
      .def_property_readonly(
          "part_bytes", [](const qvg::EncodedTensor& e) { return part_bytes(e.bytes()); }, "Bytes of each part.")
      .def_property_readonly("parts", &parts, "Each part's bytes, laid out as docs/FORMAT.md describes.")
      .def_property_readonly(
          "spec", [](const qvg::EncodedTensor& e) { return qvg::codec_spec(e.config); },
          "The configuration it was encoded with, as a full spec (a cache span's C may be clamped).")
      .def(py::pickle(
          [](const qvg::EncodedTensor& e) {  // (spec, role, shape, parts in FORMAT.md order)
            return py::make_tuple(qvg::codec_spec(e.config), e.role == qvg::TensorRole::key ? "key" : "value",
                                  py::make_tuple(e.heads, e.tokens, e.dim), parts(e));
          },
          &encoded_from_state))
      .def(
          "to_bytes",
          [](const qvg::EncodedTensor& e) {
            const std::vector<uint8_t> b = qvg::serialize_encoded(e);
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          "The tensor as an encoded tensor record (docs/FORMAT.md): the pickled state's fields and parts, as C++'s "
          "qvg::serialize_encoded writes them and qvg::deserialize_encoded reads them.")
      .def_static(
          "from_bytes",
          [](const py::bytes& data) {
            const std::string_view b = data;
            py::gil_scoped_release unlocked;
            return qvg::deserialize_encoded(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
          },
          py::arg("data"),
          "An EncodedTensor from an encoded tensor record (to_bytes, or C++'s qvg::serialize_encoded), checked as "
          "unpickling checks a state; a damaged record raises ValueError naming the problem.")
      .def("__repr__", [](const qvg::EncodedTensor& e) {
        return "<qvg.EncodedTensor " + qvg::describe(e.config) + " [" + std::to_string(e.heads) + ", " +
               std::to_string(e.tokens) + ", " + std::to_string(e.dim) + "] " +
               std::to_string(e.bits_per_value()).substr(0, 5) + " bits/value>";
      });

  bind_cache(m);
  bind_dlpack(m);
  bind_device(m);
  bind_device_cache(m);
  bind_budget(m);

  py::class_<PyCodec>(m, "Codec", "A compression method, made from a spec such as \"qvg\" or \"qvg-pro:iters=5\".")
      .def(py::init([](const std::string& spec, const std::string& device, py::object bits, py::object tokens,
                       py::object dim) {
             auto c = std::make_unique<PyCodec>();
             c->spec = spec;
             c->config = qvg::parse_codec_spec(spec);
             if (!bits.is_none()) {
               if (tokens.is_none() || dim.is_none())
                 throw qvg::Error("qvg.Codec: bits= needs the span's shape: tokens= and dim=");
               c->config = budget_config(spec, bits.cast<double>(), tokens.cast<int64_t>(), dim.cast<int64_t>());
               c->spec = qvg::codec_spec(c->config);
             } else if (!tokens.is_none() || !dim.is_none()) {
               throw qvg::Error("qvg.Codec: tokens= and dim= go with bits= (a budget of bits per value)");
             }
             c->backend = parse_device(device);
             c->codec = qvg::make_codec(c->config, c->backend);
             return c;
           }),
           py::arg("spec"), py::arg("device") = "cpu", py::kw_only(), py::arg("bits") = py::none(),
           py::arg("tokens") = py::none(), py::arg("dim") = py::none(),
           "A codec for spec (\"qvg\", \"qvg-pro:iters=5\", ...). With bits=, tokens= and dim=: the "
           "configuration of spec's family with the lowest expected error within that many bits per value on "
           "spans of that shape (qvg.choose); .spec is then the chosen configuration's canonical spec. "
           "ValueError when the family cannot reach the budget.")
      .def_readonly("spec", &PyCodec::spec)
      .def_property_readonly(
          "device", [](const PyCodec& c) { return std::string(c.backend == qvg::Backend::cpu ? "cpu" : "cuda"); })
      .def_property_readonly("description", [](const PyCodec& c) { return qvg::describe(c.config); })
      .def(
          "encode",
          [](const PyCodec& c, const py::object& x, const std::string& role, const std::string& layout, int threads,
             const qvg::EncodedTensor* warm_start) {
            const qvg::KvLayout l = qvg::parse_layout(layout);
            qvg::EncodeOptions opt;
            opt.role = parse_role(role);
            opt.threads = check_threads(threads);
            opt.warm_start = warm_start;
            // Declared before the GIL is let go: the producer's deleter runs with it held.
            const std::unique_ptr<ImportedTensor> t = is_dlpack(x) ? import_dlpack(x, "x") : nullptr;
            if (t && t->on_cuda()) {  // read where it is (kivi, quarot, fp8, bf16: copied for their CPU encode)
              if (c.backend != qvg::Backend::cuda)
                throw qvg::Error("x is a CUDA tensor: encode it with qvg.Codec(spec, device=\"cuda\")");
              if (l != qvg::KvLayout::htd)
                throw qvg::Error(
                    "layout=\"thd\" with a CUDA tensor: pass it as [heads, tokens, dim] "
                    "(x.transpose(0, 1).contiguous())");
              const DeviceInput d = device_input(*t, "x");
              qvg::EncodedTensor enc;
              {
                py::gil_scoped_release unlocked;
                enc = qvg::cuda_encode_device(c.config, d.data, d.type, d.heads, d.tokens, d.dim, opt);
              }
              warn_bits(c.config, enc.bits_per_value(), d.tokens);
              return enc;
            }
            const qvg::HeadTensor h = t ? host_tensor(*t, l, "x") : host_input(x, l, "x", "encode");
            qvg::EncodedTensor enc;
            {
              py::gil_scoped_release unlocked;
              enc = c.codec->encode(h, opt);
            }
            warn_bits(c.config, enc.bits_per_value(), h.tokens);
            return enc;
          },
          py::arg("x"), py::arg("role") = "key", py::arg("layout") = "htd", py::arg("threads") = 0,
          py::arg("warm_start") = nullptr,
          "Encodes a finite tensor [heads, tokens, dim] (layout=\"thd\": [tokens, heads, dim]), or the "
          "same with a leading batch of 1: a NumPy array of any real dtype (converted to float32 first), or any "
          "object with __dlpack__ (PyTorch, CuPy, JAX; any real dtype). A CUDA tensor (contiguous [heads, tokens, "
          "dim] of float32, bfloat16 or float16; codec on device=\"cuda\") is read in device memory: qvg and rtn "
          "encode it there, kivi, quarot, fp8 and bf16 copy it to the host for their CPU encode. warm_start: an earlier "
          "EncodedTensor of the same codec and dim whose centroids start k-means. "
          "The result does not depend on threads.")
      .def(
          "decode",
          [](const PyCodec& c, const qvg::EncodedTensor& e, const std::string& layout, int threads,
             const std::string& output, const std::string& dtype) -> py::object {
            const qvg::KvLayout l = qvg::parse_layout(layout);
            check_threads(threads);
            if (output == "cuda") {
              if (e.config.method != c.config.method)
                throw qvg::Error(std::string("decoding a ") + qvg::method_name(e.config.method) + " tensor with a " +
                                 qvg::method_name(c.config.method) + " codec");
              if (l != qvg::KvLayout::htd)
                throw qvg::Error("output=\"cuda\" decodes to [heads, tokens, dim] only (layout=\"htd\")");
              std::string why;
              if (!qvg::cuda_available(&why)) throw qvg::Error("output=\"cuda\": " + why);
              DeviceArray a;
              a.type = parse_element(dtype);
              a.shape = {e.heads, e.tokens, e.dim};
              a.device = qvg::cuda_current_device();
              {
                py::gil_scoped_release unlocked;
                a.memory = qvg::cuda_allocate(a.nbytes());
                qvg::cuda_decode_device(e, a.memory.get(), a.type);
              }
              return py::cast(std::move(a));
            }
            if (output != "numpy") throw qvg::Error("output must be \"numpy\" or \"cuda\", got \"" + output + "\"");
            if (dtype != "float32")
              throw qvg::Error("output=\"numpy\" decodes to float32 only, got dtype=\"" + dtype + "\"");
            qvg::HeadTensor out;
            {
              py::gil_scoped_release unlocked;
              c.codec->decode(e, out, threads);
            }
            return to_array(out, l);
          },
          py::arg("encoded"), py::arg("layout") = "htd", py::arg("threads") = 0, py::arg("output") = "numpy",
          py::arg("dtype") = "float32",
          "The reconstruction of an EncodedTensor: a float32 NumPy array in the given layout, or with "
          "output=\"cuda\" a qvg.DeviceArray [heads, tokens, dim] of dtype (\"float32\", \"bfloat16\", "
          "\"float16\") in device memory, which torch.from_dlpack and the like take without a copy. Either way the "
          "values are the CPU decode's (16-bit types: rounded to nearest even).")
      .def("__repr__", [](const PyCodec& c) {
        return "<qvg.Codec \"" + c.spec + "\" (" + qvg::describe(c.config) + ") on " +
               (c.backend == qvg::Backend::cpu ? "cpu" : "cuda") + ">";
      });
}
