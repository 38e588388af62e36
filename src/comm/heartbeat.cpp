#include "comm/heartbeat.h"

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

Heartbeat::Heartbeat(std::shared_ptr<Store> store, int global_rank, std::chrono::milliseconds interval)
    : store_(std::move(store)), rank_(global_rank), interval_(interval) {
  if (!store_) throw_bad_input("heartbeat", "no store given");
  if (interval_.count() <= 0) throw_bad_input("heartbeat", "interval must be positive");
  beat();  // synchronous: a store that does not work fails here, loudly
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  pause();
  // A rank that stops on its own takes its beat away: a watcher elsewhere
  // must not take a finished rank for one lost with its host.
  try {
    store_->erase(heartbeat_key(rank_));
  } catch (const std::exception&) {
  }
}

void Heartbeat::pause() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::beat() {
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
      // A store hiccup only delays a beat; persistent failure shows as staleness.
    }
    lock.lock();
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
