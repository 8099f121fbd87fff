// The device side of the cache (this folder) in builds without CUDA:
// DeviceKVCache and StreamingKVCache::read_device say so at run time.
#include "qvg/cache.h"
#include "qvg/device_cache.h"

namespace qvg {

namespace {
[[noreturn]] void no_cuda() { QVG_CHECK(false, "qvg was built without CUDA (configure with QVG_WITH_CUDA=ON)"); }
}  // namespace

struct DeviceKVCache::Impl {};
DeviceKVCache::DeviceKVCache(CacheConfig, DeviceCacheOptions) { no_cuda(); }
DeviceKVCache::~DeviceKVCache() = default;
DeviceKVCache::DeviceKVCache(DeviceKVCache&&) noexcept = default;
DeviceKVCache& DeviceKVCache::operator=(DeviceKVCache&&) noexcept = default;
const CacheConfig& DeviceKVCache::config() const { no_cuda(); }
const DeviceCacheOptions& DeviceKVCache::options() const { no_cuda(); }
int DeviceKVCache::device() const { no_cuda(); }
AppendReport DeviceKVCache::append(int, const DeviceChunkView&, const DeviceChunkView&, const ChunkPositions&, void*) {
  no_cuda();
}
int64_t DeviceKVCache::read(int, void*, void*, DeviceElement, int64_t, void*) const { no_cuda(); }
DeviceKVView DeviceKVCache::view(int, int64_t, void*) { no_cuda(); }
AppendReport DeviceKVCache::append_extra(int, int64_t, void*) { no_cuda(); }
ViewMemory DeviceKVCache::view_memory() const { no_cuda(); }
void DeviceKVCache::flush(void*) { no_cuda(); }
int64_t DeviceKVCache::pending_spans() const { no_cuda(); }
int64_t DeviceKVCache::chunks_appended(int) const { no_cuda(); }
int64_t DeviceKVCache::tokens_appended(int) const { no_cuda(); }
int64_t DeviceKVCache::live_tokens(int) const { no_cuda(); }
std::vector<std::pair<int64_t, int64_t>> DeviceKVCache::live_chunks(int) const { no_cuda(); }
int64_t DeviceKVCache::spans_encoded(int) const { no_cuda(); }
LayerMemory DeviceKVCache::layer_memory(int) const { no_cuda(); }
MemoryStats DeviceKVCache::memory() const { no_cuda(); }
int64_t DeviceKVCache::scratch_bytes() const { no_cuda(); }
int64_t StreamingKVCache::read_device(int, float*, float*, int64_t, void*) const { no_cuda(); }
int64_t StreamingKVCache::device_bytes() const { return 0; }

}  // namespace qvg
