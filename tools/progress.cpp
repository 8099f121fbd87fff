// Progress with an estimate of the time left (tools/progress.h).
#include "progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qvg_cli {

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char b[32];
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(b, sizeof b, "%ld:%02ld", s / 60, s % 60);
  return b;
}

JobProgress::JobProgress(int64_t total, bool quiet)
    : total_(total), quiet_(quiet), start_(std::chrono::steady_clock::now()) {}

double JobProgress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void JobProgress::step(const std::string& what) {
  ++done_;
  if (quiet_) return;
  const double t = elapsed();
  const double left = done_ < total_ ? t / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0.0;
  std::fprintf(stderr, "qvg: [%lld/%lld] %s, elapsed %s, about %s left\n", static_cast<long long>(done_),
               static_cast<long long>(total_), what.c_str(), clock_text(t).c_str(), clock_text(left).c_str());
  std::fflush(stderr);
}

}  // namespace qvg_cli
