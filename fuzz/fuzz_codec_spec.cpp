// libFuzzer target: codec spec strings (parse_codec_spec), as the CLI, the
// library, the Python module and cache files parse them.
// Properties: every rejection is a qvg::Error; an accepted spec's canonical
// form (codec_spec) parses back to the same codec (same_codec) and is a fixed
// point; validate and describe either accept it or throw qvg::Error.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qvg/codec.h"
#include "qvg/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  qvg::CodecConfig c;
  try {
    c = qvg::parse_codec_spec(spec);
  } catch (const qvg::Error&) {
    return 0;
  }
  const std::string canonical = qvg::codec_spec(c);
  qvg::CodecConfig again;
  try {
    again = qvg::parse_codec_spec(canonical);
  } catch (const qvg::Error& e) {
    std::fprintf(stderr, "the canonical spec '%s' of '%s' is rejected: %s\n", canonical.c_str(), spec.c_str(),
                 e.what());
    QVG_FUZZ_REQUIRE(false);
  }
  std::string diff;
  if (!qvg::same_codec(c, again, &diff)) {
    std::fprintf(stderr, "'%s' -> '%s' differs in %s\n", spec.c_str(), canonical.c_str(), diff.c_str());
    QVG_FUZZ_REQUIRE(false);
  }
  QVG_FUZZ_REQUIRE(qvg::codec_spec(again) == canonical);
  (void)qvg::describe(c);
  for (const int64_t dim : {64, 128, 96}) {
    try {
      qvg::validate(c, dim);
      (void)qvg::make_codec(c);
    } catch (const qvg::Error&) {
    }
  }
  return 0;
}
