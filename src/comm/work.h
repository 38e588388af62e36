#pragma once
// Work: the handle of an asynchronous collective. The operation runs on the
// group's communication thread, in issue order with every other operation of
// that group; wait() blocks until it finished and rethrows its CommError.
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace ntp::comm {

class Work {
 public:
  // True once the operation finished (successfully or not). Never blocks.
  bool done() const;
  // Blocks until done; rethrows the operation's error, if any. Bounded: each
  // operation fails by its group's deadline, later ones of a broken group at once.
  void wait();

  // Called by the executor.
  void finish(std::exception_ptr error);
  // A Work that is already complete (for operations run inline).
  static std::shared_ptr<Work> completed(std::exception_ptr error = nullptr);

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace ntp::comm
