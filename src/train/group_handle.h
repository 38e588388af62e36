#pragma once
// A Group that forwards every call to a replaceable member of the current
// epoch. The model keeps one comm::Group* for its TP collectives for its whole
// life; after a reconfiguration the trainer swaps in the TP group of the new
// epoch behind the same pointer.
#include <memory>
#include <stdexcept>
#include <utility>

#include "comm/group.h"

namespace ntp::train {

class GroupHandle final : public comm::Group {
 public:
  void reset(std::unique_ptr<comm::Group> group) { group_ = std::move(group); }
  comm::Group* get() const { return group_.get(); }

  int rank() const override { return current().rank(); }
  int size() const override { return current().size(); }
  std::uint64_t epoch() const override { return current().epoch(); }
  const std::string& name() const override { return current().name(); }
  void all_reduce(float* data, std::size_t count, comm::ReduceOp op = comm::ReduceOp::kSum) override {
    current().all_reduce(data, count, op);
  }
  void all_reduce(double* data, std::size_t count, comm::ReduceOp op = comm::ReduceOp::kSum) override {
    current().all_reduce(data, count, op);
  }
  using comm::Group::all_reduce;
  const std::vector<int>& ranks() const override { return current().ranks(); }
  void set_timeout(std::chrono::milliseconds timeout) override { current().set_timeout(timeout); }
  std::chrono::milliseconds timeout() const override { return current().timeout(); }
  bool broken() const override { return current().broken(); }
  void abort(const std::string& reason) override {
    if (group_) group_->abort(reason);
  }
  void all_gather(comm::ConstView in, comm::View out) override { current().all_gather(in, out); }
  void all_gather_v(comm::ConstView in, comm::View out, const std::vector<std::size_t>& counts) override {
    current().all_gather_v(in, out, counts);
  }
  void reduce_scatter(comm::ConstView in, comm::View out, const std::vector<std::size_t>& counts,
                      comm::ReduceOp op = comm::ReduceOp::kSum) override {
    current().reduce_scatter(in, out, counts, op);
  }
  void all_to_all_v(comm::ConstView in, const std::vector<std::size_t>& send_counts, comm::View out,
                    const std::vector<std::size_t>& recv_counts) override {
    current().all_to_all_v(in, send_counts, out, recv_counts);
  }
  void broadcast(comm::View data, int root) override { current().broadcast(data, root); }
  void send(comm::ConstView data, int dst, std::uint32_t tag) override { current().send(data, dst, tag); }
  void recv(comm::View data, int src, std::uint32_t tag) override { current().recv(data, src, tag); }
  void exchange(const std::vector<comm::P2POp>& ops) override { current().exchange(ops); }
  void barrier() override { current().barrier(); }
  std::shared_ptr<comm::Work> run_async(std::function<void(comm::Group&)> task) override {
    return current().run_async(std::move(task));
  }

 protected:
  void do_all_reduce(comm::View data, comm::ReduceOp op) override { current().all_reduce(data, op); }

 private:
  comm::Group& current() const {
    if (!group_) throw std::logic_error("GroupHandle: no group of the current epoch");
    return *group_;
  }
  std::unique_ptr<comm::Group> group_;
};

}  // namespace ntp::train
