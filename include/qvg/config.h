// Codec configurations: one struct for every method, with documented defaults,
// named presets ("qvg", "qvg-pro", "rtn", "kivi", "quarot", INT4 variants) and
// a textual spec with overrides: "qvg-pro:block=32,centroids=128".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qvg {

/// The compression methods. The method table (qvg/methods.h) has a row for each.
enum class Method {
  bf16,    ///< values stored as bfloat16 (the uncompressed reference cache)
  rtn,     ///< symmetric absmax per block of B along dim (round to nearest)
  kivi,    ///< KIVI: keys per channel, values per token, asymmetric, recent window
  quarot,  ///< QuaRot: normalized Walsh-Hadamard rotation + asymmetric per token
  qvg,     ///< Quant VideoGen: S k-means smoothing stages + group quantization
  fp8,     ///< FP8 E4M3 values, a power-of-two (E8M0) scale per block of B along dim
};

enum class ScaleFormat { fp8, fp16 };

/// How a b-bit code maps to a level (symmetric group quantization only).
enum class LevelRule {
  /// Paper-faithful: q in [-(2^(b-1)-1), 2^(b-1)-1], value = q * scale,
  /// scale = absmax / (2^(b-1)-1). INT2 uses three levels {-1, 0, +1}.
  symmetric,
  /// All 2^b levels: value = (u - (2^b-1)/2) * scale, scale = absmax /
  /// ((2^b-1)/2). INT2 levels {-1.5, -0.5, 0.5, 1.5} * scale; no exact zero.
  midrise,
};

enum class KMeansInit {
  random,    ///< C distinct tokens drawn with the seed
  kmeanspp,  ///< k-means++ (D^2 sampling, one centre a step) with the seed
  d2_rounds, ///< D^2 sampling in rounds (many centres a step) with the seed (kmeans.h)
};

/// K or V: KIVI quantizes them along different axes; the rest ignore it.
enum class TensorRole { key, value };

/// k-means over the tokens of one head (kmeans.h). Defaults in the comments.
struct KMeansParams {
  int centroids = 256;                    ///< C, 1..256 (ids are uint8), C <= tokens
  int max_iter = 10;                      ///< Lloyd iterations at most
  double tol = 1e-4;                      ///< stop when the relative drop of the
                                          ///< mean squared distance is at most tol
  KMeansInit init = KMeansInit::d2_rounds; ///< start when no warm start is given
  uint64_t seed = 1234;                   ///< RNG seed (stage s, head h: seed + 1000003 s + h)
};

/// How k-means centroids are stored (qvg): BF16 values, or FP8 E4M3 codes with
/// one power-of-two FP32 scale per stage and head (docs/FORMAT.md). With
/// code=cq the codebooks are stored in the same format (one FP32 scale a head).
enum class CentroidFormat { bf16, fp8 };

/// How qvg codes the residual its smoothing stages leave (docs/FORMAT.md).
enum class ResidualCode {
  /// code=int: b-bit integers with a scale per block of B values (bits,
  /// block, scale, levels). The default; specs leave it out.
  integer,
  /// code=cq: each token's residual divided by its RMS (one FP8 scale a
  /// token), cut into D / G sub-vectors of G = cq_dim channels, each stored
  /// as the index of the nearest of K = cq_codewords codewords of the
  /// codebook of its (head, channel group), trained per span by the
  /// reference's k-means (log2(K) / G bits a value, + 8 / D for the scale).
  codebook,
};

/// One codec configuration. Fields a method does not use are ignored; the
/// method table (qvg/methods.h) lists the fields each method reads.
struct CodecConfig {
  std::string name = "qvg";  ///< the name it was created from (for reports)
  Method method = Method::qvg;
  int bits = 2;                           ///< 2 or 4
  int block = 64;                         ///< B along dim: 16, 32, 64 or 128 (rtn, qvg)
  ScaleFormat scale_format = ScaleFormat::fp8;  ///< rtn, qvg
  LevelRule levels = LevelRule::symmetric;      ///< rtn, qvg
  int stages = 1;                         ///< S smoothing stages, 0..8 (qvg)
  KMeansParams kmeans;                    ///< qvg
  CentroidFormat centroid_format = CentroidFormat::bf16;  ///< qvg
  /// centroids=auto (qvg): C is chosen per span from its length N, not fixed:
  /// the most centroids (at most kmeans.centroids = 256, at most N, at least
  /// 1) whose stored values cost at most centroid_bits bits per value per
  /// stage: C = clamp(floor(centroid_bits * N / cb), 1, min(256, N)), cb = 16
  /// (BF16) or 8 (FP8) bits per centroid value (FP8's per-stage FP32 scale is
  /// not counted). span_config resolves it; an encoding holds the resolved C
  /// (a saved cache's warm-start state too: config_with_centroids).
  bool auto_centroids = false;
  /// With auto_centroids: bits per value per stage, > 0. 0.25, the qvg
  /// presets' (C = 256 from 16,384 tokens; floor(N / 64) below).
  double centroid_bits = 0.25;
  ResidualCode code = ResidualCode::integer;  ///< qvg: the residual's code
  int cq_dim = 2;                         ///< code=cq: channels per sub-vector, 1|2|4|8, divides dim
  int cq_codewords = 16;                  ///< code=cq: codewords per codebook, a power of two 2..256
  int group = 32;                         ///< G: KIVI group size (tokens for keys, channels for values)
  int residual = 32;                      ///< R: KIVI newest tokens kept in bf16
};

/// Where the budget rule (qvg/budget.h) searches an integer field.
enum class BudgetGrid {
  none,           ///< never: the field keeps the config's value
  accepted,       ///< every value the field accepts for the head dim
  up_to_config,   ///< those from 1 up to the config's own value (0 when it is 0): stages
  up_to_tokens,   ///< those up to the span's tokens: centroids (k-means needs C <= N)
};

