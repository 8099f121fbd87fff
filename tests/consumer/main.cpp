// Encodes and decodes a tensor with an installed qvg: 2-bit RTN of values in
// [-1, 1] must keep every error within half a quantization step (at most
// 0.5 + 2^-10 with the FP8 block scales), take the bits its formula says, and
// the library must report a version. It includes the umbrella header, so
// every public header compiles in a consumer of the installed package.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "qvg/qvg.h"        // the public API in one include
#include "qvg/qvg_steps.h"  // qvg_bits_per_value_formula

int main() {
  qvg::HeadTensor x(2, 256, 64);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = std::sin(0.37f * static_cast<float>(i));
  auto codec = qvg::make_codec("rtn");
  const qvg::EncodedTensor e = codec->encode(x);
  qvg::HeadTensor y;
  codec->decode(e, y);
  double worst = 0;
  for (size_t i = 0; i < x.data.size(); ++i) worst = std::fmax(worst, std::fabs(x.data[i] - y.data[i]));
  std::printf("%s: rtn %.3f bits/value, max abs error %.4f\n", qvg::build_info().c_str(), e.bits_per_value(), worst);
  const double bits = qvg::qvg_bits_per_value_formula(codec->config(), x.tokens, x.dim);
  if (std::fabs(e.bits_per_value() - bits) > 1e-12 || !(worst <= 0.5 + 1.0 / 1024) || std::strlen(qvg::version()) == 0) {
    std::fprintf(stderr, "qvg_consumer: unexpected result\n");
    return 1;
  }
  return 0;
}
