#pragma once
// Heartbeat: each rank publishes "ntp/hb/<global rank>" = "<wall ms> <beat>"
// in the store every `interval` from a background thread; stale_ranks() lists
// the ranks whose last beat is older than `max_age` (or that never beat). A
// killed process and a stopped one (SIGSTOP) both stop beating; a live rank
// whose collectives hang keeps beating, which tells the two cases apart.
//
// Times are wall-clock milliseconds, so ranks on different hosts need clocks
// in sync to well within max_age (NTP/chrony, as any cluster has). A watcher
// of its own host's ranks can do without them: heartbeat_values() and how
// long each has not changed.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace ntp::comm {

class Heartbeat {
 public:
  // Beats once at once (so a fresh rank is never stale), then every interval.
  Heartbeat(std::shared_ptr<Store> store, int global_rank,
            std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  // Stops beating and erases the key: a rank that ends on its own is not
  // stale. A killed process never gets here, so its key stays and goes stale.
  ~Heartbeat();
  // Stops beating and leaves the key to go stale, as a stopped or starved
  // process's would (test.failures MUTE). Idempotent.
  void pause();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  std::uint64_t beats() const { return beats_.load(); }

 private:
  void beat();
  void loop();

  std::shared_ptr<Store> store_;
  int rank_;
  std::chrono::milliseconds interval_;
  std::atomic<std::uint64_t> beats_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

std::string heartbeat_key(int global_rank);

// Each rank's last beat as stored ("<wall ms> <beat>"), nullopt when it
// never beat. A watcher that keeps them sees a beat change on its own
// monotonic clock, which no wall-clock step can fake.
std::vector<std::optional<std::string>> heartbeat_values(Store& store, const std::vector<int>& ranks);

// Age of each rank's last beat (nullopt-like: -1 when it never beat).
std::vector<std::int64_t> heartbeat_ages_ms(Store& store, const std::vector<int>& ranks);

// Ranks among `ranks` whose last beat is older than max_age or missing.
std::vector<int> stale_ranks(Store& store, const std::vector<int>& ranks, std::chrono::milliseconds max_age);

}  // namespace ntp::comm
