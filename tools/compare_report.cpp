// What `qvg compare` and `qvg demo` report (tools/compare_report.h).
#include "compare_report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "plot.h"
#include "qvg/methods.h"
#include "qvg/video_metrics.h"

namespace qvg_cli {

void measure(RunResult& r, const RunResult& ref, const std::vector<uint8_t>& real, const qvg::ModelConfig& mc,
             int rd_chunks) {
  const size_t frame_bytes = static_cast<size_t>(mc.frame_values());
  const size_t chunk_bytes = static_cast<size_t>(mc.chunk_frames) * frame_bytes;
  const int gen_chunks = static_cast<int>(r.frames.size() / chunk_bytes);
  const int gen_frames = gen_chunks * mc.chunk_frames;
  QVG_CHECK(ref.frames.size() >= r.frames.size() && rd_chunks <= gen_chunks, "measure: ", gen_chunks,
            " chunks against a reference of ", ref.frames.size() / chunk_bytes, ", rate-distortion over ", rd_chunks);
  const auto mine = std::span<const uint8_t>(r.frames);
  const auto theirs = std::span<const uint8_t>(ref.frames);
  const auto x = mine.first(static_cast<size_t>(rd_chunks) * chunk_bytes);
  r.rd_psnr = qvg::psnr_u8(x, theirs.first(x.size()));
  r.rd_ssim = qvg::ssim_rgb(x, theirs.first(x.size()), rd_chunks * mc.chunk_frames, mc.frame, mc.frame);
  r.psnr = qvg::psnr_u8(mine, theirs.first(mine.size()));
  r.ssim = qvg::ssim_rgb(mine, theirs.first(mine.size()), gen_frames, mc.frame, mc.frame);
  for (int i = 0; i < gen_chunks; ++i) {
    const auto a = mine.subspan(i * chunk_bytes, chunk_bytes), b = theirs.subspan(i * chunk_bytes, chunk_bytes);
    r.psnr_chunk.push_back(qvg::psnr_u8(a, b));
    r.ssim_chunk.push_back(qvg::ssim_rgb(a, b, mc.chunk_frames, mc.frame, mc.frame));
  }
  for (int i = 0; i < gen_frames; ++i) {
    const auto a = mine.subspan(i * frame_bytes, frame_bytes), b = theirs.subspan(i * frame_bytes, frame_bytes);
    r.psnr_frame.push_back(qvg::psnr_u8(a, b));
    r.ssim_frame.push_back(qvg::ssim_rgb(a, b, 1, mc.frame, mc.frame));
    if (real.size() >= r.frames.size()) {
      const auto z = std::span<const uint8_t>(real).subspan(i * frame_bytes, frame_bytes);
      r.psnr_real_frame.push_back(qvg::psnr_u8(a, z));
      r.ssim_real_frame.push_back(qvg::ssim_rgb(a, z, 1, mc.frame, mc.frame));
    }
  }
}

/// The chosen configuration in short, its centroid count resolved for the
/// spans (with " auto" for centroids=auto).
std::string config_text(const qvg::CodecConfig& c, int64_t span_tokens) {
  std::string s = qvg::describe(qvg::span_config(c, span_tokens));
  if (c.auto_centroids && qvg::smoothing_stages(c) > 0) s += " auto";
  return s;
}

std::string psnr_text(double x, const char* fmt) {
  if (!std::isfinite(x)) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, fmt, x);
  return b;
}

/// The plan entries of one budget (0: the no-budget plan).
std::vector<const PlannedMethod*> at_budget(const Outcome& o, double budget) {
  std::vector<const PlannedMethod*> v;
  for (const PlannedMethod& p : o.plan)
    if (p.budget == budget) v.push_back(&p);
  return v;
}

