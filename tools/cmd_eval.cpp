// `qvg eval`: methods side by side on K/V files or built-in data; `qvg
// codec-demo`: the same on both built-in data sets with a summary against RTN;
// `qvg methods`: the methods, presets and codec keys. Thin: qvg::evaluate
// (include/qvg/eval.h) does the work; this loads data and prints tables or JSON.
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "budget_plan.h"
#include "commands.h"
#include "data_options.h"
#include "eval_sweep.h"
#include "plot.h"
#include "device.h"
#include "qvg/eval.h"
#include "qvg/io.h"
#include "qvg/methods.h"

namespace qvg_cli {
namespace {

using nlohmann::json;

const std::vector<std::string> kDefaultMethods = qvg::comparison_presets();

/// `qvg eval`'s options.
struct EvalArgs {
  DataOptions data;
  int threads = 0;             ///< worker threads (0 = all cores)
  std::string device = "cpu";  ///< where the codecs encode and decode: cpu or cuda
  std::string write_rec;       ///< directory for the reconstructions ("" = none)
  std::vector<std::string> methods = kDefaultMethods;
  std::vector<std::string> bits;  ///< budgets of bits per value (empty: the methods as given)
  std::string rd_csv, rd_plot;    ///< with --bits: rate-distortion CSV / PNG ("" = none)
  std::string budget_rule = "data";  ///< with --bits: data (trial encodes) or model (shapes alone)
  double trial_seconds = 120;        ///< with --bits and data: time bound of each method's trial encodes
  int trial_heads = 2;               ///< with --bits and data: heads of K and V trial-encoded
  bool as_json = false, quiet = false;
};

/// `qvg codec-demo`'s options.
struct CodecDemoArgs {
  DataOptions data = [] {
    DataOptions d;
    d.heads = 4;
    return d;
  }();
  int threads = 0;
  std::vector<std::string> methods = kDefaultMethods;
  bool as_json = false, quiet = false;
};

void progress(bool quiet, const std::string& s) {
  if (quiet) return;
  std::fprintf(stderr, "qvg: %s\n", s.c_str());
  std::fflush(stderr);
}

/// Every method parses as a codec spec (a name or an option is wrong: an
/// error naming it, before seconds of data generation); dims are checked later.
void check_method_names(const std::vector<std::string>& methods) {
  for (const std::string& m : methods) {
    try {
      qvg::parse_codec_spec(m);
    } catch (const qvg::Error& e) {
      QVG_CHECK(false, "method '", m, "': ", e.what());
    }
  }
}

qvg::EvalInput eval_input(KvData&& d) {
  qvg::EvalInput in;
  in.name = std::move(d.name);
  in.k = std::move(d.k);
  in.v = std::move(d.v);
  in.q = std::move(d.q);
  return in;
}

json row_json(const qvg::EvalRow& r) {
  const auto& c = r.config;
  json bytes;
  for (const qvg::PartField& p : qvg::kPartFields) bytes[p.name] = r.bytes.*p.bytes;
  bytes["total"] = r.bytes.total();
  json j = {{"dataset", r.dataset},
            {"method", r.method},
            {"tensor", r.tensor},
            {"kind", qvg::method_name(c.method)},
            {"spec", qvg::codec_spec(c)},
            {"mse", r.error.mse},
            {"rel_l2", r.error.rel_l2},
            {"snr_db", std::isfinite(r.error.snr_db) ? json(r.error.snr_db) : json(nullptr)},
            {"max_abs", r.error.max_abs},
            {"bits_per_value", r.bits_per_value},
            {"ratio", r.ratio},
            {"encode_ms", r.encode_ms},
            {"decode_ms", r.decode_ms},
            {"bytes", bytes}};
  // The configuration: every field the method reads, under its spec key.
  qvg::for_each_field(c, [&](const qvg::CodecField& f, const std::string& v) {
    j[f.key] = f.is_number && json::accept(v) ? json::parse(v) : json(v);  // centroids=auto: "auto"
  });
  j["stages"] = qvg::smoothing_stages(c);
  if (j["stages"] > 0) {
    j["kmeans_ms"] = r.kmeans_ms;
    j["kmeans_iterations_run"] = r.kmeans_iterations;
  }
  if (r.attn_rel_l2) j["attn_rel_l2"] = *r.attn_rel_l2;
  return j;
}

void print_rows(const std::vector<qvg::EvalRow>& rows, const qvg::EvalInput& in) {
  std::printf("\n== %s: K/V [%lld heads, %lld tokens, dim %lld]%s\n", in.name.c_str(),
              static_cast<long long>(in.k.heads), static_cast<long long>(in.k.tokens),
              static_cast<long long>(in.k.dim),
              in.q ? (" with " + std::to_string(in.q->tokens) + " queries").c_str() : "");
  std::printf("\nkeys\n%s", qvg::format_table(rows, "k").c_str());
  std::printf("\nvalues\n%s", qvg::format_table(rows, "v").c_str());
  std::fflush(stdout);
}

void run_eval(const EvalArgs& a) {
  qvg::EvalOptions opt;
  opt.backend = require_backend(a.device);  // before any data are made
  const std::vector<double> budgets = a.bits.empty() ? std::vector<double>{} : parse_budget_option(a.bits, "--bits");
  QVG_CHECK(!budgets.empty() || (a.rd_csv.empty() && a.rd_plot.empty()), "--rd-csv and --rd-plot need --bits");
  QVG_CHECK(budgets.empty() || a.write_rec.empty(), "--write-rec and --bits cannot be combined");
  if (!a.rd_plot.empty()) require_gnuplot("--rd-plot");
  check_method_names(a.methods);  // before the data are made or read
  if (const double kv = builtin_kv_bytes(a.data); kv > 0)
    check_memory(2 * kv, "the K and V as float32 (" + std::to_string(static_cast<int64_t>(kv / 1e6)) +
                             " MB) and a reconstruction of them as large");
  KvData data = load_data(a.data, a.threads, [&](const std::string& s) { progress(a.quiet, s); });
  const qvg::KvFileInfo info = data.info;
  const std::string ext = data.ext;
  const qvg::KvLayout layout = data.layout;
  const qvg::EvalInput in = eval_input(std::move(data));
  opt.threads = a.threads;
  const auto t0 = std::chrono::steady_clock::now();
  opt.progress = [&](const std::string& s) {
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%7.1fs ", sec);
    progress(a.quiet, buf + s);
  };
  if (!a.write_rec.empty()) {
    std::filesystem::create_directories(a.write_rec);
    opt.on_reconstruction = [&](const std::string& method, const std::string& tensor, const qvg::HeadTensor& x) {
      std::string safe = method;  // "qvg-pro:block=32" -> "qvg-pro_block-32"
      for (char& ch : safe)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = ch == '=' ? '-' : '_';
      const std::string path = (std::filesystem::path(a.write_rec) / (safe + "." + tensor + ext)).string();
      qvg::save_kv(path, x, layout, info.dtype, ext == ".npy" ? "" : tensor, info.leading_batch);
      progress(a.quiet, "wrote " + path);
    };
  }
  if (!budgets.empty()) {
    EvalSweepOptions sweep{budgets, a.rd_csv, a.rd_plot, a.as_json, row_json, true, {}};
    sweep.on_data = a.budget_rule == "data";
    sweep.trial.sample_heads = a.trial_heads;
    sweep.trial.max_seconds = a.trial_seconds;
    sweep.trial.threads = a.threads;
    sweep.trial.progress = opt.progress;
    run_eval_sweep(in, a.methods, opt, sweep);
    return;
  }
  const auto rows = qvg::evaluate(in, a.methods, opt);
  for (const auto& r : rows)
    if (r.tensor == "k") note_if_over_limit(r.config, r.bits_per_value, in.k.tokens);
  if (a.as_json) {
    json out = json::array();
    for (const auto& r : rows) out.push_back(row_json(r));
    std::cout << out.dump(2) << std::endl;
  } else {
    print_rows(rows, in);
  }
}

/// Whether r's method is plain round-to-nearest quantization (RTN): the
/// group-quantized format without smoothing stages.
bool plain_quantizer(const qvg::EvalRow& r) {
  const qvg::MethodTraits& t = qvg::method_traits(r.config.method);
  return t.group_quantized && !t.clustered;
}

/// One line per method against the first RTN row: how much lower its errors are.
void print_summary(const std::vector<qvg::EvalRow>& rows) {
  const qvg::EvalRow* rk = nullptr;
  const qvg::EvalRow* rv = nullptr;
  for (const auto& r : rows)
    if (plain_quantizer(r) && !rk && r.tensor == "k") rk = &r;
  for (const auto& r : rows)
    if (plain_quantizer(r) && !rv && r.tensor == "v") rv = &r;
  if (!rk || !rv) return;
  std::printf("\nagainst %s (%.2fx smaller than BF16):\n", rk->method.c_str(), rk->ratio);
  for (size_t i = 0; i + 1 < rows.size(); i += 2) {
    const auto& k = rows[i];
    const auto& v = rows[i + 1];
    if (&k == rk || qvg::method_traits(k.config.method).uncompressed) continue;
    std::printf("  %-10s %.2fx smaller than BF16; key MSE %6.2fx lower, value MSE %5.2fx lower", k.method.c_str(),
                k.ratio, rk->error.mse / k.error.mse, rv->error.mse / v.error.mse);
    if (k.attn_rel_l2 && rk->attn_rel_l2) std::printf(", attention error %5.2fx lower", *rk->attn_rel_l2 / *k.attn_rel_l2);
    std::printf("\n");
  }
}

void run_codec_demo(const CodecDemoArgs& args) {
  check_method_names(args.methods);
  const DataOptions& a = args.data;
  const bool quiet = args.quiet;
  if (!args.as_json) {
    std::printf("qvg codec-demo: KV-cache compression methods side by side on built-in data\n"
                "(one Self-Forcing span: %d latent frames x 1,560 tokens, %d heads, dim 128).\n"
                "Lower mse / attn_rel is better; bits = stored bits per value with every byte of\n"
                "metadata counted; ratio = BF16 size / compressed size.\n",
                a.frames, a.heads);
  }
  json all = json::array();
  for (const std::string kind : {"video-like", "clip"}) {
    const qvg::EvalInput in =
        eval_input(make_builtin_data(kind, a, args.threads, [&](const std::string& s) { progress(quiet, s); }));
    qvg::EvalOptions opt;
    opt.threads = args.threads;
    opt.progress = [&](const std::string& s) { progress(quiet, s); };
    const auto rows = qvg::evaluate(in, args.methods, opt);
    if (args.as_json) {
      for (const auto& r : rows) all.push_back(row_json(r));
    } else {
      print_rows(rows, in);
      print_summary(rows);
    }
  }
  if (args.as_json) std::cout << all.dump(2) << std::endl;
}

void list_methods() {
  std::printf("methods:\n");
  for (const auto& t : qvg::method_table()) {
    std::string keys;
    for (const auto& k : t.fields) keys += (keys.empty() ? "" : " ") + k;
    std::printf("  %-8s %s\n           keys: %s%s\n", t.name, t.summary, keys.empty() ? "(none)" : keys.c_str(),
                t.device_decode ? "" : "  (CPU only)");
  }
  std::printf("\npresets (give as PRESET or PRESET:key=value,...):\n");
  for (const auto& p : qvg::codec_presets())
    std::printf("  %-14s %s\n", p.c_str(), qvg::describe(qvg::parse_codec_spec(p)).c_str());
  std::printf("\nkeys:\n");
  for (const auto& f : qvg::codec_fields()) std::printf("  %-16s %s\n", f.key, f.values.c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* s = app.add_subcommand("eval", "compare methods on K/V files or built-in data");
  add_data_options(s, a->data, {.files = true, .queries = true});
  s->add_option("--threads", a->threads, "worker threads (0 = all cores); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  add_codec_device_option(s, a->device);
  s->add_option("--write-rec", a->write_rec,
                "write each method's K/V reconstructions into this directory, in the input's format, "
                "dtype and layout (built-in data: .npy f32, htd)");
  s->add_option("--methods", a->methods, "methods/presets with optional overrides (see `qvg methods`)");
  s->add_option("--bits", a->bits,
                "budgets of bits per value (e.g. 2 2.5 3 4): every method runs the configuration of its own family "
                "with the lowest error within each, at most 3 % above it (K and V together; the tensor is one span)");
  s->add_option("--budget-rule", a->budget_rule,
                "with --bits: how the error is judged: data (trial encodes of --trial-heads heads of the K/V, "
                "each method's within --trial-seconds) or model (the quality model of the span's shape)")
      ->check(CLI::IsMember({"data", "model"}))
      ->capture_default_str();
  s->add_option("--trial-heads", a->trial_heads, "with --bits and --budget-rule data: heads sampled")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  s->add_option("--trial-seconds", a->trial_seconds,
                "with --bits and --budget-rule data: no new trial encode of a method starts after this long")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  s->add_option("--rd-csv", a->rd_csv, "with --bits: write the rate-distortion rows (budget, method, tensor, bits, MSE)");
  s->add_option("--rd-plot", a->rd_plot, "with --bits: write a PNG of key and value MSE against bits (gnuplot)");
  s->add_flag("--json", a->as_json, "print one JSON row per method and tensor");
  s->add_flag("--quiet", a->quiet, "no progress output");
  s->callback([a] { run_eval(*a); });
}

void add_codec_demo_command(CLI::App& app) {
  auto a = std::make_shared<CodecDemoArgs>();
  auto* s = app.add_subcommand("codec-demo",
                               "the codecs side by side on both built-in K/V data sets (no model)");
  add_data_options(s, a->data, {.files = false, .queries = true});
  s->add_option("--threads", a->threads, "worker threads (0 = all cores); results do not depend on it")->check(CLI::Range(0, 1 << 16));
  s->add_option("--methods", a->methods, "methods/presets (see `qvg methods`)");
  s->add_flag("--json", a->as_json, "print one JSON row per data set, method and tensor");
  s->add_flag("--quiet", a->quiet, "no progress output");
  s->callback([a] { run_codec_demo(*a); });
}

void add_methods_command(CLI::App& app) {
  app.add_subcommand("methods", "list methods, presets and codec options")->callback(list_methods);
}

}  // namespace qvg_cli
