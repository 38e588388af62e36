#pragma once
// Runs fn(i) for i in [0, count) on up to `threads` threads. Work is handed
// out one index at a time; results must be written to slot i only, so the
// outcome never depends on the thread count. The first exception is rethrown.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ntp::sim {

template <typename Fn>
void parallel_for(int count, int threads, Fn&& fn) {
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int i = next++; i < count; i = next++) {
      try {
        fn(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;
      }
    }
  };
  const int n = std::max(1, std::min(threads, count));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace ntp::sim
