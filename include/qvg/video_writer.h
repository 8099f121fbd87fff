// Writing RGB frames to a video file through FFmpeg's libraries (when qvg is
// built with QVG_WITH_FFMPEG; otherwise write_video throws qvg::Error).
#pragma once

#include <string>

#include "qvg/video.h"

namespace qvg {

struct VideoWriteOptions {
  double fps = 8.0;  ///< frame rate written into the stream (> 0)
  /// Encoder name (FFmpeg's: "libx264", "mpeg4", "png", ...); "" = H.264
  /// (libx264) when the build has it, else MPEG-4 part 2.
  std::string encoder;
  int crf = 12;      ///< libx264 constant rate factor (0 = lossless YUV 4:2:0; lower = better)
  int upscale = 1;   ///< integer nearest-neighbour upscaling of every frame (64 px -> 64*upscale), 1..16
};

/// Encodes `video` (8-bit RGB, [frames, height, width, 3]) into `path`; the
/// container is chosen by the extension (.mp4, .mkv, .avi, ...). Pixels are
/// converted to YUV 4:2:0 (width and height must be even after upscaling).
/// Throws qvg::Error naming the file for an empty video, bad sizes, a missing
/// encoder, an unwritable file or a build without FFmpeg.
/// @return the encoder used
std::string write_video(const std::string& path, const Video& video, const VideoWriteOptions& options = {});

}  // namespace qvg
