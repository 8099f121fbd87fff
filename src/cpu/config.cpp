#include "qvg/config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qvg/common.h"

namespace qvg {

const std::vector<MethodTraits>& method_traits() {
  static const std::vector<MethodTraits> table = {
      {Method::bf16, "bf16", "values stored as bfloat16 (uncompressed reference)"},
      {Method::rtn, "rtn", "symmetric absmax per block of B along dim"},
      {Method::kivi, "kivi", "KIVI: per-channel keys, per-token values, asymmetric, bf16 window"},
      {Method::quarot, "quarot", "QuaRot: Hadamard rotation + asymmetric per-token quantization"},
      {Method::qvg, "qvg", "Quant VideoGen: k-means smoothing stages + group quantization"},
  };
  return table;
}

const char* method_name(Method m) {
  for (const auto& t : method_traits())
    if (t.method == m) return t.name;
  return "?";
}

namespace {

struct Preset {
  const char* name;
  Method method;
  int bits;
  int block;
  int stages;
};

// Named configurations (DESIGN.md): QVG = INT2 S1 B64 C256; QVG-Pro = INT2 S4 B16 C256.
const Preset kPresets[] = {
    {"bf16", Method::bf16, 16, 64, 0},       {"rtn", Method::rtn, 2, 64, 0},
    {"rtn-int4", Method::rtn, 4, 64, 0},     {"kivi", Method::kivi, 2, 64, 0},
    {"kivi-int4", Method::kivi, 4, 64, 0},   {"quarot", Method::quarot, 2, 64, 0},
    {"quarot-int4", Method::quarot, 4, 64, 0}, {"qvg", Method::qvg, 2, 64, 1},
    {"qvg-int4", Method::qvg, 4, 64, 1},     {"qvg-pro", Method::qvg, 2, 16, 4},
    {"qvg-pro-int4", Method::qvg, 4, 16, 4},
};

int parse_int(const std::string& key, const std::string& v) {
  int out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  QVG_CHECK(ec == std::errc() && p == v.data() + v.size(), "codec option '", key,
            "' needs an integer, got '", v, "'");
  return out;
}

double parse_double(const std::string& key, const std::string& v) {
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QVG_CHECK(used == v.size() && !v.empty() && std::isfinite(out), "codec option '", key,
            "' needs a number, got '", v, "'");
  return out;
}

void apply_option(CodecConfig& c, const std::string& key, const std::string& v) {
  if (key == "bits") {
    c.bits = parse_int(key, v);
  } else if (key == "block") {
    c.block = parse_int(key, v);
  } else if (key == "scale") {
    QVG_CHECK(v == "fp8" || v == "fp16", "codec option 'scale' must be fp8 or fp16, got '", v, "'");
    c.scale_format = v == "fp8" ? ScaleFormat::fp8 : ScaleFormat::fp16;
  } else if (key == "levels") {
    QVG_CHECK(v == "symmetric" || v == "midrise",
              "codec option 'levels' must be symmetric or midrise, got '", v, "'");
    c.levels = v == "symmetric" ? LevelRule::symmetric : LevelRule::midrise;
  } else if (key == "stages") {
    c.stages = parse_int(key, v);
  } else if (key == "centroids") {
    c.kmeans.centroids = parse_int(key, v);
  } else if (key == "iters") {
    c.kmeans.max_iter = parse_int(key, v);
  } else if (key == "tol") {
    c.kmeans.tol = parse_double(key, v);
  } else if (key == "init") {
    QVG_CHECK(v == "random" || v == "kmeans++", "codec option 'init' must be random or kmeans++, got '",
              v, "'");
    c.kmeans.init = v == "random" ? KMeansInit::random : KMeansInit::kmeanspp;
  } else if (key == "seed") {
    uint64_t seed = 0;  // 0 .. 2^64 - 1 (a negative seed wrapped around)
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
    QVG_CHECK(ec == std::errc() && p == v.data() + v.size() && !v.empty() && v[0] != '-', "codec option 'seed' needs ",
              "an integer 0..18446744073709551615, got '", v, "'");
    c.kmeans.seed = seed;
  } else if (key == "group") {
    c.group = parse_int(key, v);
  } else if (key == "residual") {
    c.residual = parse_int(key, v);
  } else {
    QVG_CHECK(false, "unknown codec option '", key,
              "' (known: bits, block, scale, levels, stages, centroids, iters, tol, init, seed, "
              "group, residual)");
  }
}

std::string preset_list() {
  std::string s;
  for (const auto& p : kPresets) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

}  // namespace

std::vector<std::string> codec_presets() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

CodecConfig parse_codec_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  const Preset* preset = nullptr;
  for (const auto& p : kPresets)
    if (base == p.name) preset = &p;
  QVG_CHECK(preset != nullptr, "unknown method '", base, "' (known: ", preset_list(), ")");
  CodecConfig c;
  c.name = spec;
  c.method = preset->method;
  c.bits = preset->bits;
  c.block = preset->block;
  c.stages = preset->stages;
  if (colon != std::string::npos) {
    std::stringstream ss(spec.substr(colon + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const size_t eq = item.find('=');
      QVG_CHECK(eq != std::string::npos && eq > 0, "codec option '", item, "' in '", spec,
                "' is not of the form key=value");
      apply_option(c, item.substr(0, eq), item.substr(eq + 1));
    }
  }
  return c;
}

void validate(const CodecConfig& c, int64_t dim) {
  QVG_CHECK(dim > 0, "head dim must be positive, got ", dim);
  if (c.method == Method::bf16) return;
  QVG_CHECK(c.bits == 2 || c.bits == 4, c.name, ": bits must be 2 or 4, got ", c.bits);
  switch (c.method) {
    case Method::rtn:
    case Method::qvg:
      QVG_CHECK(c.block == 16 || c.block == 32 || c.block == 64 || c.block == 128, c.name,
                ": block must be 16, 32, 64 or 128, got ", c.block);
      QVG_CHECK(dim % c.block == 0, c.name, ": head dim ", dim, " is not a multiple of block ",
                c.block);
      if (c.method == Method::qvg) {
        QVG_CHECK(c.stages >= 0 && c.stages <= 8, c.name, ": stages must be 0..8, got ", c.stages);
        QVG_CHECK(c.kmeans.centroids >= 1 && c.kmeans.centroids <= 256, c.name,
                  ": centroids must be 1..256 (ids are uint8), got ", c.kmeans.centroids);
        QVG_CHECK(c.kmeans.max_iter >= 0 && c.kmeans.max_iter <= 10000, c.name,
                  ": iters must be 0..10000, got ", c.kmeans.max_iter);
        QVG_CHECK(c.kmeans.tol >= 0, c.name, ": tol must be >= 0, got ", c.kmeans.tol);
      }
      break;
    case Method::kivi:
      QVG_CHECK(c.group >= 1 && c.group <= 4096, c.name, ": group must be 1..4096, got ", c.group);
      QVG_CHECK(c.residual >= 0, c.name, ": residual must be >= 0, got ", c.residual);
      QVG_CHECK(dim % c.group == 0, c.name, ": head dim ", dim,
                " is not a multiple of the value group ", c.group);
      break;
    case Method::quarot:
      QVG_CHECK((dim & (dim - 1)) == 0, c.name, ": QuaRot's Hadamard rotation needs a power-of-two "
                "head dim, got ", dim);
      break;
    case Method::bf16:
      break;
  }
}

std::string codec_spec(const CodecConfig& c) {
  char tol[32];
  std::snprintf(tol, sizeof tol, "%.17g", c.kmeans.tol);
  std::ostringstream os;
  os << method_name(c.method) << ":bits=" << c.bits << ",block=" << c.block
     << ",scale=" << (c.scale_format == ScaleFormat::fp8 ? "fp8" : "fp16")
     << ",levels=" << (c.levels == LevelRule::symmetric ? "symmetric" : "midrise") << ",stages=" << c.stages
     << ",centroids=" << c.kmeans.centroids << ",iters=" << c.kmeans.max_iter << ",tol=" << tol
     << ",init=" << (c.kmeans.init == KMeansInit::random ? "random" : "kmeans++") << ",seed=" << c.kmeans.seed
     << ",group=" << c.group << ",residual=" << c.residual;
  return os.str();
}

std::string describe(const CodecConfig& c) {
  std::ostringstream os;
  switch (c.method) {
    case Method::bf16:
      os << "BF16";
      break;
    case Method::rtn:
      os << "INT" << c.bits << " B" << c.block << ' '
         << (c.scale_format == ScaleFormat::fp8 ? "fp8" : "fp16");
      break;
    case Method::qvg:
      os << "INT" << c.bits << " B" << c.block << ' '
         << (c.scale_format == ScaleFormat::fp8 ? "fp8" : "fp16") << " S" << c.stages << " C"
         << c.kmeans.centroids;
      break;
    case Method::kivi:
      os << "INT" << c.bits << " G" << c.group << " R" << c.residual;
      break;
    case Method::quarot:
      os << "INT" << c.bits << " per-token";
      break;
  }
  if ((c.method == Method::rtn || c.method == Method::qvg) && c.levels == LevelRule::midrise)
    os << " midrise";
  return os.str();
}

}  // namespace qvg
