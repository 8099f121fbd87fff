// libFuzzer target: the .safetensors reader as K/V files use it
// (read_safetensors_header, read_safetensors, read_safetensors_tensor, load_kv).
// Properties: every rejection is a qvg::Error; the header and the full read
// agree on names, order and sizes; each tensor holds numel x itemsize bytes;
// load_kv of an accepted single tensor has its element count.
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_util.h"
#include "qvg/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qvg::fuzz::InputFile file("input.safetensors");
  file.set(data, size);
  std::vector<qvg::SafetensorsEntry> entries;
  qvg::NamedTensors tensors;
  std::map<std::string, std::string> meta;
  try {
    entries = qvg::read_safetensors_header(file.path());
  } catch (const qvg::Error&) {
    return 0;
  }
  try {
    tensors = qvg::read_safetensors(file.path(), &meta);
  } catch (const qvg::Error&) {
    QVG_FUZZ_REQUIRE(false);  // the header was valid: the data is in the file (sizes checked)
  }
  QVG_FUZZ_REQUIRE(tensors.size() == entries.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    QVG_FUZZ_REQUIRE(name == entries[i].name);
    QVG_FUZZ_REQUIRE(t.bytes.size() == entries[i].end - entries[i].begin);
    QVG_FUZZ_REQUIRE(static_cast<uint64_t>(t.numel()) * qvg::dtype_size(t.dtype) == t.bytes.size());
    try {
      QVG_FUZZ_REQUIRE(qvg::read_safetensors_tensor(file.path(), name).bytes == t.bytes);
    } catch (const qvg::Error&) {
      QVG_FUZZ_REQUIRE(false);
    }
  }
  if (tensors.size() == 1) {
    for (const qvg::KvLayout layout : {qvg::KvLayout::thd, qvg::KvLayout::htd}) {
      try {
        qvg::KvFileInfo info;
        const qvg::HeadTensor h = qvg::load_kv(file.path(), layout, "", std::nullopt, &info);
        QVG_FUZZ_REQUIRE(h.numel() == tensors[0].second.numel());
        QVG_FUZZ_REQUIRE(info.shape == tensors[0].second.shape);
      } catch (const qvg::Error&) {
      }
    }
  }
  return 0;
}
