// What `qvg compare` and `qvg demo` report: the runs' quality against the
// BF16 run, the tables by budget, the rate-distortion table, JSON rows, the
// CSV files and the rate-distortion plot.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "budget_plan.h"
#include "qvg/cache.h"
#include "qvg/model.h"

namespace qvg_cli {

/// One run of the model with one cache.
struct RunResult {
  std::string spec;
  std::vector<uint8_t> frames;  ///< generated frames, uint8 [frames, 64, 64, 3]
  qvg::LayerMemory memory;      ///< all layers, at the end
  double bits = 0;              ///< measured: every byte of the cache's K/V
  double span_bits = 0;         ///< measured over the encoded spans alone (= bits when none is held)
  int chunks = 0;               ///< generated chunks
  double rd_bits = 0;           ///< span bits after the rate-distortion measure's chunks
  double rd_psnr = 0, rd_ssim = 0;  ///< against the BF16 run over those chunks
  std::vector<int64_t> kv_bytes;  ///< the cache's K/V bytes (all layers) after each generated chunk
  // Against the BF16 run:
  double psnr = 0, ssim = 0;
  std::vector<double> psnr_chunk, ssim_chunk, psnr_frame, ssim_frame;
  // Against the clip's real frames (empty where the clip ends before them):
  std::vector<double> psnr_real_frame, ssim_real_frame;
};

/// r's PSNR / SSIM against the reference frames (r's chunks, the first of
/// ref's), overall, per chunk and per frame, and over its first rd_chunks;
/// per frame against the clip's real frames where `real` holds them (uint8,
/// at least as many frames as r's).
void measure(RunResult& r, const RunResult& ref, const std::vector<uint8_t>& real, const qvg::ModelConfig& mc,
             int rd_chunks);

/// Everything that was planned and run.
struct Outcome {
  std::vector<double> budgets;       ///< of the tables (--bits); empty: the specs as given
  std::vector<double> rd_budgets;    ///< the rate-distortion sweep's only (--rd-bits)
  std::vector<PlannedMethod> plan;   ///< every method at every budget (tables', then sweep's)
  std::vector<RunResult> runs;       ///< runs[0]: BF16
  std::map<std::string, size_t> run_of;  ///< canonical spec -> index in runs
  int64_t span_tokens = 0;
  int gen_chunks = 0;
  int rd_chunks = 0;  ///< chunks over which the rate-distortion sweep is measured (<= gen_chunks)
};

/// The plan entries of one budget (0: the no-budget plan).
std::vector<const PlannedMethod*> at_budget(const Outcome& o, double budget);

/// The chosen configuration in short, its centroid count resolved for the
/// spans (with " auto" for centroids=auto).
std::string config_text(const qvg::CodecConfig& c, int64_t span_tokens);

/// x with printf format fmt, or "inf".
std::string psnr_text(double x, const char* fmt = "%.2f");

/// The table of one budget (0: the specs as given): BF16, then each method's
/// configuration, measured bits, ratio, PSNR / SSIM overall and per chunk;
/// unreachable methods as a line naming their cheapest configuration.
void print_table(const Outcome& o, double budget);

/// Methods by budgets: measured bits / PSNR, or "cannot reach".
void print_rd_table(const Outcome& o, std::vector<double> budgets);

/// One JSON row for BF16 and one per method and budget (unreachable ones
/// without measurements).
nlohmann::json json_rows(const Outcome& o, int first_generated_frame);

/// One CSV row per method and budget: budget, method, reachable, config,
/// span_bits, bits, psnr, ssim, spec.
void write_rd_csv(const Outcome& o, const std::string& path);

/// PSNR against measured bits, one line per method (gnuplot).
void write_rd_plot(const Outcome& o, const std::string& path, const std::string& title);

/// PSNR per generated frame, one column per run: frame (from first_frame),
/// clip_frame (from first_clip_frame), then labels.
void write_frame_csv(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                     int first_frame, int first_clip_frame, const std::string& path);

/// Drift over the generated frames, one row per frame: frame, clip_frame,
/// then for each run (label_): psnr_bf16, ssim_bf16, psnr_real, ssim_real
/// (empty without real frames) and kv_mb, the cache's K/V megabytes after the
/// frame's chunk.
void write_drift_csv(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                     int first_frame, int first_clip_frame, int chunk_frames, const std::string& path);

/// PSNR against the real frames per generated frame, one line per run (BF16
/// included), and the cache's K/V megabytes over the generated frames: two
/// PNGs (gnuplot).
void write_drift_plots(const std::vector<std::string>& labels, const std::vector<const RunResult*>& rs,
                       int first_frame, int chunk_frames, const std::string& real_png, const std::string& kv_png,
                       const std::string& title);

}  // namespace qvg_cli
