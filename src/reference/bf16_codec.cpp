// The uncompressed reference: every value stored as bfloat16 (2 bytes).
#include "core/codecs.h"
#include "qvg/half.h"
#include "util/parallel.h"

namespace qvg {
namespace {

class Bf16Codec final : public Codec {
 public:
  explicit Bf16Codec(CodecConfig c) : config_(std::move(c)) {}
  const CodecConfig& config() const override { return config_; }

  EncodedTensor encode(const HeadTensorView& x, const EncodeOptions& opt, EncodeReport*) const override {
    check_encode_input(config_, x);
    EncodedTensor e = encoded_header(config_, x, opt.role);
    e.full_precision.resize(static_cast<size_t>(x.numel()) * 2);
    size_t i = 0;
    for (int64_t h = 0; h < x.heads; ++h)
      for (int64_t n = 0; n < x.tokens; ++n)
        for (int64_t d = 0; d < x.dim; ++d) put_u16(e.full_precision, i++, bf16_from_float(x.row(h, n)[d]));
    return e;
  }

  void decode(const EncodedTensor& e, HeadTensor& out, int) const override {
    check_decode_header(config_, e);  // (bounds the shape before its size is computed)
    PartBytes need;
    need.full_precision = static_cast<size_t>(e.values()) * 2;
    check_decode_parts(e, need);
    out = HeadTensor(e.heads, e.tokens, e.dim);
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = bf16_to_float(get_u16(e.full_precision, i));
  }

 private:
  CodecConfig config_;
};

}  // namespace

std::unique_ptr<Codec> make_bf16_codec(const CodecConfig& c) { return std::make_unique<Bf16Codec>(c); }

}  // namespace qvg
