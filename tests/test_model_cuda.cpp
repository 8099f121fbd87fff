// The reference model's CUDA forward (qvg::CudaModel, Sampler with
// Backend::cuda) against the PyTorch golden outputs and against the CPU
// runtime. Every test that needs a device skips itself where none is usable;
// the no-device test runs everywhere.
#include <gtest/gtest.h>

#include "gpu_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "qvg/cuda.h"
#include "qvg/io.h"
#include "qvg/model.h"
#include "qvg/model_cuda.h"

#include "golden_util.h"

namespace {

using golden::Diff;
using golden::diff;
using golden::golden_f32;
using golden::kGolden;
using golden::first_tokens_thd;
using golden::GoldenResult;
using golden::kModel;
using golden::model;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

size_t chunk_values() { return static_cast<size_t>(model().config().chunk_frames * model().config().frame_values()); }
size_t token_values() {
  return static_cast<size_t>(model().config().tokens_per_chunk()) * model().config().patch_dim();
}

qvg::SamplerConfig gpu_config(qvg::CudaMath math = qvg::CudaMath::fp32) {
  qvg::SamplerConfig sc;
  sc.backend = qvg::Backend::cuda;
  sc.cuda.math = math;
  return sc;
}

/// The golden case through a Sampler on `sc`'s backend (Q/K/V checked).
GoldenResult run_golden(qvg::StreamingKVCache& cache, const qvg::SamplerConfig& sc, bool both_chunks = true) {
  return golden::run_golden(cache, sc, true, both_chunks);
}

/// A cache holding the two golden context chunks (encoded by the CPU runtime).
qvg::KVContext golden_context(const std::string& spec, int quant_factor) {
  qvg::SpanPolicy p;
  p.quant_factor = quant_factor;
  qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), spec, spec, true, p));
  qvg::Sampler s(model(), cache);
  const std::vector<float> ctx = golden_f32("context");
  s.add_context(std::span<const float>(ctx).subspan(0, chunk_values()));
  s.add_context(std::span<const float>(ctx).subspan(chunk_values(), chunk_values()));
  return qvg::read_context(cache, model().config());
}

// ---- runs everywhere --------------------------------------------------------------

// Without a device (or without CUDA) the API exists and says why it cannot run;
// with one, a device that does not exist is refused.
TEST(CudaModel, ClearErrorWithoutDevice) {
  std::string why;
  if (!qvg::cuda_available(&why)) {
    try {
      qvg::CudaModel g(model());
      ADD_FAILURE() << "no error without a device";
    } catch (const qvg::Error& e) {
      std::printf("[no device] %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("CUDA model"), std::string::npos) << e.what();
    }
    qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), "bf16", "bf16"));
    EXPECT_THROW(qvg::Sampler(model(), cache, gpu_config()), qvg::Error);
  } else {
    qvg::CudaModelOptions o;
    o.device = 999;
    EXPECT_THROW(qvg::CudaModel(model(), o), qvg::Error);
  }
}

TEST(CudaModel, NamesParse) {
  for (qvg::CudaMath m : {qvg::CudaMath::fp32, qvg::CudaMath::tf32, qvg::CudaMath::bf16})
    EXPECT_EQ(qvg::parse_cuda_math(qvg::cuda_math_name(m)), m);
  EXPECT_EQ(qvg::parse_backend("cuda"), qvg::Backend::cuda);
  EXPECT_EQ(qvg::parse_backend("cpu"), qvg::Backend::cpu);
  EXPECT_THROW(qvg::parse_cuda_math("fp16"), qvg::Error);
  EXPECT_THROW(qvg::parse_backend("gpu0"), qvg::Error);
}

// ---- on a device ----------------------------------------------------------------------

