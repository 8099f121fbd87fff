// The labelled side-by-side video (tools/side_by_side.h).
#include "side_by_side.h"

#include <algorithm>
#include <cstdlib>

#include "bitmap_font.h"
#include "qvg/common.h"
#include "qvg/video_writer.h"

namespace qvg_cli {
namespace {

constexpr int kFontScale = 2;                 // 12 px per character
constexpr int kTitle = 7 * kFontScale + 8;    // title bar height
constexpr uint8_t kWhite[3] = {255, 255, 255};

/// Copies frame f of `frames` (side x side), zoomed, into the canvas at (x0, y0).
void blit(std::vector<uint8_t>& canvas, int width, const std::vector<uint8_t>& frames, int f, int side, int zoom,
          int x0, int y0) {
  const uint8_t* src = frames.data() + static_cast<size_t>(f) * side * side * 3;
  for (int y = 0; y < side * zoom; ++y)
    for (int x = 0; x < side * zoom; ++x) {
      const uint8_t* p = src + (static_cast<size_t>(y / zoom) * side + x / zoom) * 3;
      uint8_t* q = canvas.data() + (static_cast<size_t>(y0 + y) * width + x0 + x) * 3;
      q[0] = p[0];
      q[1] = p[1];
      q[2] = p[2];
    }
}

/// A title centred in the bar above a panel (cut to the panel's width).
void title(std::vector<uint8_t>& canvas, int width, int height, int x0, int y0, int panel, std::string text) {
  const size_t fit = static_cast<size_t>(std::max(1, (panel - 4) / (6 * kFontScale)));
  if (text.size() > fit) text = text.substr(0, fit);
  draw_text(canvas, width, height, x0 + (panel - text_width(text, kFontScale)) / 2, y0 + 4, text, kFontScale, kWhite);
}

}  // namespace

void write_side_by_side(const std::string& path, const SideBySide& s) {
  const size_t frame_bytes = static_cast<size_t>(s.side) * s.side * 3;
  const size_t want = static_cast<size_t>(s.frames) * frame_bytes;
  QVG_CHECK(s.frames > 0 && s.reference.frames.size() == want, "side-by-side: the reference has ",
            s.reference.frames.size(), " bytes of frames, need ", want);
  for (const Panel& p : s.methods)
    QVG_CHECK(p.frames.size() == want, "side-by-side: panel '", p.title, "' has ", p.frames.size(), " bytes, need ",
              want);
  const bool real = !s.real.frames.empty();
  QVG_CHECK(!real || s.real.frames.size() == want, "side-by-side: the real frames have ", s.real.frames.size(),
            " bytes, need ", want);
  const int panel = s.side * s.zoom, cols = static_cast<int>(s.methods.size()) + 1 + (real ? 1 : 0);
  const int rows = s.methods.empty() ? 1 : 2;
  qvg::Video v;
  v.width = panel * cols;
  v.height = (panel + kTitle) * rows;
  v.frames = s.frames;
  v.fps = s.fps;
  v.rgb.assign(static_cast<size_t>(v.frames) * v.width * v.height * 3, 0);
  std::vector<uint8_t> canvas(static_cast<size_t>(v.width) * v.height * 3);
  std::vector<uint8_t> diff(frame_bytes);
  for (int f = 0; f < s.frames; ++f) {
    std::fill(canvas.begin(), canvas.end(), 0);
    int col = 0;
    auto column = [&](const Panel& p) {
      title(canvas, v.width, v.height, col * panel, 0, panel, p.title);
      blit(canvas, v.width, p.frames, f, s.side, s.zoom, col * panel, kTitle);
      ++col;
    };
    if (real) column(s.real);
    column(s.reference);
    for (const Panel& p : s.methods) {
      const uint8_t* a = p.frames.data() + f * frame_bytes;
      const uint8_t* b = s.reference.frames.data() + f * frame_bytes;
      for (size_t i = 0; i < frame_bytes; ++i) diff[i] = static_cast<uint8_t>(std::min(255, std::abs(a[i] - b[i]) * s.amplify));
      const int y0 = panel + kTitle;
      title(canvas, v.width, v.height, col * panel, y0, panel,
            "|" + p.label + " - " + s.reference.label + "| x " + std::to_string(s.amplify));
      blit(canvas, v.width, diff, 0, s.side, s.zoom, col * panel, y0 + kTitle);
      column(p);
    }
    std::copy(canvas.begin(), canvas.end(), v.rgb.begin() + static_cast<ptrdiff_t>(f) * canvas.size());
  }
  qvg::VideoWriteOptions wo;
  wo.fps = s.fps;
  qvg::write_video(path, v, wo);
}

}  // namespace qvg_cli
