// CudaModel in builds without CUDA: the API exists and says so.
#include "qvg/model_cuda.h"

namespace qvg {

struct CudaModel::Impl {};

namespace {
[[noreturn]] void no_cuda() {
  QVG_CHECK(false, "CUDA model: qvg was built without CUDA (configure with QVG_WITH_CUDA=ON)");
}
}  // namespace

CudaModel::CudaModel(const Model&, CudaModelOptions) { no_cuda(); }
CudaModel::~CudaModel() = default;
CudaModel::CudaModel(CudaModel&&) noexcept = default;
CudaModel& CudaModel::operator=(CudaModel&&) noexcept = default;
const Model& CudaModel::model() const { no_cuda(); }
const CudaModelOptions& CudaModel::options() const { no_cuda(); }
void CudaModel::set_context(const KVContext&) { no_cuda(); }
void CudaModel::set_context(const StreamingKVCache&) { no_cuda(); }
int64_t CudaModel::context_tokens() const { no_cuda(); }
std::vector<float> CudaModel::forward(std::span<const float>, float, int64_t, std::vector<LayerKV>*,
                                      const ForwardOptions&) {
  no_cuda();
}
std::vector<float> CudaModel::forward(std::span<const float>, float, int64_t, const KVContext&, std::vector<LayerKV>*,
                                      const ForwardOptions&) {
  no_cuda();
}
int64_t CudaModel::device_bytes() const { no_cuda(); }

}  // namespace qvg
