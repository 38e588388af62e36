#pragma once

// The launcher's side of failure detection (DESIGN §5): it marks every worker
// that died in the store (dead_key), where the survivors' agreement looks;
// and it fences — SIGKILLs, by pid — a worker whose heartbeat is older than
// deadline.heartbeat_s (stopped, or wedged with its whole process), or that
// the survivors declared lost (fence_key), so that a process declared lost
// can never come back with stale state. A worker whose beat is stale but
// that still gets CPU (process_cpu.h) is starved, not lost: it is reported,
// vouched for on the store, and left alone.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/store.h"
#include "elastic/launcher.h"
#include "elastic/process_cpu.h"
#include "train/config.h"
#include "train/run_dir.h"

namespace ntp::elastic {

// The dead mark a host's watcher sets on another host's rank whose beat went
// stale with no launcher reporting it: its host is lost.
inline constexpr const char* kLostWithHost = "lost with its host";

// The beat of host `node`'s launcher ("<wall ms>"), while it watches its own
// ranks. A live launcher answers for its ranks itself (it fences a stopped or
// wedged one, and leaves a starved one alone), so another host's watcher
// declares a rank lost with its host only when this beat is stale too.
std::string host_beat_key(int node);

class Fencer {
 public:
  Fencer(const train::Config& config, const train::RunDir& run, std::shared_ptr<comm::Store> store);

  // The launcher's worker_started / worker_exited events.
  void on_event(const std::string& event, const RankExit& r);

  // With elastic.rejoin: the lost ranks whose repair is due, each restarted
  // once. Its store marks go first, so nobody takes the new process for dead.
  std::vector<int> restarts(std::int64_t logged_steps);

  // Every launcher tick: the local ranks, then the other hosts'.
  void poll();

  // Whether this worker was fenced (SIGKILLed here): LaunchOptions::killed.
  bool killed(pid_t pid) const { return killed_pids_.contains(pid); }

  // This host (`node`) and the ranks of the other hosts, by host. A whole
  // host lost takes its launcher with it, so nobody there marks its ranks
  // dead: a rank whose beat and whose launcher's beat both went stale is
  // marked here (dead_key, for the survivors' agreement) and fenced, should
  // its host come back. A host that finds its own ranks so marked was the
  // one cut off from the store: it declares nobody lost.
  void watch_remote(int node, const std::map<int, std::vector<int>>& hosts);

 private:
  void tick();
  void tick_remote();
  void note_fresh(int rank);
  bool starved(int rank, std::int64_t age_ms);
  bool fresh_beat(const std::optional<std::vector<char>>& mark) const;
  std::optional<std::vector<std::int64_t>> ages_of(const std::vector<int>& ranks);
  std::optional<std::vector<std::int64_t>> local_ages(const std::vector<int>& ranks);
  std::optional<std::vector<std::int64_t>> after_outage(std::vector<std::int64_t> ages);
  void fence(int rank, const std::string& reason, std::int64_t age_ms);

  const train::Config& config_;
  const train::RunDir& run_;
  std::shared_ptr<comm::Store> store_;
  std::int64_t max_age_ms_;
  std::int64_t first_beat_ms_;
  std::map<int, int> pids_;
  std::map<int, std::int64_t> started_ms_;
  std::set<int> fenced_;
  std::set<pid_t> killed_pids_;
  std::map<int, std::int64_t> lost_ms_;  // lost ranks waiting for their repair
  std::set<int> restarted_;
  std::map<int, ProcessSample> fresh_cpu_;  // CPU time at a recent fresh heartbeat
  std::map<int, std::int64_t> fresh_sampled_ms_;
  std::set<int> starved_;  // stale but getting CPU: reported once
  std::set<int> beaten_;   // local ranks seen beating
  // Local rank -> its beat as last read, and when (this clock) it was first
  // read so: a local beat's age is how long it has not changed here.
  std::map<int, std::pair<std::string, std::int64_t>> beat_seen_;
  void beat_host();

  std::set<int> local_;  // every rank this launcher started
  int node_ = 0;
  std::vector<int> remote_;
  std::map<int, int> host_of_;  // remote rank -> its host
  std::int64_t next_host_beat_ms_ = 0;
  std::set<int> declared_;  // remote ranks found stale
  std::int64_t next_remote_ms_ = 0;
  static constexpr std::int64_t kStoreHiccupMs = 500;  // a batched read takes milliseconds
  std::int64_t store_back_ms_ = 0;  // when the store answered again after being unavailable
  std::int64_t poll_started_ms_ = 0;
};

}  // namespace ntp::elastic
