// make_seeds <dir>: writes the seed corpora of the fuzz targets, valid files made
// by the library's own writers (write_npy, write_safetensors,
// StreamingKVCache::save, codec_spec, Codec::encode):
//   <dir>/npy             every dtype; ranks 0..4; an empty tensor
//   <dir>/safetensors     K/V files (one tensor, several, with metadata)
//   <dir>/model_weights   a tiny reference model (1 layer, dim 8) in bf16 and f32
//   <dir>/cache_file      small caches: every codec, RoPE modes, tails, policies
//   <dir>/codec_spec      every preset and spec with overrides, canonical forms
//   <dir>/encoded_tensor  encoded tensors of every method (encoded_input.h)
//   <dir>/encoded_record  the same tensors as records (serialize_encoded)
// Deterministic (fixed seeds). Small: a few hundred KiB in all.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "encoded_input.h"
#include "qvg/cache.h"
#include "qvg/codec.h"
#include "qvg/half.h"
#include "qvg/io.h"
#include "qvg/model.h"
#include "qvg/rope.h"
#include "qvg/serialize.h"

namespace {

namespace fs = std::filesystem;
using qvg::DType;

std::mt19937 rng(1234);

std::vector<float> normals(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

/// n random values of dtype t as stored bytes.
qvg::RawTensor raw(DType t, std::vector<int64_t> shape) {
  qvg::RawTensor r;
  r.dtype = t;
  r.shape = std::move(shape);
  const size_t n = static_cast<size_t>(r.numel());
  const std::vector<float> v = normals(n);
  r.bytes.resize(n * qvg::dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    switch (t) {
      case DType::f32: bits = qvg::float_bits(v[i]); break;
      case DType::f16: bits = qvg::fp16_from_float(v[i]); break;
      case DType::bf16: bits = qvg::bf16_from_float(v[i]); break;
      case DType::u8: bits = static_cast<uint64_t>(static_cast<int64_t>(v[i] * 40)) & 0xFF; break;
      case DType::i32: bits = static_cast<uint64_t>(static_cast<int64_t>(v[i] * 1000)) & 0xFFFFFFFF; break;
      case DType::i64: bits = static_cast<uint64_t>(static_cast<int64_t>(v[i] * 1e6)); break;
    }
    for (size_t b = 0; b < qvg::dtype_size(t); ++b) r.bytes[i * qvg::dtype_size(t) + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return r;
}

qvg::HeadTensor head_tensor(int64_t h, int64_t n, int64_t d) {
  qvg::HeadTensor x(h, n, d);
  // A few clusters plus noise: what the codecs are made for.
  const std::vector<float> centers = normals(static_cast<size_t>(4 * d), 2.0f);
  const std::vector<float> noise = normals(x.data.size(), 0.3f);
  for (int64_t i = 0; i < h * n; ++i)
    for (int64_t k = 0; k < d; ++k)
      x.data[static_cast<size_t>(i * d + k)] =
          centers[static_cast<size_t>((i % 4) * d + k)] + noise[static_cast<size_t>(i * d + k)];
  return x;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void npy_seeds(const fs::path& dir) {
  int i = 0;
  for (const DType t : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::i32, DType::i64})
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{}, {5}, {3, 4}, {3, 2, 8}, {1, 2, 3, 8}})
      qvg::write_npy((dir / ("t" + std::to_string(i++) + ".npy")).string(), raw(t, shape));
  qvg::write_npy((dir / "empty.npy").string(), raw(DType::f32, {0, 2, 8}));
}

void safetensors_seeds(const fs::path& dir) {
  int i = 0;
  for (const DType t : {DType::f32, DType::f16, DType::bf16})
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{3, 2, 8}, {1, 2, 3, 8}})
      qvg::write_safetensors((dir / ("kv" + std::to_string(i++) + ".safetensors")).string(), {{"k", raw(t, shape)}});
  qvg::write_safetensors((dir / "kvq.safetensors").string(),
                         {{"k", raw(DType::bf16, {4, 2, 8})}, {"v", raw(DType::bf16, {4, 2, 8})},
                          {"q", raw(DType::f32, {4, 2, 8})}, {"ids", raw(DType::i64, {4})}},
                         {{"layout", "thd"}, {"source", "make_seeds"}});
  qvg::write_safetensors((dir / "metadata_only.safetensors").string(), {}, {{"note", "no tensors"}});
}

