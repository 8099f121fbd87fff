// The K/V the CPU probes (init_probe, residual_vq_probe) run on, and their
// list arguments.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qvg/data.h"
#include "qvg/io.h"

namespace probe {

/// s cut at every `sep`.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

/// Named tensors: "clip" (the built-in clip K/V), "video" (video-like K/V), or
/// a .npy / .safetensors file with tensors `names` (comma-separated, thd
/// layout; "-" for a .npy file's one unnamed tensor).
inline std::vector<std::pair<std::string, qvg::HeadTensor>> load(const std::string& data, const std::string& names) {
  using qvg::TensorRole;
  std::vector<std::pair<std::string, qvg::HeadTensor>> xs;
  if (data == "clip") {
    qvg::ClipKVParams p;
    xs.emplace_back("clip K", qvg::make_clip_kv(p, TensorRole::key));
    xs.emplace_back("clip V", qvg::make_clip_kv(p, TensorRole::value));
  } else if (data == "video") {
    qvg::VideoLikeParams p;
    xs.emplace_back("video K", qvg::make_video_like(p, TensorRole::key));
    xs.emplace_back("video V", qvg::make_video_like(p, TensorRole::value));
  } else {
    for (const std::string& name : split(names, ','))
      xs.emplace_back(name, qvg::load_kv(data, qvg::KvLayout::thd, name == "-" ? "" : name));
  }
  return xs;
}

}  // namespace probe
