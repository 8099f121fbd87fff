// DLPack in and out of the module: tensors of PyTorch, CuPy, JAX or NumPy
// (any object with __dlpack__ / __dlpack_device__) as encode inputs, and
// qvg.DeviceArray, a decode's output in device memory that those libraries
// take without a copy (torch.from_dlpack, cupy.from_dlpack, ...).
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qvg/cuda.h"
#include "qvg/device_cache.h"
#include "qvg/io.h"
#include "qvg/tensor.h"

namespace qvg::python {

namespace py = pybind11;

/// A tensor taken from a producer's capsule; the producer's deleter runs on
/// destruction.
class ImportedTensor {
 public:
  explicit ImportedTensor(DLManagedTensor* m) : m_(m) {}
  ~ImportedTensor() {
    if (m_ && m_->deleter) m_->deleter(m_);
  }
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  void adopt(DLManagedTensor* m) { m_ = m; }
  const DLTensor& tensor() const { return m_->dl_tensor; }
  /// In CUDA device memory (kDLCUDA, kDLCUDAManaged); else host memory.
  bool on_cuda() const;

 private:
  DLManagedTensor* m_;
};

/// Whether x is read through DLPack: it is not a NumPy array and has
/// __dlpack__.
bool is_dlpack(const py::handle& x);

/// x.__dlpack__() consumed (CUDA tensors: `stream` as DLPack numbers it, by
/// default 1, the legacy default stream, which the library's work is
/// ordered on; the producer orders the tensor's data before that stream).
/// qvg::Error for devices other than the CPU and CUDA.
std::unique_ptr<ImportedTensor> import_dlpack(const py::handle& x, const char* what, int64_t stream = 1);

/// A host tensor's values (float32, float16, bfloat16 as they are; float64
/// and integers converted to float32; any strides) as [heads, tokens, dim] from `layout`, through the library's
/// conversion of stored tensors (its shape checks and messages).
HeadTensor host_tensor(const ImportedTensor& t, KvLayout layout, const char* what);

/// A CUDA tensor as the library's device input: contiguous [heads, tokens,
/// dim] or [1, heads, tokens, dim] of float32, bfloat16 or float16 on the
/// current device; qvg::Error otherwise, naming what to change.
struct DeviceInput {
  const void* data = nullptr;
  DeviceElement type = DeviceElement::f32;
  int64_t heads = 0, tokens = 0, dim = 0;
};
DeviceInput device_input(const ImportedTensor& t, const char* what);

/// A contiguous CUDA tensor of bytes (uint8 or int8, any shape) on the
/// current device: its address and size; qvg::Error otherwise.
struct DeviceBytes {
  void* data = nullptr;
  int64_t bytes = 0;
};
DeviceBytes device_bytes(const ImportedTensor& t, const char* what);

/// A CUDA tensor [heads, tokens, dim] (layout htd) or [tokens, heads, dim]
/// (thd), optionally with a batch of 1 in front, any strides with the
/// channels contiguous, as a chunk for DeviceKVCache::append.
DeviceChunkView device_chunk(const ImportedTensor& t, KvLayout layout, const char* what);

/// The cudaStream_t of a Python stream argument (None: the legacy default;
/// an int as torch.cuda.current_stream().cuda_stream gives it).
void* stream_of(const py::object& s);
/// DLPack's number for the same stream (1: the legacy default stream; 0 is
/// not allowed there).
inline int64_t dlpack_stream(void* s) { return s ? static_cast<int64_t>(reinterpret_cast<intptr_t>(s)) : 1; }

/// A host input for the library: a NumPy array (any real dtype, converted to
/// float32; anything NumPy turns into one) or a host DLPack tensor, [A, B, D]
/// or [1, A, B, D] in `layout`. A CUDA tensor is a qvg::Error naming `where`
/// (what takes host tensors); anything else a TypeError.
HeadTensor host_input(const py::handle& x, KvLayout layout, const char* what, const char* where);

/// "float32" / "bfloat16" / "float16".
DeviceElement parse_element(const std::string& dtype);
const char* element_name(DeviceElement t);

/// A decode's output in the memory of a CUDA device, exported by __dlpack__.
struct DeviceArray {
  std::shared_ptr<void> memory;
  std::vector<int64_t> shape;
  DeviceElement type = DeviceElement::f32;
  int device = 0;
  int64_t numel() const;
  size_t nbytes() const;
};

/// Registers qvg.DeviceArray.
void bind_dlpack(py::module_& m);

}  // namespace qvg::python
