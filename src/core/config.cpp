// The generic side of configurations: parsing, the canonical spec,
// validation and comparison, all driven by the tables in methods.cpp.
#include "qvg/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "core/codecs.h"
#include "qvg/common.h"
#include "qvg/methods.h"
#include "util/join.h"

namespace qvg {

const MethodTraits& method_traits(Method m) {
  for (const auto& t : method_table())
    if (t.method == m) return t;
  QVG_CHECK(false, "unknown method id ", static_cast<int>(m));
}

const char* method_name(Method m) {
  for (const auto& t : method_table())
    if (t.method == m) return t.name;
  return "?";
}

std::string method_names_where(bool (*keep)(const MethodTraits& t)) {
  std::vector<const char*> names;
  for (const auto& t : method_table())
    if (keep(t)) names.push_back(t.name);
  return join(names, ", ", " and ");
}

Method method_from_name(const std::string& name) {
  std::vector<const char*> names;
  for (const auto& t : method_table()) {
    if (name == t.name) return t.method;
    names.push_back(t.name);
  }
  QVG_CHECK(false, "unknown method '", name, "' (known: ", join(names), ")");
}

std::vector<const CodecField*> method_fields(Method m) {
  std::vector<const CodecField*> out;
  const auto& keys = method_traits(m).fields;
  for (const CodecField& f : codec_fields())
    for (const auto& k : keys)
      if (k == f.key) out.push_back(&f);
  return out;
}

bool reads_field(const CodecConfig& c, const std::string& key) {
  const MethodTraits& t = method_traits(c.method);
  if (std::find(t.fields.begin(), t.fields.end(), key) == t.fields.end()) return false;
  return t.reads == nullptr || t.reads(c, key);
}

std::vector<const CodecField*> config_fields(const CodecConfig& c) {
  std::vector<const CodecField*> out;
  for (const CodecField* f : method_fields(c.method))
    if (reads_field(c, f->key)) out.push_back(f);
  return out;
}

std::vector<std::string> budget_fields_of(const CodecConfig& c) {
  std::vector<std::string> out;
  for (const std::string& k : method_traits(c.method).budget_fields)
    if (reads_field(c, k)) out.push_back(k);
  return out;
}

bool uses_codebooks(const CodecConfig& c) { return reads_field(c, "code") && c.code == ResidualCode::codebook; }

double code_bits(const CodecConfig& c) {
  const MethodTraits& t = method_traits(c.method);
  return t.code_bits ? t.code_bits(c) : c.bits;
}

bool device_encodes(const CodecConfig& c) { return method_traits(c.method).device_encode; }

int smoothing_stages(const CodecConfig& c) { return method_traits(c.method).clustered ? c.stages : 0; }

std::vector<int> accepted_values(const IntValues& v, int64_t dim) {
  std::vector<int> out;
  for (int64_t x = v.lo; x <= v.hi; x = v.powers_of_two ? 2 * x : x + 1)
    if (!v.divides_dim || dim <= 0 || dim % x == 0) out.push_back(static_cast<int>(x));
  return out;
}

std::string int_values_text(const IntValues& v) {
  std::string s;
  if (v.powers_of_two)
    for (int x : accepted_values(v, 0)) {
      if (!s.empty()) s += '|';
      s += std::to_string(x);
    }
  else
    s = std::to_string(v.lo) + ".." + std::to_string(v.hi);
  return v.also ? s + "|" + v.also : s;
}

namespace {

/// What a message says field values v must be: "2 or 4", "a power of two
/// 2..256", "0..8", ">= 0".
std::string int_values_words(const IntValues& v) {
  if (v.powers_of_two) {
    const std::vector<int> all = accepted_values(v, 0);
    if (all.size() > 4) return "a power of two " + std::to_string(v.lo) + ".." + std::to_string(v.hi);
    return join(all, ", ", " or ");
  }
  if (v.hi == std::numeric_limits<int>::max()) return ">= " + std::to_string(v.lo);
  return std::to_string(v.lo) + ".." + std::to_string(v.hi);
}

/// Integer field f's value in c is one of f.ints' for dim (else qvg::Error
/// prefixed with c.name).
void check_int_field(const CodecField& f, const CodecConfig& c, int64_t dim) {
  const IntValues& v = *f.ints;
  const int x = v.get(c);
  QVG_CHECK(x >= v.lo && x <= v.hi && (!v.powers_of_two || (x & (x - 1)) == 0), c.name, ": ", f.key, " must be ",
            int_values_words(v), v.why ? v.why : "", v.also ? std::string(" or ") + v.also : "", ", got ", x);
  if (v.divides_dim)
    QVG_CHECK(dim % x == 0, c.name, ": head dim ", dim, " is not a multiple of ", v.divides_dim, " ", x);
}

const CodecField& field_named(const std::string& key) {
  std::vector<const char*> keys;
  for (const CodecField& f : codec_fields()) {
    if (key == f.key) return f;
    keys.push_back(f.key);
  }
  QVG_CHECK(false, "unknown codec option '", key, "' (known: ", join(keys), ")");
}

}  // namespace

CodecConfig parse_codec_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  CodecConfig c = preset_config(spec.substr(0, colon));
  c.name = spec;
  if (colon != std::string::npos) {
    std::stringstream ss(spec.substr(colon + 1));
    std::string item;
    std::vector<std::string> seen;
    while (std::getline(ss, item, ',')) {
      const size_t eq = item.find('=');
      QVG_CHECK(eq != std::string::npos && eq > 0, "codec option '", item, "' in '", spec,
                "' is not of the form key=value");
      const std::string key = item.substr(0, eq);
      QVG_CHECK(std::find(seen.begin(), seen.end(), key) == seen.end(), "codec option '", key, "' is given twice in '",
                spec, "'");
      seen.push_back(key);
      const CodecField& f = field_named(key);
      // A key the method does not read would be accepted and do nothing (issue 41).
      const std::vector<std::string>& reads = method_traits(c.method).fields;
      QVG_CHECK(std::find(reads.begin(), reads.end(), key) != reads.end(), "codec option '", key, "' in '", spec,
                "' does nothing for method ", method_name(c.method),
                reads.empty() ? " (it has no options)" : " (it reads " + join(reads) + ")");
      f.set(c, item.substr(eq + 1));
    }
    // Nor one that the config's other fields switch off (qvg's bits with code=cq).
    for (const std::string& key : seen)
      if (!reads_field(c, key)) {
        std::vector<const char*> keys;
        for (const CodecField* f : config_fields(c)) keys.push_back(f->key);
        QVG_CHECK(false, "codec option '", key, "' in '", spec, "' does nothing with code=",
                  field_named("code").get(c), " (this config reads ", join(keys), ")");
      }
  }
  return c;
}