void model_seeds(const fs::path& dir) {
  qvg::ModelConfig c;
  c.frame = 8;
  c.patch = 4;
  c.dim = 8;
  c.heads = 2;
  c.head_dim = 4;
  c.layers = 1;
  c.mlp_dim = 16;
  c.chunk_frames = 1;
  c.freq_dim = 8;
  const nlohmann::json config = {{"frame", c.frame},       {"patch", c.patch},     {"channels", c.channels},
                                 {"dim", c.dim},           {"heads", c.heads},     {"head_dim", c.head_dim},
                                 {"layers", c.layers},     {"mlp_dim", c.mlp_dim}, {"chunk_frames", c.chunk_frames},
                                 {"freq_dim", c.freq_dim}, {"eps", c.eps},         {"rope_theta", c.rope_theta},
                                 {"t_scale", c.t_scale}};
  for (const DType t : {DType::bf16, DType::f32}) {
    qvg::NamedTensors w;
    for (const auto& [name, shape] : qvg::expected_weight_shapes(c)) w.push_back({name, raw(t, shape)});
    const std::string p = (dir / (std::string("tiny_") + qvg::dtype_name(t) + ".safetensors")).string();
    qvg::write_safetensors(p, w, {{"format", "qvg-reference-video-dit-v1"}, {"config", config.dump()}});
    (void)qvg::Model::load(p);  // a seed the loader accepts
  }
}

void cache_seeds(const fs::path& dir) {
  struct Case {
    const char* name;
    const char* key;
    const char* value;
    qvg::RopeMode rope;
    qvg::TailFormat tail;
    int sink, keep_recent;
    int64_t window_chunks;
  };
  const Case cases[] = {
      {"qvg", "qvg:block=16,centroids=4", "qvg:block=16,centroids=4", qvg::RopeMode::none, qvg::TailFormat::bf16, 0, 0, 0},
      {"pro_3d", "qvg-pro:centroids=4,stages=2", "qvg-int4:block=32,centroids=4", qvg::RopeMode::wan_3d,
       qvg::TailFormat::f32, 1, 1, 0},
      {"fp8_1d", "qvg:block=32,centroids=4,centroid_format=fp8", "rtn:block=16", qvg::RopeMode::rope_1d,
       qvg::TailFormat::bf16, 0, 1, 3},
      {"baselines", "kivi:group=8,residual=4", "quarot-int4", qvg::RopeMode::none, qvg::TailFormat::bf16, 1, 0, 4},
      {"bf16", "bf16", "rtn-int4:block=32,scale=fp16", qvg::RopeMode::wan_3d, qvg::TailFormat::f32, 0, 0, 0},
  };
  constexpr int kHeads = 2, kDim = 32, kH = 2, kW = 4;  // 8 tokens per chunk
  for (const Case& k : cases) {
    qvg::CacheConfig c;
    c.layers = 2;
    c.heads = kHeads;
    c.dim = kDim;
    c.key = qvg::parse_codec_spec(k.key);
    c.value = qvg::parse_codec_spec(k.value);
    c.chunk_tokens = kH * kW;
    c.policy.quant_factor = 2;
    c.policy.sink = k.sink;
    c.policy.keep_recent = k.keep_recent;
    c.policy.window_chunks = k.window_chunks;
    c.rope.mode = k.rope;
    c.tail = k.tail;
    qvg::StreamingKVCache cache(c, qvg::CacheOptions{1});
    for (int64_t chunk = 0; chunk < 6; ++chunk)
      for (int l = 0; l < (chunk < 5 ? 2 : 1); ++l) {
        std::vector<int32_t> pos;
        if (k.rope == qvg::RopeMode::wan_3d) pos = qvg::wan_grid_positions(chunk, 1, kH, kW);
        if (k.rope == qvg::RopeMode::rope_1d) pos = qvg::positions_1d(chunk * kH * kW, kH * kW);
        cache.append(l, head_tensor(kHeads, kH * kW, kDim), head_tensor(kHeads, kH * kW, kDim), pos);
      }
    cache.save((dir / (std::string(k.name) + ".qvgc")).string());
  }
  qvg::CacheConfig empty;
  empty.layers = 1;
  empty.heads = 1;
  empty.dim = 64;
  qvg::StreamingKVCache(empty).save((dir / "empty.qvgc").string());
}

