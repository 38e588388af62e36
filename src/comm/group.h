#pragma once
// A process group: the ranks that run collectives together in one epoch.
// This is the interface the model (TP all-reduce) and the trainer (DP sync,
// reshard) use; backends (Gloo over TCP, NCCL) implement it. Every blocking
// call has a deadline and throws ntp::comm::CommError instead of hanging.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ntp::comm {

enum class ReduceOp { kSum, kMax };

struct GroupOptions {
  std::vector<int> ranks;   // global ranks of the members, in group-rank order
  int global_rank = -1;     // this process's global rank (must be in `ranks`)
  std::uint64_t epoch = 0;  // membership epoch; store keys are prefixed with it
  std::string name;         // e.g. "tp/r0", "dp/core3"; unique within an epoch
  std::chrono::milliseconds timeout{30000};  // deadline of every blocking call
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;  // this process's rank inside the group
  virtual int size() const = 0;
  virtual std::uint64_t epoch() const = 0;
  virtual const std::string& name() const = 0;

  // In-place all-reduce over `count` elements.
  virtual void all_reduce(float* data, std::size_t count, ReduceOp op = ReduceOp::kSum) = 0;
  virtual void all_reduce(double* data, std::size_t count, ReduceOp op = ReduceOp::kSum) = 0;
};

}  // namespace ntp::comm