// The golden case on the GPU, exact (float32) cache, pre- and post-RoPE keys:
// the bounds of tests/test_model.cpp.
TEST(CudaModel, MatchesGoldenExactCache) {
  REQUIRE_GPU();
  for (bool pre_rope : {true, false}) {
    qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), "none", "none", pre_rope));
    const GoldenResult r = run_golden(cache, gpu_config(), pre_rope);
    golden::expect_golden_exact(r, "gpu golden exact cache", pre_rope, pre_rope);
    if (!pre_rope) continue;
    EXPECT_EQ(cache.chunks_appended(0), 4);
  }
}

// GPU forward vs CPU forward on the same context, velocity and every layer's
// Q / k_pre / K / V: no context, the exact cache's context and a QVG (INT2)
// cache's context (decoded by the CPU, so both backends see the same K/V).
TEST(CudaModel, ForwardMatchesCpu) {
  REQUIRE_GPU();
  const qvg::Model& m = model();
  qvg::CudaModel g(m);
  const std::vector<float> noise = golden_f32("noise");
  const std::span<const float> x = std::span<const float>(noise).first(token_values());
  struct Case {
    const char* name;
    qvg::KVContext ctx;
  };
  std::vector<Case> cases;
  cases.push_back({"no context", {}});
  cases.push_back({"exact cache", golden_context("none", 1 << 30)});
  cases.push_back({"qvg cache", golden_context("qvg", 1)});
  qvg::ForwardOptions fo;
  fo.record_q = true;
  for (const Case& cs : cases) {
    for (float t : {1.0f, 0.5f, 0.0f}) {
      std::vector<qvg::LayerKV> lc, lg;
      const std::vector<float> vc = m.forward(x, t, 6, cs.ctx, &lc, fo);
      const std::vector<float> vg = g.forward(x, t, 6, cs.ctx, &lg, fo);
      EXPECT_EQ(g.context_tokens(), cs.ctx.tokens());
      const Diff dv = diff(vg, vc);
      double kv_rel = 0;
      ASSERT_EQ(lg.size(), lc.size());
      for (size_t li = 0; li < lc.size(); ++li)
        for (auto [a, b] : {std::pair{&lg[li].q, &lc[li].q}, {&lg[li].k_pre, &lc[li].k_pre}, {&lg[li].k, &lc[li].k},
                            {&lg[li].v, &lc[li].v}}) {
          ASSERT_TRUE(a->same_shape(*b));
          kv_rel = std::max(kv_rel, diff(a->data, b->data).max_rel);
        }
      std::printf("[gpu vs cpu forward, %s (%lld tokens), t = %.2f] velocity max rel %.3g (max abs %.3g, rel L2 "
                  "%.3g); Q/K/V max rel %.3g\n",
                  cs.name, static_cast<long long>(cs.ctx.tokens()), t, dv.max_rel, dv.max_abs, dv.rel_l2, kv_rel);
      EXPECT_LE(dv.max_rel, 1e-4) << cs.name << " t " << t;
      EXPECT_LE(kv_rel, 1e-4) << cs.name << " t " << t;
    }
  }
}

