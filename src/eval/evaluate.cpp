#include <chrono>
#include <cmath>
#include <cstdio>

#include "qvg/eval.h"

namespace qvg {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<EvalRow> evaluate(const EvalInput& in, const std::vector<std::string>& methods,
                              const EvalOptions& opt) {
  QVG_CHECK(!methods.empty(), "no methods to evaluate");
  QVG_CHECK(in.k.same_shape(in.v), "K [", in.k.heads, ", ", in.k.tokens, ", ", in.k.dim, "] and V [",
            in.v.heads, ", ", in.v.tokens, ", ", in.v.dim, "] must have the same shape");
  check_finite(in.k, "K");
  check_finite(in.v, "V");
  if (in.q) {
    QVG_CHECK(in.q->dim == in.k.dim, "Q dim ", in.q->dim, " != K dim ", in.k.dim);
    QVG_CHECK(in.q->heads % in.k.heads == 0, "Q heads (", in.q->heads, ") must be a multiple of K heads (",
              in.k.heads, ")");
    check_finite(*in.q, "Q");
  }
  std::vector<std::unique_ptr<Codec>> codecs;
  for (const auto& m : methods) {
    codecs.push_back(make_codec(parse_codec_spec(m), opt.backend));
    validate(codecs.back()->config(), in.k.dim);
  }
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  std::optional<HeadTensor> attn_ref;
  if (in.q) {
    say("attention reference (" + std::to_string(in.q->tokens) + " queries)");
    attn_ref = attention_ref(*in.q, in.k, in.v, opt.threads);
  }
  std::vector<EvalRow> rows;
  for (size_t mi = 0; mi < codecs.size(); ++mi) {
    const Codec& codec = *codecs[mi];
    HeadTensor rec[2];
    for (int t = 0; t < 2; ++t) {
      const HeadTensor& x = t == 0 ? in.k : in.v;
      const std::string label = t == 0 ? "k" : "v";
      std::string step = "[";
      step += std::to_string(mi + 1);
      step += '/';
      step += std::to_string(codecs.size());
      step += "] ";
      step += methods[mi];
      step += t == 0 ? " K" : " V";
      say(step);
      EncodeOptions eo;
      eo.role = t == 0 ? TensorRole::key : TensorRole::value;
      eo.threads = opt.threads;
      EncodeReport rep;
      auto t0 = std::chrono::steady_clock::now();
      const EncodedTensor e = codec.encode(x, eo, &rep);
      EvalRow row;
      row.encode_ms = ms_since(t0);
      t0 = std::chrono::steady_clock::now();
      codec.decode(e, rec[t], opt.threads);
      row.decode_ms = ms_since(t0);
      if (opt.on_reconstruction) opt.on_reconstruction(methods[mi], label, rec[t]);
      row.dataset = in.name;
      row.method = methods[mi];
      row.tensor = label;
      row.config = e.config;  // as encoded: centroids=auto holds the span's C
      row.error = compare(x, rec[t]);
      row.bytes = e.bytes();
      row.bits_per_value = e.bits_per_value();
      row.ratio = e.ratio_to_bf16();
      row.kmeans_ms = rep.kmeans_seconds * 1e3;
      for (const auto& s : rep.kmeans) row.kmeans_iterations += s.iterations;
      rows.push_back(std::move(row));
    }
    if (attn_ref) {
      const HeadTensor out = attention_ref(*in.q, rec[0], rec[1], opt.threads);
      const double rel = compare(*attn_ref, out).rel_l2;
      rows[rows.size() - 2].attn_rel_l2 = rel;
      rows[rows.size() - 1].attn_rel_l2 = rel;
    }
  }
  return rows;
}

std::string format_table(const std::vector<EvalRow>& rows, const std::string& tensor) {
  std::string out;
  char buf[512];
  bool attn = false;
  size_t w = 6;
  for (const auto& r : rows)
    if (r.tensor == tensor) {
      attn = attn || r.attn_rel_l2.has_value();
      w = std::max(w, r.method.size());
    }
  const int mw = static_cast<int>(w);
  std::snprintf(buf, sizeof buf, "%-*s %-28s %11s %8s %8s %9s %6s %6s %10s %10s%s\n", mw, "method", "config",
                "mse", "rel_l2", "snr_db", "max_abs", "bits", "ratio", "enc_ms", "dec_ms",
                attn ? "  attn_rel" : "");
  out += buf;
  for (const auto& r : rows) {
    if (r.tensor != tensor) continue;
    std::snprintf(buf, sizeof buf, "%-*s %-28s %11.4e %8.4f %8.2f %9.4f %6.3f %6.2f %10.1f %10.1f", mw,
                  r.method.c_str(), describe(r.config).c_str(), r.error.mse, r.error.rel_l2, r.error.snr_db,
                  r.error.max_abs, r.bits_per_value, r.ratio, r.encode_ms, r.decode_ms);
    out += buf;
    if (attn) {
      if (r.attn_rel_l2)
        std::snprintf(buf, sizeof buf, "  %8.4f", *r.attn_rel_l2);
      else
        std::snprintf(buf, sizeof buf, "  %8s", "-");
      out += buf;
    }
    out += '\n';
  }
  return out;
}

}  // namespace qvg
