#include "elastic/fencer.h"

#include <signal.h>

#include <chrono>

#include <spdlog/spdlog.h>

#include "comm/heartbeat.h"
#include "elastic/membership.h"

namespace ntp::elastic {
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why the survivors asked for a rank to be fenced, from its fence mark.
std::string fence_reason(const std::vector<char>& mark) {
  const std::string text = comm::to_text(mark);
  if (text == kLostWithHost) return "declared lost with its host by another host (its heartbeat went stale there)";
  return "declared lost by the survivors (" + text + ")";
}

}  // namespace

Fencer::Fencer(const train::Config& config, const train::RunDir& run, std::shared_ptr<comm::Store> store)
    : config_(config), run_(run), store_(std::move(store)),
      max_age_ms_(static_cast<std::int64_t>(config.deadline.heartbeat_s * 1000)),
      first_beat_ms_(static_cast<std::int64_t>(config.deadline.rendezvous_s * 1000)) {}

void Fencer::on_event(const std::string& event, const RankExit& r) {
  if (event == "worker_started") {
    local_.insert(r.rank);
    pids_[r.rank] = r.pid;
    started_ms_[r.rank] = now_ms();
    fresh_cpu_.erase(r.rank);  // a restarted worker is a new process
    fresh_sampled_ms_.erase(r.rank);
  }
  if (event == "worker_exited") {
    pids_.erase(r.rank);
    // Created, never overwritten: another host's verdict (kLostWithHost) on a
    // rank of this host, cut off meanwhile, must outlive this host's report.
    if (!r.ok()) store_->create(dead_key(r.rank), comm::to_bytes("exited"));
    // A worker lost to a signal (killed, or fenced) or fenced by itself is a slot to repair.
    if ((!r.exited || r.tolerated_exit) && config_.elastic.rejoin && !restarted_.contains(r.rank)) {
      lost_ms_[r.rank] = now_ms();
    }
  }
}

std::vector<int> Fencer::restarts(std::int64_t logged_steps) {
  std::vector<int> due;
  for (auto it = lost_ms_.begin(); it != lost_ms_.end();) {
    const bool ready = config_.test.repair_at_step >= 0
                           ? logged_steps > config_.test.repair_at_step
                           : now_ms() - it->second >= static_cast<std::int64_t>(config_.elastic.rejoin_after_s * 1000);
    if (!ready) {
      ++it;
      continue;
    }
    const int rank = it->first;
    store_->erase(dead_key(rank));
    store_->erase(fence_key(rank));
    store_->erase(comm::heartbeat_key(rank));
    fenced_.erase(rank);
    beaten_.erase(rank);  // the new process must beat within deadline.rendezvous_s
    restarted_.insert(rank);
    run_.event("rank_restarted", {{"rank", rank}});
    due.push_back(rank);
    it = lost_ms_.erase(it);
  }
  return due;
}

std::string host_beat_key(int node) { return "ntp/host/" + std::to_string(node); }

void Fencer::watch_remote(int node, const std::map<int, std::vector<int>>& hosts) {
  node_ = node;
  remote_.clear();
  host_of_.clear();
  for (const auto& [host, ranks] : hosts) {
    for (int rank : ranks) {
      remote_.push_back(rank);
      host_of_[rank] = host;
    }
  }
}

void Fencer::poll() {
  const std::int64_t now = now_ms();
  if (poll_started_ms_ > 0 && now - poll_started_ms_ > kStoreHiccupMs) store_back_ms_ = now;
  poll_started_ms_ = now;
  beat_host();
  tick();
  tick_remote();
}

// As often as the workers beat; only on several hosts (someone watches it).
void Fencer::beat_host() {
  if (remote_.empty() || now_ms() < next_host_beat_ms_) return;
  next_host_beat_ms_ = now_ms() + std::max<std::int64_t>(100, max_age_ms_ / 5);
  store_->set(host_beat_key(node_), comm::to_bytes(std::to_string(wall_ms())));
}

