#include "comm/heartbeat.h"

#include <algorithm>
#include <string>

#include "comm/error.h"

namespace ntp::comm {

namespace {

std::int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string heartbeat_key(int global_rank) { return "ntp/hb/" + std::to_string(global_rank); }
std::string lease_key(int global_rank) { return "ntp/lease/" + std::to_string(global_rank); }

std::chrono::milliseconds lease_guard(std::chrono::milliseconds ttl) {
  return std::min(std::max(ttl / 10, std::chrono::milliseconds(200)), ttl / 2);
}

std::chrono::milliseconds lease_poll(std::chrono::milliseconds ttl) {
  return std::max(std::min(lease_guard(ttl) / 4, std::chrono::milliseconds(50)), std::chrono::milliseconds(1));
}

bool lease_lapsed(std::chrono::steady_clock::time_point sent, std::chrono::steady_clock::time_point now,
                  std::chrono::milliseconds ttl) {
  return now > sent + ttl - lease_guard(ttl);
}

namespace {

std::int64_t steady_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

std::chrono::steady_clock::time_point steady_at(std::int64_t ns) {
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ns));
}

}  // namespace

Heartbeat::Heartbeat(std::shared_ptr<Store> store, int global_rank, std::chrono::milliseconds interval,
                     LeaseOptions lease)
    : store_(std::move(store)), rank_(global_rank), interval_(interval), lease_(std::move(lease)) {
  if (!store_) throw_bad_input("heartbeat", "no store given");
  if (interval_.count() <= 0) throw_bad_input("heartbeat", "interval must be positive");
  if (lease_.ttl.count() < 0) throw_bad_input("heartbeat", "lease ttl must be >= 0");
  if (lease_.ttl.count() > 0) {
    lapse_line_ = "rank " + std::to_string(rank_) + ": self-fenced: could not renew its lease " + lease_key(rank_) +
                  " on " + store_->describe() + " within deadline.lease_s (" + std::to_string(lease_.ttl.count()) +
                  " ms); stopping before the store drops it and the others go on without this rank";
  }
  beat();  // synchronous: a store that does not work fails here, loudly
  thread_ = std::thread([this] { loop(); });
  if (lease_.ttl.count() > 0) guard_ = std::thread([this] { guard(); });
}

Heartbeat::~Heartbeat() {
  stop_threads();
  // A rank that stops on its own takes its beat and its lease away: a watcher
  // elsewhere must not take a finished rank for one lost with its host, and
  // the survivors need not wait for its lease to run out.
  try {
    store_->erase(heartbeat_key(rank_));
    if (lease_.ttl.count() > 0) store_->erase(lease_key(rank_));
  } catch (const std::exception&) {
  }
}

void Heartbeat::stop_threads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (guard_.joinable()) guard_.join();
}

void Heartbeat::pause() {
  muted_ = true;
  if (lease_.ttl.count() == 0) {
    // Nothing left to renew: the thread goes, as before leases.
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (lease_.ttl.count() == 0 && thread_.joinable()) thread_.join();
}

void Heartbeat::lapse() {
  muted_ = true;
  lapsing_ = true;
}

// The lease first, with the time taken before the send: the store counts its
// ttl from when the command arrived, never earlier, so the holder's view of
// the lease's end is never later than the store's.
void Heartbeat::beat() {
  if (lease_.ttl.count() > 0 && !lapsing_) {
    const std::int64_t sent = steady_ns();
    store_->set_expiring(lease_key(rank_), to_bytes(std::to_string(wall_ms())), lease_.ttl);
    renewal_sent_ns_.store(std::max(renewal_sent_ns_.load(), sent));
  }
  if (muted_) return;
  const std::uint64_t n = beats_.load() + 1;
  store_->set(heartbeat_key(rank_), to_bytes(std::to_string(wall_ms()) + " " + std::to_string(n)));
  beats_.store(n);
}

void Heartbeat::loop() {
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, interval_, [&] { return stop_; })) {
    lock.unlock();
    try {
      beat();
    } catch (const std::exception&) {
      // A store hiccup only delays a beat; persistent failure shows as
      // staleness, and as a lapsed lease.
    }
    lock.lock();
  }
}

bool Heartbeat::check_lease() {
  if (lease_.ttl.count() == 0) return true;
  if (lapsed_.load()) return false;
  const auto sent = steady_at(renewal_sent_ns_.load());
  if (!lease_lapsed(sent, std::chrono::steady_clock::now(), lease_.ttl)) return true;
  if (lapsed_.exchange(true)) return false;
  const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - sent);
  if (lease_.on_lapse) lease_.on_lapse(lapse_line_ + " (last renewal sent " + std::to_string(ago.count()) + " ms ago)");
  return false;
}

// Never calls the store: a call during a network cut blocks for the store's
// reconnect deadline, far past the lease.
void Heartbeat::guard() {
  const auto poll = lease_poll(lease_.ttl);
  std::unique_lock lock(mutex_);
  while (!cv_.wait_for(lock, poll, [&] { return stop_; })) {
    lock.unlock();
    const bool held = check_lease();
    lock.lock();
    if (!held) return;
  }
}

// One batched read (Redis MGET) for all the ranks: a watcher of N ranks makes
// one store operation per check, not N.
std::vector<std::optional<std::string>> heartbeat_values(Store& store, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(heartbeat_key(r));
  std::vector<std::optional<std::string>> out;
  for (const auto& value : store.get_many(keys)) {
    out.push_back(value ? std::optional<std::string>(to_text(*value)) : std::nullopt);
  }
  return out;
}

std::vector<std::int64_t> heartbeat_ages_ms(Store& store, const std::vector<int>& ranks) {
  std::vector<std::int64_t> ages;
  const std::int64_t now = wall_ms();
  for (const auto& value : heartbeat_values(store, ranks)) {
    if (!value) {
      ages.push_back(-1);
      continue;
    }
    try {
      ages.push_back(std::max<std::int64_t>(0, now - std::stoll(*value)));
    } catch (const std::exception&) {
      ages.push_back(-1);  // unreadable beat counts as none
    }
  }
  return ages;
}

std::vector<int> stale_ranks(Store& store, const std::vector<int>& ranks, std::chrono::milliseconds max_age) {
  const auto ages = heartbeat_ages_ms(store, ranks);
  std::vector<int> stale;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ages[i] < 0 || ages[i] > max_age.count()) stale.push_back(ranks[i]);
  }
  return stale;
}

}  // namespace ntp::comm
