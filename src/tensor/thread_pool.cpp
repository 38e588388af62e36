#include "tensor/thread_pool.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace ntp::tensor {

namespace {
std::int64_t chunk_begin(std::int64_t count, int chunks, int index) {
  return count * index / chunks;
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("thread pool: threads must be >= 1");
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::parallel_for(std::int64_t count, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (count <= 0) return;
  const std::int64_t by_grain = std::max<std::int64_t>(1, count / std::max<std::int64_t>(grain, 1));
  const int chunks = static_cast<int>(std::min<std::int64_t>(threads(), by_grain));
  if (chunks == 1) {
    fn(0, count);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    count_ = count;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  wake_.notify_all();
  // The workers use `fn` until pending_ reaches 0: even when the caller's
  // chunk throws, wait for them before leaving (and rethrowing).
  std::exception_ptr own_error;
  try {
    fn(0, chunk_begin(count, chunks, 1));
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  std::exception_ptr error = own_error ? own_error : std::exchange(error_, nullptr);
  error_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= chunks_) continue;  // this job has fewer chunks than workers
    const auto* job = job_;
    const std::int64_t begin = chunk_begin(count_, chunks_, index);
    const std::int64_t end = chunk_begin(count_, chunks_, index + 1);
    lock.unlock();
    std::exception_ptr error;
    try {
      (*job)(begin, end);
    } catch (...) {  // an exception leaving a worker thread would terminate
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace ntp::tensor
