// The labelled side-by-side video of `qvg compare --side-by-side` and the
// demo: one column per panel (the real frames, the reference, each method),
// each titled; under each method its difference from the reference,
// amplified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qvg_cli {

/// One panel: its title, its short name (difference maps: "|label - reference label|")
/// and its frames, 8-bit RGB [frames, side, side, 3].
struct Panel {
  std::string title;
  std::string label;
  std::vector<uint8_t> frames;
};

struct SideBySide {
  int side = 64;         ///< frame side in pixels (square frames)
  int frames = 0;        ///< frames of every panel
  double fps = 8.0;
  int zoom = 4;          ///< nearest-neighbour upscaling of every panel
  int amplify = 8;       ///< difference maps show |method - reference| * amplify
  Panel real;            ///< the real frames (no frames: no such panel)
  Panel reference;       ///< the reference run (BF16)
  std::vector<Panel> methods;
};

/// Composes the panels, one column each (real, reference, methods), titles
/// above; a second row holds |method - reference| * amplify (per channel,
/// clamped to 255) under each method; writes the video to `path` (FFmpeg,
/// qvg/video_writer.h). Throws qvg::Error for panels whose frame counts
/// differ from `frames` or for a video that cannot be written.
void write_side_by_side(const std::string& path, const SideBySide& s);

}  // namespace qvg_cli
