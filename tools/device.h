// --device cpu|cuda of `qvg eval` and `qvg stream`: the backend on which the
// codecs encode and decode (qvg::Backend, qvg/cuda.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "qvg/cuda.h"

namespace qvg_cli {

/// Adds --device (cpu or cuda; default: the value in `device`, "cpu").
void add_codec_device_option(CLI::App* app, std::string& device);

/// The backend `device` names. For cuda, throws qvg::Error naming the
/// problem unless CUDA is usable (the library was built with CUDA and a
/// device is there): call it before loading data or doing any work.
qvg::Backend require_backend(const std::string& device);

}  // namespace qvg_cli
