// qvg.DeviceCodec and qvg.DeviceEncodedTensor: encoded tensors that stay in
// CUDA memory, encode and decode on the caller's stream
// (include/qvg/device_codec.h). Streams are integers as
// torch.cuda.current_stream().cuda_stream gives them (None or 0: the legacy
// default stream); tensors come in through DLPack with that stream, so the
// producer orders them before the library's work.
#include <pybind11/pybind11.h>

#include <string>

#include "convert.h"
#include "dlpack.h"
#include "qvg/device_codec.h"
#include "qvg/methods.h"

namespace qvg::python {

namespace {

TensorRole role_of(const std::string& r) {
  if (r == "key") return TensorRole::key;
  if (r == "value") return TensorRole::value;
  throw qvg::Error("role must be \"key\" or \"value\", got \"" + r + "\"");
}

}  // namespace

void bind_device(py::module_& m) {
  py::class_<DeviceEncodedTensor>(m, "DeviceEncodedTensor",
                                  "An encoded K or V tensor whose parts stay in CUDA memory (DeviceCodec.encode). "
                                  "to_host() gives the EncodedTensor (pickling, files); DeviceEncodedTensor.from_host "
                                  "uploads one.")
      .def_property_readonly("spec", [](const DeviceEncodedTensor& e) { return codec_spec(e.config()); })
      .def_property_readonly("shape",
                             [](const DeviceEncodedTensor& e) { return py::make_tuple(e.heads(), e.tokens(), e.dim()); })
      .def_property_readonly("role", [](const DeviceEncodedTensor& e) {
        return std::string(e.role() == TensorRole::key ? "key" : "value");
      })
      .def_property_readonly("device", [](const DeviceEncodedTensor& e) { return "cuda:" + std::to_string(e.device()); })
      .def_property_readonly("nbytes", [](const DeviceEncodedTensor& e) { return e.bytes().total(); })
      .def_property_readonly("part_bytes", [](const DeviceEncodedTensor& e) { return part_bytes(e.bytes()); })
      .def_property_readonly("bits_per_value", &DeviceEncodedTensor::bits_per_value)
      .def(
          "to_host",
          [](const DeviceEncodedTensor& e, const py::object& stream) {
            void* s = stream_of(stream);
            py::gil_scoped_release unlocked;
            return e.to_host(s);
          },
          py::arg("stream") = py::none(), "The host EncodedTensor: the parts copied back (waits for the stream).")
      .def_static(
          "from_host",
          [](const EncodedTensor& e, const py::object& stream) {
            void* s = stream_of(stream);
            py::gil_scoped_release unlocked;
            return DeviceEncodedTensor::from_host(e, s);
          },
          py::arg("encoded"), py::arg("stream") = py::none(),
          "An EncodedTensor's parts on the current device, checked as the decoders check them.")
      .def(
          "pack",
          [](const DeviceEncodedTensor& e, const py::object& out, const py::object& stream) {
            void* s = stream_of(stream);
            const auto t = import_dlpack(out, "out", dlpack_stream(s));
            if (!t->on_cuda()) throw qvg::Error("out: pack writes into a CUDA tensor of bytes");
            const DeviceBytes b = device_bytes(*t, "out");
            const auto need = static_cast<int64_t>(e.bytes().total());
            if (b.bytes != need)
              throw qvg::Error("out: holds " + std::to_string(b.bytes) + " bytes; the packed tensor is nbytes = " +
                               std::to_string(need));
            py::gil_scoped_release unlocked;
            e.pack(b.data, s);
            return out;
          },
          py::arg("out"), py::arg("stream") = py::none(),
          "Every part into `out` (a contiguous uint8 CUDA tensor of nbytes bytes), one after the other: one "
          "message to send to another device (torch.distributed / NCCL); DeviceEncodedTensor.unpack rebuilds "
          "it from the bytes, spec, role and shape. qvg and rtn. Returns out; stream-ordered.")
      .def_static(
          "unpack",
          [](const py::object& packed, const std::string& spec, const std::string& role, const py::tuple& shape,
             const py::object& stream) {
            void* s = stream_of(stream);
            const auto t = import_dlpack(packed, "packed", dlpack_stream(s));
            if (!t->on_cuda()) throw qvg::Error("packed: unpack reads a CUDA tensor of bytes");
            const DeviceBytes b = device_bytes(*t, "packed");
            if (shape.size() != 3) throw qvg::Error("shape must be (heads, tokens, dim)");
            const CodecConfig c = parse_codec_spec(spec);
            const TensorRole r = role_of(role);
            const auto h = shape[0].cast<int64_t>(), n = shape[1].cast<int64_t>(), d = shape[2].cast<int64_t>();
            if (h < 1 || n < 1 || d < 1) throw qvg::Error("shape: every size must be >= 1");
            const auto need = static_cast<int64_t>(
                expected_part_bytes(c.auto_centroids ? span_config(c, n) : c, r, h, n, d).total());
            if (b.bytes != need)
              throw qvg::Error("packed: holds " + std::to_string(b.bytes) + " bytes; " + spec + " [" +
                               std::to_string(h) + ", " + std::to_string(n) + ", " + std::to_string(d) + "] packs " +
                               std::to_string(need));
            py::gil_scoped_release unlocked;
            return DeviceEncodedTensor::unpack(c, r, h, n, d, b.data, s);
          },
          py::arg("packed"), py::arg("spec"), py::arg("role"), py::arg("shape"), py::arg("stream") = py::none(),
          "pack()'s inverse: the tensor whose parts are the bytes of `packed` (a contiguous uint8 CUDA tensor "
          "on the current device, as pack wrote it), for the encoded tensor's spec, role and shape. The bytes "
          "are trusted (from_host checks parts; this does not read them back).")
      .def("__repr__", [](const DeviceEncodedTensor& e) {
        return "<qvg.DeviceEncodedTensor " + codec_spec(e.config()) + " [" + std::to_string(e.heads()) + ", " +
               std::to_string(e.tokens()) + ", " + std::to_string(e.dim()) + "] on cuda:" +
               std::to_string(e.device()) + ", " + std::to_string(e.bits_per_value()) + " bits/value>";
      });

  py::class_<DeviceCodec>(m, "DeviceCodec",
                          "A codec on the current CUDA device whose encodings stay there; its work runs on the "
                          "caller's stream without host synchronization (qvg/device_codec.h).")
      .def(py::init([](const std::string& spec) { return DeviceCodec(parse_codec_spec(spec)); }), py::arg("spec"))
      .def_property_readonly("spec", [](const DeviceCodec& c) { return codec_spec(c.config()); })
      .def_property_readonly(
          "group_quantized", [](const DeviceCodec& c) { return method_traits(c.config().method).group_quantized; },
          "Whether its encodings are in the group-quantized format (qvg, rtn): the ones decode_rows reads and "
          "DeviceEncodedTensor.pack packs (the method table's flag).")
      .def_property_readonly(
          "clustered", [](const DeviceCodec& c) { return method_traits(c.config().method).clustered; },
          "Whether it runs k-means stages (qvg), so that an encode may warm-start from an earlier encoding "
          "(the method table's flag).")
      .def(
          "encode",
          [](const DeviceCodec& c, const py::object& x, const std::string& role, const py::object& stream,
             const DeviceEncodedTensor* warm_start) {
            void* s = stream_of(stream);
            const auto t = import_dlpack(x, "x", dlpack_stream(s));
            if (!t->on_cuda()) throw qvg::Error("x: DeviceCodec.encode takes a CUDA tensor (use Codec for host arrays)");
            const DeviceInput in = device_input(*t, "x");
            const TensorRole r = role_of(role);
            py::gil_scoped_release unlocked;
            return c.encode(in.data, in.type, in.heads, in.tokens, in.dim, r, s, warm_start);
          },
          py::arg("x"), py::arg("role") = "key", py::arg("stream") = py::none(), py::arg("warm_start") = nullptr,
          "Encode a contiguous CUDA tensor [heads, tokens, dim] or [1, heads, tokens, dim] (float32, bfloat16 or "
          "float16) on `stream`. qvg / rtn encode on the device: each head's k-means stops by the CPU reference's "
          "rule (relative drop <= tol, or max_iter), decided on the device; kivi, quarot, fp8 and bf16 encode on "
          "the host. warm_start: an earlier DeviceEncodedTensor of this codec whose centroids start k-means.")
      .def(
          "decode",
          [](const DeviceCodec& c, const DeviceEncodedTensor& e, const py::object& out, const py::object& stream,
             const std::string& dtype) -> py::object {
            void* s = stream_of(stream);
            if (out.is_none()) {  // a new qvg.DeviceArray, ready when returned
              DeviceArray a;
              a.type = parse_element(dtype);
              a.shape = {e.heads(), e.tokens(), e.dim()};
              a.device = e.device();
              {
                py::gil_scoped_release unlocked;
                a.memory = cuda_allocate_async(a.nbytes(), s);
                c.decode(e, a.memory.get(), a.type, s);
                cuda_synchronize(s);
              }
              return py::cast(std::move(a));
            }
            const auto t = import_dlpack(out, "out", dlpack_stream(s));
            if (!t->on_cuda()) throw qvg::Error("out: DeviceCodec.decode writes into a CUDA tensor");
            const DeviceInput o = device_input(*t, "out");
            if (o.heads != e.heads() || o.tokens != e.tokens() || o.dim != e.dim())
              throw qvg::Error("out: shape [" + std::to_string(o.heads) + ", " + std::to_string(o.tokens) + ", " +
                               std::to_string(o.dim) + "] does not match the encoded tensor's [" +
                               std::to_string(e.heads()) + ", " + std::to_string(e.tokens()) + ", " +
                               std::to_string(e.dim()) + "]");
            {
              py::gil_scoped_release unlocked;
              c.decode(e, const_cast<void*>(o.data), o.type, s);
            }
            return out;
          },
          py::arg("encoded"), py::arg("out") = py::none(), py::arg("stream") = py::none(),
          py::arg("dtype") = "bfloat16",
          "Decode on `stream`. out: a contiguous CUDA tensor of the encoded shape (float32, bfloat16 or float16), "
          "written in place with no allocation or synchronization, and returned. Without out: a new "
          "qvg.DeviceArray of dtype, returned once the decode is done.")
      .def(
          "decode_rows",
          [](const DeviceCodec& c, const DeviceEncodedTensor& e, const py::object& out, int64_t out_offset,
             int64_t begin, int64_t count, const py::object& stream) -> py::object {
            void* s = stream_of(stream);
            const auto t = import_dlpack(out, "out", dlpack_stream(s));
            if (!t->on_cuda()) throw qvg::Error("out: DeviceCodec.decode_rows writes into a CUDA tensor");
            const DeviceInput o = device_input(*t, "out");
            if (o.heads != e.heads() || o.dim != e.dim())
              throw qvg::Error("out: shape [" + std::to_string(o.heads) + ", " + std::to_string(o.tokens) + ", " +
                               std::to_string(o.dim) + "] does not fit the encoded tensor's [" +
                               std::to_string(e.heads()) + ", rows, " + std::to_string(e.dim()) + "]");
            const int64_t n = count < 0 ? e.tokens() - begin : count;
            if (out_offset < 0 || out_offset + n > o.tokens)
              throw qvg::Error("out: rows [" + std::to_string(out_offset) + ", " + std::to_string(out_offset + n) +
                               ") do not fit its " + std::to_string(o.tokens) + " rows");
            {
              py::gil_scoped_release unlocked;
              c.decode_rows(e, const_cast<void*>(o.data), o.type, o.tokens, out_offset, s, begin, count);
            }
            return out;
          },
          py::arg("encoded"), py::arg("out"), py::kw_only(), py::arg("out_offset") = 0, py::arg("begin") = 0,
          py::arg("count") = -1, py::arg("stream") = py::none(),
          "qvg and rtn: decode tokens [begin, begin + count) of `encoded` (count < 0: to the end) into token rows "
          "[out_offset, out_offset + count) of out, a contiguous CUDA tensor [heads, rows, dim] or [1, heads, rows, "
          "dim] (float32, bfloat16 or float16), on `stream`; returns out. Other methods decode whole tensors only "
          "(qvg.Error).")
      .def("__repr__", [](const DeviceCodec& c) { return "<qvg.DeviceCodec " + codec_spec(c.config()) + ">"; });
}

}  // namespace qvg::python
