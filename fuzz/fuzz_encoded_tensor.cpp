// libFuzzer target: decoding an encoded tensor made from untrusted parts, as
// the Python module's unpickler (EncodedTensor.__setstate__,
// python/qvg_module.cpp) builds it: parse the spec, take the role and shape,
// refuse an empty shape, validate the config against the dim, take the seven
// parts as they are; then decode it as Codec.decode does on the CPU. (Cache
// files reach decode through StreamingKVCache::load: fuzz_cache_file.)
// Input layout: encoded_input.h.
// Properties: every rejection is a qvg::Error; an accepted tensor decodes to
// [heads, tokens, dim], and its byte accounting equals the parts' sizes.
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
  qvg::HeadTensor out;
  try {
    qvg::make_codec(e.config)->decode(e, out, 1);
  } catch (const qvg::Error&) {
    return 0;
  }
  QVG_FUZZ_REQUIRE(out.heads == e.heads && out.tokens == e.tokens && out.dim == e.dim);
  QVG_FUZZ_REQUIRE(static_cast<int64_t>(out.data.size()) == out.numel());
  return 0;
}
