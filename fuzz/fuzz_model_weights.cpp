// libFuzzer target: loading the reference model's weights (Model::load: the
// .safetensors reader, the metadata's config JSON, shape and value checks).
// Property: every rejection is a qvg::Error; an accepted model has the config
// the metadata gives and every expected tensor.
#include <cstdint>

#include "fuzz_util.h"
#include "qvg/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qvg::fuzz::InputFile file("weights.safetensors");
  file.set(data, size);
  try {
    const qvg::Model m = qvg::Model::load(file.path());
    QVG_FUZZ_REQUIRE(static_cast<int>(m.weights().blocks.size()) == m.config().layers);
  } catch (const qvg::Error&) {
  }
  return 0;
}