const char* const kSpecs[] = {
    "bf16", "rtn", "rtn-int4", "kivi", "kivi-int4", "quarot", "quarot-int4", "qvg", "qvg-int4", "qvg-pro",
    "qvg-pro-int4",
    ("qvg:bits=4,block=32,scale=fp16,levels=midrise,stages=3,centroids=17,iters=5,tol=0.5,"
     "init=random,seed=99,centroid_format=fp8"),
    "kivi:group=64,residual=128", "rtn:block=128,scale=fp16", "qvg-pro:tol=1e-30", "qvg:seed=18446744073709551615",
};

void spec_seeds(const fs::path& dir) {
  int i = 0;
  for (const char* s : kSpecs) {
    write_text(dir / ("s" + std::to_string(i++)), s);
    write_text(dir / ("s" + std::to_string(i++)), qvg::codec_spec(qvg::parse_codec_spec(s)));
  }
}

void encoded_seeds(const fs::path& dir, const fs::path& record_dir) {
  const char* const specs[] = {
      "bf16", "rtn:block=32", "rtn-int4:block=16,scale=fp16", "kivi:group=8,residual=8", "kivi-int4:group=8,residual=4",
      "quarot", "quarot-int4", "qvg:block=32,centroids=8", "qvg-pro:centroids=4",
      "qvg-int4:block=32,centroids=8,levels=midrise", "qvg:block=32,centroids=8,centroid_format=fp8",
  };
  const qvg::HeadTensor x = head_tensor(2, 24, 32);
  int i = 0;
  for (const char* s : specs)
    for (const qvg::TensorRole role : {qvg::TensorRole::key, qvg::TensorRole::value}) {
      qvg::EncodeOptions opt;
      opt.role = role;
      opt.threads = 1;
      const qvg::EncodedTensor e = qvg::make_codec(s)->encode(x, opt);
      qvg::fuzz::EncodedInput in;
      in.spec = qvg::codec_spec(e.config);
      in.value = role == qvg::TensorRole::value;
      in.heads = e.heads;
      in.tokens = e.tokens;
      in.dim = e.dim;
      for (size_t p = 0; p < std::size(qvg::kPartFields); ++p) in.parts[p] = e.*qvg::kPartFields[p].data;
      write_bytes(record_dir / ("r" + std::to_string(i)), qvg::serialize_encoded(e));
      write_bytes(dir / ("e" + std::to_string(i++)), qvg::fuzz::to_bytes(in));
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <dir>\n");
    return 2;
  }
  const fs::path root = argv[1];
  try {
    for (const char* d : {"npy", "safetensors", "model_weights", "cache_file", "codec_spec", "encoded_tensor",
                          "encoded_record"})
      fs::create_directories(root / d);
    npy_seeds(root / "npy");
    safetensors_seeds(root / "safetensors");
    model_seeds(root / "model_weights");
    cache_seeds(root / "cache_file");
    spec_seeds(root / "codec_spec");
    encoded_seeds(root / "encoded_tensor", root / "encoded_record");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
