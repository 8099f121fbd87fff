// The K/V the CPU probes (init_probe, residual_vq_probe) run on, and their
// arguments.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qvg/data.h"
#include "qvg/io.h"

namespace probe {

/// The probes' common arguments: --data, --tensor, --heads, --centroids,
/// --candidates, and --tokens where a probe takes it.
struct Args {
  std::string data = "clip", tensor, candidates;
  int heads = 4, centroids = 256;
  int64_t tokens = 0;
};

/// Parses argv into a (its fields hold the defaults); false, after naming
/// it, for an unknown argument (--tokens unless with_tokens).
inline bool parse(int argc, char** argv, Args& a, bool with_tokens) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (arg == "--data") a.data = next();
    else if (arg == "--tensor") a.tensor = next();
    else if (arg == "--heads") a.heads = std::atoi(next().c_str());
    else if (arg == "--centroids") a.centroids = std::atoi(next().c_str());
    else if (arg == "--tokens" && with_tokens) a.tokens = std::atoll(next().c_str());
    else if (arg == "--candidates") a.candidates = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return false;
    }
  }
  return true;
}

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
