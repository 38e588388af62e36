#pragma once
// GlooGroup: a Group over Gloo's TCP transport (CPU buffers, any number of
// hosts). Rendezvous goes through a Store; every call has a deadline (Gloo's
// per-operation timeout), and an error breaks the group and closes its
// connections so that the other members fail fast too.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "comm/call_check.h"
#include "comm/executor.h"
#include "comm/group.h"

namespace gloo {
class Context;
}

namespace ntp::comm {

class GlooGroup : public Group {
 public:
  // Joins and connects; see create_group() for the errors.
  GlooGroup(std::shared_ptr<Store> store, GroupOptions opts);
  ~GlooGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(opts_.ranks.size()); }
  std::uint64_t epoch() const override { return opts_.epoch; }
  const std::string& name() const override { return opts_.name; }
  const std::vector<int>& ranks() const override { return opts_.ranks; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = timeout.count(); }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(timeout_ms_.load()); }
  bool broken() const override { return broken_.load(); }

  void all_reduce(float* data, std::size_t count, ReduceOp op = ReduceOp::kSum) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op = ReduceOp::kSum) override;
  void all_gather(ConstView in, View out) override;
  void all_gather_v(ConstView in, View out, const std::vector<std::size_t>& counts) override;
  void reduce_scatter(ConstView in, View out, const std::vector<std::size_t>& counts,
                      ReduceOp op = ReduceOp::kSum) override;
  void all_to_all_v(ConstView in, const std::vector<std::size_t>& send_counts, View out,
                    const std::vector<std::size_t>& recv_counts) override;
  void broadcast(View data, int root) override;
  void send(ConstView data, int dst, std::uint32_t tag) override;
  void recv(View data, int src, std::uint32_t tag) override;
  void exchange(const std::vector<P2POp>& ops) override;
  void barrier() override;
  std::shared_ptr<Work> run_async(std::function<void(Group&)> task) override;

 protected:
  void do_all_reduce(View data, ReduceOp op) override;

 private:
  // Runs one operation in order, under the group's error policy.
  void guarded(const char* op, const std::function<void()>& body);
  // Exchanges call descriptors (if enabled) and throws kBadInput on mismatch.
  void check_call(const CallDescriptor& call, const std::string& local_problem);
  [[noreturn]] void fail(CommErrorKind kind, const char* op, const std::string& detail, int peer_group_rank = -1);
  CommError translate(const char* op, const std::exception& e) const;
  void break_group(const CommError& error);
  void map_peer_addresses();
  std::uint32_t next_tag() { return static_cast<std::uint32_t>(seq_++); }
  std::chrono::milliseconds deadline() const { return timeout(); }

  std::shared_ptr<Store> store_;
  GroupOptions opts_;
  std::string prefix_;
  int rank_ = -1;
  std::atomic<long long> timeout_ms_;
  std::shared_ptr<gloo::Context> context_;
  std::uint64_t seq_ = 0;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;
  std::map<std::string, int> peer_by_address_;  // Gloo peer address -> group rank
  OrderedExecutor executor_;  // last member: destroyed (drained) first
};

}  // namespace ntp::comm