void print_table(const Outcome& o, double budget) {
  if (budget > 0)
    std::printf("\nbudget %.3g bits per value: each method's configuration of its own family with the lowest "
                "expected error within it, at most 3 %% above (spans of %" PRId64 " tokens)\n",
                budget, o.span_tokens);
  else
    std::printf("\nthe configurations as given (no budget; spans of %" PRId64 " tokens)\n", o.span_tokens);
  const std::vector<const PlannedMethod*> rows = at_budget(o, budget);
  int lw = 12, cw = 26;  // label and configuration columns: as wide as their longest entry
  for (const PlannedMethod* p : rows) {
    lw = std::max(lw, static_cast<int>(p->label.size()));
    if (p->reachable) cw = std::max(cw, static_cast<int>(config_text(p->config, o.span_tokens).size()));
  }
  const bool per_chunk = o.gen_chunks <= 6;  // else the first and the last chunk (per frame: --drift-csv)
  std::printf("%-*s %-*s %7s %7s %7s %7s %7s  %s\n", lw, "method", cw, "configuration", "bits", "cache", "ratio", "psnr",
              "ssim", per_chunk ? "psnr / ssim per chunk" : "psnr first -> last chunk");
  auto row = [&](const std::string& label, const std::string& config, const RunResult& r, const std::string& note) {
    std::string pcs;
    if (per_chunk) {
      for (size_t i = 0; i < r.psnr_chunk.size(); ++i) {
        char b[48];
        std::snprintf(b, sizeof b, "%s/%.4f ", psnr_text(r.psnr_chunk[i]).c_str(), r.ssim_chunk[i]);
        pcs += b;
      }
    } else {  // from the first chunk that differs from BF16
      const auto first = std::find_if(r.psnr_chunk.begin(), r.psnr_chunk.end(), [](double x) { return std::isfinite(x); });
      const auto k = first - r.psnr_chunk.begin();
      pcs = first == r.psnr_chunk.end() ? "inf -> inf"
            : k == 0                    ? psnr_text(*first) + " -> " + psnr_text(r.psnr_chunk.back())
                                        : psnr_text(*first) + " (chunk " + std::to_string(k + 1) + ") -> " +
                                              psnr_text(r.psnr_chunk.back());
    }
    std::printf("%-*s %-*s %7.3f %7.3f %6.2fx %7s %7.4f  %s%s\n", lw, label.c_str(), cw, config.c_str(), r.span_bits,
                r.bits, r.memory.ratio(), psnr_text(r.psnr).c_str(), r.ssim, pcs.c_str(), note.c_str());
  };
  row("bf16", "BF16", o.runs.front(), "");
  for (const PlannedMethod* p : rows) {
    if (!p->reachable) {
      std::printf("%-*s cannot reach %.3g bits: its family's cheapest configuration, %s, stores %.3f (%s)\n",
                  lw, p->label.c_str(), budget, config_text(p->config, o.span_tokens).c_str(), p->span_bits,
                  budget_gap(p->span_bits, budget).c_str());
      continue;
    }
    std::string note;
    if (budget > 0 && p->span_bits < budget * 0.97)
      note = "  (" + budget_gap(p->span_bits, budget) + " the budget)";
    row(p->label, config_text(p->config, o.span_tokens), o.runs[o.run_of.at(p->canonical)], note);
  }
  // The ranking in one line: the best PSNR and its margin over the next method.
  const PlannedMethod* best = nullptr;
  const PlannedMethod* next = nullptr;
  auto psnr_of = [&](const PlannedMethod* p) { return o.runs[o.run_of.at(p->canonical)].psnr; };
  for (const PlannedMethod* p : rows) {
    if (!p->reachable || !std::isfinite(psnr_of(p))) continue;
    if (!best || psnr_of(p) > psnr_of(best)) {
      next = best;
      best = p;
    } else if (!next || psnr_of(p) > psnr_of(next)) {
      next = p;
    }
  }
  auto bits_of = [&](const PlannedMethod* p) { return o.runs[o.run_of.at(p->canonical)].span_bits; };
  // Where QVG methods (the clustered ones) rank first and second: the margin over the best baseline (every
  // other compressing method: RTN, KIVI, QuaRot) too.
  auto is_qvg = [](const PlannedMethod* p) { return qvg::method_traits(p->config.method).clustered; };
  auto is_reference = [](const PlannedMethod* p) { return qvg::method_traits(p->config.method).uncompressed; };
  const PlannedMethod* baseline = nullptr;
  for (const PlannedMethod* p : rows)
    if (p->reachable && std::isfinite(psnr_of(p)) && !is_qvg(p) && !is_reference(p) &&
        (!baseline || psnr_of(p) > psnr_of(baseline)))
      baseline = p;
  if (best && next) {
    std::printf("best: %s, %.2f dB at %.3f bits, %.2f dB above the next, %s (%.2f dB at %.3f bits)",
                best->label.c_str(), psnr_of(best), bits_of(best), psnr_of(best) - psnr_of(next), next->label.c_str(),
                psnr_of(next), bits_of(next));
    if (baseline && is_qvg(best) && is_qvg(next))
      std::printf(", and %.2f dB above the best baseline, %s (%.2f dB at %.3f bits)", psnr_of(best) - psnr_of(baseline),
                  baseline->label.c_str(), psnr_of(baseline), bits_of(baseline));
    std::printf("\n");
  }
  if (std::any_of(o.runs.begin(), o.runs.end(), [](const RunResult& r) { return r.bits != r.span_bits; }))
    std::printf("bits: the encoded spans' (every byte counted); cache: the whole cache's, with the chunks it holds in "
                "BF16 (sink, chunks waiting for their span), the same for every method\n");
  if (const double r = o.runs.front().memory.ratio(); r > 0 && r < 0.995)
    std::printf("ratio: against a BF16 copy of the tokens the model attends to; a cache holds a span until all of it "
                "has left the window, so each holds more (the BF16 cache %.2fx)\n", r);
}

