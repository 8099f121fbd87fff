// A model run's options and the configs they give (tools/model_run.h).
#include "model_run.h"

#include <algorithm>
#include <filesystem>

namespace qvg_cli {

void add_device_options(CLI::App* s, ModelRunArgs& a) {
  s->add_option("--device", a.device, "where the network and the cache's codecs run: cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  s->add_option("--gpu-math", a.gpu_math, "GPU matmuls: fp32 (default, no TF32), tf32 or bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
}

qvg::SamplerConfig sampler_config(const ModelRunArgs& a) {
  qvg::SamplerConfig sc;
  sc.steps = a.steps;
  sc.threads = a.threads;
  sc.backend = qvg::parse_backend(a.device);
  sc.cuda.math = qvg::parse_cuda_math(a.gpu_math);
  return sc;
}

qvg::CacheOptions cache_options(const ModelRunArgs& a) {
  qvg::CacheOptions copt;
  copt.threads = a.threads;
  copt.backend = qvg::parse_backend(a.device);
  return copt;
}

qvg::SpanPolicy span_policy(const ModelRunArgs& a) {
  qvg::SpanPolicy policy;
  policy.quant_factor = a.quant_factor;
  policy.keep_recent = a.keep_recent;
  policy.sink = a.sink;
  policy.window_chunks = a.window;
  return policy;
}

qvg::Video load_context(const ModelRunArgs& a, const qvg::ModelConfig& c, double* fps) {
  const int fw = 128, fh = 72;
  QVG_CHECK(c.frame == 64, "generate: the context crop assumes 64x64 frames, the model has ", c.frame);
  // The 16:9 center crop of the full width: 416x234 of the shipped 416x240 clips.
  const qvg::Video probe = qvg::read_video(a.context, 1);
  qvg::VideoReadOptions ro;
  ro.max_frames = a.start + a.context_frames;
  ro.width = fw;
  ro.height = fh;
  ro.crop_width = probe.width;
  ro.crop_height = std::min(probe.height, (probe.width * 9 / 16) & ~1);
  const qvg::Video v = qvg::read_video(a.context, ro);
  QVG_CHECK(v.frames >= a.start + a.context_frames, a.context, ": has ", v.frames, " frames, need ",
            a.start + a.context_frames, " (--start ", a.start, " + --context-frames ", a.context_frames, ")");
  *fps = v.fps;
  qvg::Video out;
  out.width = out.height = c.frame;
  out.frames = a.context_frames;
  out.fps = v.fps;
  const int y0 = (fh - c.frame) / 2, x0 = (fw - c.frame) / 2;  // 4, 32
  for (int f = a.start; f < a.start + a.context_frames; ++f)
    for (int y = 0; y < c.frame; ++y) {
      const uint8_t* row = v.frame(f) + (static_cast<size_t>(y0 + y) * fw + x0) * 3;
      out.rgb.insert(out.rgb.end(), row, row + c.frame * 3);
    }
  return out;
}

qvg::Model load_model(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && path == qvg::resource_path(kModelFile))
    throw qvg::Error("the shipped model weights were not found (" + qvg::resource_search(kModelFile) +
                     "); pass --model");
  return qvg::Model::load(path);
}

}  // namespace qvg_cli
