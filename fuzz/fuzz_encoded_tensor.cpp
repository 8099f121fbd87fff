// libFuzzer target: decoding an encoded tensor made from untrusted parts, as
// the Python module's unpickler (EncodedTensor.__setstate__,
// python/qvg_module.cpp) builds it: parse the spec, take the role and shape,
// refuse an empty shape, validate the config against the dim, take the seven
// parts, check them and their values (check_encoded_tensor); then decode it as
// Codec.decode does on the CPU. (Cache files reach decode through
// StreamingKVCache::load: fuzz_cache_file.) Input layout: encoded_input.h.
// Properties: every rejection is a qvg::Error; the byte accounting equals the
// parts' sizes; a tensor the check accepts decodes without an error to
// [heads, tokens, dim] finite values.
#include <cmath>
#include <cstdint>

#include "encoded_input.h"
#include "fuzz_util.h"
#include "qvg/codec.h"
#include "qvg/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto in = qvg::fuzz::from_bytes(data, size);
  if (!in) return 0;
  qvg::EncodedTensor e;
  try {  // the unpickler's steps
    e.config = qvg::parse_codec_spec(in->spec);
    e.role = in->value ? qvg::TensorRole::value : qvg::TensorRole::key;
    e.heads = in->heads;
    e.tokens = in->tokens;
    e.dim = in->dim;
    if (e.heads <= 0 || e.tokens <= 0 || e.dim <= 0) return 0;  // (the unpickler's "empty shape" error)
    qvg::validate(e.config, e.dim);
  } catch (const qvg::Error&) {
    return 0;
  }
  size_t total = 0;
  for (size_t i = 0; i < std::size(qvg::kPartFields); ++i) {
    e.*qvg::kPartFields[i].data = in->parts[i];
    total += in->parts[i].size();
  }
  QVG_FUZZ_REQUIRE(e.bytes().total() == total);
  try {
    qvg::check_encoded_tensor(e);  // the unpickler's last step
  } catch (const qvg::Error&) {
    return 0;
  }
  qvg::HeadTensor out;
  try {
    qvg::make_codec(e.config)->decode(e, out, 1);
  } catch (const qvg::Error& err) {
    std::fprintf(stderr, "an accepted tensor failed to decode: %s\n", err.what());
    QVG_FUZZ_REQUIRE(false);
  }
  QVG_FUZZ_REQUIRE(out.heads == e.heads && out.tokens == e.tokens && out.dim == e.dim);
  QVG_FUZZ_REQUIRE(static_cast<int64_t>(out.data.size()) == out.numel());
  for (const float v : out.data) QVG_FUZZ_REQUIRE(std::isfinite(v));
  return 0;
}
