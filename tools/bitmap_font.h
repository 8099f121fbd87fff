// Text drawn into RGB frames with a 5x7 bitmap font (printable ASCII), for
// the titles of the side-by-side video's panels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qvg_cli {

/// Width in pixels of `text` drawn at `scale` (6 * scale per character:
/// 5 columns and one of space).
int text_width(const std::string& text, int scale);

/// Draws `text` into an 8-bit RGB image [height, width, 3] with its top-left
/// corner at (x, y), each font pixel a scale x scale square of `rgb`; pixels
/// outside the image are skipped; characters outside printable ASCII are
/// drawn as '?'.
void draw_text(std::vector<uint8_t>& image, int width, int height, int x, int y, const std::string& text, int scale,
               const uint8_t rgb[3]);

}  // namespace qvg_cli
