// GPU benchmark of the CUDA QVG/RTN backend at real model shapes.
//   bench_cuda [--json FILE] [--reps N] [--quick] [--profile] [--starts] [--batch] [--warm] [--cq]
// (--starts, --batch, --warm, --cq: only the k-means starts' table,
// bench_starts; the batched span encodes, bench_batch; iterations after a
// warm start, bench_warm; qvg's code=cq decode at the Self-Forcing span,
// bench_cq.)
// Prints, per shape and data: the device copy bandwidth (bytes read +
// written), decode time and achieved bandwidth, encode time of QVG (S=1,
// B=64, 2 k-means iterations; with BF16 and with FP8 centroids) and QVG-Pro
// (S=4, B=16, 5 iterations), and the
// reconstruction error next to the CPU reference's on the same heads.
// Decode and the same-size copy are timed two ways: one launch between two
// events (launch gap and tail included), and back-to-back, 10 launches
// between the events divided by 10 (the rate of a kernel queued behind
// others in a stream, as in a model's step).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cuda/qvg_cuda.h"
#include "qvg/device_codec.h"
#include "bench_data.h"
#include "cuda_timer.h"
#include "qvg/codec.h"
#include "qvg/data.h"
#include "qvg/half.h"
#include "qvg/methods.h"
#include "qvg/metrics.h"
#include "qvg/qvg_steps.h"

using namespace qvg;
using namespace qvg::cuda;

namespace {

using bench::random_normal;
using bench::Timer;
using bench::to_bf16;

/// The k-means starts at the Self-Forcing and LongCat shapes (video-like
/// keys): the encode with iters=0 per start, its cost over the random start
/// (a gather of C rows: the start's own time), and the error after 0 and 2
/// Lloyd iterations relative to k-means++'s.
void bench_starts(Timer& timer, int reps) {
  struct Case {
    const char* name;
    int heads, frames;
  };
  std::printf("%-36s %-10s %9s %9s %12s %12s\n", "k-means start", "init", "enc0_ms", "start_ms", "mse0/pp", "mse2/pp");
  for (const Case sc : {Case{"self-forcing span [1,12,37440,128]", 12, 24}, Case{"longcat [1,32,29640,128]", 32, 19}}) {
    VideoLikeParams p;
    p.heads = sc.heads;
    p.frames = sc.frames;
    const HeadTensor x = make_video_like(p, TensorRole::key);
    const std::vector<uint16_t> xb = to_bf16(x);
    HeadTensor xr(x.heads, x.tokens, x.dim);
    for (size_t i = 0; i < xb.size(); ++i) xr.data[i] = bf16_to_float(xb[i]);
    DeviceBuffer<uint16_t> xd, out(xb.size());
    xd.upload(xb.data(), xb.size());
    double random_ms = 0, pp_mse[2] = {0, 0};
    for (const std::string init : {"random", "kmeans++", "d2-rounds"}) {
      double ms = 0, mse[2] = {0, 0};
      for (int iters : {0, 2}) {
        const CodecConfig c = parse_codec_spec("qvg:iters=" + std::to_string(iters) + ",init=" + init);
        const QvgShape sh = make_shape(c, x.heads, x.tokens, x.dim);
        const GpuKMeansOptions km = GpuKMeansOptions::fixed_iterations(c.kmeans);
        Encoder enc;
        DeviceParts parts;
        const double t = timer.median_ms(reps, [&] { enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr); });
        if (iters == 0) ms = t;
        decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr);
        std::vector<uint16_t> ob(xb.size());
        out.download(ob.data(), ob.size());
        QVG_CUDA_CHECK(cudaDeviceSynchronize());
        HeadTensor y(x.heads, x.tokens, x.dim);
        for (size_t i = 0; i < ob.size(); ++i) y.data[i] = bf16_to_float(ob[i]);
        mse[iters / 2] = compare(xr, y).mse;
      }
      if (init == "random") random_ms = ms;
      if (init == "kmeans++") pp_mse[0] = mse[0], pp_mse[1] = mse[1];
      const double r0 = pp_mse[0] > 0 ? mse[0] / pp_mse[0] : 0, r2 = pp_mse[1] > 0 ? mse[1] / pp_mse[1] : 0;
      std::printf("%-36s %-10s %9.3f %9.3f %12.4f %12.4f\n", sc.name, init.c_str(), ms, ms - random_ms, r0, r2);
      std::fflush(stdout);
    }
  }
}

