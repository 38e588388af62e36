#include "comm/executor.h"

namespace ntp::comm {

namespace {
// The executor whose task runs on this thread, for re-entrant calls.
thread_local const OrderedExecutor* running_here = nullptr;

struct RunningScope {
  const OrderedExecutor* saved;
  explicit RunningScope(const OrderedExecutor* self) : saved(running_here) { running_here = self; }
  ~RunningScope() { running_here = saved; }
};
}  // namespace

OrderedExecutor::~OrderedExecutor() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OrderedExecutor::run(const std::function<void()>& fn) {
  if (running_here == this) {
    fn();
    return;
  }
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  struct Release {
    OrderedExecutor* self;
    ~Release() {
      {
        std::lock_guard lock(self->mutex_);
        self->busy_ = false;
      }
      self->cv_.notify_all();
    }
  } release{this};
  RunningScope scope(this);
  fn();
}

std::shared_ptr<Work> OrderedExecutor::submit(std::function<void()> fn) {
  // From inside a running task, queueing would make a wait() on the result
  // wait for the task itself: run it at once, as run() does.
  if (running_here == this) {
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    return Work::completed(error);
  }
  auto work = std::make_shared<Work>();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Task{std::move(fn), work});
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  }
  cv_.notify_all();
  return work;
}

void OrderedExecutor::drain() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void OrderedExecutor::worker_loop() {
  RunningScope scope(this);
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      task.fn();
    } catch (...) {
      error = std::current_exception();
    }
    task.work->finish(error);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace ntp::comm
