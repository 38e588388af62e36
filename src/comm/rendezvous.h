#pragma once
// Rendezvous of one group, common to all backends: store key layout, the
// join step that every member passes before any connection is made, and the
// group-level error helper.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"

namespace ntp::comm {

// A CommError about the group `opts` describes (its name, epoch and this rank).
CommError group_error(const GroupOptions& opts, CommErrorKind kind, const std::string& op, const std::string& detail,
                      int peer_global_rank = -1);

// group_keys_prefix(epoch) + "<name>/": everything of one group in one epoch lives below it.
std::string group_prefix(std::uint64_t epoch, const std::string& name);

// Joins the group in O(1) store operations and O(N) bytes per rank (with a
// store that has lists, e.g. Redis): each rank appends one card (its global
// rank and a hash of its membership list) to the list join_list_key(prefix);
// the rank that makes the list full appends to "<prefix>ready", which every
// rank waits on; then each reads the list once. Whatever a member published
// before joining is in the store when this returns. Throws CommError:
// kTimeout naming the ranks that did not join, kBadInput naming a rank whose
// membership list differs, kPeerError naming a member that opts.is_dead
// reports dead while waiting (the rank that sees it wakes the others).
void join_group(Store& store, const std::string& prefix, const GroupOptions& opts, std::chrono::milliseconds timeout);

// The list a group's members join in, and the card rank opts.global_rank
// appends to it (exposed so that tests can stand in for a member).
std::string join_list_key(const std::string& prefix);
std::vector<char> join_card(const GroupOptions& opts);

// Watches opts.is_dead and opts.abandoned during one phase of group creation
// ("joining", "connecting"): a helper thread asks them every kPollInterval
// (is_dead about every other member); on the first dead member it records a
// kPeerError naming that rank, on an abandoned epoch a kBroken, and runs
// `on_death` once (on the helper thread), e.g. to fail connects that are
// blocked in the transport. Without either oracle it starts no thread and
// never fires.
class DeathWatch {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{25};

  DeathWatch(const GroupOptions& opts, std::string phase, std::function<void(const CommError&)> on_death = {});
  ~DeathWatch();
  DeathWatch(const DeathWatch&) = delete;
  DeathWatch& operator=(const DeathWatch&) = delete;

  // Stops the helper thread: on_death does not run after this returns.
  void stop();
  // Throws the recorded error once a member was reported dead.
  void throw_if_fired() const;
  // For Store::wait's check.
  std::function<void()> check() const {
    return [this] { throw_if_fired(); };
  }

 private:
  void run();
  std::optional<int> first_dead_member() const;

  const GroupOptions& opts_;
  std::string phase_;
  std::function<void(const CommError&)> on_death_;
  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::optional<CommError> fired_;
  std::thread thread_;
};

}  // namespace ntp::comm
