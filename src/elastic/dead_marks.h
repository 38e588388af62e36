#pragma once
// The dead marks of a job's ranks (membership.h, dead_key) as one snapshot
// per process, for GroupOptions::is_dead. Group creation asks the oracle
// about every other member every 25 ms while it waits and connects, in each
// of a rank's groups at once: one store read per member made that
// O(N) calls per poll per rank and O(N²) per poll on the store at the start of
// every epoch (dp 2 x tp 72 on one Redis: the server starved and the groups
// never connected). Here all of a process's questions within `max_age` are
// answered from one batched read (Redis MGET) of every rank's mark, and of
// the failed-epoch mark (membership.h, failed_key) of the epoch last asked
// about, for GroupOptions::abandoned.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ntp::elastic {

class DeadMarks {
 public:
  DeadMarks(std::shared_ptr<comm::Store> store, int world_size, std::chrono::milliseconds max_age);
  // Whether `rank` had a dead mark at a read at most max_age old (a read made
  // now if the last is older). Thread-safe; throws what the store throws.
  bool is_dead(int rank);
  // Whether a member marked `epoch` failed, as fresh as is_dead (a read made
  // now when the last one was of another epoch's mark). Thread-safe.
  bool epoch_failed(std::uint64_t epoch);

 private:
  // Reads every mark again if the snapshot is older than max_age or was not
  // of `epoch`'s failed mark. Under mutex_.
  void refresh(std::uint64_t epoch);

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds max_age_;
  int world_size_;
  std::vector<std::string> keys_;  // dead_key of every rank, then the failed mark's slot
  std::mutex mutex_;
  std::chrono::steady_clock::time_point read_at_;
  bool read_ = false;
  std::uint64_t epoch_ = 0;     // whose failed mark the snapshot holds
  std::vector<bool> dead_;
  bool epoch_failed_ = false;
};

}  // namespace ntp::elastic