/// The integers a field accepts, declared once with the field: its help
/// text (CodecField::values), its check (validate) and the values the budget
/// rule tries (budget_field_values) all come from it.
struct IntValues {
  int lo = 0, hi = 0;                 ///< the accepted values lie in lo..hi
  bool powers_of_two = false;         ///< only the powers of two in lo..hi
  /// Non-null: only values that divide the head dim; the name the error
  /// gives the value ("block", "the value group").
  const char* divides_dim = nullptr;
  /// Text accepted besides the integers, for help and messages ("auto");
  /// its parsing is the field's own set.
  const char* also = nullptr;
  const char* why = nullptr;          ///< why the range, for messages: " (ids are uint8)"
  int (*get)(const CodecConfig& c) = nullptr;   ///< the field as an int
  void (*set)(CodecConfig& c, int v) = nullptr;
  BudgetGrid budget = BudgetGrid::none;
};

/// The values of `v` accepted for head dim `dim` (every dim when dim <= 0),
/// ascending.
std::vector<int> accepted_values(const IntValues& v, int64_t dim);

/// v as help text: "2|4", "0..8", "1..256|auto".
std::string int_values_text(const IntValues& v);

/// One configuration field as the spec string, the cache file, reports and
/// the help text name it. The table (codec_fields) is the only place that
/// spells a field's key and its values.
struct CodecField {
  const char* key;     ///< spec key: "bits"
  /// Accepted values, for help: "2|4"; for integer fields made from `ints`.
  std::string values;
  bool is_number;      ///< a number in JSON (else a string); centroids=auto is the string "auto"
  /// The value as canonical text ("2", "fp8", "0.0001" to 17 digits).
  std::string (*get)(const CodecConfig& c);
  /// Parses text into c; throws qvg::Error naming the key and the value.
  void (*set)(CodecConfig& c, const std::string& text);
  /// Throws qvg::Error (prefixed with c.name) when c's value is invalid for
  /// head dim `dim` beyond what `ints` says (null: nothing more); checked
  /// only for configs that read the field.
  void (*check)(const CodecConfig& c, int64_t dim) = nullptr;
  /// A value the canonical spec, reports and files leave out (code=int: the
  /// specs and files written before the field existed stay byte for byte
  /// the same); null: always written.
  const char* omitted = nullptr;
  /// An integer field's accepted values; null for the others.
  const IntValues* ints = nullptr;
};

/// Every configuration field, in spec order.
const std::vector<CodecField>& codec_fields();

/// The fields method m may read (a subset of codec_fields, in spec order).
std::vector<const CodecField*> method_fields(Method m);

/// The fields config c reads: its method's, less those its other fields
/// switch off (qvg with code=cq reads cq_dim and cq_codewords, not bits,
/// block, scale or levels; with code=int the reverse).
std::vector<const CodecField*> config_fields(const CodecConfig& c);

/// True when config c reads field `key` (one of config_fields(c)).
bool reads_field(const CodecConfig& c, const std::string& key);

/// Calls f(field, canonical value text) for every field c reads, except
/// those at their omitted value (CodecField::omitted).
template <typename F>
void for_each_field(const CodecConfig& c, F&& f) {
  for (const CodecField* field : config_fields(c)) {
    std::string v = field->get(c);
    if (field->omitted && v == field->omitted) continue;
    f(*field, v);
  }
}

const char* method_name(Method m);
/// The method named `name`; throws qvg::Error listing the known names.
Method method_from_name(const std::string& name);

/// Smoothing stages actually run: c.stages for methods with k-means stages
/// (qvg), 0 for every other method (RTN is QVG with no stage).
int smoothing_stages(const CodecConfig& c);

/// Parse "preset[:key=value,...]". Presets: bf16, rtn, rtn-int4, kivi,
/// kivi-int4, quarot, quarot-int4, qvg, qvg-int4, qvg-pro, qvg-pro-int4, fp8;
/// the qvg ones with centroids=auto at centroid_bits = 0.25 (C = 256 on
/// spans of 16,384 tokens or more; `centroids=256` fixes it).
/// Keys: codec_fields(). Throws qvg::Error naming the unknown preset/key or
/// the bad value.
CodecConfig parse_codec_spec(const std::string& spec);

/// The preset names accepted by parse_codec_spec.
std::vector<std::string> codec_presets();

/// The presets compared by default (`qvg eval`, `compare`, `demo`): bf16
/// (the reference) and every preset whose codes have at most 2 bits (not
/// the INT4 variants), in codec_presets()' order.
std::vector<std::string> comparison_presets();

/// Throws qvg::Error when the configuration is invalid for dim (e.g. dim not
/// a multiple of block, bits not 2/4, centroids outside 1..256).
void validate(const CodecConfig& c, int64_t dim);

/// The canonical spec: the method's name and every field it reads written
/// out, but those at their omitted value (for_each_field)
/// ("rtn:bits=2,block=64,scale=fp8,levels=symmetric"; tol to 17
/// significant digits). parse_codec_spec turns it back into a config equal
/// to c in the method and every field it reads (same_codec). How an encoded
/// tensor's configuration is stored outside the library (cache files, the
/// Python module's pickles).
std::string codec_spec(const CodecConfig& c);

/// True when a and b have the same method and agree on every field a reads
/// (config_fields; the name is not compared). If not, *diff names the first field that
/// differs ("method" or a field key).
bool same_codec(const CodecConfig& a, const CodecConfig& b, std::string* diff = nullptr);

/// Short human-readable description: "INT2 B64 fp8 S1 C256".
std::string describe(const CodecConfig& c);

}  // namespace qvg
