// Side-by-side evaluation of codecs on K/V (and optional Q): the engine
// behind `qvg eval` and `qvg demo`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qvg/codec.h"
#include "qvg/cuda.h"
#include "qvg/metrics.h"

namespace qvg {

struct EvalInput {
  std::string name;  ///< data set label for reports
  HeadTensor k, v;   ///< [heads, tokens, dim], same shape
  std::optional<HeadTensor> q;  ///< [q_heads, queries, dim]; enables attention error
};

/// One method on one tensor.
struct EvalRow {
  std::string dataset;
  std::string method;  ///< the spec as given ("qvg-pro:block=32")
  std::string tensor;  ///< "k" or "v"
  CodecConfig config;  ///< the encoding's (centroids=auto: the C chosen for the tensor's length)
  ErrorStats error;
  PartBytes bytes;
  double bits_per_value = 0;
  double ratio = 0;  ///< BF16 bytes / encoded bytes
  double encode_ms = 0, decode_ms = 0, kmeans_ms = 0;
  int kmeans_iterations = 0;  ///< summed over heads and stages
  /// Relative L2 error of softmax(Q K^T / sqrt(D)) V with this method's K and
  /// V reconstructions (the same value on the method's k and v rows).
  std::optional<double> attn_rel_l2;
};

struct EvalOptions {
  int threads = 0;
  /// Where the codecs encode and decode (qvg/cuda.h): Backend::cuda makes
  /// every method's codec with make_cuda_codec (qvg::Error, before any work,
  /// for a method without one or when CUDA is not usable).
  Backend backend = Backend::cpu;
  /// Called before each step with a short description (progress output).
  std::function<void(const std::string&)> progress;
  /// Called with each reconstruction (method spec, "k" or "v", tensor), e.g.
  /// to write it to a file. May be empty.
  std::function<void(const std::string&, const std::string&, const HeadTensor&)> on_reconstruction;
};

/// Encodes and decodes K and V with every method; validates every spec and
/// the input shapes before any work starts (qvg::Error naming the problem).
std::vector<EvalRow> evaluate(const EvalInput& in, const std::vector<std::string>& methods,
                              const EvalOptions& opt = {});

/// A fixed-width text table of the rows of one tensor ("k" or "v").
std::string format_table(const std::vector<EvalRow>& rows, const std::string& tensor);

}  // namespace qvg