/// Rows: methods; columns: budgets; cells: measured bits / PSNR.
void print_rd_table(const Outcome& o, std::vector<double> all) {
  std::sort(all.begin(), all.end());  // columns in increasing budget (the tables' budgets run first)
  std::printf("\nrate-distortion: measured bits of the spans / PSNR against BF16 at each budget");
  if (o.rd_chunks < o.gen_chunks) std::printf(", over the first %d chunks", o.rd_chunks);
  std::printf(" (CSV and plot: --rd-csv, --rd-plot)\n");
  std::vector<std::string> labels;
  int lw = 12;
  for (const PlannedMethod& p : o.plan)
    if (std::find(labels.begin(), labels.end(), p.label) == labels.end()) {
      labels.push_back(p.label);
      lw = std::max(lw, static_cast<int>(p.label.size()));
    }
  std::printf("%-*s", lw, "method");
  for (double b : all) std::printf(" %15.3g", b);
  std::printf("\n");
  for (const std::string& l : labels) {
    std::printf("%-*s", lw, l.c_str());
    for (double b : all)
      for (const PlannedMethod& p : o.plan) {
        if (p.label != l || p.budget != b) continue;
        if (!p.reachable) {
          std::printf(" %15s", "cannot reach");
          continue;
        }
        const RunResult& r = o.runs[o.run_of.at(p.canonical)];
        const std::string cell = psnr_text(r.rd_bits, "%.3f") + " / " + psnr_text(r.rd_psnr, "%.1f");
        std::printf(" %15s", cell.c_str());
      }
    std::printf("\n");
  }
}

nlohmann::json json_rows(const Outcome& o, int first_generated_frame) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  auto arr = [&](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(num(x));
    return a;
  };
  auto measured = [&](nlohmann::json& j, const RunResult& r) {
    j["bits"] = r.bits;
    j["span_bits_measured"] = r.span_bits;
    j["chunks"] = r.chunks;
    j["rd_chunks"] = std::min(r.chunks, o.rd_chunks);
    j["rd_bits"] = r.rd_bits;
    j["rd_psnr"] = num(r.rd_psnr);
    j["rd_ssim"] = r.rd_ssim;
    j["ratio"] = r.memory.ratio();
    j["kv_bytes"] = r.memory.kv_bytes();
    j["psnr"] = num(r.psnr);
    j["ssim"] = r.ssim;
    j["psnr_per_chunk"] = arr(r.psnr_chunk);
    j["ssim_per_chunk"] = arr(r.ssim_chunk);
    j["psnr_per_frame"] = arr(r.psnr_frame);
    j["ssim_per_frame"] = arr(r.ssim_frame);
    j["first_generated_frame"] = first_generated_frame;
  };
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json ref = {{"method", "bf16"}, {"budget", nullptr}, {"reachable", true}, {"spec", "bf16"},
                        {"config", "BF16"}, {"span_bits", 16.0}};
  measured(ref, o.runs.front());
  rows.push_back(ref);
  for (const PlannedMethod& p : o.plan) {
    nlohmann::json j = {{"method", p.label},
                        {"budget", p.budget > 0 ? nlohmann::json(p.budget) : nlohmann::json(nullptr)},
                        {"reachable", p.reachable},
                        {"spec", p.spec},
                        {"config", config_text(p.config, o.span_tokens)},
                        {"span_bits", p.span_bits}};
    if (p.reachable) measured(j, o.runs[o.run_of.at(p.canonical)]);
    rows.push_back(j);
  }
  return rows;
}

void write_rd_csv(const Outcome& o, const std::string& path) {
  std::ofstream f(path);
  QVG_CHECK(f.good(), "cannot write ", path);
  f << "budget,method,reachable,config,span_bits,bits,psnr,ssim,spec\n";
  for (const PlannedMethod& p : o.plan) {
    char b[160];
    std::snprintf(b, sizeof b, "%.6g,%s,%d,%s,%.6f,", p.budget, p.label.c_str(), p.reachable ? 1 : 0,
                  config_text(p.config, o.span_tokens).c_str(), p.span_bits);
    f << b;
    if (p.reachable) {
      const RunResult& r = o.runs[o.run_of.at(p.canonical)];
      std::snprintf(b, sizeof b, "%.6f,%s,%.6f,", r.rd_bits, psnr_text(r.rd_psnr, "%.4f").c_str(), r.rd_ssim);
      f << b;
    } else {
      f << ",,,";
    }
    f << '"' << p.spec << "\"\n";
  }
  f.close();
  QVG_CHECK(f.good(), "cannot write ", path);
}

