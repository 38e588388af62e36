#pragma once
// A worker's watch on the job's losses, through the store.
//
// Ranks declared lost with their host (fencer.h). Such a rank's sockets may
// never close (its host is cut off), so a collective blocked on it would wait
// out deadline.collective_s before the recovery could begin, although the
// fencer knew it lost a lease_s after the cut. Every `interval` the watch
// reads the new entries of lost_list_key() — one store call, whatever the
// job's size — and calls on_lost for each rank named there; the worker aborts
// its groups with that rank (comm::abort_groups_with), and the step fails
// into the recovery. Entries written before the watch started are history
// (that rank was recovered from, and may have rejoined since): they are
// skipped.
//
// Failed epochs (EpochWatch). A failure reaches most members as closed
// sockets, passed on from rank to rank as each aborts its groups; but a
// member blocked on a peer that is itself blocked (on a pair whose close it
// has not read yet) hears nothing until its call's deadline, and the
// survivors then wait that long for its registration. The first member to
// enter a recovery marks the epoch failed (failed_key); every interval the
// watch reads the mark of the epoch this rank trains in — one more store
// call — and calls on_failed once per epoch, and the worker aborts that
// epoch's groups (comm::abort_epoch_groups).
//
// A store call that fails (a cut) is tried again at the next interval.
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/store.h"

namespace ntp::elastic {

// The epoch half of the watch; empty functions: lost ranks only.
struct EpochWatch {
  std::function<std::uint64_t()> live_epoch;  // the epoch this rank trains in now (any thread)
  std::function<void(std::uint64_t epoch, int reporter)> on_failed;
};

class LossWatch {
 public:
  LossWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds interval,
            std::function<void(int rank)> on_lost, EpochWatch epochs = {});
  ~LossWatch();
  LossWatch(const LossWatch&) = delete;
  LossWatch& operator=(const LossWatch&) = delete;

 private:
  void loop();
  void read_new();
  void check_epoch();

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds interval_;
  std::function<void(int)> on_lost_;
  EpochWatch epochs_;
  std::size_t read_ = 0;
  std::optional<std::uint64_t> reported_;  // the last epoch on_failed was called for
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ntp::elastic
