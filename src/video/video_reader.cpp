// read_video: decoding through FFmpeg's libraries (libavformat, libavcodec,
// libswscale, libavutil) into 8-bit RGB frames.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qvg/common.h"
#include "qvg/video.h"

#if defined(QVG_WITH_FFMPEG) && QVG_WITH_FFMPEG
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}
#include "video/ffmpeg_util.h"
#define QVG_HAVE_VIDEO 1
#else
#define QVG_HAVE_VIDEO 0
#endif

namespace qvg {

bool video_support() { return QVG_HAVE_VIDEO != 0; }

#if QVG_HAVE_VIDEO
namespace {

using ffmpeg::av_error;
using ffmpeg::CodecFreer;
using ffmpeg::FrameFreer;
using ffmpeg::PacketFreer;
using ffmpeg::SwsFreer;

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};

/// Scales/converts decoded frames to RGB24 and appends them to a Video.
class FrameSink {
 public:
  FrameSink(Video& out, const std::string& path, const VideoReadOptions& o) : out_(out), path_(path), o_(o) {}

  bool full() const { return o_.max_frames > 0 && out_.frames >= o_.max_frames; }

  void add(const AVFrame* f) {
    QVG_CHECK(f->width > 0 && f->height > 0, "video '", path_, "': decoded a frame of size ", f->width, "x",
              f->height);
    // Centered crop by moving the plane pointers, as ffmpeg's crop filter does
    // (libavfilter/vf_crop.c, exact = 0): x, y rounded down to the chroma
    // subsampling; chroma planes move by y >> vsub rows, (x * step) >> hsub bytes.
    const AVPixelFormat fmt = static_cast<AVPixelFormat>(f->format);
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(fmt);
    QVG_CHECK(desc != nullptr, "video '", path_, "': unknown pixel format ", f->format);
    const int cw = o_.crop_width > 0 ? o_.crop_width : f->width;
    const int ch = o_.crop_height > 0 ? o_.crop_height : f->height;
    QVG_CHECK(cw <= f->width && ch <= f->height, "video '", path_, "': crop ", cw, "x", ch, " is larger than the ",
              f->width, "x", f->height, " frame");
    const uint8_t* data[4] = {f->data[0], f->data[1], f->data[2], f->data[3]};
    if (cw != f->width || ch != f->height) {
      QVG_CHECK(!(desc->flags & (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM)) && desc->nb_components > 0,
                "video '", path_, "': cannot crop pixel format ", desc->name);
      const int hsub = desc->log2_chroma_w, vsub = desc->log2_chroma_h;
      const int x = ((f->width - cw) / 2) & ~((1 << hsub) - 1);
      const int y = ((f->height - ch) / 2) & ~((1 << vsub) - 1);
      int step[4] = {0, 0, 0, 0};
      av_image_fill_max_pixsteps(step, nullptr, desc);
      data[0] += static_cast<ptrdiff_t>(y) * f->linesize[0] + static_cast<ptrdiff_t>(x) * step[0];
      for (int i = 1; i < 3; ++i)
        if (data[i])
          data[i] += static_cast<ptrdiff_t>(y >> vsub) * f->linesize[i] + ((static_cast<ptrdiff_t>(x) * step[i]) >> hsub);
      if (data[3]) data[3] += static_cast<ptrdiff_t>(y) * f->linesize[3] + static_cast<ptrdiff_t>(x) * step[3];
    }
    if (out_.width == 0) out_.width = o_.width > 0 ? o_.width : cw;
    if (out_.height == 0) out_.height = o_.height > 0 ? o_.height : ch;
    const int ow = out_.width, oh = out_.height;
    SwsContext* s = sws_getCachedContext(sws_.release(), cw, ch, fmt, ow, oh, AV_PIX_FMT_RGB24,
                                         SWS_AREA | SWS_ACCURATE_RND | SWS_BITEXACT, nullptr, nullptr, nullptr);
    QVG_CHECK(s != nullptr, "video '", path_, "': cannot convert pixel format ", f->format, " (", cw, "x", ch,
              ") to RGB ", ow, "x", oh);
    sws_.reset(s);
    // swscale may write a little past the end of a row: convert into a padded
    // buffer with aligned stride, then copy the rows.
    const int stride = (ow * 3 + 63) / 64 * 64;
    scratch_.resize(static_cast<size_t>(stride) * static_cast<size_t>(oh) + 64);
    uint8_t* dst[4] = {scratch_.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {stride, 0, 0, 0};
    const int rows = sws_scale(sws_.get(), data, f->linesize, 0, ch, dst, dst_stride);
    QVG_CHECK(rows == oh, "video '", path_, "': scaling produced ", rows, " rows, expected ", oh);
    const size_t frame_bytes = static_cast<size_t>(ow) * static_cast<size_t>(oh) * 3u;
    const size_t at = out_.rgb.size();
    out_.rgb.resize(at + frame_bytes);
    for (int y = 0; y < oh; ++y)
      std::memcpy(out_.rgb.data() + at + static_cast<size_t>(y) * ow * 3, scratch_.data() + static_cast<size_t>(y) * stride,
                  static_cast<size_t>(ow) * 3u);
    ++out_.frames;
  }

 private:
  Video& out_;
  const std::string& path_;
  VideoReadOptions o_;
  std::unique_ptr<SwsContext, SwsFreer> sws_;
  std::vector<uint8_t> scratch_;
};

/// Receives every frame the decoder has ready. Returns false once the sink is full.
bool drain(AVCodecContext* codec, AVFrame* frame, FrameSink& sink, const std::string& path) {
  while (!sink.full()) {
    const int r = avcodec_receive_frame(codec, frame);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return true;
    QVG_CHECK(r >= 0, "video '", path, "': decoding failed: ", av_error(r));
    sink.add(frame);
    av_frame_unref(frame);
  }
  return false;
}

}  // namespace
#endif

Video read_video(const std::string& path, int max_frames, int width, int height) {
  VideoReadOptions o;
  o.max_frames = max_frames;
  o.width = width;
  o.height = height;
  return read_video(path, o);
}

Video read_video(const std::string& path, const VideoReadOptions& options) {
  const int max_frames = options.max_frames, width = options.width, height = options.height;
  QVG_CHECK(max_frames >= 0, "read_video: max_frames must be >= 0 (0 = all), got ", max_frames);
  QVG_CHECK(width >= 0 && height >= 0 && width <= 16384 && height <= 16384,
            "read_video: width and height must be in [0, 16384] (0 = the stream's), got ", width, "x", height);
  QVG_CHECK(options.crop_width >= 0 && options.crop_height >= 0, "read_video: crop sizes must be >= 0, got ",
            options.crop_width, "x", options.crop_height);
#if !QVG_HAVE_VIDEO
  (void)path;
  QVG_CHECK(false, "cannot read video '", path,
            "': qvg was built without FFmpeg (configure with -DQVG_WITH_FFMPEG=ON and install "
            "libavformat-dev libavcodec-dev libswscale-dev libavutil-dev)");
  return {};
#else
  std::error_code ec;
  QVG_CHECK(std::filesystem::exists(path, ec), "cannot read video '", path, "': no such file");
  QVG_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read video '", path, "': not a regular file");

  AVFormatContext* raw_fmt = nullptr;
  int r = avformat_open_input(&raw_fmt, path.c_str(), nullptr, nullptr);
  QVG_CHECK(r >= 0, "cannot open video '", path, "': ", av_error(r));
  std::unique_ptr<AVFormatContext, FormatCloser> fmt(raw_fmt);
  r = avformat_find_stream_info(fmt.get(), nullptr);
  QVG_CHECK(r >= 0, "cannot read video '", path, "': no stream information (", av_error(r), ")");

  const AVCodec* decoder = nullptr;
  const int stream = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  QVG_CHECK(stream >= 0 && decoder != nullptr, "cannot read video '", path, "': ",
            stream == AVERROR_DECODER_NOT_FOUND ? "no decoder for its video stream" : "no video stream");
  const AVStream* st = fmt->streams[stream];

  std::unique_ptr<AVCodecContext, CodecFreer> codec(avcodec_alloc_context3(decoder));
  QVG_CHECK(codec != nullptr, "cannot read video '", path, "': out of memory");
  r = avcodec_parameters_to_context(codec.get(), st->codecpar);
  QVG_CHECK(r >= 0, "cannot read video '", path, "': ", av_error(r));
  codec->thread_count = 1;  // decoding is exact either way; leave the cores to the caller
  r = avcodec_open2(codec.get(), decoder, nullptr);
  QVG_CHECK(r >= 0, "cannot open the ", decoder->name, " decoder for '", path, "': ", av_error(r));

  Video video;
  video.width = width;
  video.height = height;
  if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) video.fps = av_q2d(st->avg_frame_rate);
  FrameSink sink(video, path, options);
  std::unique_ptr<AVPacket, PacketFreer> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameFreer> frame(av_frame_alloc());
  QVG_CHECK(packet != nullptr && frame != nullptr, "cannot read video '", path, "': out of memory");

  int bad_packets = 0;
  bool more = true;
  while (more) {
    r = av_read_frame(fmt.get(), packet.get());
    if (r == AVERROR_EOF) break;
    QVG_CHECK(r >= 0, "cannot read video '", path, "': ", av_error(r), " after ", video.frames, " frames");
    if (packet->stream_index == stream) {
      const int s = avcodec_send_packet(codec.get(), packet.get());
      if (s < 0 && s != AVERROR(EAGAIN)) ++bad_packets;  // skip a damaged packet, as ffmpeg does
      more = drain(codec.get(), frame.get(), sink, path);
    }
    av_packet_unref(packet.get());
  }
  if (more) {  // flush the frames the decoder still holds
    avcodec_send_packet(codec.get(), nullptr);
    drain(codec.get(), frame.get(), sink, path);
  }
  QVG_CHECK(video.frames > 0, "cannot read video '", path, "': no decodable video frame",
            bad_packets > 0 ? " (the stream is corrupt)" : "");
  return video;
#endif
}

}  // namespace qvg
