#include "comm/group_base.h"

#include <algorithm>
#include <vector>

#include "comm/rendezvous.h"

namespace ntp::comm {
namespace {

// The process's live groups. A watchdog thread aborts them under the mutex;
// a group leaves the list (under the same mutex) before its transport goes.
struct LiveGroups {
  std::mutex mutex;
  std::vector<GroupBase*> groups;
};

LiveGroups& live_groups() {
  static LiveGroups live;
  return live;
}

}  // namespace

namespace {

// Aborts the live groups that `match`, under the registry's mutex (a group
// leaves the list under it before its transport goes).
int abort_live_groups(const std::function<bool(const GroupBase&)>& match, const std::string& reason) {
  LiveGroups& live = live_groups();
  std::lock_guard lock(live.mutex);
  std::vector<GroupBase*> targets;
  for (GroupBase* g : live.groups) {
    if (!g->broken() && match(*g)) targets.push_back(g);
  }
  for (GroupBase* g : targets) g->abort(reason);
  return static_cast<int>(targets.size());
}

}  // namespace

int abort_groups_with(int global_rank, const std::string& reason) {
  return abort_live_groups([global_rank](const GroupBase& g) {
    return std::find(g.ranks().begin(), g.ranks().end(), global_rank) != g.ranks().end();
  }, reason);
}

int abort_epoch_groups(std::uint64_t epoch, const std::string& reason) {
  return abort_live_groups([epoch](const GroupBase& g) { return g.epoch() == epoch; }, reason);
}

void GroupBase::notify_failure(const CommError& error) const {
  if (opts_.on_failure) opts_.on_failure(error);
}

GroupBase::GroupBase(std::shared_ptr<Store> store, GroupOptions opts)
    : store_(std::move(store)), opts_(std::move(opts)), timeout_ms_(opts_.timeout.count()) {
  for (std::size_t i = 0; i < opts_.ranks.size(); ++i) {
    if (opts_.ranks[i] == opts_.global_rank) rank_ = static_cast<int>(i);
  }
  LiveGroups& live = live_groups();
  std::lock_guard lock(live.mutex);
  live.groups.push_back(this);
}

GroupBase::~GroupBase() { unlist(); }

void GroupBase::unlist() {
  LiveGroups& live = live_groups();
  std::lock_guard lock(live.mutex);
  std::erase(live.groups, this);
}

std::shared_ptr<Work> GroupBase::run_async(std::function<void(Group&)> task) {
  return executor_.submit([this, task = std::move(task)] { task(*this); });
}

std::chrono::milliseconds GroupBase::connect_timeout() const {
  return opts_.connect_timeout.count() > 0 ? opts_.connect_timeout : opts_.timeout;
}

void GroupBase::throw_if_broken(const char* op) const {
  if (broken_.load()) throw group_error(opts_, CommErrorKind::kBroken, op, "earlier failure: " + broken_reason_);
}

bool GroupBase::mark_broken(const std::string& reason) {
  std::lock_guard lock(broken_mutex_);
  if (broken_.load()) return false;
  broken_reason_ = reason;
  broken_.store(true);
  return true;
}

}  // namespace ntp::comm
