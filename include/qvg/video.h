// Reading video files into RGB frames (through FFmpeg's libraries when qvg is
// built with QVG_WITH_FFMPEG; otherwise read_video throws qvg::Error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qvg {

/// Decoded frames, 8-bit RGB, row-major [frames, height, width, 3].
struct Video {
  int width = 0;
  int height = 0;
  int frames = 0;
  double fps = 0.0;          ///< average frame rate of the stream (0 when unknown)
  std::vector<uint8_t> rgb;  ///< size frames * height * width * 3

  /// Frame f: height * width * 3 bytes, rows top to bottom, pixels R, G, B.
  const uint8_t* frame(int f) const {
    return rgb.data() + static_cast<size_t>(f) * static_cast<size_t>(height) *
                            static_cast<size_t>(width) * 3u;
  }
};

/// True when this build can decode video (QVG_WITH_FFMPEG was on).
bool video_support();

/// Decodes the first video stream of `path`, in presentation order.
/// @param max_frames  frames to decode at most; 0 = all
/// @param width       output width; 0 = the stream's width
/// @param height      output height; 0 = the stream's height
/// Frames are scaled (without keeping the aspect ratio) to width x height with
/// swscale's bit-exact area/bicubic path, so the result does not depend on the
/// CPU. Returns fewer than max_frames frames when the stream ends first.
/// Throws qvg::Error naming the file for a missing, unreadable or corrupt file,
/// a file without a video stream or without a decodable frame, bad sizes, or a
/// build without FFmpeg.
Video read_video(const std::string& path, int max_frames = 0, int width = 0, int height = 0);

}  // namespace qvg
