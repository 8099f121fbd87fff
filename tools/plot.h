// Plots drawn by gnuplot through a pipe (`qvg compare --plot`, `qvg demo
// --plot`). The program is $QVG_GNUPLOT when set, else `gnuplot` on PATH.
#pragma once

#include <string>
#include <vector>

namespace qvg_cli {

/// Throws qvg::Error unless gnuplot runs (call it before minutes of work, not
/// after); the message says how to install it or what to use instead.
void require_gnuplot();

/// PSNR against BF16 per generated frame into a PNG at `path`, one line per
/// method. psnr[m][f]: method m's PSNR at generated frame f (dB; infinite =
/// identical frames, drawn at a cap the legend names); psnr[0] is the
/// reference itself and is not drawn. methods[m] labels line m; the x axis
/// counts from first_frame. Throws qvg::Error when gnuplot fails or writes
/// no file.
void write_psnr_plot(const std::string& path, const std::vector<std::string>& methods,
                     const std::vector<std::vector<double>>& psnr, int first_frame, const std::string& title);

}  // namespace qvg_cli
