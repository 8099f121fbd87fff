// qvg::version and qvg::build_info (include/qvg/version.h); the values come
// from CMake (QVG_VERSION_STRING, QVG_GIT_COMMIT).
#include "qvg/version.h"

#ifndef QVG_VERSION_STRING
#define QVG_VERSION_STRING "unknown"
#endif
#ifndef QVG_GIT_COMMIT
#define QVG_GIT_COMMIT "unknown"
#endif

namespace qvg {

const char* version() { return QVG_VERSION_STRING; }

std::string build_info() {
#if defined(QVG_WITH_CUDA)
  const char* cuda = "yes";
#else
  const char* cuda = "no";
#endif
#if defined(QVG_WITH_FFMPEG)
  const char* ffmpeg = "yes";
#else
  const char* ffmpeg = "no";
#endif
  return std::string("qvg ") + version() + " (commit " + QVG_GIT_COMMIT + ", CUDA: " + cuda + ", FFmpeg: " + ffmpeg +
         ")";
}

}  // namespace qvg
