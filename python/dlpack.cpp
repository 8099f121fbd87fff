// DLPack import (encode inputs) and export (qvg.DeviceArray): see dlpack.h.
#include "dlpack.h"

#include <pybind11/numpy.h>

#include <cstring>

#include "convert.h"
#include "qvg/half.h"

namespace qvg::python {

namespace {

[[noreturn]] void fail(const std::string& message) { throw qvg::Error(message); }

std::string shape_text(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

/// How an element is read: as stored (float32, float16, bfloat16), or
/// converted to float32 (float64 and integers, as NumPy's float32 cast).
struct Element {
  DType dtype;  // what the library reads
  size_t size;  // bytes an element in the producer's memory
  enum { as_is, f64, sint, uint } conv;
};

Element element_of(const DLDataType& t, const char* what) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return {DType::f32, 4, Element::as_is};
    if (t.code == kDLFloat && t.bits == 16) return {DType::f16, 2, Element::as_is};
    if (t.code == kDLBfloat && t.bits == 16) return {DType::bf16, 2, Element::as_is};
    if (t.code == kDLFloat && t.bits == 64) return {DType::f32, 8, Element::f64};
    const bool int_bits = t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
    if (t.code == kDLInt && int_bits) return {DType::f32, t.bits / 8u, Element::sint};
    if (t.code == kDLUInt && int_bits) return {DType::f32, t.bits / 8u, Element::uint};
  }
  fail(std::string(what) + ": DLPack dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
       " bits, " + std::to_string(t.lanes) +
       " lanes) is not a real number type (float32, float16, bfloat16, "
       "float64 or an integer)");
}

/// "float64", "int32", "uint8", ... (the dtypes element_of takes).
std::string dtype_name(const DLDataType& t) {
  const char* kind = t.code == kDLFloat ? "float" : t.code == kDLBfloat ? "bfloat" : t.code == kDLInt ? "int" : "uint";
  return kind + std::to_string(t.bits);
}

/// An element converted to float32 (Element::f64, sint, uint).
float converted(const uint8_t* p, const Element& el) {
  if (el.conv == Element::f64) {
    double d;
    std::memcpy(&d, p, 8);
    return static_cast<float>(d);
  }
  uint64_t u = 0;
  std::memcpy(&u, p, el.size);  // little-endian
  if (el.conv == Element::uint) return static_cast<float>(u);
  const int shift = 64 - 8 * static_cast<int>(el.size);
  return static_cast<float>(static_cast<int64_t>(u << shift) >> shift);  // sign-extended
}

/// The element strides of t (row-major where the producer gives none).
std::vector<int64_t> strides_of(const DLTensor& t) {
  std::vector<int64_t> s(static_cast<size_t>(t.ndim));
  int64_t step = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    s[static_cast<size_t>(i)] = t.strides ? t.strides[i] : step;
    step *= t.shape[i];
  }
  return s;
}

/// Whether t is row-major and contiguous (the strides of size-1 dimensions
/// do not matter).
bool row_major(const DLTensor& t) {
  const std::vector<int64_t> st = strides_of(t);
  int64_t step = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && st[static_cast<size_t>(i)] != step) return false;
    step *= t.shape[i];
  }
  return true;
}

}  // namespace

bool ImportedTensor::on_cuda() const {
  const DLDeviceType d = m_->dl_tensor.device.device_type;
  return d == kDLCUDA || d == kDLCUDAManaged;
}

bool is_dlpack(const py::handle& x) { return !py::isinstance<py::array>(x) && py::hasattr(x, "__dlpack__"); }

