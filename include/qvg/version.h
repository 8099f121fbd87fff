// The library's version and what this build has in it.
#pragma once

#include <string>

namespace qvg {

/// "0.1.0": the project's version (CMakeLists.txt, the one place it is set).
const char* version();

/// One line: version, git commit, and whether CUDA and FFmpeg were built in:
/// "qvg 0.1.0 (commit 1a2b3c4, CUDA: yes, FFmpeg: yes)".
std::string build_info();

}  // namespace qvg
