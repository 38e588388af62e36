#pragma once
// A worker's watch on the ranks declared lost with their host (fencer.h).
// Such a rank's sockets may never close (its host is cut off), so a
// collective blocked on it would wait out deadline.collective_s before the
// recovery could begin, although the fencer knew it lost a lease_s after
// the cut. Every `interval` the watch reads the new entries of
// lost_list_key() — one store call, whatever the job's size — and calls
// on_lost for each rank named there; the worker aborts its groups with that
// rank (comm::abort_groups_with), and the step fails into the recovery.
//
// Entries written before the watch started are history (that rank was
// recovered from, and may have rejoined since): they are skipped. A store
// call that fails (a cut) is tried again at the next interval.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/store.h"

namespace ntp::elastic {

class LossWatch {
 public:
  LossWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds interval,
            std::function<void(int rank)> on_lost);
  ~LossWatch();
  LossWatch(const LossWatch&) = delete;
  LossWatch& operator=(const LossWatch&) = delete;

 private:
  void loop();
  void read_new();

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds interval_;
  std::function<void(int)> on_lost_;
  std::size_t read_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ntp::elastic
