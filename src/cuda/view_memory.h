// Contiguous views over memory that several address ranges share, through
// CUDA's virtual memory management (cuMemCreate, cuMemAddressReserve,
// cuMemMap, cuMemSetAccess). The driver's entry points come from the
// runtime (cudaGetDriverEntryPointByVersion): qvg does not link libcuda.
//
// What DeviceKVCache's zero-copy views (DeviceCacheOptions::contiguous_views)
// are made of: per layer and role (K, V) one range of addresses split at a
// page-aligned boundary,
//
//     [ ... shared pages | own pages ... ]
//                        ^ boundary
//
// where the shared pages (one set per role, mapped into every layer's range)
// end at the boundary and the layer's own pages start there. Rows written
// just below the boundary through one layer's range are the rows just below
// the boundary of every other layer's range (the same physical memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qvg::cuda {

/// Whether `device` supports virtual memory management (false, with *why
/// set, where it does not or the driver's entry points are missing).
bool view_memory_supported(int device, std::string* why = nullptr);

/// The size, in bytes, that physical allocations and address ranges on
/// `device` are multiples of (the minimum granularity, usually 2 MiB).
size_t view_page_bytes(int device);

/// x bytes rounded up to a multiple of page.
inline size_t round_up_to_page(size_t x, size_t page) { return (x + page - 1) / page * page; }

/// One physical allocation of device memory (cuMemCreate), pinned to
/// `device`; released (cuMemRelease) on destruction: the memory goes once
/// every range that maps it has unmapped it too.
class PhysicalPages {
 public:
  /// bytes: a positive multiple of view_page_bytes(device).
  PhysicalPages(int device, size_t bytes);
  ~PhysicalPages();
  PhysicalPages(const PhysicalPages&) = delete;
  PhysicalPages& operator=(const PhysicalPages&) = delete;
  size_t bytes() const { return bytes_; }
  unsigned long long handle() const { return handle_; }

 private:
  unsigned long long handle_ = 0;
  size_t bytes_ = 0;
};

using PageList = std::vector<std::shared_ptr<PhysicalPages>>;

/// A range of device addresses split at a page-aligned boundary: `below`
/// allocations mapped under it (below[0] ends at the boundary, below[i + 1]
/// ends where below[i] starts), `above` allocations over it (above[0]
/// starts at the boundary, above[i + 1] where above[i] ends), all read and
/// written by `device`.
class SplitRange {
 public:
  explicit SplitRange(int device);
  /// Unmaps and frees every reservation, retired ones included. The caller
  /// has made sure no work on the device uses the addresses any more.
  ~SplitRange();
  SplitRange(const SplitRange&) = delete;
  SplitRange& operator=(const SplitRange&) = delete;

  /// Maps what is not mapped yet: both lists hold the allocations of the
  /// previous call in the same order, perhaps followed by more. When they
  /// outgrow the reserved room on either side, a larger range is reserved
  /// (twice what they need on each side) and everything is mapped there;
  /// the old range stays mapped (addresses handed out earlier stay valid,
  /// over the same memory) until destruction. qvg::Error naming the driver
  /// call that failed; on an error the range is as before the call or holds
  /// more mappings of the same lists (a later call completes them).
  void map(const PageList& below, const PageList& above);

  /// The boundary in the current reservation (null before the first map()).
  uint8_t* boundary() const { return boundary_; }
  /// Bytes mapped below and above the boundary in the current reservation.
  size_t below_bytes() const { return below_bytes_; }
  size_t above_bytes() const { return above_bytes_; }
  /// Address space reserved, retired reservations included (no memory).
  size_t reserved_bytes() const;
  /// Reservations made (1 after the first map(); more each time the lists
  /// outgrew the range).
  int reservations() const { return static_cast<int>(ranges_.size()); }

 private:
  struct Mapping {
    uint64_t ptr = 0;
    size_t bytes = 0;
  };
  struct Range {
    uint64_t base = 0;
    size_t bytes = 0;
    std::vector<Mapping> maps;
  };
  void reserve(size_t below, size_t above);
  void map_one(const PhysicalPages& p, uint64_t at);

  int device_ = 0;
  std::vector<Range> ranges_;  // the last is current
  uint8_t* boundary_ = nullptr;
  size_t below_room_ = 0, above_room_ = 0;    // of the current range
  size_t below_bytes_ = 0, above_bytes_ = 0;  // mapped in the current range
  size_t below_mapped_ = 0, above_mapped_ = 0;  // list entries mapped in the current range
};

}  // namespace qvg::cuda
