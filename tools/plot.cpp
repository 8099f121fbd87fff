// gnuplot invocation for the CLI's plots (tools/plot.h).
#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "qvg/common.h"

namespace qvg_cli {
namespace {

/// The gnuplot to run: $QVG_GNUPLOT when set, else `gnuplot` on PATH.
std::string gnuplot_program() {
  const char* env = std::getenv("QVG_GNUPLOT");
  return env && *env ? env : "gnuplot";
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char ch : s) r += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return r + "'";
}

/// A gnuplot double-quoted string.
std::string gnuplot_string(const std::string& s) {
  std::string r = "\"";
  for (char ch : s) r += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return r + "\"";
}

/// Runs gnuplot on `script`, which draws into `path`.
void run_gnuplot(const std::string& script, const std::string& path) {
  const std::string cmd = shell_quote(gnuplot_program());
  FILE* p = popen(cmd.c_str(), "w");
  QVG_CHECK(p != nullptr, "cannot start gnuplot ('", gnuplot_program(), "')");
  const bool wrote = std::fwrite(script.data(), 1, script.size(), p) == script.size();
  const int status = pclose(p);
  QVG_CHECK(wrote && status == 0, "gnuplot failed to draw ", path, " (exit status ", status, ")");
  std::error_code ec;
  QVG_CHECK(std::filesystem::file_size(path, ec) > 0 && !ec, "gnuplot wrote no ", path);
}

}  // namespace

void require_gnuplot(const std::string& option) {
  const std::string cmd = shell_quote(gnuplot_program()) + " --version 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
  }
  const int status = p ? pclose(p) : -1;
  QVG_CHECK(status == 0 && out.rfind("gnuplot", 0) == 0, option, " needs gnuplot, and '", gnuplot_program(),
            "' does not run (install the Debian package gnuplot-nox, e.g. bash scripts/install_deps.sh, or "
            "drop ", option, "; the CSV / JSON output carries the same numbers to draw them elsewhere)");
}

void write_psnr_plot(const std::string& path, const std::vector<std::string>& methods,
                     const std::vector<std::vector<double>>& psnr, int first_frame, const std::string& title) {
  // The y axis fits the finite values (5 dB steps and a 5 dB margin); identical frames
  // (infinite PSNR) are drawn 10 dB above the largest finite value (100 dB without any).
  double top = -INFINITY, bottom = INFINITY;
  for (size_t m = 1; m < psnr.size(); ++m)
    for (double x : psnr[m])
      if (std::isfinite(x)) top = std::max(top, x), bottom = std::min(bottom, x);
  const bool any_finite = std::isfinite(top);
  const double high = any_finite ? std::ceil(top / 5.0) * 5.0 : 90.0;
  const double low = any_finite ? std::max(0.0, std::floor(bottom / 5.0) * 5.0 - 5.0) : 0.0;
  const double cap = high + 10.0;
  std::string script;
  char buf[256];
  for (size_t m = 1; m < psnr.size(); ++m) {
    script += "$m" + std::to_string(m) + " << EOD\n";
    for (size_t f = 0; f < psnr[m].size(); ++f) {
      const double x = std::isfinite(psnr[m][f]) ? psnr[m][f] : cap;
      std::snprintf(buf, sizeof buf, "%zu %.4f\n", static_cast<size_t>(first_frame) + f, x);
      script += buf;
    }
    script += "EOD\n";
  }
  script += "set terminal pngcairo size 1000,560 enhanced font 'sans,11'\n";
  script += "set output " + gnuplot_string(path) + "\n";
  script += "set title " + gnuplot_string(title) + " noenhanced\n";
  script += "set xlabel 'frame of the video (context frames first)'\nset ylabel 'PSNR against the BF16 cache (dB)'\n";
  script += "set grid\nset key outside right top noenhanced\n";
  // Identical frames (infinite PSNR) are drawn at the cap, which the key's title says once.
  bool any_inf = false;
  for (size_t m = 1; m < psnr.size(); ++m)
    any_inf |= std::any_of(psnr[m].begin(), psnr[m].end(), [](double x) { return !std::isfinite(x); });
  if (any_inf) {
    std::snprintf(buf, sizeof buf, "set key title \"identical frames\\n(inf) at %g dB\"\n", cap);
    script += buf;
  }
  std::snprintf(buf, sizeof buf, "set yrange [%g:%g]\n", low, any_inf ? cap + 5 : high + 5);
  script += buf;
  script += "plot ";
  for (size_t m = 1; m < psnr.size(); ++m)
    script += (m > 1 ? ", " : "") + std::string("$m") + std::to_string(m) + " using 1:2 with linespoints lw 2 pt 7 ps 0.6 title " +
              gnuplot_string(methods[m]);
  script += "\n";
  run_gnuplot(script, path);
}

void write_lines_plot(const std::string& path, const std::vector<PlotSeries>& series, const PlotAxes& axes) {
  std::string script, plot;
  char buf[96];
  int n = 0;
  for (const PlotSeries& s : series) {
    if (s.points.empty()) continue;
    ++n;
    script += "$s" + std::to_string(n) + " << EOD\n";
    for (const auto& [x, y] : s.points) {
      std::snprintf(buf, sizeof buf, "%.6g %.6g\n", x, y);
      script += buf;
    }
    script += "EOD\n";
    plot += (n > 1 ? ", " : "") + std::string("$s") + std::to_string(n) + " using 1:2 with linespoints lw 2 pt 7 ps 0.8" +
            " lc " + std::to_string(s.color > 0 ? s.color : n) + " dt " + (s.dashed ? "2" : "1") + " title " +
            gnuplot_string(s.label);
  }
  QVG_CHECK(n > 0, "plot ", path, ": no points to draw");
  script += "set terminal pngcairo size 1000,560 enhanced font 'sans,11'\n";
  script += "set output " + gnuplot_string(path) + "\n";
  script += "set title " + gnuplot_string(axes.title) + " noenhanced\n";
  script += "set xlabel " + gnuplot_string(axes.xlabel) + " noenhanced\n";
  script += "set ylabel " + gnuplot_string(axes.ylabel) + " noenhanced\n";
  script += "set grid\nset key outside right top noenhanced\n";
  if (axes.log_y) script += "set logscale y\n";
  script += "plot " + plot + "\n";
  run_gnuplot(script, path);
}

}  // namespace qvg_cli
