// libFuzzer target: the .npy reader (read_npy) and what load_kv does with its
// result (to_head_tensor in both layouts).
// Properties: every rejection is a qvg::Error (any other exception, a crash or a
// sanitizer report is a finding); an accepted tensor holds exactly
// numel x itemsize bytes; a converted K/V tensor has heads x tokens x dim values.
#include <cstdint>
#include <optional>

#include "fuzz_util.h"
#include "qvg/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qvg::fuzz::InputFile file("input.npy");
  file.set(data, size);
  // The bf16 hint: '<V2' / '<u2' / '<i2' descrs are read too (other descrs ignore it).
  for (const std::optional<qvg::DType> hint : {std::optional<qvg::DType>(), std::optional(qvg::DType::bf16)}) {
    qvg::RawTensor t;
    try {
      t = qvg::read_npy(file.path(), hint);
    } catch (const qvg::Error&) {
      continue;
    }
    QVG_FUZZ_REQUIRE(static_cast<uint64_t>(t.numel()) * qvg::dtype_size(t.dtype) == t.bytes.size());
    for (const qvg::KvLayout layout : {qvg::KvLayout::thd, qvg::KvLayout::htd}) {
      try {
        const qvg::HeadTensor h = qvg::to_head_tensor(t, layout, "fuzz");
        QVG_FUZZ_REQUIRE(static_cast<int64_t>(h.data.size()) == h.heads * h.tokens * h.dim);
        QVG_FUZZ_REQUIRE(h.numel() == t.numel());
      } catch (const qvg::Error&) {
      }
    }
  }
  return 0;
}
