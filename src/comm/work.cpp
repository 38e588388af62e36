#include "comm/work.h"

namespace ntp::comm {

bool Work::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Work::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::shared_ptr<Work> Work::completed(std::exception_ptr error) {
  auto work = std::make_shared<Work>();
  work->finish(std::move(error));
  return work;
}

}  // namespace ntp::comm