std::unique_ptr<ImportedTensor> import_dlpack(const py::handle& x, const char* what, int64_t stream) {
  int device = kDLCPU;
  if (py::hasattr(x, "__dlpack_device__")) device = x.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>();
  const bool cuda = device == kDLCUDA || device == kDLCUDAManaged;
  if (!cuda && device != kDLCPU && device != kDLCUDAHost)
    fail(std::string(what) + ": DLPack device type " + std::to_string(device) +
         " is neither host memory nor CUDA (1, 2, 3 or 13)");
  // The stream the library's work is queued on (1: the legacy default
  // stream), for CUDA producers; host producers take no stream.
  const py::object cap = cuda ? x.attr("__dlpack__")(py::arg("stream") = stream) : x.attr("__dlpack__")();
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    fail(std::string(what) + ": __dlpack__ did not return an unused DLPack capsule");
  auto t = std::make_unique<ImportedTensor>(nullptr);  // allocated first: nothing can throw between taking and owning
  t->adopt(static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor")));
  PyCapsule_SetName(cap.ptr(), "used_dltensor");  // ours now: ImportedTensor calls its deleter
  if (t->tensor().ndim < 0 || t->tensor().ndim > 8)
    fail(std::string(what) + ": " + std::to_string(t->tensor().ndim) + " dimensions (a KV tensor has 3 or 4)");
  return t;
}

HeadTensor host_tensor(const ImportedTensor& it, KvLayout layout, const char* what) {
  const DLTensor& t = it.tensor();
  const Element el = element_of(t.dtype, what);
  RawTensor raw;
  raw.dtype = el.dtype;
  raw.shape.assign(t.shape, t.shape + t.ndim);
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] < 0 || __builtin_mul_overflow(n, t.shape[i], &n))
      fail(std::string(what) + ": shape " + shape_text(t) + " is negative or overflows");
  const auto* base = static_cast<const uint8_t*>(t.data) + t.byte_offset;
  if (el.conv == Element::as_is && row_major(t))  // read where it is, in one pass
    return to_head_tensor(RawTensorView{el.dtype, raw.shape, {base, static_cast<size_t>(n) * el.size}}, layout, what);
  const std::vector<int64_t> st = strides_of(t);
  const size_t out_size = el.conv == Element::as_is ? el.size : 4;
  raw.bytes.resize(static_cast<size_t>(n) * out_size);
  std::vector<int64_t> idx(static_cast<size_t>(t.ndim), 0);
  for (int64_t k = 0; k < n; ++k) {  // row-major order, any strides
    int64_t off = 0;
    for (int i = 0; i < t.ndim; ++i) off += idx[static_cast<size_t>(i)] * st[static_cast<size_t>(i)];
    const uint8_t* src = base + off * static_cast<int64_t>(el.size);
    uint8_t* dst = raw.bytes.data() + static_cast<size_t>(k) * out_size;
    if (el.conv == Element::as_is) {
      std::memcpy(dst, src, el.size);
    } else {
      const float f = converted(src, el);
      std::memcpy(dst, &f, 4);
    }
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (++idx[static_cast<size_t>(i)] < t.shape[i]) break;
      idx[static_cast<size_t>(i)] = 0;
    }
  }
  return to_head_tensor(raw, layout, what);
}

namespace {

/// A CUDA tensor's data, element type and device checked as the library's device input.
DeviceInput device_checked(const DLTensor& t, const char* what) {
  const std::string w = what;
  const Element el = element_of(t.dtype, what);
  if (el.conv != Element::as_is)
    fail(w + ": a " + dtype_name(t.dtype) + " CUDA tensor; convert it to float32, bfloat16 or float16 first");
  const int current = cuda_current_device();
  if (t.device.device_id != current)
    fail(w + ": the tensor is on cuda:" + std::to_string(t.device.device_id) +
         "; qvg runs on the current device, cuda:" + std::to_string(current));
  DeviceInput d;
  d.data = static_cast<const uint8_t*>(t.data) + t.byte_offset;
  d.type = el.dtype == DType::f32    ? DeviceElement::f32
           : el.dtype == DType::bf16 ? DeviceElement::bf16
                                     : DeviceElement::f16;
  return d;
}

}  // namespace

void* stream_of(const py::object& s) {
  if (s.is_none()) return nullptr;
  const auto v = s.cast<int64_t>();
  if (v < 0) throw qvg::Error("stream must be a CUDA stream handle (an int >= 0) or None, got " + std::to_string(v));
  return reinterpret_cast<void*>(static_cast<intptr_t>(v));
}

DeviceInput device_input(const ImportedTensor& it, const char* what) {
  const DLTensor& t = it.tensor();
  const std::string w = what;
  DeviceInput d = device_checked(t, what);
  const bool batch = t.ndim == 4 && t.shape[0] == 1;
  if (t.ndim != 3 && !batch)
    fail(w + ": expected a CUDA tensor [heads, tokens, dim] or [1, heads, tokens, dim], got shape " + shape_text(t));
  if (!row_major(t))
    fail(w + ": a CUDA tensor must be contiguous [heads, tokens, dim] (row-major); call .contiguous() first");
  const int o = batch ? 1 : 0;
  d.heads = t.shape[o];
  d.tokens = t.shape[o + 1];
  d.dim = t.shape[o + 2];
  return d;
}

