// write_video: encoding RGB frames through FFmpeg's libraries (libavformat,
// libavcodec, libswscale, libavutil); include/qvg/video_writer.h.
#include "qvg/video_writer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "qvg/common.h"

#if defined(QVG_WITH_FFMPEG) && QVG_WITH_FFMPEG
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}
#include "video/ffmpeg_util.h"
#define QVG_HAVE_VIDEO_OUT 1
#else
#define QVG_HAVE_VIDEO_OUT 0
#endif

namespace qvg {

#if QVG_HAVE_VIDEO_OUT
namespace {

using ffmpeg::av_error;
using ffmpeg::CodecFreer;
using ffmpeg::FrameFreer;
using ffmpeg::PacketFreer;
using ffmpeg::SwsFreer;

struct OutputCloser {
  void operator()(AVFormatContext* f) const {
    if (f->pb && !(f->oformat->flags & AVFMT_NOFILE)) avio_closep(&f->pb);
    avformat_free_context(f);
  }
};

}  // namespace

std::string write_video(const std::string& path, const Video& video, const VideoWriteOptions& o) {
  QVG_CHECK(video.frames > 0 && video.width > 0 && video.height > 0, path, ": nothing to write (", video.frames,
            " frames of ", video.width, "x", video.height, ")");
  QVG_CHECK(video.rgb.size() == static_cast<size_t>(video.frames) * video.width * video.height * 3, path,
            ": frame data does not match ", video.frames, " x ", video.height, " x ", video.width, " x 3");
  QVG_CHECK(std::isfinite(o.fps) && o.fps > 0, path, ": fps must be > 0, got ", o.fps);
  QVG_CHECK(o.upscale >= 1 && o.upscale <= 16, path, ": upscale must be 1..16, got ", o.upscale);
  const int W = video.width * o.upscale, H = video.height * o.upscale;
  QVG_CHECK(W % 2 == 0 && H % 2 == 0, path, ": YUV 4:2:0 needs an even size, got ", W, "x", H);

  if (av_log_get_level() > AV_LOG_WARNING) av_log_set_level(AV_LOG_WARNING);  // no encoder statistics
  const AVCodec* codec = nullptr;
  if (o.encoder.empty()) {
    codec = avcodec_find_encoder_by_name("libx264");
    if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  } else {
    codec = avcodec_find_encoder_by_name(o.encoder.c_str());
  }
  QVG_CHECK(codec != nullptr, path, ": video encoder '", o.encoder.empty() ? "libx264 / mpeg4" : o.encoder,
            "' is not available in this FFmpeg build");

  AVFormatContext* raw = nullptr;
  int r = avformat_alloc_output_context2(&raw, nullptr, nullptr, path.c_str());
  QVG_CHECK(r >= 0 && raw, path, ": no container for this file name: ", av_error(r));
  std::unique_ptr<AVFormatContext, OutputCloser> fmt(raw);
  std::unique_ptr<AVCodecContext, CodecFreer> enc(avcodec_alloc_context3(codec));
  QVG_CHECK(enc != nullptr, path, ": out of memory");
  const int fps_num = static_cast<int>(std::lround(o.fps * 1000)), fps_den = 1000;
  enc->width = W;
  enc->height = H;
  enc->time_base = AVRational{fps_den, fps_num};
  enc->framerate = AVRational{fps_num, fps_den};
  enc->pix_fmt = codec->id == AV_CODEC_ID_PNG ? AV_PIX_FMT_RGB24 : AV_PIX_FMT_YUV420P;
  enc->gop_size = 12;
  if (codec->id == AV_CODEC_ID_MPEG4) enc->bit_rate = static_cast<int64_t>(W) * H * o.fps * 4;  // generous
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (std::string(codec->name) == "libx264") {
    av_opt_set(enc->priv_data, "crf", std::to_string(o.crf).c_str(), 0);
    av_opt_set(enc->priv_data, "preset", "medium", 0);
  }
  r = avcodec_open2(enc.get(), codec, nullptr);
  QVG_CHECK(r >= 0, path, ": cannot open encoder ", codec->name, ": ", av_error(r));
  AVStream* st = avformat_new_stream(fmt.get(), nullptr);
  QVG_CHECK(st != nullptr, path, ": cannot add a stream");
  st->time_base = enc->time_base;
  r = avcodec_parameters_from_context(st->codecpar, enc.get());
  QVG_CHECK(r >= 0, path, ": ", av_error(r));
  if (!(fmt->oformat->flags & AVFMT_NOFILE)) {
    r = avio_open(&fmt->pb, path.c_str(), AVIO_FLAG_WRITE);
    QVG_CHECK(r >= 0, path, ": cannot open for writing: ", av_error(r));
  }
  r = avformat_write_header(fmt.get(), nullptr);
  QVG_CHECK(r >= 0, path, ": cannot write the header: ", av_error(r));

  std::unique_ptr<SwsContext, SwsFreer> sws(sws_getContext(W, H, AV_PIX_FMT_RGB24, W, H, enc->pix_fmt,
                                                           SWS_BICUBIC | SWS_ACCURATE_RND | SWS_BITEXACT,
                                                           nullptr, nullptr, nullptr));
  QVG_CHECK(sws != nullptr, path, ": cannot set up the pixel conversion");
  std::unique_ptr<AVFrame, FrameFreer> frame(av_frame_alloc());
  std::unique_ptr<AVPacket, PacketFreer> pkt(av_packet_alloc());
  QVG_CHECK(frame && pkt, path, ": out of memory");
  frame->format = enc->pix_fmt;
  frame->width = W;
  frame->height = H;
  r = av_frame_get_buffer(frame.get(), 0);
  QVG_CHECK(r >= 0, path, ": ", av_error(r));

  auto drain = [&](bool flushing) {
    for (;;) {
      int e = avcodec_receive_packet(enc.get(), pkt.get());
      if (e == AVERROR(EAGAIN) || (flushing && e == AVERROR_EOF)) return;
      QVG_CHECK(e >= 0, path, ": encoding failed: ", av_error(e));
      if (pkt->duration <= 0) pkt->duration = 1;  // one frame; without it mp4 drops the last frame
      av_packet_rescale_ts(pkt.get(), enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      e = av_interleaved_write_frame(fmt.get(), pkt.get());
      QVG_CHECK(e >= 0, path, ": write failed: ", av_error(e));
    }
  };
  std::vector<uint8_t> up(static_cast<size_t>(W) * H * 3);
  for (int f = 0; f < video.frames; ++f) {
    const uint8_t* src = video.frame(f);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int ch = 0; ch < 3; ++ch)
          up[(static_cast<size_t>(y) * W + x) * 3 + ch] =
              src[(static_cast<size_t>(y / o.upscale) * video.width + x / o.upscale) * 3 + ch];
    r = av_frame_make_writable(frame.get());
    QVG_CHECK(r >= 0, path, ": ", av_error(r));
    const uint8_t* in[1] = {up.data()};
    const int in_stride[1] = {W * 3};
    sws_scale(sws.get(), in, in_stride, 0, H, frame->data, frame->linesize);
    frame->pts = f;
    r = avcodec_send_frame(enc.get(), frame.get());
    QVG_CHECK(r >= 0, path, ": encoding failed: ", av_error(r));
    drain(false);
  }
  r = avcodec_send_frame(enc.get(), nullptr);
  QVG_CHECK(r >= 0, path, ": encoding failed: ", av_error(r));
  drain(true);
  r = av_write_trailer(fmt.get());
  QVG_CHECK(r >= 0, path, ": cannot write the trailer: ", av_error(r));
  return codec->name;
}

#else

std::string write_video(const std::string& path, const Video&, const VideoWriteOptions&) {
  QVG_CHECK(false, path, ": qvg was built without FFmpeg (configure with -DQVG_WITH_FFMPEG=ON and install "
                         "libavformat-dev libavcodec-dev libswscale-dev libavutil-dev)");
}

#endif

}  // namespace qvg
