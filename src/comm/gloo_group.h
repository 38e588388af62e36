#pragma once
// GlooGroup: a Group over Gloo's TCP transport (CPU buffers, any number of
// hosts). Rendezvous goes through a Store; every call has a deadline (Gloo's
// per-operation timeout), and an error breaks the group and closes its
// connections so that the other members fail fast too.
#include <map>
#include <memory>
#include <set>
#include <string>

#include "comm/call_check.h"
#include "comm/group_base.h"

namespace gloo {
class Context;
}

namespace ntp::comm {

class GlooGroup : public GroupBase {
 public:
  // Joins and connects; see create_group() for the errors.
  GlooGroup(std::shared_ptr<Store> store, GroupOptions opts);
  ~GlooGroup() override;

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
  // Also fails the connections at once (see Group::abort).
  void abort(const std::string& reason) override;

 protected:
  void do_all_reduce(View data, ReduceOp op) override;

 private:
  // Runs one operation in order, under the group's error policy.
  void guarded(const char* op, const std::function<void()>& body);
  // Exchanges call descriptors (if enabled and the shape is new) and throws
  // kBadInput on mismatch; true when the exchange ran (it is then a barrier).
  bool check_call(const CallDescriptor& call, const std::string& local_problem);
  [[noreturn]] void fail(CommErrorKind kind, const char* op, const std::string& detail, int peer_group_rank = -1);
  CommError translate(const char* op, const std::exception& e) const;
  // Records the failure and closes the connections; false if the group was
  // already broken (an earlier error, or abort() from another thread).
  bool break_group(const CommError& error);
  void map_peer_addresses(const std::vector<std::vector<char>>& records);
  std::uint32_t next_tag() { return static_cast<std::uint32_t>(seq_++); }
  std::chrono::milliseconds deadline() const { return timeout(); }

  std::string prefix_;
  std::shared_ptr<gloo::Context> context_;
  std::uint64_t seq_ = 0;
  std::map<std::string, int> peer_by_address_;  // Gloo peer address -> group rank
  static constexpr std::size_t kMaxCheckedShapes = 4096;
  bool check_every_call_ = false;
  std::set<std::string> checked_shapes_;  // encoded descriptors every member agreed on
};

}  // namespace ntp::comm