DeviceBytes device_bytes(const ImportedTensor& it, const char* what) {
  const DLTensor& t = it.tensor();
  const std::string w = what;
  if ((t.dtype.code != kDLUInt && t.dtype.code != kDLInt) || t.dtype.bits != 8 || t.dtype.lanes != 1)
    fail(w + ": expected a CUDA tensor of bytes (uint8 or int8), got " + dtype_name(t.dtype));
  const int current = cuda_current_device();
  if (t.device.device_id != current)
    fail(w + ": the tensor is on cuda:" + std::to_string(t.device.device_id) +
         "; qvg runs on the current device, cuda:" + std::to_string(current));
  if (!row_major(t)) fail(w + ": the byte tensor must be contiguous; call .contiguous() first");
  DeviceBytes b;
  b.data = static_cast<uint8_t*>(t.data) + t.byte_offset;
  b.bytes = 1;
  for (int i = 0; i < t.ndim; ++i) b.bytes *= t.shape[i];
  return b;
}

DeviceChunkView device_chunk(const ImportedTensor& it, KvLayout layout, const char* what) {
  const DLTensor& t = it.tensor();
  const std::string w = what;
  const DeviceInput in = device_checked(t, what);
  const bool batch = t.ndim == 4 && t.shape[0] == 1;
  const char* names = layout == KvLayout::thd ? "[tokens, heads, dim] or [1, tokens, heads, dim]"
                                              : "[heads, tokens, dim] or [1, heads, tokens, dim]";
  if (t.ndim != 3 && !batch) fail(w + ": expected a CUDA tensor " + names + ", got shape " + shape_text(t));
  const std::vector<int64_t> st = strides_of(t);
  const int o = batch ? 1 : 0;
  if (st[static_cast<size_t>(o + 2)] != 1 && t.shape[o + 2] > 1)
    fail(w + ": the channel dimension must be contiguous (stride 1); call .contiguous() first");
  const int h = layout == KvLayout::thd ? o + 1 : o, n = layout == KvLayout::thd ? o : o + 1;
  DeviceChunkView v;
  v.data = in.data;
  v.type = in.type;
  v.heads = t.shape[h];
  v.tokens = t.shape[n];
  v.dim = t.shape[o + 2];
  v.head_stride = st[static_cast<size_t>(h)];
  v.token_stride = st[static_cast<size_t>(n)];
  return v;
}

HeadTensor host_input(const py::handle& x, KvLayout layout, const char* what, const char* where) {
  if (is_dlpack(x)) {
    const std::unique_ptr<ImportedTensor> t = import_dlpack(x, what);
    if (t->on_cuda())
      fail(std::string(what) + " is a CUDA tensor, and " + where + " takes host tensors (NumPy arrays, CPU tensors)");
    return host_tensor(*t, layout, what);
  }
  if (!py::isinstance<py::array>(x))
    throw py::type_error(std::string(what) + " must be a NumPy array or a tensor with __dlpack__ (PyTorch, CuPy, " +
                         "JAX), got " + std::string(py::str(py::type::of(x).attr("__name__"))));
  const py::dtype dt = py::reinterpret_borrow<py::array>(x).dtype();
  const char kind = dt.kind();
  // A complex array would be cast to float32 with its imaginary part dropped.
  if (kind == 'c')
    throw py::type_error(std::string(what) + " is a complex array (dtype " + std::string(py::str(static_cast<const py::handle&>(dt))) +
                         "); qvg encodes real tensors: pass its .real or .imag part");
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(std::string(what) + " must have a real number dtype (float or integer), got " +
                         std::string(py::str(static_cast<const py::handle&>(dt))) + " (complex, bool, string and object arrays are refused)");
  const FloatArray a = FloatArray::ensure(x);
  if (!a) throw py::type_error(std::string(what) + ": NumPy cannot convert it to float32");
  return to_tensor(a, layout, what);
}

DeviceElement parse_element(const std::string& dtype) {
  if (dtype == "float32") return DeviceElement::f32;
  if (dtype == "bfloat16") return DeviceElement::bf16;
  if (dtype == "float16") return DeviceElement::f16;
  fail("dtype must be \"float32\", \"bfloat16\" or \"float16\", got \"" + dtype + "\"");
}

const char* element_name(DeviceElement t) {
  return t == DeviceElement::f32 ? "float32" : t == DeviceElement::bf16 ? "bfloat16" : "float16";
}

int64_t DeviceArray::numel() const {
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  return n;
}

size_t DeviceArray::nbytes() const { return static_cast<size_t>(numel()) * element_bytes(type); }

