// parallel_for over independent items (heads) with std::thread. Each item is
// processed by exactly one thread, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace qvg {

/// 0 -> hardware concurrency (at least 1).
inline int resolve_threads(int threads) {
  if (threads > 0) return threads;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

/// Calls fn(i) for i in [0, n) on up to `threads` threads; rethrows the first
/// exception (by item order) after all threads have finished.
template <typename F>
void parallel_for(int64_t n, int threads, F&& fn) {
  const int t = static_cast<int>(std::min<int64_t>(resolve_threads(threads), std::max<int64_t>(n, 1)));
  if (t <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(t));
  for (int w = 0; w < t; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += t) {
        try {
          fn(i);
        } catch (...) {
          errors[static_cast<size_t>(i)] = std::current_exception();
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace qvg
