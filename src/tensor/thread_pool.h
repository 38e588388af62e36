#pragma once
// A small fixed thread pool for the loops that are not GEMMs (layernorm,
// GELU, attention, softmax, AdamW). The calling thread takes part, so a pool
// of n threads starts n - 1 workers. No OpenMP: its spinning workers would
// fight OpenBLAS's own threads for the cores.
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

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t count_ = 0;
  int chunks_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;  // first exception of the current job's chunks
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace ntp::tensor
