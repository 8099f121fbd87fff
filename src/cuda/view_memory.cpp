// view_memory.h: the driver's virtual memory calls, found through the
// runtime, and the split ranges built on them.
#include "cuda/view_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "qvg/common.h"

namespace qvg::cuda {

namespace {

/// The driver entry points the views use (all present since CUDA 10.2).
struct Driver {
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 access = nullptr;
  std::string missing;  // the first entry point not found, or empty
};

/// The CUDA version whose ABI of the entry points is asked for: 12.0 (each
/// of them has had one ABI since it appeared).
constexpr unsigned kDriverAbi = 12000;

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    auto get = [&](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
      const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, kDriverAbi, cudaEnableDefault, &q);
#else  // before CUDA 12.5: the toolkit's own ABI of each entry point (12.0's for every one named here)
      const cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &q);
#endif
      if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
        if (r.missing.empty())
          r.missing = std::string(name) + " (cudaGetDriverEntryPoint: " + cudaGetErrorString(e) +
                      ", query result " + std::to_string(static_cast<int>(q)) + ")";
        (void)cudaGetLastError();  // the lookup's error is reported by missing, not left for later calls
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuGetErrorString", r.error_string);
    get("cuDeviceGetAttribute", r.attribute);
    get("cuMemGetAllocationGranularity", r.granularity);
    get("cuMemCreate", r.create);
    get("cuMemRelease", r.release);
    get("cuMemAddressReserve", r.reserve);
    get("cuMemAddressFree", r.free);
    get("cuMemMap", r.map);
    get("cuMemUnmap", r.unmap);
    get("cuMemSetAccess", r.access);
    return r;
  }();
  return d;
}

/// driver(), or qvg::Error naming the missing entry point.
const Driver& checked_driver() {
  const Driver& d = driver();
  QVG_CHECK(d.missing.empty(), "CUDA virtual memory management: the driver entry point ", d.missing,
            " is not available");
  return d;
}

[[noreturn]] void driver_fail(const char* call, CUresult r, const char* file, int line) {
  const char* msg = nullptr;
  const Driver& d = driver();
  if (d.error_string == nullptr || d.error_string(r, &msg) != CUDA_SUCCESS || msg == nullptr) msg = "unknown error";
  detail::fail(call, "CUDA driver error in ", call, " at ", file, ":", line, ": ", static_cast<int>(r), ": ", msg);
}

/// Throws qvg::Error naming the driver call (e.g. "cuMemMap") when it fails.
#define QVG_CU_CHECK(name, expr)                                \
  do {                                                          \
    const CUresult qvg_cu_ = (expr);                            \
    if (qvg_cu_ != CUDA_SUCCESS) driver_fail(name, qvg_cu_, __FILE__, __LINE__); \
  } while (0)

/// The driver calls run in the device's primary context, the one the
/// runtime uses: made current on this thread by a runtime call on `device`.
void enter(int device) {
  int current = -1;
  QVG_CUDA_CHECK(cudaGetDevice(&current));
  QVG_CHECK(current == device, "CUDA virtual memory: the current device is ", current, ", the views are on device ",
            device, " (call from the device the cache was made on)");
  QVG_CUDA_CHECK(cudaFree(nullptr));  // initializes the primary context and makes it current
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}


}  // namespace