void Fencer::tick() {
  std::vector<int> ranks;
  for (const auto& [rank, pid] : pids_) ranks.push_back(rank);
  if (ranks.empty()) return;
  // Right after a store outage the beats are not judged; fence requests are.
  const std::optional<std::vector<std::int64_t>> ages = local_ages(ranks);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int rank = ranks[i];
    const std::int64_t age = ages ? (*ages)[i] : 0;
    if (ages && age >= 0) beaten_.insert(rank);
    if (const auto mark = store_->try_get(fence_key(rank))) {
      fence(rank, fence_reason(*mark), age);
    } else if (!ages) {
      continue;
    } else if (age > max_age_ms_) {
      if (!starved(rank, age)) fence(rank, "heartbeat older than deadline.heartbeat_s", age);
    } else if (age < 0 && !beaten_.contains(rank) && now_ms() - started_ms_[rank] > first_beat_ms_) {
      // (a rank that beat and has none now is ending on its own)
      fence(rank, "no heartbeat within deadline.rendezvous_s of its start", age);
    } else if (age >= 0) {
      note_fresh(rank);
    }
  }
}


void Fencer::tick_remote() {
  if (remote_.empty() || now_ms() < next_remote_ms_) return;
  next_remote_ms_ = now_ms() + std::max<std::int64_t>(100, max_age_ms_ / 5);
  const std::optional<std::vector<std::int64_t>> read = ages_of(remote_);
  if (!read) return;
  const std::vector<std::int64_t>& ages = *read;
  std::vector<int> stale;
  // Per stale rank: its dead mark, its starved mark, its host's beat, its lease.
  constexpr std::size_t kPer = 4;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < remote_.size(); ++i) {
    if (ages[i] <= max_age_ms_ || declared_.contains(remote_[i])) continue;
    stale.push_back(remote_[i]);
    keys.push_back(dead_key(remote_[i]));
    keys.push_back(starved_key(remote_[i]));
    keys.push_back(host_beat_key(host_of_.at(remote_[i])));
    keys.push_back(comm::lease_key(remote_[i]));
  }
  if (stale.empty()) return;
  // This host's own fence marks too: a host whose ranks the others declared
  // lost was the one cut off, and must declare nobody when it is back.
  for (int rank : local_) keys.push_back(fence_key(rank));
  // Its own launcher may have reported it, or vouched for it, or be alive.
  const auto marks = store_->get_many(keys);
  for (std::size_t i = kPer * stale.size(); i < marks.size(); ++i) {
    if (marks[i] && comm::to_text(*marks[i]) == kLostWithHost) return;
  }
  for (std::size_t i = 0; i < stale.size(); ++i) {
    if (fresh_beat(marks[kPer * i + 1]) || fresh_beat(marks[kPer * i + 2])) continue;
    // Nobody acts on a rank while the store still holds its lease: a rank cut
    // off from the store stops at (last renewal sent) + lease_s - guard
    // (comm/heartbeat.h), and the store drops the lease no earlier than
    // (last renewal sent) + lease_s, so once it is gone the rank has stopped:
    // it can commit no step and write nothing after the others go on.
    if (marks[kPer * i + 3]) continue;
    declared_.insert(stale[i]);
    if (marks[kPer * i]) continue;
    store_->set(fence_key(stale[i]), comm::to_bytes(kLostWithHost));
    store_->set(dead_key(stale[i]), comm::to_bytes(kLostWithHost));
    store_->append(lost_list_key(), comm::to_bytes(std::to_string(stale[i])));  // wakes blocked collectives
    run_.event("rank_lost", {{"rank", stale[i]},
                             {"reason", "heartbeat older than deadline.heartbeat_s, its lease ended on the store "
                                        "(deadline.lease_s) and no launcher reports it (its host is lost)"}});
  }
}

// A rank's CPU time while its heartbeat was fresh: the reference that tells
// a starved worker from a stopped one once the beat goes stale.
// Sampled at most once a second: any moment of a fresh beat will do.
void Fencer::note_fresh(int rank) {
  starved_.erase(rank);
  std::int64_t& sampled = fresh_sampled_ms_[rank];
  if (now_ms() - sampled < 1000) return;
  sampled = now_ms();
  if (const std::optional<ProcessSample> s = sample_process(pids_.at(rank))) fresh_cpu_[rank] = *s;
}

