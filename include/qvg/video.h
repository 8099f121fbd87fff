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

/// What read_video does with each decoded frame, in this order: a centered
/// crop, then one swscale pass (area filter, accurate rounding, bit-exact) to
/// RGB24 of the output size. This is the ffmpeg CLI's
/// `-vf crop=W:H,scale=w:h:flags=area -pix_fmt rgb24` (train/prepare_data.py):
/// the crop moves the plane pointers by x = (in_w - W) / 2, y = (in_h - H) / 2,
/// rounded down to the chroma subsampling (vf_crop's default, exact = 0), and
/// scaling sees the cropped W x H frame: every frame of the five shipped clips
/// is byte-identical to the ffmpeg 5.1 CLI's output (docs/RUNTIME.md).
struct VideoReadOptions {
  int max_frames = 0;   ///< frames to decode at most; 0 = all
  int width = 0;        ///< output width; 0 = the (cropped) stream's
  int height = 0;       ///< output height; 0 = the (cropped) stream's
  int crop_width = 0;   ///< centered crop width before scaling; 0 = no crop
  int crop_height = 0;  ///< centered crop height before scaling; 0 = no crop
};

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

/// The same with a crop and the swscale flags of VideoReadOptions. Also throws
/// when the crop is larger than a decoded frame.
Video read_video(const std::string& path, const VideoReadOptions& options);

}  // namespace qvg
