#include "comm/group_base.h"

#include "comm/rendezvous.h"

namespace ntp::comm {

GroupBase::GroupBase(std::shared_ptr<Store> store, GroupOptions opts)
    : store_(std::move(store)), opts_(std::move(opts)), timeout_ms_(opts_.timeout.count()) {
  for (std::size_t i = 0; i < opts_.ranks.size(); ++i) {
    if (opts_.ranks[i] == opts_.global_rank) rank_ = static_cast<int>(i);
  }
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