void write_rd_plot(const Outcome& o, const std::string& path, const std::string& title) {
  std::vector<PlotSeries> series;  // one per method, in the order given
  for (const PlannedMethod& p : o.plan)
    if (std::none_of(series.begin(), series.end(), [&](const PlotSeries& s) { return s.label == p.label; }))
      series.push_back({p.label, {}});
  for (const PlannedMethod& p : o.plan) {
    if (!p.reachable) continue;
    auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& s) { return s.label == p.label; });
    const RunResult& r = o.runs[o.run_of.at(p.canonical)];
    if (!std::isfinite(r.rd_psnr)) continue;  // identical to BF16: no finite PSNR to draw
    if (std::none_of(it->points.begin(), it->points.end(), [&](const auto& q) { return q.first == r.rd_bits; }))
      it->points.emplace_back(r.rd_bits, r.rd_psnr);
  }
  for (PlotSeries& s : series) std::sort(s.points.begin(), s.points.end());
  write_lines_plot(path, series,
                   {title, "stored bits per K/V value of the spans (measured, every byte counted)",
                    "PSNR against the BF16-cache video (dB)", false});
}

void write_frame_csv(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                     int first_frame, int first_clip_frame, const std::string& path) {
  std::ofstream f(path);
  QVG_CHECK(f.good(), "cannot write ", path);
  f << "frame,clip_frame";
  for (const std::string& m : labels) f << "," << m;
  f << "\n";
  const size_t frames = rs.front()->psnr_frame.size();
  for (size_t i = 0; i < frames; ++i) {
    f << first_frame + static_cast<int>(i) << "," << first_clip_frame + static_cast<int>(i);
    for (const RunResult* r : rs) f << "," << psnr_text(r->psnr_frame[i], "%.4f");
    f << "\n";
  }
  f.close();
  QVG_CHECK(f.good(), "cannot write ", path);
}

void write_drift_csv(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                     int first_frame, int first_clip_frame, int chunk_frames, const std::string& path) {
  std::ofstream f(path);
  QVG_CHECK(f.good(), "cannot write ", path);
  f << "frame,clip_frame";
  for (const std::string& m : labels)
    for (const char* col : {"psnr_bf16", "ssim_bf16", "psnr_real", "ssim_real", "kv_mb"}) f << "," << m << "_" << col;
  f << "\n";
  const size_t frames = rs.front()->psnr_frame.size();
  char b[32];
  for (size_t i = 0; i < frames; ++i) {
    f << first_frame + static_cast<int>(i) << "," << first_clip_frame + static_cast<int>(i);
    for (const RunResult* r : rs) {
      f << "," << psnr_text(r->psnr_frame[i], "%.4f");
      std::snprintf(b, sizeof b, "%.5f", r->ssim_frame[i]);
      f << "," << b;
      f << "," << (i < r->psnr_real_frame.size() ? psnr_text(r->psnr_real_frame[i], "%.4f") : "");
      if (i < r->ssim_real_frame.size()) std::snprintf(b, sizeof b, "%.5f", r->ssim_real_frame[i]);
      f << "," << (i < r->ssim_real_frame.size() ? b : "");
      std::snprintf(b, sizeof b, "%.3f", static_cast<double>(r->kv_bytes[i / static_cast<size_t>(chunk_frames)]) / 1e6);
      f << "," << b;
    }
    f << "\n";
  }
  f.close();
  QVG_CHECK(f.good(), "cannot write ", path);
}

void write_drift_plots(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                       int first_frame, int chunk_frames, const std::string& real_png, const std::string& kv_png,
                       const std::string& title) {
  std::vector<PlotSeries> real, kv;
  for (size_t m = 0; m < rs.size(); ++m) {
    PlotSeries p{labels[m], {}, static_cast<int>(m) + 1, m == 0};
    PlotSeries q = p;
    for (size_t i = 0; i < rs[m]->psnr_real_frame.size(); ++i)
      if (std::isfinite(rs[m]->psnr_real_frame[i]))
        p.points.emplace_back(first_frame + static_cast<double>(i), rs[m]->psnr_real_frame[i]);
    for (size_t i = 0; i < rs[m]->psnr_frame.size(); ++i)
      q.points.emplace_back(first_frame + static_cast<double>(i),
                            static_cast<double>(rs[m]->kv_bytes[i / static_cast<size_t>(chunk_frames)]) / 1e6);
    real.push_back(std::move(p));
    kv.push_back(std::move(q));
  }
  if (!real_png.empty())
    write_lines_plot(real_png, real, {title, "frame of the video (context frames first)",
                                      "PSNR against the real frames (dB)"});
  if (!kv_png.empty())
    write_lines_plot(kv_png, kv, {title, "frame of the video (context frames first)",
                                  "K/V bytes of the cache, all layers (MB)"});
}

}  // namespace qvg_cli