namespace {

/// What a capsule of a DeviceArray owns: the tensor, its shape and strides,
/// and a reference to the memory.
struct Export {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  std::shared_ptr<void> memory;
};

py::capsule export_capsule(const DeviceArray& a) {
  auto owner = std::make_unique<Export>();
  Export* ex = owner.get();
  ex->shape = a.shape;
  ex->strides.resize(a.shape.size());
  int64_t step = 1;
  for (size_t i = a.shape.size(); i-- > 0;) {
    ex->strides[i] = step;
    step *= a.shape[i];
  }
  ex->memory = a.memory;
  DLTensor& t = ex->managed.dl_tensor;
  t.data = a.memory.get();
  t.device = DLDevice{kDLCUDA, a.device};
  t.ndim = static_cast<int32_t>(a.shape.size());
  t.dtype = a.type == DeviceElement::f32    ? DLDataType{kDLFloat, 32, 1}
            : a.type == DeviceElement::bf16 ? DLDataType{kDLBfloat, 16, 1}
                                            : DLDataType{kDLFloat, 16, 1};
  t.shape = ex->shape.data();
  t.strides = ex->strides.data();
  t.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
  PyObject* cap = PyCapsule_New(&ex->managed, "dltensor", [](PyObject* c) {
    if (PyCapsule_IsValid(c, "dltensor")) {  // never consumed: ours to free
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      m->deleter(m);
    }
  });
  if (!cap) throw py::error_already_set();
  owner.release();  // the capsule's (or its consumer's) now
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace

void bind_dlpack(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray",
                          "A decoded tensor in CUDA device memory (Codec.decode(..., output=\"cuda\")). Take it "
                          "without a copy with torch.from_dlpack, cupy.from_dlpack or jax.dlpack.from_dlpack.")
      .def(
          "__dlpack__",
          [](const DeviceArray& a, const py::object&, const py::kwargs& kw) {
            // The decode finished before the array was returned: its data is
            // ready on every stream, whichever the consumer names. A legacy
            // capsule whatever max_version asks (allowed by the standard).
            if (kw.contains("dl_device") && !kw["dl_device"].is_none()) {
              const auto d = kw["dl_device"].cast<py::tuple>();
              if (d.size() != 2 || d[0].cast<int>() != kDLCUDA || d[1].cast<int>() != a.device)
                throw py::buffer_error("qvg.DeviceArray: it is on cuda:" + std::to_string(a.device) +
                                       "; exporting to another device is not supported");
            }
            if (kw.contains("copy") && !kw["copy"].is_none() && kw["copy"].cast<bool>())
              throw py::buffer_error("qvg.DeviceArray: copy=True is not supported (it exports its own memory)");
            return export_capsule(a);
          },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const DeviceArray& a) { return py::make_tuple(static_cast<int>(kDLCUDA), a.device); })
      .def_property_readonly("shape",
                             [](const DeviceArray& a) {
                               py::tuple t(a.shape.size());
                               for (size_t i = 0; i < a.shape.size(); ++i) t[i] = a.shape[i];
                               return t;
                             })
      .def_property_readonly("dtype", [](const DeviceArray& a) { return std::string(element_name(a.type)); })
      .def_property_readonly("device", [](const DeviceArray& a) { return "cuda:" + std::to_string(a.device); })
      .def_property_readonly("nbytes", &DeviceArray::nbytes)
      .def(
          "numpy",
          [](const DeviceArray& a) -> py::object {
            const std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
            if (a.type == DeviceElement::f32) {
              py::array_t<float> out(shape);
              cuda_copy_to_host(out.mutable_data(), a.memory.get(), a.nbytes());
              return out;
            }
            std::vector<uint16_t> raw(static_cast<size_t>(a.numel()));
            cuda_copy_to_host(raw.data(), a.memory.get(), a.nbytes());
            if (a.type == DeviceElement::f16) {
              py::array out(py::dtype("float16"), shape);
              std::memcpy(out.mutable_data(), raw.data(), a.nbytes());
              return out;
            }
            py::array_t<float> out(shape);  // NumPy has no bfloat16: its values, widened (exactly)
            float* o = out.mutable_data();
            for (size_t i = 0; i < raw.size(); ++i) o[i] = bf16_to_float(raw[i]);
            return out;
          },
          "A host copy: float32 and float16 as they are, bfloat16 widened to float32 (exactly).")
      .def("__repr__", [](const DeviceArray& a) {
        std::string s = "<qvg.DeviceArray [";
        for (size_t i = 0; i < a.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(a.shape[i]);
        return s + "] " + element_name(a.type) + " on cuda:" + std::to_string(a.device) + ">";
      });
}

}  // namespace qvg::python