/// 60 span encodes (30 layers' K or V... here 60 tensors of one shape) one
/// by one (DeviceCodec::encode) against DeviceCodec::encode_batch, cold
/// (the default start) and warm-started, at Self-Forcing's span of 2 chunks
/// and of 8 chunks.
void bench_batch(Timer& timer, int reps) {
  constexpr int64_t kCount = 60;
  std::printf("%-30s %-34s %-5s %11s %11s %8s\n", "batched span encodes (60)", "spec", "start", "one_by_one_ms",
              "batch_ms", "speedup");
  for (const int64_t tokens : {int64_t{9360}, int64_t{37440}}) {
    const int64_t heads = 12, dim = 128, per = heads * tokens * dim;
    const std::vector<uint16_t> xb = to_bf16(random_normal(static_cast<int>(heads), tokens, static_cast<int>(dim), 3));
    DeviceBuffer<uint16_t> xd(static_cast<size_t>(kCount * per));
    for (int64_t i = 0; i < kCount; ++i) QVG_CUDA_CHECK(cudaMemcpy(xd.get() + i * per, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    for (const std::string spec : {"qvg:iters=3,centroid_format=fp8", "qvg"}) {
      const DeviceCodec codec(parse_codec_spec(spec));
      std::vector<DeviceEncodedTensor> warm =
          codec.encode_batch(xd.get(), DeviceElement::bf16, kCount, heads, tokens, dim, TensorRole::key, nullptr);
      std::vector<const DeviceEncodedTensor*> wp;
      for (const auto& w : warm) wp.push_back(&w);
      for (const bool use_warm : {false, true}) {
        std::vector<DeviceEncodedTensor> out(static_cast<size_t>(kCount));
        const double one_ms = timer.median_ms(reps, [&] {
          for (int64_t i = 0; i < kCount; ++i)
            out[static_cast<size_t>(i)] = codec.encode(xd.get() + i * per, DeviceElement::bf16, heads, tokens, dim,
                                                       TensorRole::key, nullptr, use_warm ? wp[i] : nullptr);
        });
        const double batch_ms = timer.median_ms(reps, [&] {
          out = codec.encode_batch(xd.get(), DeviceElement::bf16, kCount, heads, tokens, dim, TensorRole::key, nullptr,
                                   use_warm ? wp.data() : nullptr);
        });
        char shape[64];
        std::snprintf(shape, sizeof shape, "60 x [12,%lld,128]", static_cast<long long>(tokens));
        std::printf("%-30s %-34s %-5s %11.2f %11.2f %7.2fx\n", shape, spec.c_str(), use_warm ? "warm" : "cold", one_ms,
                    batch_ms, one_ms / batch_ms);
        std::fflush(stdout);
      }
    }
  }
}

/// Lloyd iterations after a warm start: a video-like stream of 96 frames
/// (keys and values, 12 heads) cut into spans of 6 frames (9,360 tokens,
/// Self-Forcing's span of 2 chunks) and of 24 (37,440, its span of 8); span 0
/// cold (the default start, the setting's iterations), each later span
/// warm-started from the previous one's centroids (DeviceCodec::encode, as
/// the caches do). Per setting: the mean squared error of the decoded warm
/// spans relative to 10 iterations with tol 1e-4 from a cold start, and the
/// median time of a warm encode.
void bench_warm(Timer& timer, int reps) {
  std::printf("%-26s %-5s %-30s %12s %12s\n", "warm-started spans", "role", "spec", "mse/cold10", "warm_enc_ms");
  VideoLikeParams p;
  p.frames = 96;
  for (const TensorRole role : {TensorRole::key, TensorRole::value}) {
    const HeadTensor x = make_video_like(p, role);
    const std::vector<uint16_t> xb = to_bf16(x);
    for (const int frames : {6, 24}) {
      const int64_t tokens = int64_t{frames} * p.height * p.width, spans = x.tokens / tokens;
      // Span i as a contiguous [H][tokens][D] bf16 tensor on the device, and its BF16 values on the host.
      std::vector<DeviceBuffer<uint16_t>> span_d(static_cast<size_t>(spans));
      std::vector<HeadTensor> span_h;
      for (int64_t i = 0; i < spans; ++i) {
        std::vector<uint16_t> s(static_cast<size_t>(x.heads * tokens * x.dim));
        HeadTensor h(x.heads, tokens, x.dim);
        for (int64_t hd = 0; hd < x.heads; ++hd)
          for (int64_t t = 0; t < tokens * x.dim; ++t) {
            const uint16_t b = xb[static_cast<size_t>((hd * x.tokens + i * tokens) * x.dim + t)];
            s[static_cast<size_t>(hd * tokens * x.dim + t)] = b;
            h.data[static_cast<size_t>(hd * tokens * x.dim + t)] = bf16_to_float(b);
          }
        span_d[static_cast<size_t>(i)].upload(s.data(), s.size());
        span_h.push_back(std::move(h));
      }
      DeviceBuffer<uint16_t> out(static_cast<size_t>(x.heads * tokens * x.dim));
      auto run = [&](const std::string& spec, bool warm, double* enc_ms) {
        const DeviceCodec codec(parse_codec_spec(spec));
        DeviceEncodedTensor prev;
        double mse = 0;
        std::vector<double> times;
        for (int64_t i = 0; i < spans; ++i) {
          const bool w = warm && i > 0;
          DeviceEncodedTensor e;
          const double ms = timer.median_ms(w ? reps : 1, [&] {
            e = codec.encode(span_d[static_cast<size_t>(i)].get(), DeviceElement::bf16, x.heads, tokens, x.dim, role,
                             nullptr, w ? &prev : nullptr);
          });
          if (w) times.push_back(ms);
          codec.decode(e, out.get(), DeviceElement::bf16, nullptr);
          std::vector<uint16_t> ob(out.size());
          out.download(ob.data(), ob.size());
          QVG_CUDA_CHECK(cudaDeviceSynchronize());
          HeadTensor y(x.heads, tokens, x.dim);
          for (size_t j = 0; j < ob.size(); ++j) y.data[j] = bf16_to_float(ob[j]);
          if (i > 0) mse += compare(span_h[static_cast<size_t>(i)], y).mse;
          prev = e;
        }
        std::sort(times.begin(), times.end());
        if (enc_ms) *enc_ms = times.empty() ? 0 : times[times.size() / 2];
        return mse / static_cast<double>(spans - 1);
      };
      const double cold = run("qvg:iters=10,tol=1e-4", false, nullptr);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lld spans x [12,%lld,128]", static_cast<long long>(spans),
                    static_cast<long long>(tokens));
      for (const std::string spec : {"qvg:iters=1,tol=0", "qvg:iters=2,tol=0", "qvg:iters=3,tol=0", "qvg:iters=5,tol=0",
                                     "qvg:iters=10,tol=1e-4", "qvg:iters=3,tol=0,centroid_format=fp8"}) {
        double ms = 0;
        const double mse = run(spec, true, &ms);
        std::printf("%-26s %-5s %-30s %12.4f %12.3f\n", shape, role == TensorRole::key ? "K" : "V", spec.c_str(),
                    mse / cold, ms);
        std::fflush(stdout);
      }
    }
  }
}

/// Device-to-device copy bandwidth (bytes read + written) of 2 GiB: the
/// reference every decode figure is a fraction of.
double copy_bandwidth_gbs(Timer& timer, int reps) {
  const size_t copy_bytes = size_t(2) << 30;
  DeviceBuffer<uint8_t> c0(copy_bytes), c1(copy_bytes);
  QVG_CUDA_CHECK(cudaMemset(c0.get(), 1, copy_bytes));
  const double copy_ms = timer.median_ms(reps, [&] {
    QVG_CUDA_CHECK(cudaMemcpyAsync(c1.get(), c0.get(), copy_bytes, cudaMemcpyDeviceToDevice));
  });
  return 2.0 * copy_bytes / (copy_ms * 1e6);
}

/// qvg's codebook residual code (code=cq) at the Self-Forcing span
/// [12, 37440, 128] (video-like keys): the CPU reference encodes (all cores;
/// the CUDA codecs run it), the fused decode to BF16 on the device (one
/// launch, and back-to-back), as a fraction of the 2 GiB copy and of a copy
/// of the decode's size, beside QVG's int decode of the same keys (encoded on
/// the GPU); and whether the BF16 decode equals the CPU decode rounded to
/// BF16 (mismatching values: 0 expected).
void bench_cq(Timer& timer, int reps) {
  const double copy_gbs = copy_bandwidth_gbs(timer, reps);
  std::printf("copy bandwidth: %.0f GB/s (read + write of 2 GiB)\n", copy_gbs);
  VideoLikeParams vp;
  vp.heads = 12;
  vp.frames = 24;
  const HeadTensor x = make_video_like(vp, TensorRole::key);
  const std::vector<uint16_t> xb = to_bf16(x);
  HeadTensor xr(x.heads, x.tokens, x.dim);  // the BF16 values the device holds
  for (size_t i = 0; i < xb.size(); ++i) xr.data[i] = bf16_to_float(xb[i]);
  DeviceBuffer<uint16_t> xd, out(xb.size());
  xd.upload(xb.data(), xb.size());
  std::printf("%-36s %-58s %9s %10s %8s %9s %8s %10s %10s %10s %9s %9s\n", "code=cq, self-forcing span", "spec",
              "enc_ms", "cpu_enc_ms", "cpu_same", "dec_ms", "dec_GB/s", "dec_%copy", "%same_copy", "b2b_%copy", "bits",
              "bf16_diff");
  for (const std::string spec :
       {"qvg:iters=2,init=random", "qvg:code=cq,iters=2,init=random",
        "qvg:code=cq,cq_dim=2,cq_codewords=16,iters=2,init=random,centroid_format=fp8",
        "qvg:code=cq,cq_dim=4,cq_codewords=64,iters=2,init=random,centroid_format=fp8",
        "qvg:code=cq,cq_dim=4,cq_codewords=16,iters=2,init=random,centroid_format=fp8",
        "qvg:code=cq,cq_dim=1,cq_codewords=4,iters=2,init=random,centroid_format=fp8",
        "qvg:code=cq,cq_dim=8,cq_codewords=256,iters=2,init=random,centroid_format=fp8"}) {
    const CodecConfig c = parse_codec_spec(spec);
    const QvgShape sh = make_shape(c, x.heads, x.tokens, x.dim);
    DeviceParts parts;
    EncodedTensor host;
    double enc_ms = 0;
    double cpu_ms = 0;
    const char* cpu_same = "-";
    if (device_encodes(c)) {  // the GPU encoder (both codes)
      Encoder enc;
      const GpuKMeansOptions km = GpuKMeansOptions::fixed_iterations(c.kmeans);
      enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr);  // scratch allocated before timing
      enc_ms = timer.median_ms(3, [&] { enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr); });
      host.config = c;
      host.heads = x.heads;
      host.tokens = x.tokens;
      host.dim = x.dim;
      download_parts(parts, host, nullptr);
      if (uses_codebooks(c)) {  // the CPU reference beside it (all threads), and whether its bytes are the GPU's
        EncodeOptions opt;
        opt.threads = 0;
        const auto t0 = std::chrono::steady_clock::now();
        const EncodedTensor ref = make_codec(c)->encode(xr, opt);
        cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        // The codebook step's bytes against the CPU's: the whole encoding without stages; with stages the
        // CPU reference given the GPU's stage centroids and ids (a stage k-means of tens of thousands of
        // rows meets near-ties, where the two may assign differently: docs/FORMAT.md), which takes BF16
        // stage centroids only ("n/a" for FP8 ones).
        if (sh.stages == 0 || c.centroid_format == CentroidFormat::bf16) {
          const EncodedTensor want =
              sh.stages == 0 ? ref : qvg_encode_given_centroids_ref(xr, c, host.centroids, host.ids, TensorRole::key);
          bool same = true;
          for (const PartField& pf : kPartFields) same = same && want.*(pf.data) == host.*(pf.data);
          cpu_same = same ? "yes" : "no";
        } else {
          cpu_same = "n/a";
        }
      }
    } else {  // code=cq: the CPU reference, uploaded
      EncodeOptions opt;
      opt.threads = 0;
      const auto t0 = std::chrono::steady_clock::now();
      host = make_codec(c)->encode(xr, opt);
      enc_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      upload_parts(host, sh, parts, nullptr);
    }
    auto dec = [&] { decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr); };
    const double dec_ms = timer.median_ms(reps, dec);
    const double b2b_ms = timer.batch_median_ms(reps, 10, dec);
    const double moved = double(parts.bytes()) + double(out.bytes());
    double same_gbs = 0;
    {
      const size_t half = static_cast<size_t>(moved / 2) & ~size_t{15};
      DeviceBuffer<uint8_t> s0(half), s1(half);
      QVG_CUDA_CHECK(cudaMemset(s0.get(), 1, half));
      same_gbs = 2.0 * half / (timer.median_ms(reps, [&] {
                   QVG_CUDA_CHECK(cudaMemcpyAsync(s1.get(), s0.get(), half, cudaMemcpyDeviceToDevice));
                 }) * 1e6);
    }
    dec();
    std::vector<uint16_t> ob(xb.size());
    out.download(ob.data(), ob.size());
    QVG_CUDA_CHECK(cudaDeviceSynchronize());
    HeadTensor cpu;
    make_codec(c)->decode(host, cpu, 0);
    size_t diff = 0;
    for (size_t i = 0; i < ob.size(); ++i) diff += ob[i] != bf16_from_float(cpu.data[i]);
    const double gbs = moved / (dec_ms * 1e6), b2b_gbs = moved / (b2b_ms * 1e6);
    std::printf("%-36s %-58s %9.2f %10.1f %8s %9.4f %8.0f %9.1f%% %9.1f%% %9.1f%% %9.3f %9zu\n",
                "[12,37440,128] video-like keys", spec.c_str(), enc_ms, cpu_ms, cpu_same, dec_ms, gbs, 100.0 * gbs / copy_gbs, 100.0 * gbs / same_gbs,
                100.0 * b2b_gbs / copy_gbs, host.bits_per_value(), diff);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int reps = 20;
  bool quick = false, profile = false, starts = false, batch = false, warm = false, cq = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--starts")) starts = true;
    else if (!std::strcmp(argv[i], "--batch")) batch = true;
    else if (!std::strcmp(argv[i], "--warm")) warm = true;
    else if (!std::strcmp(argv[i], "--cq")) cq = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_cuda [--json FILE] [--reps N] [--quick] [--profile] [--starts] [--batch] [--warm] "
                   "[--cq]\n");
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    QVG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
    if (profile) {
      // One encode of QVG, QVG-Pro, QVG with its k-means++ start and qvg's
      // code=cq, each followed by two decodes (code=cq: its one decode, twice),
      // at the LongCat shape, for a per-kernel profile
      // (scripts/probes/ncu_summary.py).
      const HeadTensor x = random_normal(32, 29640, 128, 7);
      const std::vector<uint16_t> xb = to_bf16(x);
      DeviceBuffer<uint16_t> xd, out(xb.size());
      xd.upload(xb.data(), xb.size());
      for (const std::string spec :
           {"qvg:iters=2,init=random", "qvg-pro:iters=5,init=random", "qvg:iters=2", "qvg:code=cq,iters=2,init=random"}) {
        const CodecConfig c = parse_codec_spec(spec);
        const QvgShape sh = make_shape(c, x.heads, x.tokens, x.dim);
        const GpuKMeansOptions km = GpuKMeansOptions::fixed_iterations(c.kmeans);
        Encoder enc;
        DeviceParts parts;
        enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr);
        const bool cq_code = uses_codebooks(c);  // one decode kernel (automatic)
        decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr, DecodeKernel::automatic);
        decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr,
               cq_code ? DecodeKernel::automatic : DecodeKernel::vals16);
      }
      QVG_CUDA_CHECK(cudaDeviceSynchronize());
      std::printf("profile run done\n");
      return 0;
    }
    Timer timer;
    if (starts || batch || warm || cq) {  // the k-means starts, the batched encodes, warm-start iterations, code=cq
      if (starts) bench_starts(timer, reps);
      if (batch) bench_batch(timer, reps);
      if (warm) bench_warm(timer, reps);
      if (cq) bench_cq(timer, reps);
      return 0;
    }
    // Copy bandwidth: 2 GiB device-to-device, bytes read + written.
    const size_t copy_bytes = size_t(2) << 30;
    DeviceBuffer<uint8_t> c0(copy_bytes), c1(copy_bytes);
    QVG_CUDA_CHECK(cudaMemset(c0.get(), 1, copy_bytes));
    const double copy_gbs = copy_bandwidth_gbs(timer, reps);
    std::printf("copy bandwidth: %.0f GB/s (read + write of 2.0 GiB)\n", copy_gbs);
    // References for a write-dominated kernel: write-only bandwidth
    // (cudaMemset, 2 GiB) and a copy of the decode's output size (128 MiB).
    const double set_ms = timer.median_ms(reps, [&] { QVG_CUDA_CHECK(cudaMemsetAsync(c1.get(), 0, copy_bytes)); });
    const size_t small = size_t(128) << 20;
    const double small_ms = timer.median_ms(reps, [&] {
      QVG_CUDA_CHECK(cudaMemcpyAsync(c1.get(), c0.get(), small, cudaMemcpyDeviceToDevice));
    });
    std::printf("write-only bandwidth (memset 2 GiB): %.0f GB/s; copy of 128 MiB: %.0f GB/s\n\n",
                copy_bytes / (set_ms * 1e6), 2.0 * small / (small_ms * 1e6));
    c0 = DeviceBuffer<uint8_t>();
    c1 = DeviceBuffer<uint8_t>();

    struct ShapeCase {
      const char* name;
      int heads;
      int frames;
    };
    std::vector<ShapeCase> shapes = {{"self-forcing span [1,12,37440,128]", 12, 24},
                                     {"longcat context [1,32,29640,128]", 32, 19}};
    std::string json = "[\n";
    std::printf("%-36s %-11s %-44s %9s %9s %7s %11s %11s %11s %11s %11s\n", "shape", "data", "method", "enc_ms", "dec_ms",
                "dec_GB/s", "dec_%copy", "%same_copy", "b2b_%copy", "b2b_%same", "mse_gpu/cpu");
    for (const auto& sc : shapes) {
      for (const std::string data : {"random-normal", "video-like"}) {
        HeadTensor x;
        if (data == "video-like") {
          VideoLikeParams p;
          p.heads = sc.heads;
          p.frames = sc.frames;
          x = make_video_like(p, TensorRole::key);
        } else {
          x = random_normal(sc.heads, int64_t{sc.frames} * 1560, 128, 42);
        }
        const std::vector<uint16_t> xb = to_bf16(x);
        DeviceBuffer<uint16_t> xd;
        xd.upload(xb.data(), xb.size());
        DeviceBuffer<uint16_t> out(xb.size());
        // QVG with FP8 centroids beside its BF16 form; the last: QVG with its
        // default k-means++ start (on the GPU).
        for (const std::string spec : {"rtn", "qvg:iters=2,init=random", "qvg:iters=2,init=random,centroid_format=fp8",
                                       "qvg-pro:iters=5,init=random", "qvg:iters=2"}) {
          const CodecConfig c = parse_codec_spec(spec);
          const QvgShape sh = make_shape(c, x.heads, x.tokens, x.dim);
          const GpuKMeansOptions km = GpuKMeansOptions::fixed_iterations(c.kmeans);
          Encoder enc;
          DeviceParts parts;
          const double enc_ms = timer.median_ms(quick ? 3 : reps, [&] {
            enc.encode(xd.get(), DeviceElement::bf16, sh, km, parts, nullptr);
          });
          auto dec = [&] { decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr, DecodeKernel::automatic); };
          const double dec_ms = timer.median_ms(reps, dec);
          constexpr int kBatch = 10;
          const double b2b_ms = timer.batch_median_ms(reps, kBatch, dec);
          const double v16_ms = timer.median_ms(
              reps, [&] { decode(sh, parts.view(), out.get(), DeviceElement::bf16, nullptr, DecodeKernel::vals16); });
          // The same through the public device-resident API (qvg/device_codec.h):
          // what a caller of DeviceCodec pays over the kernels.
          DeviceCodec api(c);
          DeviceEncodedTensor resident;
          const double api_enc_ms = timer.median_ms(quick ? 3 : reps, [&] {
            resident = api.encode(xd.get(), DeviceElement::bf16, x.heads, x.tokens, x.dim, TensorRole::key, nullptr);
          });
          const double api_dec_ms = timer.median_ms(reps, [&] { api.decode(resident, out.get(), DeviceElement::bf16, nullptr); });
          const double part_bytes = double(parts.bytes());
          const double moved = part_bytes + double(out.bytes());
          const double dec_gbs = moved / (dec_ms * 1e6);
          // A copy that reads and writes as many bytes as this decode (moved / 2
          // each way): what the device does at this size, launch and tail
          // included, next to the 2 GiB copy rate the target names.
          double same_gbs = 0, same_b2b_gbs = 0;
          {
            const size_t half = static_cast<size_t>(moved / 2) & ~size_t{15};
            DeviceBuffer<uint8_t> s0(half), s1(half);
            QVG_CUDA_CHECK(cudaMemset(s0.get(), 1, half));
            auto copy = [&] { QVG_CUDA_CHECK(cudaMemcpyAsync(s1.get(), s0.get(), half, cudaMemcpyDeviceToDevice)); };
            same_gbs = 2.0 * half / (timer.median_ms(reps, copy) * 1e6);
            same_b2b_gbs = 2.0 * half / (timer.batch_median_ms(reps, kBatch, copy) * 1e6);
          }
          const double b2b_gbs = moved / (b2b_ms * 1e6);
          // Error against the CPU reference on the first two heads (same config, same start).
          double ratio = 0;
          if (!quick || data == "video-like") {
            HeadTensor x2(2, x.tokens, x.dim);
            for (size_t i = 0; i < x2.data.size(); ++i) x2.data[i] = bf16_to_float(xb[i]);
            EncodedTensor eg;
            {
              DeviceBuffer<float> xf;
              xf.upload(x2.data.data(), x2.data.size());
              DeviceParts p2;
              Encoder e2;
              const QvgShape s2 = make_shape(c, 2, x.tokens, x.dim);
              e2.encode(xf.get(), DeviceElement::f32, s2, km, p2, nullptr);
              DeviceBuffer<float> o2(x2.data.size());
              decode(s2, p2.view(), o2.get(), DeviceElement::f32, nullptr);
              HeadTensor rg(2, x.tokens, x.dim);
              o2.download(rg.data.data(), rg.data.size());
              QVG_CUDA_CHECK(cudaDeviceSynchronize());
              CodecConfig cc = c;
              cc.kmeans.tol = 0;  // the CPU stops only once the error stops falling
              auto cpu = make_codec(cc);
              HeadTensor rc;
              cpu->decode(cpu->encode(x2), rc);
              ratio = compare(x2, rg).mse / compare(x2, rc).mse;
            }
          }
          std::printf(
              "%-36s %-11s %-44s %9.3f %9.3f %7.0f %10.1f%% %10.1f%% %10.1f%% %10.1f%% %11.4f   (vals16 kernel: %.3f ms; "
              "DeviceCodec encode %.3f ms = %.3fx, decode %.3f ms = %.3fx)\n",
              sc.name, data.c_str(), spec.c_str(), enc_ms, dec_ms, dec_gbs, 100.0 * dec_gbs / copy_gbs,
              100.0 * dec_gbs / same_gbs, 100.0 * b2b_gbs / copy_gbs, 100.0 * b2b_gbs / same_b2b_gbs, ratio, v16_ms,
              api_enc_ms, api_enc_ms / enc_ms, api_dec_ms, api_dec_ms / dec_ms);
          std::fflush(stdout);
          char buf[1024];
          std::snprintf(buf, sizeof buf,
                        "  {\"shape\": \"%s\", \"data\": \"%s\", \"method\": \"%s\", \"encode_ms\": %.4f, "
                        "\"decode_ms\": %.4f, \"decode_vals16_ms\": %.4f, \"decode_bytes\": %.0f, \"decode_gbs\": %.1f, \"copy_gbs\": %.1f, "
                        "\"same_size_copy_gbs\": %.1f, \"decode_b2b_ms\": %.5f, \"decode_b2b_gbs\": %.1f, "
                        "\"same_size_copy_b2b_gbs\": %.1f, \"mse_ratio_gpu_cpu\": %.5f, \"api_encode_ms\": %.4f, "
                        "\"api_decode_ms\": %.4f},\n",
                        sc.name, data.c_str(), spec.c_str(), enc_ms, dec_ms, v16_ms, moved, dec_gbs, copy_gbs,
                        same_gbs, b2b_ms, b2b_gbs, same_b2b_gbs, ratio, api_enc_ms, api_dec_ms);
          json += buf;
        }
      }
    }
    if (json.size() > 2) json.erase(json.size() - 2, 1);
    json += "]\n";
    if (!json_path.empty()) std::ofstream(json_path) << json;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
