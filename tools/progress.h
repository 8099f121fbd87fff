// Progress of a known amount of work on stderr, with the elapsed time and an
// estimate of the time left (the mean time per step so far times the steps
// left).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qvg_cli {

class JobProgress {
 public:
  /// total: the steps of the whole job (> 0); quiet: print nothing.
  JobProgress(int64_t total, bool quiet);
  /// One step done: "qvg: [done/total] what, elapsed m:ss, about m:ss left".
  void step(const std::string& what);
  /// Seconds since construction.
  double elapsed() const;

 private:
  int64_t total_, done_ = 0;
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
};

/// Seconds as "m:ss" (or "h:mm:ss").
std::string clock_text(double seconds);

}  // namespace qvg_cli
