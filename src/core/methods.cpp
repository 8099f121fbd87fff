// The tables: configuration fields, methods and presets. A new method or
// field is a row here (plus its enum value in config.h, its reference code
// and its test).
#include "qvg/methods.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/codecs.h"
#include "qvg/common.h"
#include "reference/baselines.h"
#include "util/join.h"

namespace qvg {

namespace {

// ---- field parsing helpers -------------------------------------------------------

/// The values a field takes, as codec_fields lists them ("0..10000", "2|4").
std::string field_values(const char* key) {
  for (const CodecField& f : codec_fields())
    if (std::string(f.key) == key) return f.values;
  return "?";
}

int parse_int(const char* key, const std::string& v) {
  int out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  // (An integer beyond int's range, e.g. iters=99999999999, said only "needs an integer".)
  if (ec != std::errc() || p != v.data() + v.size()) {
    const std::string values = field_values(key);
    QVG_CHECK(false, "codec option '", key, "' needs an integer ", values.find('|') != std::string::npos ? "of " : "in ",
              values, ", got '", v, "'");
  }
  return out;
}

double parse_double(const char* key, const std::string& v) {
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QVG_CHECK(used == v.size() && !v.empty() && std::isfinite(out), "codec option '", key, "' needs a number, got '", v,
            "'");
  return out;
}

/// The index of v among names (an enum's values in order); throws naming key.
template <size_t N>
int parse_choice(const char* key, const std::string& v, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (v == names[i]) return static_cast<int>(i);
  std::string list;
  for (size_t i = 0; i < N; ++i) list += std::string(i == 0 ? "" : (i + 1 == N ? " or " : ", ")) + names[i];
  QVG_CHECK(false, "codec option '", key, "' must be ", list, ", got '", v, "'");
}

const char* const kScaleNames[] = {"fp8", "fp16"};           // ScaleFormat
const char* const kLevelNames[] = {"symmetric", "midrise"};  // LevelRule
const char* const kInitNames[] = {"random", "kmeans++", "d2-rounds"};     // KMeansInit
const char* const kCentroidNames[] = {"bf16", "fp8"};         // CentroidFormat
const char* const kCodeNames[] = {"int", "cq"};               // ResidualCode

std::string int_text(int v) { return std::to_string(v); }

// ---- the integer fields' values (declared once: help, check, budget grid) ------------

const IntValues kBits{.lo = 2, .hi = 4, .powers_of_two = true,
                      .get = [](const CodecConfig& c) { return c.bits; },
                      .set = [](CodecConfig& c, int v) { c.bits = v; }, .budget = BudgetGrid::accepted};
const IntValues kBlock{.lo = 16, .hi = 128, .powers_of_two = true, .divides_dim = "block",
                       .get = [](const CodecConfig& c) { return c.block; },
                       .set = [](CodecConfig& c, int v) { c.block = v; }, .budget = BudgetGrid::accepted};
const IntValues kStages{.lo = 0, .hi = 8, .get = [](const CodecConfig& c) { return c.stages; },
                        .set = [](CodecConfig& c, int v) { c.stages = v; }, .budget = BudgetGrid::up_to_config};
const IntValues kCentroids{.lo = 1, .hi = 256, .also = "auto", .why = " (ids are uint8)",
                           .get = [](const CodecConfig& c) { return c.kmeans.centroids; },
                           .set = [](CodecConfig& c, int v) { c.kmeans.centroids = v; },
                           .budget = BudgetGrid::up_to_tokens};
const IntValues kIters{.lo = 0, .hi = 10000, .get = [](const CodecConfig& c) { return c.kmeans.max_iter; },
                       .set = [](CodecConfig& c, int v) { c.kmeans.max_iter = v; }};
const IntValues kCqDim{.lo = 1, .hi = 8, .powers_of_two = true, .divides_dim = "cq_dim",
                       .get = [](const CodecConfig& c) { return c.cq_dim; },
                       .set = [](CodecConfig& c, int v) { c.cq_dim = v; }, .budget = BudgetGrid::accepted};
const IntValues kCqCodewords{.lo = 2, .hi = 256, .powers_of_two = true,
                             .get = [](const CodecConfig& c) { return c.cq_codewords; },
                             .set = [](CodecConfig& c, int v) { c.cq_codewords = v; },
                             .budget = BudgetGrid::accepted};
// KIVI's value groups split dim (its key groups run along the tokens).
const IntValues kGroup{.lo = 1, .hi = 4096, .divides_dim = "the value group",
                       .get = [](const CodecConfig& c) { return c.group; },
                       .set = [](CodecConfig& c, int v) { c.group = v; }, .budget = BudgetGrid::accepted};
const IntValues kResidual{.lo = 0, .hi = std::numeric_limits<int>::max(),
                          .get = [](const CodecConfig& c) { return c.residual; },
                          .set = [](CodecConfig& c, int v) { c.residual = v; }};

// ---- checks beyond the values (run for the methods that read the field) -----------------

void check_centroid_bits(const CodecConfig& c, int64_t) {
  QVG_CHECK(std::isfinite(c.centroid_bits) && c.centroid_bits > 0 && c.centroid_bits <= 4096, c.name,
            ": centroid_bits must be a number in (0, 4096], got ", c.centroid_bits);
}
void check_tol(const CodecConfig& c, int64_t) {
  QVG_CHECK(c.kmeans.tol >= 0, c.name, ": tol must be >= 0, got ", c.kmeans.tol);
}

}  // namespace

const std::vector<CodecField>& codec_fields() {
  static const std::vector<CodecField> table = [] {
    std::vector<CodecField> t = {
      {"bits", "", true, [](const CodecConfig& c) { return int_text(c.bits); },
       [](CodecConfig& c, const std::string& v) { c.bits = parse_int("bits", v); }, nullptr, nullptr, &kBits},
      {"block", "", true, [](const CodecConfig& c) { return int_text(c.block); },
       [](CodecConfig& c, const std::string& v) { c.block = parse_int("block", v); }, nullptr, nullptr, &kBlock},
      {"scale", "fp8|fp16", false,
       [](const CodecConfig& c) { return std::string(kScaleNames[static_cast<int>(c.scale_format)]); },
       [](CodecConfig& c, const std::string& v) {
         c.scale_format = static_cast<ScaleFormat>(parse_choice("scale", v, kScaleNames));
       },
       nullptr},
      {"levels", "symmetric|midrise", false,
       [](const CodecConfig& c) { return std::string(kLevelNames[static_cast<int>(c.levels)]); },
       [](CodecConfig& c, const std::string& v) {
         c.levels = static_cast<LevelRule>(parse_choice("levels", v, kLevelNames));
       },
       nullptr},
      {"stages", "", true, [](const CodecConfig& c) { return int_text(c.stages); },
       [](CodecConfig& c, const std::string& v) { c.stages = parse_int("stages", v); }, nullptr, nullptr, &kStages},
      {"centroids", "", true,
       [](const CodecConfig& c) { return c.auto_centroids ? std::string("auto") : int_text(c.kmeans.centroids); },
       [](CodecConfig& c, const std::string& v) {
         c.auto_centroids = v == "auto";
         c.kmeans.centroids = c.auto_centroids ? 256 : parse_int("centroids", v);  // auto: at most 256
       },
       nullptr, nullptr, &kCentroids},
      {"iters", "", true, [](const CodecConfig& c) { return int_text(c.kmeans.max_iter); },
       [](CodecConfig& c, const std::string& v) { c.kmeans.max_iter = parse_int("iters", v); }, nullptr, nullptr,
       &kIters},
      {"tol", "X", true,
       [](const CodecConfig& c) {
         char tol[32];
         std::snprintf(tol, sizeof tol, "%.17g", c.kmeans.tol);
         return std::string(tol);
       },
       [](CodecConfig& c, const std::string& v) { c.kmeans.tol = parse_double("tol", v); }, check_tol},
      {"init", "random|kmeans++|d2-rounds", false,
       [](const CodecConfig& c) { return std::string(kInitNames[static_cast<int>(c.kmeans.init)]); },
       [](CodecConfig& c, const std::string& v) {
         c.kmeans.init = static_cast<KMeansInit>(parse_choice("init", v, kInitNames));
       },
       nullptr},
      {"seed", "N", true, [](const CodecConfig& c) { return std::to_string(c.kmeans.seed); },
       [](CodecConfig& c, const std::string& v) {
         uint64_t seed = 0;  // 0 .. 2^64 - 1 (a negative seed would wrap around)
         const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
         QVG_CHECK(ec == std::errc() && p == v.data() + v.size() && !v.empty() && v[0] != '-',
                   "codec option 'seed' needs an integer 0..18446744073709551615, got '", v, "'");
         c.kmeans.seed = seed;
       },
       nullptr},
      {"centroid_format", "bf16|fp8", false,
       [](const CodecConfig& c) { return std::string(kCentroidNames[static_cast<int>(c.centroid_format)]); },
       [](CodecConfig& c, const std::string& v) {
         c.centroid_format = static_cast<CentroidFormat>(parse_choice("centroid_format", v, kCentroidNames));
       },
       nullptr},
      {"centroid_bits", "X", true,
       [](const CodecConfig& c) {
         char v[32];
         std::snprintf(v, sizeof v, "%.17g", c.centroid_bits);
         return std::string(v);
       },
       [](CodecConfig& c, const std::string& v) { c.centroid_bits = parse_double("centroid_bits", v); },
       check_centroid_bits},
      {"code", "int|cq", false,
       [](const CodecConfig& c) { return std::string(kCodeNames[static_cast<int>(c.code)]); },
       [](CodecConfig& c, const std::string& v) {
         c.code = static_cast<ResidualCode>(parse_choice("code", v, kCodeNames));
       },
       nullptr, "int"},
      {"cq_dim", "", true, [](const CodecConfig& c) { return int_text(c.cq_dim); },
       [](CodecConfig& c, const std::string& v) { c.cq_dim = parse_int("cq_dim", v); }, nullptr, nullptr, &kCqDim},
      {"cq_codewords", "", true, [](const CodecConfig& c) { return int_text(c.cq_codewords); },
       [](CodecConfig& c, const std::string& v) { c.cq_codewords = parse_int("cq_codewords", v); }, nullptr, nullptr,
       &kCqCodewords},
      {"group", "", true, [](const CodecConfig& c) { return int_text(c.group); },
       [](CodecConfig& c, const std::string& v) { c.group = parse_int("group", v); }, nullptr, nullptr, &kGroup},
      {"residual", "", true, [](const CodecConfig& c) { return int_text(c.residual); },
       [](CodecConfig& c, const std::string& v) { c.residual = parse_int("residual", v); }, nullptr, nullptr,
       &kResidual},
  };
    for (CodecField& f : t)
      if (f.ints) f.values = int_values_text(*f.ints);
    return t;
  }();
  return table;
}

namespace {

// ---- per-method rules ----------------------------------------------------------

std::string level_suffix(const CodecConfig& c) { return c.levels == LevelRule::midrise ? " midrise" : ""; }
const char* scale_name(const CodecConfig& c) { return kScaleNames[static_cast<int>(c.scale_format)]; }

std::string describe_bf16(const CodecConfig&) { return "BF16"; }
std::string describe_rtn(const CodecConfig& c) {
  return "INT" + std::to_string(c.bits) + " B" + std::to_string(c.block) + ' ' + scale_name(c) + level_suffix(c);
}
std::string centroid_text(const CodecConfig& c) {
  if (!c.auto_centroids) return std::to_string(c.kmeans.centroids);
  char v[48];
  std::snprintf(v, sizeof v, "auto(%.4g b)", c.centroid_bits);
  return v;
}
std::string describe_qvg(const CodecConfig& c) {
  const std::string stages = " S" + std::to_string(c.stages) + " C" + centroid_text(c) +
                             (c.centroid_format == CentroidFormat::fp8 ? " fp8c" : "");
  if (c.code == ResidualCode::codebook)
    return "CQ G" + std::to_string(c.cq_dim) + " K" + std::to_string(c.cq_codewords) + stages;
  return "INT" + std::to_string(c.bits) + " B" + std::to_string(c.block) + ' ' + scale_name(c) + stages +
         level_suffix(c);
}

/// qvg's code switches fields off: code=int reads bits, block, scale and
/// levels; code=cq reads cq_dim and cq_codewords instead.
bool qvg_reads(const CodecConfig& c, const std::string& key) {
  const bool cq = c.code == ResidualCode::codebook;
  if (key == "bits" || key == "block" || key == "scale" || key == "levels") return !cq;
  if (key == "cq_dim" || key == "cq_codewords") return cq;
  return true;
}
double bf16_code_bits(const CodecConfig&) { return 16.0; }
double qvg_code_bits(const CodecConfig& c) {
  return uses_codebooks(c) ? std::log2(static_cast<double>(c.cq_codewords)) / c.cq_dim : c.bits;
}
// FP16 scales and zero points go subnormal below 2^-20 (reference/baselines.h).
constexpr MagnitudeRange kAsymmetricFp16{0x1p-20, std::numeric_limits<double>::infinity()};

std::string describe_kivi(const CodecConfig& c) {
  return "INT" + std::to_string(c.bits) + " G" + std::to_string(c.group) + " R" + std::to_string(c.residual);
}
std::string describe_quarot(const CodecConfig& c) { return "INT" + std::to_string(c.bits) + " per-token"; }

void validate_quarot(const CodecConfig& c, int64_t dim) {
  QVG_CHECK((dim & (dim - 1)) == 0, c.name, ": QuaRot's Hadamard rotation needs a power-of-two head dim, got ", dim);
}

PartBytes bf16_bytes(const CodecConfig&, TensorRole, int64_t heads, int64_t tokens, int64_t dim) {
  PartBytes b;
  b.full_precision = static_cast<size_t>(heads * tokens * dim * 2);
  return b;
}
PartBytes qvg_bytes(const CodecConfig& c, TensorRole, int64_t heads, int64_t tokens, int64_t dim) {
  return qvg_expected_bytes(c, heads, tokens, dim);
}
PartBytes quarot_bytes(const CodecConfig& c, TensorRole, int64_t heads, int64_t tokens, int64_t dim) {
  return quarot_expected_bytes(c, heads, tokens, dim);
}

std::string describe_fp8(const CodecConfig& c) { return "E4M3 B" + std::to_string(c.block) + " e8m0"; }
double fp8_code_bits(const CodecConfig&) { return 8.0; }

// A method's own GPU decode (MethodTraits::decode_on_device): defined only in builds with CUDA.
#if QVG_WITH_CUDA
#define QVG_ON_DEVICE(f) f
#else
#define QVG_ON_DEVICE(f) nullptr
#endif

// Named configurations: QVG = INT2 S1 B64 C256; QVG-Pro = INT2 S4 B16 C256, with C
// = centroids=auto at CodecConfig's centroid_bits (0.25 bits per value a stage): 256 on spans of
// 16,384 tokens or more (the paper's Self-Forcing and LongCat spans, 37,440 and 29,640 tokens),
// floor(N / 64) on shorter ones, so that on any span of 256 tokens or more `qvg` stores at most
// 2.44 bits per value and `qvg-pro` at most 3.75 (2 + 8/16 + 4 * 8/128 + 4 * 0.25, plus the span
// scale). FP8 = E4M3 with one E8M0 scale per 32 values (OCP MX's block): 8.25 bits per value.
struct Preset {
  const char* name;
  Method method;
  int bits;
  int block;
  int stages;
};
const Preset kPresets[] = {
    {"bf16", Method::bf16, 16, 64, 0},         {"rtn", Method::rtn, 2, 64, 0},
    {"rtn-int4", Method::rtn, 4, 64, 0},       {"kivi", Method::kivi, 2, 64, 0},
    {"kivi-int4", Method::kivi, 4, 64, 0},     {"quarot", Method::quarot, 2, 64, 0},
    {"quarot-int4", Method::quarot, 4, 64, 0}, {"qvg", Method::qvg, 2, 64, 1},
    {"qvg-int4", Method::qvg, 4, 64, 1},       {"qvg-pro", Method::qvg, 2, 16, 4},
    {"qvg-pro-int4", Method::qvg, 4, 16, 4},   {"fp8", Method::fp8, 8, 32, 0},
};

}  // namespace

const std::vector<MethodTraits>& method_table() {
  static const std::vector<MethodTraits> table = {
      {.method = Method::bf16,
       .name = "bf16",
       .summary = "values stored as bfloat16 (uncompressed reference)",
       .fields = {},
       .budget_fields = {},
       .uncompressed = true,
       .device_decode = true,
       .code_bits = bf16_code_bits,
       .expected_bytes = bf16_bytes,
       .describe = describe_bf16,
       .make_cpu = make_bf16_codec,
       .check_values = check_bf16_values},
      {.method = Method::rtn,
       .name = "rtn",
       .summary = "symmetric absmax per block of B along dim",
       .fields = {"bits", "block", "scale", "levels"},
       .budget_fields = {"bits", "block"},
       .group_quantized = true,
       .device_encode = true,
       .device_decode = true,
       .expected_bytes = qvg_bytes,
       .describe = describe_rtn,
       .make_cpu = make_qvg_codec,
       .check_values = check_group_quantized_values},
      {.method = Method::kivi,
       .name = "kivi",
       .summary = "KIVI: per-channel keys, per-token values, asymmetric, bf16 window",
       .fields = {"bits", "group", "residual"},
       .budget_fields = {"bits", "group"},
       .asymmetric_fp16 = true,
       .role_layout = true,
       .device_decode = true,
       .encodable = kAsymmetricFp16,
       .expected_bytes = kivi_expected_bytes,
       .describe = describe_kivi,
       .make_cpu = make_kivi_codec,
       .check_values = check_kivi_values},
      {.method = Method::quarot,
       .name = "quarot",
       .summary = "QuaRot: Hadamard rotation + asymmetric per-token quantization",
       .fields = {"bits"},
       .budget_fields = {"bits"},
       .asymmetric_fp16 = true,
       .rotated = true,
       .device_decode = true,
       .encodable = kAsymmetricFp16,
       .validate = validate_quarot,
       .expected_bytes = quarot_bytes,
       .describe = describe_quarot,
       .make_cpu = make_quarot_codec,
       .check_values = check_quarot_values},
      {.method = Method::qvg,
       .name = "qvg",
       .summary = "Quant VideoGen: k-means smoothing stages + group quantization (code=int) or codebooks (code=cq)",
       .fields = {"bits", "block", "scale", "levels", "stages", "centroids", "iters", "tol", "init", "seed",
                  "centroid_format", "centroid_bits", "code", "cq_dim", "cq_codewords"},
       .budget_fields = {"bits", "block", "stages", "centroids", "cq_dim", "cq_codewords"},
       .clustered = true,
       .group_quantized = true,
       .device_encode = true,
       .device_decode = true,
       .code_bits = qvg_code_bits,
       .expected_bytes = qvg_bytes,
       .describe = describe_qvg,
       .make_cpu = make_qvg_codec,
       .check_values = check_group_quantized_values,
       .reads = qvg_reads},
      {.method = Method::fp8,
       .name = "fp8",
       .summary = "FP8 E4M3 values, a power-of-two (E8M0) scale per block of B along dim",
       .fields = {"block"},
       .budget_fields = {"block"},
       .device_decode = true,
       .decode_on_device = QVG_ON_DEVICE(fp8_decode_on_device),
       .code_bits = fp8_code_bits,
       // Below 2^-91 the block scale 2^e is clamped to e >= -100; 2^127 keeps e <= kFp8MaxScaleExponent.
       .encodable = {0x1p-91, 0x1p127},
       .expected_bytes = fp8_expected_bytes,
       .describe = describe_fp8,
       .make_cpu = make_fp8_codec,
       .check_values = check_fp8_values},
  };
  return table;
}

std::vector<std::string> codec_presets() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

std::vector<std::string> comparison_presets() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) {
    const CodecConfig c = preset_config(p.name);
    if (method_traits(c.method).uncompressed || code_bits(c) <= 2) v.emplace_back(p.name);
  }
  return v;
}

CodecConfig preset_config(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) {
      CodecConfig c;
      c.name = name;
      c.method = p.method;
      c.bits = p.bits;
      c.block = p.block;
      c.stages = p.stages;
      c.auto_centroids = p.stages > 0;
      return c;
    }
  std::vector<const char*> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  QVG_CHECK(false, "unknown method '", name, "' (known: ", join(names), ")");
}

}  // namespace qvg
