// The reference model's network on the GPU (qvg::CudaModel) against the CPU
// runtime: milliseconds per forward pass at several context lengths, then
// whole chunks through the Sampler (cache read / network / append) on both.
//
//   bench_model_cuda [--chunks N] [--cache SPEC] [--quant-factor Q] [--math fp32|tf32|bf16]
//                    [--passes P] [--cpu-threads T] [--no-cpu] [--cache-backend cpu|cuda]
//                    [--baseline SPEC] [--host-read]
// --baseline: also run the GPU sampler with that cache (e.g. bf16) and print
// the overhead of --cache over it per generated chunk (one process, same
// noise, same backends).
//
// Pass times are wall times of synchronous calls (tokens up, velocity down);
// chunk times are the Sampler's ChunkReport (every GPU pass synchronizes).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qvg/cuda.h"
#include "qvg/io.h"
#include "qvg/model.h"
#include "qvg/model_cuda.h"
#include "qvg/video_metrics.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Args {
  int chunks = 6;               // generated chunks in the Sampler part
  std::string cache = "qvg";    // codec of K and V
  int quant_factor = 4;         // chunks per span
  qvg::CudaMath math = qvg::CudaMath::fp32;
  int passes = 20;              // timed GPU passes per context length
  int cpu_threads = 1;          // threads of the CPU network (0 = all cores)
  bool cpu = true;
  qvg::Backend cache_backend = qvg::Backend::cpu;  // where the cache's codecs run
  std::string baseline;                          // overhead reference cache, e.g. bf16
  bool device_read = true;                       // SamplerConfig::device_context_read
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      QVG_CHECK(i + 1 < argc, k, " needs a value");
      return argv[++i];
    };
    if (k == "--chunks")
      a.chunks = std::stoi(val());
    else if (k == "--cache")
      a.cache = val();
    else if (k == "--quant-factor")
      a.quant_factor = std::stoi(val());
    else if (k == "--math")
      a.math = qvg::parse_cuda_math(val());
    else if (k == "--passes")
      a.passes = std::stoi(val());
    else if (k == "--cpu-threads")
      a.cpu_threads = std::stoi(val());
    else if (k == "--no-cpu")
      a.cpu = false;
    else if (k == "--cache-backend")
      a.cache_backend = qvg::parse_backend(val());
    else if (k == "--baseline")
      a.baseline = val();
    else if (k == "--host-read")
      a.device_read = false;
    else
      QVG_CHECK(false, "unknown argument '", k,
                "' (--chunks N --cache SPEC --quant-factor Q --math fp32|tf32|bf16 --passes P --cpu-threads T "
                "--no-cpu --cache-backend cpu|cuda --baseline SPEC --host-read)");
  }
  return a;
}

