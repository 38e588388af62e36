#include "tensor/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace ntp::tensor {

namespace {

std::int64_t chunk_begin(std::int64_t count, int chunks, int index) {
  return count * index / chunks;
}

// Polls `done` until it holds or kSpin has passed; true if it holds.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("thread pool: threads must be >= 1");
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i); });
    pthread_setname_np(workers_.back().native_handle(), kWorkerName);  // top -H, perf, tests
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
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
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    count_ = count;
    chunks_ = chunks;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleeping_workers_ > 0;
  }
  if (wake) wake_.notify_all();
  // The workers use `fn` until pending_ reaches 0: even when the caller's
  // chunk throws, wait for them before leaving (and rethrowing).
  std::exception_ptr own_error;
  try {
    fn(0, chunk_begin(count, chunks, 1));
  } catch (...) {
    own_error = std::current_exception();
  }
  wait_for_workers();
  std::lock_guard lock(mutex_);
  job_ = nullptr;
  std::exception_ptr error = own_error ? own_error : std::exchange(error_, nullptr);
  error_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::wait_for_workers() {
  if (spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock lock(mutex_);
  caller_sleeping_ = true;
  done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  caller_sleeping_ = false;
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock lock(mutex_);
    if (generation_.load(std::memory_order_acquire) == seen) {
      ++sleeping_workers_;
      sleeps_.fetch_add(1, std::memory_order_relaxed);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      --sleeping_workers_;
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
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
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping_) done_.notify_one();
  }
}

}  // namespace ntp::tensor