// A stale heartbeat of a local worker that still gets CPU (process_cpu.h):
// not fenced; the event says so once per episode.
bool Fencer::starved(int rank, std::int64_t age_ms) {
  const std::optional<ProcessSample> now = sample_process(pids_.at(rank));
  const auto fresh = fresh_cpu_.find(rank);
  if (!now || fresh == fresh_cpu_.end() || stale_worker_lost(fresh->second, *now)) return false;
  if (starved_.insert(rank).second) {
    run_.event("rank_starved", {{"rank", rank}, {"heartbeat_age_ms", age_ms},
                                {"cpu_ticks_since_beat", now->cpu_ticks - fresh->second.cpu_ticks}});
  }
  // Vouched for on the store, so that the other hosts' watchers (tick_remote) hold off too.
  store_->set(starved_key(rank), comm::to_bytes(std::to_string(wall_ms())));
  return true;
}

// Whether a "<wall ms>" mark was written within deadline.heartbeat_s: a
// launcher vouching that its rank is starved rather than lost, or its own beat.
bool Fencer::fresh_beat(const std::optional<std::vector<char>>& mark) const {
  if (!mark) return false;
  try {
    return wall_ms() - std::stoll(std::string(mark->begin(), mark->end())) <= max_age_ms_;
  } catch (const std::exception&) {
    return false;
  }
}

// Other hosts' ranks' beat ages, by the wall times in their beats.
std::optional<std::vector<std::int64_t>> Fencer::ages_of(const std::vector<int>& ranks) {
  return after_outage(comm::heartbeat_ages_ms(*store_, ranks));
}

// The local ranks' beat ages on this launcher's monotonic clock: since each
// beat last changed. The wall times in the beats are not compared: a clock
// step (NTP, a VM resumed) made every beat written before it look that much
// older, and a step forward fenced every rank that was not busy at the time.
std::optional<std::vector<std::int64_t>> Fencer::local_ages(const std::vector<int>& ranks) {
  const std::vector<std::optional<std::string>> values = comm::heartbeat_values(*store_, ranks);
  const std::int64_t now = now_ms();
  std::vector<std::int64_t> ages;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (!values[i]) {
      beat_seen_.erase(ranks[i]);
      ages.push_back(-1);
      continue;
    }
    auto [seen, fresh] = beat_seen_.try_emplace(ranks[i], *values[i], now);
    if (!fresh && seen->second.first != *values[i]) seen->second = {*values[i], now};
    ages.push_back(now - seen->second.second);
  }
  return after_outage(std::move(ages));
}

// `ages`, or none while the store was just unavailable (a call of this poll
// or the last one blocked on a reconnect, as when the server restarts): the
// ranks could not beat either, so for one deadline.heartbeat_s their silence
// says nothing.
std::optional<std::vector<std::int64_t>> Fencer::after_outage(std::vector<std::int64_t> ages) {
  const std::int64_t after = now_ms();
  if (after - poll_started_ms_ > kStoreHiccupMs) store_back_ms_ = after;
  if (store_back_ms_ > 0 && after - store_back_ms_ < max_age_ms_) return std::nullopt;
  return ages;
}

void Fencer::fence(int rank, const std::string& reason, std::int64_t age_ms) {
  const auto it = pids_.find(rank);
  if (it == pids_.end() || fenced_.contains(rank)) return;
  fenced_.insert(rank);
  // The dead mark goes first: survivors must not wait for this rank again.
  // Created, never overwritten: when the others declared it lost with its
  // host (this host was cut off), their mark is the one that stays, which is
  // how the lowest host left knows to write the run's summary.
  store_->create(dead_key(rank), comm::to_bytes("fenced"));
  ::kill(-it->second, SIGKILL);
  ::kill(it->second, SIGKILL);
  killed_pids_.insert(it->second);
  run_.event("rank_fenced", {{"rank", rank}, {"pid", it->second}, {"reason", reason},
                             {"heartbeat_age_ms", age_ms}});
  // Said at once: the rank's exit line that follows reads "killed by signal 9".
  spdlog::warn("rank {} (pid {}) fenced: {} (last heartbeat {} ms ago); killed with SIGKILL", rank, it->second,
               reason, age_ms);
}

}  // namespace ntp::elastic
