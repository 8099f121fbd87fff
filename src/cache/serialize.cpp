// StreamingKVCache::save / load: the streaming cache file (docs/FORMAT.md,
// "Streaming cache file"). Little-endian; a 20-byte header, then sections
// (tag, length, payload, CRC-32), each checked before it is parsed.
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/byte_io.h"
#include "cache/cache_impl.h"
#include "cache/checksum.h"
#include "core/codecs.h"
#include "io/io_util.h"
#include "qvg/methods.h"

namespace qvg {
namespace {

using nlohmann::json;
using byte_io::Reader;
using byte_io::Writer;

constexpr char kMagic[8] = {'Q', 'V', 'G', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kVersion = 2;     // written; 2: codecs stored as canonical specs
constexpr uint32_t kOldestVersion = 1;  // read: 1 stored each codec field as a JSON member
constexpr size_t kHeaderBytes = 20;         // magic, version, section count, header CRC
constexpr size_t kSectionHeadBytes = 16;    // tag, flags, payload length
constexpr uint64_t kMaxConfigBytes = 1u << 20;

// ---- config as JSON ----------------------------------------------------------------

/// A codec in the cache file: the name it was given and its canonical spec.
json codec_json(const CodecConfig& c) { return json{{"name", c.name}, {"spec", codec_spec(c)}}; }

json config_json(const CacheConfig& c) {
  return json{{"layers", c.layers},
              {"heads", c.heads},
              {"dim", c.dim},
              {"key_codec", codec_json(c.key)},
              {"value_codec", codec_json(c.value)},
              {"chunk_tokens", c.chunk_tokens},
              {"policy",
               {{"quant_factor", c.policy.quant_factor},
                {"keep_recent", c.policy.keep_recent},
                {"sink", c.policy.sink},
                {"window_chunks", c.policy.window_chunks},
                {"window_tokens", c.policy.window_tokens}}},
              {"rope",
               {{"mode", rope_mode_name(c.rope.mode)},
                {"theta", c.rope.theta},
                {"pairing", c.rope.pairing == RopePairing::interleaved ? "interleaved" : "half"}}},
              {"tail", tail_format_name(c.tail)},
              {"warm_start", c.warm_start}};
}

const json& field(const json& j, const char* key, const std::string& where) {
  QVG_CHECK(j.is_object() && j.contains(key), where, ": config has no field '", key, "'");
  return j.at(key);
}

int64_t int_field(const json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  const json& v = field(j, key, where);
  QVG_CHECK(v.is_number_integer(), where, ": config field '", key, "' must be an integer");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  QVG_CHECK(x >= lo && x <= hi, where, ": config field '", key, "' = ", x, " is out of range [", lo, ", ", hi, "]");
  return x;
}

std::string str_field(const json& j, const char* key, const std::string& where,
                      std::initializer_list<const char*> allowed = {}) {
  const json& v = field(j, key, where);
  QVG_CHECK(v.is_string(), where, ": config field '", key, "' must be a string");
  const std::string s = v.get<std::string>();
  if (allowed.size() > 0) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || s == a;
    QVG_CHECK(ok, where, ": config field '", key, "' has an unknown value '", s, "'");
  }
  return s;
}

double num_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  QVG_CHECK(v.is_number(), where, ": config field '", key, "' must be a number");
  return v.get<double>();
}

/// A codec of the cache file: {"name", "spec"}, or (files written before
/// the spec was stored) {"name", "method", and one member per field with
/// the spec's key}.
CodecConfig codec_from_json(const json& j, const std::string& where) {
  const std::string name = str_field(j, "name", where);
  CodecConfig c;
  try {
    if (j.contains("spec")) {
      c = parse_codec_spec(str_field(j, "spec", where));
    } else {
      c = parse_codec_spec(method_name(method_from_name(str_field(j, "method", where))));
      for (const CodecField& f : codec_fields()) {
        if (!j.contains(f.key)) continue;
        const json& v = j.at(f.key);
        QVG_CHECK(v.is_string() || v.is_number(), "config field '", f.key, "' must be a string or a number");
        f.set(c, v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
  } catch (const Error& e) {
    QVG_CHECK(false, where, ": ", e.what());
  }
  c.name = name;
  return c;
}

CacheConfig config_from_json(const json& j, const std::string& where) {
  QVG_CHECK(j.is_object(), where, ": config is not a JSON object");
  CacheConfig c;
  c.layers = static_cast<int>(int_field(j, "layers", where, 1, 65536));
  c.heads = static_cast<int>(int_field(j, "heads", where, 1, 65536));
  c.dim = static_cast<int>(int_field(j, "dim", where, 1, 65536));
  c.key = codec_from_json(field(j, "key_codec", where), where + " key_codec");
  c.value = codec_from_json(field(j, "value_codec", where), where + " value_codec");
  c.chunk_tokens = int_field(j, "chunk_tokens", where, 0, INT64_MAX);
  const json& p = field(j, "policy", where);
  c.policy.quant_factor = static_cast<int>(int_field(p, "quant_factor", where, 1, INT32_MAX));
  c.policy.keep_recent = static_cast<int>(int_field(p, "keep_recent", where, 0, INT32_MAX));
  c.policy.sink = static_cast<int>(int_field(p, "sink", where, 0, INT32_MAX));
  c.policy.window_chunks = int_field(p, "window_chunks", where, 0, INT64_MAX);
  c.policy.window_tokens = int_field(p, "window_tokens", where, 0, INT64_MAX);
  const json& r = field(j, "rope", where);
  c.rope.mode = parse_rope_mode(str_field(r, "mode", where, {"none", "1d", "3d"}));
  c.rope.theta = num_field(r, "theta", where);
  c.rope.pairing = str_field(r, "pairing", where, {"interleaved", "half"}) == "interleaved" ? RopePairing::interleaved
                                                                                            : RopePairing::half;
  c.tail = str_field(j, "tail", where, {"bf16", "f32"}) == "bf16" ? TailFormat::bf16 : TailFormat::f32;
  const json& w = field(j, "warm_start", where);
  QVG_CHECK(w.is_boolean(), where, ": config field 'warm_start' must be true or false");
  c.warm_start = w.get<bool>();
  try {
    validate(c);
  } catch (const Error& e) {
    QVG_CHECK(false, where, ": ", e.what());
  }
  return c;
}

// ---- layer payload -------------------------------------------------------------------


std::vector<uint8_t> layer_payload(const StreamingKVCache::Impl& I, int layer) {
  const CacheLayer& L = I.layers[static_cast<size_t>(layer)];
  Writer w;
  w.u32(static_cast<uint32_t>(layer));
  w.u32(0);
  w.i64(L.next_chunk);
  w.i64(L.next_token);
  w.i64(L.next_span);
  w.u64(L.spans.size());
  w.u64(L.chunks.size());
  for (const CacheSpan& sp : L.spans) {
    w.i64(sp.id);
    w.i64(sp.first_chunk);
    w.i64(sp.chunks);
    w.i64(sp.first_token);
    w.i64(sp.tokens);
    byte_io::write_encoded_record(w, sp.k, sp.k.config.kmeans.centroids);
    byte_io::write_encoded_record(w, sp.v, sp.v.config.kmeans.centroids);
  }
  for (const CacheChunk& ch : L.chunks) {
    w.i64(ch.index);
    w.i64(ch.first_token);
    w.i64(ch.tokens);
    w.u64(ch.live ? 1 : 0);
    w.i64(ch.span);
    w.i64(ch.span_offset);
    w.i32s(ch.positions);
    if (ch.span < 0) {
      w.raw(ch.k.data(), ch.k.size());
      w.raw(ch.v.data(), ch.v.size());
    }
  }
  for (const std::optional<EncodedTensor>* warm : {&L.warm_k, &L.warm_v}) {
    w.u64(warm->has_value() ? 1 : 0);
    if (*warm) {
      w.i64((*warm)->config.kmeans.centroids);
      w.bytes((*warm)->centroids);
    }
  }
  return std::move(w.buf);
}

EncodedTensor read_encoded(Reader& r, const StreamingKVCache::Impl& I, bool key, int64_t tokens, const char* what) {
  const CodecConfig& base = key ? I.config.key : I.config.value;
  EncodedTensor e;
  e.config = span_config(base, tokens);
  const int64_t cn = r.i64(what);
  QVG_CHECK(cn == e.config.kmeans.centroids, r.where(), ": ", what, " records ", cn, " centroids; a span of ", tokens,
            " tokens has ", e.config.kmeans.centroids);
  e.role = key ? TensorRole::key : TensorRole::value;
  e.heads = I.config.heads;
  e.tokens = tokens;
  e.dim = I.config.dim;
  byte_io::read_encoded_parts(r, e, what);
  return e;
}

CacheLayer read_layer(Reader& r, const StreamingKVCache::Impl& I, int layer) {
  const CacheConfig& c = I.config;
  CacheLayer L;
  const int64_t idx = r.u32("layer index");
  QVG_CHECK(idx == layer, r.where(), ": holds layer ", idx, ", expected layer ", layer);
  QVG_CHECK(r.u32("flags") == 0, r.where(), ": unknown flags");
  L.next_chunk = r.i64_in("chunks appended", 0, INT64_MAX / 2);
  L.next_token = r.i64_in("tokens appended", 0, INT64_MAX / 2);
  L.next_span = r.i64_in("spans encoded", 0, INT64_MAX / 2);
  const uint64_t spans = r.u64("span count"), chunks = r.u64("chunk count");
  // Each span record takes >= 5 * 8 + 2 * 8 * 8 bytes, each chunk >= 48: bound the counts by the payload.
  QVG_CHECK(spans <= r.left() / 168 && chunks <= r.left() / 48, r.where(), ": ", spans, " spans / ", chunks,
            " chunks cannot fit in ", r.left(), " bytes");
  const int pd = rope_position_dims(c.rope.mode);
  const size_t e = I.tail_value_bytes();
  for (uint64_t s = 0; s < spans; ++s) {
    CacheSpan sp;
    sp.id = r.i64_in("span id", 0, INT64_MAX / 2);
    sp.first_chunk = r.i64_in("span first chunk", 0, INT64_MAX / 2);
    sp.chunks = r.i64_in("span chunk count", 1, INT64_MAX / 2);
    sp.first_token = r.i64_in("span first token", 0, INT64_MAX / 2);
    sp.tokens = r.i64_in("span tokens", 1, INT64_MAX / 2);
    sp.k = read_encoded(r, I, true, sp.tokens, "span keys");
    sp.v = read_encoded(r, I, false, sp.tokens, "span values");
    L.spans.push_back(std::move(sp));
  }
  for (uint64_t s = 0; s < chunks; ++s) {
    CacheChunk ch;
    ch.index = r.i64_in("chunk index", 0, INT64_MAX / 2);
    ch.first_token = r.i64_in("chunk first token", 0, INT64_MAX / 2);
    ch.tokens = r.i64_in("chunk tokens", 1, INT64_MAX / 2 / (int64_t{c.heads} * c.dim * 4));
    const uint64_t live = r.u64("chunk live flag");
    QVG_CHECK(live <= 1, r.where(), ": chunk live flag is ", live);
    ch.live = live == 1;
    ch.span = r.i64_in("chunk span", -1, INT64_MAX / 2);
    ch.span_offset = r.i64_in("chunk span offset", 0, INT64_MAX / 2);
    if (ch.span < 0) QVG_CHECK(ch.span_offset == 0, r.where(), ": full-precision chunk with a span offset");
    ch.positions = r.i32s(static_cast<size_t>(ch.tokens * pd), "chunk positions");
    if (ch.span < 0) {
      const size_t n = static_cast<size_t>(int64_t{c.heads} * ch.tokens * c.dim) * e;
      ch.k = r.raw(n, "chunk keys");
      ch.v = r.raw(n, "chunk values");
    }
    L.chunks.push_back(std::move(ch));
  }
  for (const bool key : {true, false}) {
    const uint64_t present = r.u64("warm-start flag");
    QVG_CHECK(present <= 1, r.where(), ": warm-start flag is ", present);
    if (!present) continue;
    const CodecConfig& base = key ? c.key : c.value;
    EncodedTensor w;
    const int64_t cn = r.i64_in("warm-start centroids", 1, 256);
    QVG_CHECK(cn <= base.kmeans.centroids, r.where(), ": warm-start state with ", cn, " centroids, the config has ",
              base.kmeans.centroids);
    w.config = config_with_centroids(base, static_cast<int>(cn));
    w.role = key ? TensorRole::key : TensorRole::value;
    w.heads = c.heads;
    w.dim = c.dim;
    w.centroids = r.bytes("warm-start centroids");
    (key ? L.warm_k : L.warm_v) = std::move(w);
  }
  r.end();
  return L;
}

// ---- file ----------------------------------------------------------------------------

void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

void write_section(io_detail::OutFile& f, const char tag[4], const std::vector<uint8_t>& payload) {
  uint8_t head[kSectionHeadBytes] = {};
  std::memcpy(head, tag, 4);
  put_le32(head + 4, 0);
  const uint64_t n = payload.size();
  for (int i = 0; i < 8; ++i) head[8 + i] = static_cast<uint8_t>(n >> (8 * i));
  uint32_t crc = crc32(head, sizeof head);
  crc = crc32_update(crc, payload.data(), payload.size());
  uint8_t tail[4];
  put_le32(tail, crc);
  f.write(head, sizeof head);
  f.write(payload.data(), payload.size());
  f.write(tail, 4);
}

/// Reads one section; checks its tag, that it fits in the file, and its CRC.
std::vector<uint8_t> read_section(std::ifstream& f, const std::string& path, uint64_t& pos, uint64_t size,
                                  const char tag[4], const std::string& name) {
  const std::string where = path + ": " + name;
  QVG_CHECK(size - pos >= kSectionHeadBytes + 4, where, ": truncated file (section header missing at byte ", pos, ")");
  uint8_t head[kSectionHeadBytes];
  f.read(reinterpret_cast<char*>(head), sizeof head);
  QVG_CHECK(f.good(), where, ": read error");
  QVG_CHECK(std::memcmp(head, tag, 4) == 0, where, ": expected section tag '", std::string(tag, 4), "' at byte ",
            pos, ", found '", printable(std::string(reinterpret_cast<char*>(head), 4)), "' (corrupt file)");
  QVG_CHECK(get_le32(head + 4) == 0, where, ": unknown section flags");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(head[8 + i]) << (8 * i);
  pos += kSectionHeadBytes;
  QVG_CHECK(n <= size - pos - 4, where, ": section length ", n, " runs past the end of the file (",
            size - pos - 4, " bytes left): truncated or corrupt");
  std::vector<uint8_t> payload(n);
  f.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(n));
  uint8_t tail[4];
  f.read(reinterpret_cast<char*>(tail), 4);
  QVG_CHECK(f.good(), where, ": read error");
  pos += n + 4;
  const uint32_t crc = crc32_update(crc32(head, sizeof head), payload.data(), payload.size());
  QVG_CHECK(crc == get_le32(tail), where, ": checksum mismatch (stored CRC-32 0x", std::hex, get_le32(tail),
            ", computed 0x", crc, std::dec, "): the file is corrupt");
  return payload;
}

}  // namespace

void StreamingKVCache::save(const std::string& path) const {
  const Impl& I = *impl_;
  // A unique temporary file, fsynced and renamed over `path` (src/io/io_util.h): a
  // crash or a failed write leaves the previous file, and concurrent saves of one path
  // each leave a whole file (the last rename wins).
  io_detail::OutFile f(path);
  uint8_t head[kHeaderBytes];
  std::memcpy(head, kMagic, 8);
  put_le32(head + 8, kVersion);
  put_le32(head + 12, static_cast<uint32_t>(1 + I.config.layers));
  put_le32(head + 16, crc32(head, 16));
  f.write(head, sizeof head);
  const std::string conf = config_json(I.config).dump();
  write_section(f, "CONF", std::vector<uint8_t>(conf.begin(), conf.end()));
  for (int l = 0; l < I.config.layers; ++l) write_section(f, "LAYR", layer_payload(I, l));
  f.close();
}

StreamingKVCache StreamingKVCache::load(const std::string& path, CacheOptions options) {
  return load_file(path, options, nullptr);
}

StreamingKVCache StreamingKVCache::load(const std::string& path, const CacheConfig& expected, CacheOptions options) {
  return load_file(path, options, &expected);
}

StreamingKVCache StreamingKVCache::load_file(const std::string& path, const CacheOptions& options,
                                             const CacheConfig* expected) {
  check_regular_file(path);  // missing, a directory, a FIFO (whose open would block), a device: named
  std::ifstream f(path, std::ios::binary);
  QVG_CHECK(f.is_open(), path, ": cannot open streaming cache file");
  // The size of the file opened, not of the path: a save may rename another file over
  // the path in between (two sizes of one path made loads fail while saves ran).
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  QVG_CHECK(end >= 0, path, ": cannot determine the file size");
  const uint64_t size = static_cast<uint64_t>(end);
  f.seekg(0);
  QVG_CHECK(size >= kHeaderBytes, path, ": truncated file (", size, " bytes; the header alone is ", kHeaderBytes, ")");
  uint8_t head[kHeaderBytes];
  f.read(reinterpret_cast<char*>(head), sizeof head);
  QVG_CHECK(f.good(), path, ": read error");
  QVG_CHECK(std::memcmp(head, kMagic, 8) == 0, path, ": not a qvg streaming cache file (bad magic)");
  const uint32_t version = get_le32(head + 8);
  QVG_CHECK(crc32(head, 16) == get_le32(head + 16), path, ": header checksum mismatch: the file is corrupt");
  QVG_CHECK(version >= kOldestVersion && version <= kVersion, path, ": unsupported streaming cache format version ",
            version, " (this build reads versions ", kOldestVersion, " to ", kVersion, ")");
  const uint32_t sections = get_le32(head + 12);
  uint64_t pos = kHeaderBytes;

  const std::vector<uint8_t> conf = read_section(f, path, pos, size, "CONF", "config section");
  QVG_CHECK(conf.size() <= kMaxConfigBytes, path, ": config section too large");
  json j;
  try {
    j = json::parse(conf.begin(), conf.end());
  } catch (const std::exception& e) {
    QVG_CHECK(false, path, ": config section is not valid JSON (", printable(e.what()), ")");
  }
  CacheConfig config = config_from_json(j, path);
  // Compare the config before reading the (large) layer sections.
  if (expected) check_same_config(config, *expected, path + ": the file's cache config does not match");
  QVG_CHECK(sections == 1u + static_cast<uint32_t>(config.layers), path, ": header lists ", sections,
            " sections, a cache of ", config.layers, " layers has ", 1 + config.layers);
  auto impl = std::make_unique<Impl>(std::move(config), options);
  for (int l = 0; l < impl->config.layers; ++l) {
    const std::string name = "layer " + std::to_string(l) + " section";
    const std::vector<uint8_t> payload = read_section(f, path, pos, size, "LAYR", name);
    Reader r(payload, path + ": " + name);
    impl->layers[static_cast<size_t>(l)] = read_layer(r, *impl, l);
    try {
      check_layer_state(*impl, l);
      // Every span must decode (part sizes, centroid ids, span scales), and hold
      // values an encoder can have written (check_encoded_tensor: finite, and a
      // decode inside the float range).
      HeadTensor tmp;
      for (const CacheSpan& sp : impl->layers[static_cast<size_t>(l)].spans)
        for (const bool key : {true, false}) {
          const EncodedTensor& t = key ? sp.k : sp.v;
          try {
            (key ? impl->key_codec : impl->value_codec)->decode(t, tmp, options.threads);
            check_encoded_tensor(t, &tmp);
          } catch (const Error& e) {
            QVG_CHECK(false, "layer ", l, ", span ", sp.id, key ? ", keys: " : ", values: ", e.what());
          }
        }
    } catch (const Error& e) {
      QVG_CHECK(false, path, ": ", e.what());
    }
  }
  QVG_CHECK(pos == size, path, ": ", size - pos, " unexpected bytes after the last section");
  return StreamingKVCache(std::move(impl));
}


}  // namespace qvg