void validate(const CodecConfig& c, int64_t dim) {
  QVG_CHECK(dim > 0, "head dim must be positive, got ", dim);
  const MethodTraits& t = method_traits(c.method);
  for (const CodecField* f : config_fields(c)) {
    if (f->ints) check_int_field(*f, c, dim);
    if (f->check) f->check(c, dim);
  }
  if (t.validate) t.validate(c, dim);
}

std::string codec_spec(const CodecConfig& c) {
  std::string s = method_name(c.method);
  char sep = ':';
  for_each_field(c, [&](const CodecField& f, const std::string& v) {
    s += sep + std::string(f.key) + '=' + v;
    sep = ',';
  });
  return s;
}

bool same_codec(const CodecConfig& a, const CodecConfig& b, std::string* diff) {
  if (a.method != b.method) {
    if (diff) *diff = "method";
    return false;
  }
  for (const CodecField* f : config_fields(a))
    if (f->get(a) != f->get(b)) {
      if (diff) *diff = f->key;
      return false;
    }
  return true;
}

std::string describe(const CodecConfig& c) { return method_traits(c.method).describe(c); }

PartBytes expected_part_bytes(const CodecConfig& c, TensorRole role, int64_t heads, int64_t tokens, int64_t dim) {
  return method_traits(c.method).expected_bytes(c, role, heads, tokens, dim);
}

int auto_centroid_count(const CodecConfig& c, int64_t tokens) {
  const double value_bits = c.centroid_format == CentroidFormat::fp8 ? 8.0 : 16.0;
  const double most = std::floor(c.centroid_bits * static_cast<double>(tokens) / value_bits);
  const int64_t cap = std::min<int64_t>(c.kmeans.centroids, tokens);
  return static_cast<int>(std::clamp<double>(most, 1.0, static_cast<double>(std::max<int64_t>(cap, 1))));
}

CodecConfig span_config(const CodecConfig& c, int64_t tokens) {
  CodecConfig s = c;
  if (smoothing_stages(c) == 0) return s;
  if (c.auto_centroids) {
    s.kmeans.centroids = auto_centroid_count(c, tokens);
    s.auto_centroids = false;
  } else if (tokens < c.kmeans.centroids) {
    s.kmeans.centroids = static_cast<int>(tokens);
  }
  return s;
}

CodecConfig config_for_heads(const CodecConfig& c, int64_t first_head) {
  QVG_CHECK(first_head >= 0, c.name, ": first_head must be >= 0, got ", first_head);
  if (!method_traits(c.method).clustered || first_head == 0) return c;
  CodecConfig r = c;
  r.kmeans.seed += static_cast<uint64_t>(first_head);
  return r;
}

CodecConfig config_with_centroids(const CodecConfig& c, int centroids) {
  CodecConfig s = c;
  if (smoothing_stages(c) == 0) return s;
  QVG_CHECK(centroids >= 1 && centroids <= c.kmeans.centroids, "an encoding with ", centroids,
            " centroids: the config allows 1 to ", c.kmeans.centroids);
  s.kmeans.centroids = centroids;
  s.auto_centroids = false;
  return s;
}

}  // namespace qvg
