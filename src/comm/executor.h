#pragma once
// OrderedExecutor: runs a group's operations one at a time, in issue order.
// Blocking calls run on the caller's thread when nothing is queued (no thread
// hop on the latency-critical path); asynchronous ones run on a worker thread
// that starts on first use. A blocking call issued while asynchronous work is
// queued waits for it first, so the order every rank issues is the order the
// operations hit the wire.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/work.h"

namespace ntp::comm {

class OrderedExecutor {
 public:
  OrderedExecutor() = default;
  ~OrderedExecutor();  // runs what is still queued, then stops the worker
  OrderedExecutor(const OrderedExecutor&) = delete;
  OrderedExecutor& operator=(const OrderedExecutor&) = delete;

  // Runs `fn` after all earlier work; exceptions propagate to the caller.
  // Re-entrant: called from inside a running task, runs `fn` at once.
  void run(const std::function<void()>& fn);
  // Queues `fn`; the returned Work completes when it ran. Re-entrant like
  // run(): called from inside a running task, runs `fn` at once.
  std::shared_ptr<Work> submit(std::function<void()> fn);
  // Blocks until nothing is queued or running.
  void drain();

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<Work> work;
  };
  void worker_loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ntp::comm
