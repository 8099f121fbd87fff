// Internal helpers shared by the FFmpeg-based video reader and writer: error
// text and owning pointers for libav* objects. Include only where
// QVG_WITH_FFMPEG is on, after the libav* headers.
#pragma once

#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace qvg::ffmpeg {

/// FFmpeg's message for an AVERROR code.
inline std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  if (av_strerror(code, buf, sizeof(buf)) < 0) return "FFmpeg error " + std::to_string(code);
  return buf;
}

struct CodecFreer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameFreer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct SwsFreer {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

}  // namespace qvg::ffmpeg
