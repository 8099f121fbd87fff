// --device of eval and stream (tools/device.h).
#include "device.h"

#include "qvg/model.h"

namespace qvg_cli {

void add_codec_device_option(CLI::App* app, std::string& device) {
  app->add_option("--device", device, "where the codecs encode and decode: cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

qvg::Backend require_backend(const std::string& device) {
  const qvg::Backend b = qvg::parse_backend(device);
  std::string why;
  if (b == qvg::Backend::cuda && !qvg::cuda_available(&why))
    throw qvg::Error("--device cuda: " + why + "; use --device cpu");
  return b;
}

}  // namespace qvg_cli
