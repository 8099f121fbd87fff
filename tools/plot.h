// Plots drawn by gnuplot through a pipe (`qvg compare --plot`, `qvg demo`'s
// PSNR per frame and rate-distortion plots, `qvg eval --rd-plot`). The
// program is $QVG_GNUPLOT when set, else `gnuplot` on PATH.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace qvg_cli {

/// Throws qvg::Error unless gnuplot runs (call it before minutes of work, not
/// after); the message names `option` (what asked for the plot) and says how
/// to install gnuplot or what to use instead.
void require_gnuplot(const std::string& option = "--plot");

/// PSNR against BF16 per generated frame into a PNG at `path`, one line per
/// method. psnr[m][f]: method m's PSNR at generated frame f (dB; infinite =
/// identical frames, drawn at a cap the legend names); psnr[0] is the
/// reference itself and is not drawn. methods[m] labels line m; the x axis
/// counts from first_frame. Throws qvg::Error when gnuplot fails or writes
/// no file.
void write_psnr_plot(const std::string& path, const std::vector<std::string>& methods,
                     const std::vector<std::vector<double>>& psnr, int first_frame, const std::string& title);

/// One line of a plot: its label and its (x, y) points, joined in the order given.
struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;
  int color = 0;        ///< gnuplot line colour index (1, 2, ...); 0: the series' own number
  bool dashed = false;  ///< dashed instead of solid
};

/// Title, axis labels and scale of a plot.
struct PlotAxes {
  std::string title, xlabel, ylabel;
  bool log_y = false;  ///< logarithmic y axis (every y must be > 0)
};

/// Lines with points into a PNG at `path`, one per series (series without
/// points are left out of the plot and its key). Throws qvg::Error when
/// gnuplot fails or writes no file.
void write_lines_plot(const std::string& path, const std::vector<PlotSeries>& series, const PlotAxes& axes);

}  // namespace qvg_cli