// Whole continuations with a compressed cache (QVG INT2, a span per chunk):
// the GPU and CPU runs encode slightly different K/V (fp32 rounding), so
// k-means may differ in a few near-tied tokens; the frames must still agree
// far inside the codec's own error.
TEST(CudaModel, CompressedCacheCpuVsGpu) {
  REQUIRE_GPU();
  const std::vector<float> ctx = golden_f32("context");
  const std::vector<float> noise = golden_f32("noise");
  auto run = [&](qvg::Backend b) {
    qvg::SpanPolicy p;
    p.quant_factor = 1;
    qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), "qvg", "qvg", true, p));
    qvg::SamplerConfig sc = gpu_config();
    sc.backend = b;
    qvg::Sampler s(model(), cache, sc);
    s.add_context(std::span<const float>(ctx).subspan(0, chunk_values()));
    s.add_context(std::span<const float>(ctx).subspan(chunk_values(), chunk_values()));
    std::vector<float> f = s.generate(std::span<const float>(noise).first(token_values()));
    const std::vector<float> f1 = s.generate(std::span<const float>(noise).subspan(token_values(), token_values()));
    f.insert(f.end(), f1.begin(), f1.end());
    return f;
  };
  const std::vector<float> cpu = run(qvg::Backend::cpu), gpu = run(qvg::Backend::cuda);
  // The codec's own effect, for scale: exact cache vs qvg cache on the CPU.
  qvg::StreamingKVCache exact(qvg::model_cache_config(model().config(), "none", "none"));
  const GoldenResult ex = run_golden(exact, qvg::SamplerConfig{});
  const Diff d = diff(gpu, cpu), codec = diff(cpu, ex.frames);
  std::printf("[qvg cache, 2 generated chunks] gpu vs cpu frames rel L2 %.3g (max abs %.3g); the codec's own "
              "effect (qvg vs exact cache, cpu) rel L2 %.3g\n",
              d.rel_l2, d.max_abs, codec.rel_l2);
  EXPECT_LE(d.rel_l2, 0.5 * codec.rel_l2 + 1e-4);
}

// The context read on the device (spans decoded straight into the model's
// K/V buffers) gives the same frames, bit for bit, as the host read + upload,
// with the same GPU codecs, for QVG spans closing mid-run and for BF16.
TEST(CudaModel, DeviceContextReadMatchesHostRead) {
  REQUIRE_GPU();
  const std::vector<float> ctx = golden_f32("context");
  const std::vector<float> noise = golden_f32("noise");
  for (const std::string spec : {"qvg", "bf16"}) {
    auto run = [&](bool device_read) {
      qvg::SpanPolicy p;
      p.quant_factor = 2;
      qvg::CacheOptions co;
      co.backend = qvg::Backend::cuda;
      qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), spec, spec, true, p), co);
      qvg::SamplerConfig sc = gpu_config();
      sc.device_context_read = device_read;  // false: host read + upload, the reference path
      qvg::Sampler s(model(), cache, sc);
      s.add_context(std::span<const float>(ctx).subspan(0, chunk_values()));
      s.add_context(std::span<const float>(ctx).subspan(chunk_values(), chunk_values()));
      std::vector<float> f = s.generate(std::span<const float>(noise).first(token_values()));
      const std::vector<float> f1 = s.generate(std::span<const float>(noise).subspan(token_values(), token_values()));
      f.insert(f.end(), f1.begin(), f1.end());
      return f;
    };
    const std::vector<float> host = run(false), device = run(true);
    ASSERT_EQ(host.size(), device.size());
    EXPECT_EQ(0, std::memcmp(host.data(), device.data(), host.size() * sizeof(float))) << spec;
  }
}

// Two GPU runs (separate CudaModels) give the same bits: K/V, steps, frames.
TEST(CudaModel, Deterministic) {
  REQUIRE_GPU();
  const std::vector<float> ctx = golden_f32("context");
  const std::vector<float> noise = golden_f32("noise");
  struct Run {
    std::vector<qvg::LayerKV> kv;
    std::vector<std::vector<float>> steps;
    std::vector<float> frames;
  };
  auto run = [&]() {
    Run r;
    qvg::StreamingKVCache cache(qvg::model_cache_config(model().config(), "bf16", "bf16"));
    qvg::Sampler s(model(), cache, gpu_config());
    s.add_context(std::span<const float>(ctx).subspan(0, chunk_values()));
    s.add_context(std::span<const float>(ctx).subspan(chunk_values(), chunk_values()), &r.kv);
    r.frames = s.generate(std::span<const float>(noise).first(token_values()), nullptr, &r.steps);
    const std::vector<float> f1 = s.generate(std::span<const float>(noise).subspan(token_values(), token_values()));
    r.frames.insert(r.frames.end(), f1.begin(), f1.end());
    return r;
  };
  const Run a = run(), b = run();
  ASSERT_EQ(a.kv.size(), b.kv.size());
  for (size_t li = 0; li < a.kv.size(); ++li) {
    EXPECT_TRUE(same_bits(a.kv[li].q.data, b.kv[li].q.data)) << li;
    EXPECT_TRUE(same_bits(a.kv[li].k_pre.data, b.kv[li].k_pre.data)) << li;
    EXPECT_TRUE(same_bits(a.kv[li].k.data, b.kv[li].k.data)) << li;
    EXPECT_TRUE(same_bits(a.kv[li].v.data, b.kv[li].v.data)) << li;
  }
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) EXPECT_TRUE(same_bits(a.steps[k], b.steps[k])) << k;
  EXPECT_TRUE(same_bits(a.frames, b.frames));
}

