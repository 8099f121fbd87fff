// Codec configurations: one struct for every method, with documented defaults,
// named presets ("qvg", "qvg-pro", "rtn", "kivi", "quarot", INT4 variants) and
// a textual spec with overrides: "qvg-pro:block=32,centroids=128".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qvg {

/// The compression methods. The traits table (method_traits) lists each one.
enum class Method {
  bf16,    ///< values stored as bfloat16 (the uncompressed reference cache)
  rtn,     ///< symmetric absmax per block of B along dim (round to nearest)
  kivi,    ///< KIVI: keys per channel, values per token, asymmetric, recent window
  quarot,  ///< QuaRot: normalized Walsh-Hadamard rotation + asymmetric per token
  qvg,     ///< Quant VideoGen: S k-means smoothing stages + group quantization
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
  kmeanspp,  ///< k-means++ (D^2 sampling) with the seed
};

/// K or V: KIVI quantizes them along different axes; the rest ignore it.
enum class TensorRole { key, value };

/// k-means over the tokens of one head (kmeans.h). Defaults in the comments.
struct KMeansParams {
  int centroids = 256;                    ///< C, 1..256 (ids are uint8), C <= tokens
  int max_iter = 10;                      ///< Lloyd iterations at most
  double tol = 1e-4;                      ///< stop when the relative drop of the
                                          ///< mean squared distance is below tol
  KMeansInit init = KMeansInit::kmeanspp; ///< start when no warm start is given
  uint64_t seed = 1234;                   ///< RNG seed (per head: seed + head)
};

/// One codec configuration. Fields a method does not use are ignored.
struct CodecConfig {
  std::string name = "qvg";  ///< the name it was created from (for reports)
  Method method = Method::qvg;
  int bits = 2;                           ///< 2 or 4
  int block = 64;                         ///< B along dim: 16, 32, 64 or 128 (rtn, qvg)
  ScaleFormat scale_format = ScaleFormat::fp8;  ///< rtn, qvg
  LevelRule levels = LevelRule::symmetric;      ///< rtn, qvg
  int stages = 1;                         ///< S smoothing stages, 0..8 (qvg)
  KMeansParams kmeans;                    ///< qvg
  int group = 32;                         ///< G: KIVI group size (tokens for keys, channels for values)
  int residual = 32;                      ///< R: KIVI newest tokens kept in bf16
};

/// One row of the traits table.
struct MethodTraits {
  Method method;
  const char* name;
  const char* summary;
};
const std::vector<MethodTraits>& method_traits();
const char* method_name(Method m);

/// Parse "preset[:key=value,...]". Presets: bf16, rtn, rtn-int4, kivi,
/// kivi-int4, quarot, quarot-int4, qvg, qvg-int4, qvg-pro, qvg-pro-int4.
/// Keys: bits, block, scale (fp8|fp16), levels (symmetric|midrise), stages,
/// centroids, iters, tol, init (random|kmeans++), seed, group, residual.
/// Throws qvg::Error naming the unknown preset/key or the bad value.
CodecConfig parse_codec_spec(const std::string& spec);

/// The preset names accepted by parse_codec_spec.
std::vector<std::string> codec_presets();

/// Throws qvg::Error when the configuration is invalid for dim (e.g. dim not
/// a multiple of block, bits not 2/4, centroids outside 1..256).
void validate(const CodecConfig& c, int64_t dim);

/// A spec that parse_codec_spec turns back into c, every field but `name`
/// equal (the method's preset with every option written out, tol to 17
/// significant digits): how an encoded tensor's configuration is stored
/// outside the library (the Python module's pickles).
std::string codec_spec(const CodecConfig& c);

/// Short human-readable description: "INT2 B64 fp8 S1 C256".
std::string describe(const CodecConfig& c);

}  // namespace qvg
