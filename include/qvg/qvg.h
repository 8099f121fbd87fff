// qvg: the library's public API in one include, `#include <qvg/qvg.h>`. Each
// header below can also be included alone. None needs CUDA or includes a
// header of qvg's dependencies (Eigen, nlohmann_json, CUDA, FFmpeg); in a
// build without CUDA the GPU entry points exist and say so at run time
// (cuda_available() == false, their factories throw qvg::Error).
// Not included: the QVG encoder's steps exposed for tests (qvg/qvg_steps.h).
#pragma once

// Basics: errors, tensors, configurations, the method table, the version.
#include "qvg/common.h"
#include "qvg/config.h"
#include "qvg/methods.h"
#include "qvg/tensor.h"
#include "qvg/version.h"

// Codecs, encoded tensors as bytes, the budget rule.
#include "qvg/budget.h"
#include "qvg/budget_trial.h"
#include "qvg/codec.h"
#include "qvg/serialize.h"

// The streaming KV cache and RoPE.
#include "qvg/cache.h"
#include "qvg/rope.h"

// The CUDA backend: codecs, encodings in device memory, the device cache.
#include "qvg/cuda.h"
#include "qvg/device_cache.h"
#include "qvg/device_codec.h"

// K/V data, tensor files, evaluation and error metrics.
#include "qvg/data.h"
#include "qvg/eval.h"
#include "qvg/io.h"
#include "qvg/metrics.h"

// The reference video model; video files and their PSNR / SSIM.
#include "qvg/model.h"
#include "qvg/model_cuda.h"
#include "qvg/video.h"
#include "qvg/video_metrics.h"
#include "qvg/video_writer.h"

// Building blocks of the formats, shared by the reference and the kernels.
#include "qvg/fixed_sum.h"
#include "qvg/fp8.h"
#include "qvg/group_quant.h"
#include "qvg/half.h"
#include "qvg/kmeans.h"
#include "qvg/pack.h"