TEST(CudaModel, RejectsBadInput) {
  REQUIRE_GPU();
  const qvg::Model& m = model();
  qvg::CudaModel g(m);
  std::vector<float> tok(token_values(), 0.f);
  EXPECT_THROW(g.forward(std::span<const float>(tok).subspan(1), 0.f, 0), qvg::Error);
  EXPECT_THROW(g.forward(tok, 1.5f, 0), qvg::Error);
  EXPECT_THROW(g.forward(tok, std::nanf(""), 0), qvg::Error);
  EXPECT_THROW(g.forward(tok, 0.f, -3), qvg::Error);
  qvg::KVContext ctx;
  ctx.k.assign(6, qvg::HeadTensor(2, 10, 128));
  ctx.v.assign(6, qvg::HeadTensor(2, 11, 128));  // V holds more tokens than K
  try {
    g.set_context(ctx);
    ADD_FAILURE() << "no error for a K/V token mismatch";
  } catch (const qvg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context layer 0"), std::string::npos) << e.what();
  }
  ctx.v.assign(6, qvg::HeadTensor(2, 10, 64));  // wrong head_dim
  EXPECT_THROW(g.forward(tok, 0.f, 0, ctx), qvg::Error);
  ctx.v.assign(5, qvg::HeadTensor(2, 10, 128));  // wrong layer count
  EXPECT_THROW(g.set_context(ctx), qvg::Error);
  // A refused context leaves the previous one in place, and the model usable.
  EXPECT_EQ(g.context_tokens(), 0);
  EXPECT_NO_THROW(g.forward(tok, 0.f, 0));
  qvg::StreamingKVCache wrong(qvg::CacheConfig::self_forcing("bf16", "bf16"));
  EXPECT_THROW(qvg::Sampler(m, wrong, gpu_config()), qvg::Error);
}

// TF32 and BF16 tensor-core matmuls: close to the fp32 path, and not equal to
// it (the mode is really in effect).
TEST(CudaModel, FastMathModes) {
  REQUIRE_GPU();
  const qvg::KVContext ctx = golden_context("none", 1 << 30);
  const std::vector<float> noise = golden_f32("noise");
  const std::span<const float> x = std::span<const float>(noise).first(token_values());
  qvg::CudaModel f32(model());
  const std::vector<float> ref = f32.forward(x, 0.75f, 6, ctx);
  for (auto [math, bound] : {std::pair{qvg::CudaMath::tf32, 2e-2}, {qvg::CudaMath::bf16, 1e-1}}) {
    qvg::CudaModelOptions o;
    o.math = math;
    qvg::CudaModel g(model(), o);
    const Diff d = diff(g.forward(x, 0.75f, 6, ctx), ref);
    std::printf("[gpu %s matmuls] velocity vs fp32 GPU: rel L2 %.3g, max rel %.3g\n", qvg::cuda_math_name(math),
                d.rel_l2, d.max_rel);
    EXPECT_GT(d.max_abs, 0.0) << qvg::cuda_math_name(math);
    EXPECT_LE(d.rel_l2, bound) << qvg::cuda_math_name(math);
  }
}

}  // namespace
