#pragma once
// GroupBase: what every backend's group holds alike — its options, rank,
// deadline, broken state and the ordered executor behind run_async().
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "comm/executor.h"
#include "comm/group.h"

namespace ntp::comm {

class GroupBase : public Group {
 public:
  GroupBase(std::shared_ptr<Store> store, GroupOptions opts);
  ~GroupBase() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(opts_.ranks.size()); }
  std::uint64_t epoch() const override { return opts_.epoch; }
  const std::string& name() const override { return opts_.name; }
  const std::vector<int>& ranks() const override { return opts_.ranks; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = timeout.count(); }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(timeout_ms_.load()); }
  bool broken() const override { return broken_.load(); }
  void abort(const std::string& reason) override { mark_broken("aborted: " + reason); }
  std::shared_ptr<Work> run_async(std::function<void(Group&)> task) override;

 protected:
  // Takes the group out of the process's live groups (abort_groups_with):
  // derived destructors call it first, before tearing down the transport,
  // so that no watchdog aborts a half-destroyed group. Idempotent.
  void unlist();
  // Deadline of group creation: connect_timeout, else timeout.
  std::chrono::milliseconds connect_timeout() const;
  // Throws kBroken (with the first failure's message) once the group broke.
  void throw_if_broken(const char* op) const;
  // Records the first failure; returns false if the group was already broken.
  bool mark_broken(const std::string& reason);
  // Tells opts_.on_failure that a transport failure broke the group: a
  // backend calls it once, after mark_broken succeeded for that failure.
  void notify_failure(const CommError& error) const;

  std::shared_ptr<Store> store_;
  GroupOptions opts_;
  int rank_ = -1;
  // Derived destructors drain it first, before tearing down the transport.
  OrderedExecutor executor_;

 private:
  std::atomic<long long> timeout_ms_;
  std::mutex broken_mutex_;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;  // written once, before broken_ is set
};

}  // namespace ntp::comm
