#pragma once
// A small fixed thread pool for the GEMM blocks and the loops that are not
// GEMMs (layernorm, GELU, attention, softmax, AdamW). The calling thread takes
// part, so a pool of n threads starts n - 1 workers. No OpenMP: its spinning
// workers would fight OpenBLAS's own threads for the cores.
//
// Between two jobs a worker, and the caller waiting for the workers, spins for
// a bounded time (kSpin) before it sleeps on a condition variable: a step runs
// hundreds of short loops back to back, and a futex wake-up per loop cost more
// than the loops' own work on small shapes. Idle longer than that (a TP
// all-reduce, the sync, between steps) it sleeps, so it never holds a core it
// is not using for long.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ntp::tensor {

class ThreadPool {
 public:
  // How long an idle thread polls for the next job before it sleeps.
  static constexpr std::chrono::microseconds kSpin{100};
  // The name of the worker threads (as top -H and /proc/<pid>/task/*/comm show it).
  static constexpr const char* kWorkerName = "ntp-pool";

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, count) split into at most threads() contiguous
  // chunks; returns when every chunk is done. Chunks smaller than `grain` are
  // not split further. Not reentrant. If a chunk throws, the first exception
  // is rethrown here once every chunk has finished; the pool stays usable.
  void parallel_for(std::int64_t count, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  // Times a worker went to sleep on the condition variable (tests: a pool
  // left idle sleeps; one fed jobs back to back does not).
  std::uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

 private:
  void worker_loop(int index);
  void wait_for_workers();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t count_ = 0;
  int chunks_ = 0;
  std::atomic<int> pending_{0};
  std::exception_ptr error_;  // first exception of the current job's chunks
  std::atomic<std::uint64_t> generation_{0};
  int sleeping_workers_ = 0;   // guarded by mutex_
  bool caller_sleeping_ = false;  // guarded by mutex_
  bool stop_ = false;
  std::atomic<std::uint64_t> sleeps_{0};
};

}  // namespace ntp::tensor