std::vector<float> golden_f32(const std::string& path, const std::string& name) {
  const qvg::RawTensor t = qvg::read_safetensors_tensor(path, name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
  return v;
}

/// A context of n tokens per layer: seeded noise of the K/V scale.
qvg::KVContext random_context(const qvg::ModelConfig& c, int64_t n) {
  qvg::KVContext ctx;
  for (int li = 0; li < c.layers; ++li) {
    qvg::HeadTensor k(c.heads, n, c.head_dim), v(c.heads, n, c.head_dim);
    k.data = qvg::gaussian_noise(k.numel(), 100 + li);
    v.data = qvg::gaussian_noise(v.numel(), 200 + li);
    ctx.k.push_back(std::move(k));
    ctx.v.push_back(std::move(v));
  }
  return ctx;
}

struct RunResult {
  std::vector<qvg::ChunkReport> reports;  // generated chunks
  std::vector<float> frames;
};

RunResult run_sampler(const qvg::Model& m, const Args& a, qvg::Backend b, const std::vector<float>& ctx,
                      const std::string& spec) {
  const qvg::ModelConfig& c = m.config();
  qvg::SpanPolicy p;
  p.quant_factor = a.quant_factor;
  qvg::CacheOptions co;
  co.backend = a.cache_backend;
  qvg::StreamingKVCache cache(qvg::model_cache_config(c, spec, spec, true, p), co);
  qvg::SamplerConfig sc;
  sc.backend = b;
  sc.cuda.math = a.math;
  sc.threads = a.cpu_threads;
  sc.device_context_read = a.device_read;
  qvg::Sampler s(m, cache, sc);
  const size_t fv = static_cast<size_t>(c.chunk_frames * c.frame_values());
  for (size_t k = 0; k * fv < ctx.size(); ++k) s.add_context(std::span<const float>(ctx).subspan(k * fv, fv));
  RunResult r;
  const int64_t tv = int64_t{c.tokens_per_chunk()} * c.patch_dim();
  for (int k = 0; k < a.chunks; ++k) {
    qvg::ChunkReport rep;
    const std::vector<float> f = s.generate(qvg::gaussian_noise(tv, 2026 + k), &rep);
    r.frames.insert(r.frames.end(), f.begin(), f.end());
    r.reports.push_back(std::move(rep));
  }
  return r;
}

void print_run(const char* name, const RunResult& r) {
  double rd = 0, fw = 0, ap = 0;
  for (const auto& rep : r.reports) {
    std::printf("  %-4s chunk %2lld (context %5lld tokens): read %8.2f  network %9.2f  append %8.2f  total %9.2f ms\n",
                name, static_cast<long long>(rep.chunk), static_cast<long long>(rep.chunk * 768),
                1e3 * rep.read_seconds, 1e3 * rep.forward_seconds, 1e3 * rep.append_seconds,
                1e3 * (rep.read_seconds + rep.forward_seconds + rep.append_seconds));
    rd += rep.read_seconds, fw += rep.forward_seconds, ap += rep.append_seconds;
  }
  const double n = static_cast<double>(r.reports.size());
  std::printf("  %-4s mean per generated chunk: read %.2f  network %.2f  append %.2f  total %.2f ms\n", name,
              1e3 * rd / n, 1e3 * fw / n, 1e3 * ap / n, 1e3 * (rd + fw + ap) / n);
}

double mean_total(const RunResult& r) {
  double t = 0;
  for (const auto& rep : r.reports) t += rep.read_seconds + rep.forward_seconds + rep.append_seconds;
  return t / static_cast<double>(r.reports.size());
}
/// Mean total per chunk after the first span has been encoded (its k-means++
/// start is a one-time cost; later spans start from the previous centroids).
double mean_steady(const RunResult& r, int quant_factor) {
  double t = 0;
  int k = 0;
  for (const auto& rep : r.reports)
    if (rep.chunk >= quant_factor) t += rep.read_seconds + rep.forward_seconds + rep.append_seconds, ++k;
  return k ? t / k : 0.0;
}
double mean_network(const RunResult& r) {
  double t = 0;
  for (const auto& rep : r.reports) t += rep.forward_seconds;
  return t / static_cast<double>(r.reports.size());
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::string why;
  if (!qvg::cuda_available(&why)) {
    std::printf("bench_model_cuda: %s\n", why.c_str());
    return 1;
  }
  const std::string root = QVG_SOURCE_DIR;
  const qvg::Model m = qvg::Model::load(root + "/models/qvg_ref_video_dit.safetensors");
  const qvg::ModelConfig& c = m.config();
  std::printf("bench_model_cuda: math %s, cache %s, quant_factor %d, %d generated chunks, CPU network threads %d\n",
              qvg::cuda_math_name(a.math), a.cache.c_str(), a.quant_factor, a.chunks, a.cpu_threads);

  // 1. One forward pass (t = 0.5, K/V of every layer recorded as for the clean pass).
  qvg::CudaModelOptions o;
  o.math = a.math;
  qvg::CudaModel g(m, o);
  const std::vector<float> tok = qvg::gaussian_noise(int64_t{c.tokens_per_chunk()} * c.patch_dim(), 1);
  std::printf("\nforward pass, ms (GPU: mean of %d synchronous passes after 3 warm-up; CPU: mean of 2)\n"
              "  step = velocity only (an Euler step); clean = velocity + every layer's q/k_pre/k/v back on the host\n",
              a.passes);
  std::printf("  %-15s %10s %10s %11s %10s %10s\n", "context tokens", "gpu step", "gpu clean", "gpu upload",
              "cpu clean", "cpu/gpu");
  for (int chunks : {0, 2, 6, 12, 24}) {
    const int64_t n = int64_t{chunks} * c.tokens_per_chunk();
    const qvg::KVContext ctx = random_context(c, n);
    double t0 = now_s();
    g.set_context(ctx);
    const double up = now_s() - t0;
    std::vector<qvg::LayerKV> kv;
    qvg::ForwardOptions cpu_opt;
    cpu_opt.threads = a.cpu_threads;
    for (int i = 0; i < 3; ++i) g.forward(tok, 0.5f, 3 * chunks, &kv);
    t0 = now_s();
    for (int i = 0; i < a.passes; ++i) g.forward(tok, 0.5f, 3 * chunks);
    const double step = (now_s() - t0) / a.passes;
    t0 = now_s();
    for (int i = 0; i < a.passes; ++i) g.forward(tok, 0.5f, 3 * chunks, &kv);
    const double gpu = (now_s() - t0) / a.passes;
    double cpu = NAN;
    if (a.cpu && chunks <= 12) {
      t0 = now_s();
      for (int i = 0; i < 2; ++i) m.forward(tok, 0.5f, 3 * chunks, ctx, &kv, cpu_opt);
      cpu = (now_s() - t0) / 2;
    }
    std::printf("  %-15lld %10.3f %10.3f %11.3f", static_cast<long long>(n), 1e3 * step, 1e3 * gpu, 1e3 * up);
    if (std::isnan(cpu))
      std::printf(" %10s %10s\n", "-", "-");  // not measured (--no-cpu, or too long a context for the CPU)
    else
      std::printf(" %10.1f %9.0fx\n", 1e3 * cpu, cpu / gpu);
  }
  std::printf("  device memory held: %.1f MiB\n", static_cast<double>(g.device_bytes()) / (1 << 20));

  // 2. Whole chunks through the Sampler: golden context (2 chunks), then generated chunks.
  const std::vector<float> ctx = golden_f32(root + "/models/golden/golden.safetensors", "context");
  std::printf("\nSampler, 2 context chunks + %d generated, cache %s (ms per chunk)\n", a.chunks, a.cache.c_str());
  std::printf("  cache codecs on the %s, context read on the %s\n", qvg::backend_name(a.cache_backend),
              a.cache_backend == qvg::Backend::cuda && a.device_read ? "device" : "host (then uploaded)");
  const RunResult gr = run_sampler(m, a, qvg::Backend::cuda, ctx, a.cache);
  print_run("gpu", gr);
  if (!a.baseline.empty()) {
    const RunResult br = run_sampler(m, a, qvg::Backend::cuda, ctx, a.baseline);
    print_run("base", br);
    std::printf("  overhead of %s over %s per generated chunk (GPU network, cache codecs on the %s): %.1f ms vs %.1f "
                "ms = %+.1f %%\n",
                a.cache.c_str(), a.baseline.c_str(), qvg::backend_name(a.cache_backend), 1e3 * mean_total(gr),
                1e3 * mean_total(br), 100.0 * (mean_total(gr) / mean_total(br) - 1.0));
    std::printf("  steady state (chunks after the first span): %.1f ms vs %.1f ms = %+.1f %%\n",
                1e3 * mean_steady(gr, a.quant_factor), 1e3 * mean_steady(br, a.quant_factor),
                100.0 * (mean_steady(gr, a.quant_factor) / mean_steady(br, a.quant_factor) - 1.0));
  }
  if (a.cpu) {
    const RunResult cr = run_sampler(m, a, qvg::Backend::cpu, ctx, a.cache);
    print_run("cpu", cr);
    const std::vector<uint8_t> gu = qvg::model_to_pixels(gr.frames), cu = qvg::model_to_pixels(cr.frames);
    std::printf("  per generated chunk: cpu %.1f ms, gpu %.1f ms (%.1fx); network alone: cpu %.1f, gpu %.1f ms (%.0fx)\n",
                1e3 * mean_total(cr), 1e3 * mean_total(gr), mean_total(cr) / mean_total(gr), 1e3 * mean_network(cr),
                1e3 * mean_network(gr), mean_network(cr) / mean_network(gr));
    std::printf("  frames gpu vs cpu: PSNR %.2f dB (uint8, inf = identical)\n", qvg::psnr_u8(gu, cu));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_model_cuda: %s\n", e.what());
  return 1;
}