bool view_memory_supported(int device, std::string* why) {
  const Driver& d = driver();
  if (!d.missing.empty()) {
    if (why) *why = "the driver entry point " + d.missing + " is not available";
    return false;
  }
  int ok = 0;
  const CUresult r = d.attribute(&ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (r != CUDA_SUCCESS || ok == 0) {
    if (why)
      *why = r != CUDA_SUCCESS ? "cuDeviceGetAttribute failed (" + std::to_string(static_cast<int>(r)) + ")"
                               : "device " + std::to_string(device) + " does not support virtual memory management";
    return false;
  }
  return true;
}

size_t view_page_bytes(int device) {
  const Driver& d = checked_driver();
  const CUmemAllocationProp prop = device_prop(device);
  size_t g = 0;
  QVG_CU_CHECK("cuMemGetAllocationGranularity",
               d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  QVG_CHECK(g > 0, "cuMemGetAllocationGranularity: a granularity of 0");
  return g;
}

PhysicalPages::PhysicalPages(int device, size_t bytes) : bytes_(bytes) {
  const Driver& d = checked_driver();
  const size_t page = view_page_bytes(device);
  QVG_CHECK(bytes > 0 && bytes % page == 0, "PhysicalPages: ", bytes, " bytes is not a positive multiple of the ",
            page, "-byte page");
  enter(device);
  const CUmemAllocationProp prop = device_prop(device);
  CUmemGenericAllocationHandle h = 0;
  QVG_CU_CHECK("cuMemCreate", d.create(&h, bytes, &prop, 0));
  handle_ = h;
}

PhysicalPages::~PhysicalPages() {
  if (handle_ != 0) (void)driver().release(handle_);
}

SplitRange::SplitRange(int device) : device_(device) {}

SplitRange::~SplitRange() {
  const Driver& d = driver();
  if (!d.missing.empty()) return;  // nothing was ever mapped
  for (Range& r : ranges_) {
    for (const Mapping& m : r.maps) (void)d.unmap(m.ptr, m.bytes);
    (void)d.free(r.base, r.bytes);
  }
}

size_t SplitRange::reserved_bytes() const {
  size_t b = 0;
  for (const Range& r : ranges_) b += r.bytes;
  return b;
}

void SplitRange::reserve(size_t below, size_t above) {
  const Driver& d = checked_driver();
  const size_t page = view_page_bytes(device_);
  const size_t below_room = round_up_to_page(std::max(below, page), page),
               above_room = round_up_to_page(std::max(above, page), page);
  CUdeviceptr base = 0;
  QVG_CU_CHECK("cuMemAddressReserve", d.reserve(&base, below_room + above_room, page, 0, 0));
  ranges_.push_back(Range{static_cast<uint64_t>(base), below_room + above_room, {}});
  boundary_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base) + below_room);
  below_room_ = below_room;
  above_room_ = above_room;
  below_bytes_ = above_bytes_ = 0;
  below_mapped_ = above_mapped_ = 0;
}

void SplitRange::map_one(const PhysicalPages& p, uint64_t at) {
  const Driver& d = checked_driver();
  ranges_.back().maps.reserve(ranges_.back().maps.size() + 1);  // recording the mapping cannot throw below
  QVG_CU_CHECK("cuMemMap", d.map(static_cast<CUdeviceptr>(at), p.bytes(), 0, p.handle(), 0));
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult r = d.access(static_cast<CUdeviceptr>(at), p.bytes(), &access, 1);
  if (r != CUDA_SUCCESS) {
    (void)d.unmap(static_cast<CUdeviceptr>(at), p.bytes());  // as before the call
    driver_fail("cuMemSetAccess", r, __FILE__, __LINE__);
  }
  ranges_.back().maps.push_back(Mapping{at, p.bytes()});
}

void SplitRange::map(const PageList& below, const PageList& above) {
  checked_driver();
  enter(device_);
  QVG_CHECK(below.size() >= below_mapped_ && above.size() >= above_mapped_,
            "SplitRange::map: the lists lost allocations (they only grow)");
  size_t need_below = 0, need_above = 0;
  for (const auto& p : below) need_below += p->bytes();
  for (const auto& p : above) need_above += p->bytes();
  if (ranges_.empty() || need_below > below_room_ || need_above > above_room_)
    reserve(2 * need_below, 2 * need_above);  // the old range (if any) stays mapped: retired
  const uint64_t b = reinterpret_cast<uintptr_t>(boundary_);
  for (; below_mapped_ < below.size(); ++below_mapped_) {
    const PhysicalPages& p = *below[below_mapped_];
    map_one(p, b - below_bytes_ - p.bytes());
    below_bytes_ += p.bytes();
  }
  for (; above_mapped_ < above.size(); ++above_mapped_) {
    const PhysicalPages& p = *above[above_mapped_];
    map_one(p, b + above_bytes_);
    above_bytes_ += p.bytes();
  }
}

}  // namespace qvg::cuda
