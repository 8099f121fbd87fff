// The CUDA backend's entry points in builds without CUDA: they say so.
#include "core/codecs.h"
#include "qvg/cuda.h"
#include "qvg/device_codec.h"

namespace qvg {

namespace {
[[noreturn]] void no_cuda() { QVG_CHECK(false, "qvg was built without CUDA (configure with QVG_WITH_CUDA=ON)"); }
}  // namespace

bool cuda_available(std::string* why) {
  if (why) *why = "qvg was built without CUDA";
  return false;
}
std::unique_ptr<Codec> make_cuda_codec(const CodecConfig&) { no_cuda(); }
EncodedTensor cuda_qvg_encode_given_centroids(const HeadTensor&, const CodecConfig&, const std::vector<uint8_t>&,
                                              const std::vector<uint8_t>&, TensorRole) {
  no_cuda();
}
std::vector<uint16_t> cuda_decode_bf16(const EncodedTensor&) { no_cuda(); }
int cuda_current_device() { no_cuda(); }
std::shared_ptr<void> cuda_allocate(size_t) { no_cuda(); }
void cuda_copy_to_host(void*, const void*, size_t) { no_cuda(); }
std::shared_ptr<void> cuda_allocate_async(size_t, void*) { no_cuda(); }
size_t cuda_release_pool_memory() { return 0; }  // no pool to release
void cuda_synchronize(void*) { no_cuda(); }
EncodedTensor cuda_encode_device(const CodecConfig&, const void*, DeviceElement, int64_t, int64_t, int64_t,
                                 const EncodeOptions&) {
  no_cuda();
}
void cuda_decode_device(const EncodedTensor&, void*, DeviceElement) { no_cuda(); }
struct DeviceEncodedTensor::Impl {};
DeviceEncodedTensor::DeviceEncodedTensor() = default;
DeviceEncodedTensor::DeviceEncodedTensor(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
const DeviceEncodedTensor::Impl& DeviceEncodedTensor::impl() const { no_cuda(); }
const CodecConfig& DeviceEncodedTensor::config() const { no_cuda(); }
TensorRole DeviceEncodedTensor::role() const { no_cuda(); }
int64_t DeviceEncodedTensor::heads() const { no_cuda(); }
int64_t DeviceEncodedTensor::tokens() const { no_cuda(); }
int64_t DeviceEncodedTensor::dim() const { no_cuda(); }
int DeviceEncodedTensor::device() const { no_cuda(); }
PartBytes DeviceEncodedTensor::bytes() const { no_cuda(); }
double DeviceEncodedTensor::bits_per_value() const { no_cuda(); }
bool DeviceEncodedTensor::centroids_only() const { no_cuda(); }
DeviceEncodedTensor DeviceEncodedTensor::warm_state(void*) const { no_cuda(); }
EncodedTensor DeviceEncodedTensor::to_host(void*) const { no_cuda(); }
DeviceEncodedTensor DeviceEncodedTensor::from_host(const EncodedTensor&, void*) { no_cuda(); }
void DeviceEncodedTensor::pack(void*, void*) const { no_cuda(); }
DeviceEncodedTensor DeviceEncodedTensor::unpack(const CodecConfig&, TensorRole, int64_t, int64_t, int64_t, const void*,
                                                void*) {
  no_cuda();
}
struct DeviceCodec::Impl {};
DeviceCodec::DeviceCodec(const CodecConfig&) { no_cuda(); }
DeviceCodec::~DeviceCodec() = default;
DeviceCodec::DeviceCodec(DeviceCodec&&) noexcept = default;
DeviceCodec& DeviceCodec::operator=(DeviceCodec&&) noexcept = default;
const CodecConfig& DeviceCodec::config() const { no_cuda(); }
DeviceEncodedTensor DeviceCodec::encode(const void*, DeviceElement, int64_t, int64_t, int64_t, TensorRole, void*,
                                        const DeviceEncodedTensor*) const {
  no_cuda();
}
std::vector<DeviceEncodedTensor> DeviceCodec::encode_batch(const void*, DeviceElement, int64_t, int64_t, int64_t,
                                                          int64_t, TensorRole, void*, const DeviceEncodedTensor* const*,
                                                          int64_t) const {
  no_cuda();
}
void DeviceCodec::decode(const DeviceEncodedTensor&, void*, DeviceElement, void*) const { no_cuda(); }
void DeviceCodec::decode_rows(const DeviceEncodedTensor&, void*, DeviceElement, int64_t, int64_t, void*, int64_t,
                              int64_t) const {
  no_cuda();
}
void DeviceCodec::decode_rows_token_major(const DeviceEncodedTensor&, void*, DeviceElement, int64_t, int64_t, void*,
                                          int64_t, int64_t) const {
  no_cuda();
}
std::unique_ptr<Codec> make_codec(const CodecConfig& config, Backend backend) {
  return backend == Backend::cuda ? make_cuda_codec(config) : make_codec(config);
}

}  // namespace qvg
