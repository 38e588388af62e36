#include "elastic/loss_watch.h"

#include <sstream>

#include "elastic/membership.h"

namespace ntp::elastic {

LossWatch::LossWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds interval,
                     std::function<void(int rank)> on_lost, EpochWatch epochs)
    : store_(std::move(store)), interval_(interval), on_lost_(std::move(on_lost)), epochs_(std::move(epochs)) {
  read_ = store_->items(lost_list_key()).size();  // history
  thread_ = std::thread([this] { loop(); });
}

LossWatch::~LossWatch() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LossWatch::read_new() {
  const auto fresh = store_->items(lost_list_key(), read_);
  read_ += fresh.size();
  for (const auto& item : fresh) {
    int rank = -1;
    if (std::stringstream(comm::to_text(item)) >> rank) on_lost_(rank);
  }
}

void LossWatch::check_epoch() {
  if (!epochs_.live_epoch || !epochs_.on_failed) return;
  const std::uint64_t epoch = epochs_.live_epoch();
  if (reported_ == epoch) return;
  const auto mark = store_->try_get(failed_key(epoch));
  if (!mark) return;
  int reporter = -1;
  std::stringstream(comm::to_text(*mark)) >> reporter;
  reported_ = epoch;
  epochs_.on_failed(epoch, reporter);
}

void LossWatch::loop() {
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, interval_, [&] { return stop_; })) {
    lock.unlock();
    for (void (LossWatch::*look)() : {&LossWatch::read_new, &LossWatch::check_epoch}) {
      try {
        (this->*look)();
      } catch (const std::exception&) {
        // The store unreachable for now: the next interval tries again, and
        // the collective's own deadline still bounds the wait.
      }
    }
    lock.lock();
  }
}

}  // namespace ntp::elastic
