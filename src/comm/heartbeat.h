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
//
// Lease (docs/launch.md, "Partitions"): with a lease, each beat first renews
// "ntp/lease/<rank>" with Store::set_expiring(ttl), so the store itself
// drops it `ttl` after the last renewal it received. A guard thread that
// never touches the store knows when the last successful renewal was sent
// (steady clock, taken before the send) and calls on_lapse once when
//     now > sent + ttl - lease_guard(ttl),
// i.e. before the store can drop the lease: the rank must stop then (the
// worker _exits, self-fenced). Survivors act on a rank's absence only once
// its lease is gone from the store, so they never act while it may still
// run. A beat is not a lease: a rank that ends on its own erases both, so an
// expired lease (beat left, stale) tells a lost rank from a finished one.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace ntp::comm {

// How long before its lease can end on the store a holder stops:
// max(ttl / 10, 200 ms), at most ttl / 2. It covers the guard's own polling
// (lease_poll, <= guard / 4), a scheduling delay of the guard thread on a
// busy host, and the _exit; clock rate differences between the holder and
// the store (ppm) are far below it.
std::chrono::milliseconds lease_guard(std::chrono::milliseconds ttl);
// How often the guard looks: min(guard / 4, 50 ms), at least 1 ms.
std::chrono::milliseconds lease_poll(std::chrono::milliseconds ttl);
// The guard's decision, a pure function: whether a holder whose last
// successful renewal was sent at `sent` must stop at `now`.
bool lease_lapsed(std::chrono::steady_clock::time_point sent, std::chrono::steady_clock::time_point now,
                  std::chrono::milliseconds ttl);

struct LeaseOptions {
  std::chrono::milliseconds ttl{0};  // 0: no lease
  // Called once, from the guard thread, with a line that names the lease and
  // the store, when the lease lapses. It must stop the rank (the worker
  // _exits); a test records it.
  std::function<void(const std::string& why)> on_lapse;
};

class Heartbeat {
 public:
  // Beats (and renews the lease) once at once, so a fresh rank is never
  // stale, then every interval; throws if that first beat fails.
  Heartbeat(std::shared_ptr<Store> store, int global_rank,
            std::chrono::milliseconds interval = std::chrono::milliseconds(500), LeaseOptions lease = {});
  // Stops beating and erases the beat and the lease: a rank that ends on its
  // own is neither stale nor lost. A killed process never gets here, so its
  // beat stays and goes stale, and its lease expires.
  ~Heartbeat();
  // Stops beating and leaves the beat to go stale, as a starved heartbeat's
  // would; the lease is still renewed: the process is alive and its launcher
  // vouches for it (test.failures MUTE). Idempotent.
  void pause();
  // Stops beating and renewing the lease: the rank is as cut off from the
  // store, and its guard fences it (test.failures LAPSE). Idempotent.
  void lapse();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  std::uint64_t beats() const { return beats_.load(); }
  // The guard's check, on the caller's thread and without a store call: calls
  // on_lapse (at most once overall) and returns false when the lease lapsed.
  // True without a lease. For a step's commit, which must not run past it.
  bool check_lease();

 private:
  void beat();
  void loop();
  void guard();
  void stop_threads();

  std::shared_ptr<Store> store_;
  int rank_;
  std::chrono::milliseconds interval_;
  LeaseOptions lease_;
  std::string lapse_line_;  // made up front: the guard makes no store call
  std::atomic<std::uint64_t> beats_{0};
  std::atomic<bool> muted_{false};
  std::atomic<bool> lapsing_{false};
  // Steady-clock nanoseconds at which the last successful renewal was sent.
  std::atomic<std::int64_t> renewal_sent_ns_{0};
  std::atomic<bool> lapsed_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  std::thread guard_;
};

std::string heartbeat_key(int global_rank);
// "ntp/lease/<rank>": set while the rank holds its lease (Heartbeat).
std::string lease_key(int global_rank);

// Each rank's last beat as stored ("<wall ms> <beat>"), nullopt when it
// never beat. A watcher that keeps them sees a beat change on its own
// monotonic clock, which no wall-clock step can fake.
std::vector<std::optional<std::string>> heartbeat_values(Store& store, const std::vector<int>& ranks);

// Age of each rank's last beat (nullopt-like: -1 when it never beat).
std::vector<std::int64_t> heartbeat_ages_ms(Store& store, const std::vector<int>& ranks);

// Ranks among `ranks` whose last beat is older than max_age or missing.
std::vector<int> stale_ranks(Store& store, const std::vector<int>& ranks, std::chrono::milliseconds max_age);

}  // namespace ntp::comm
