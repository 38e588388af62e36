// Defaults of the Group interface, data types, and the group factory.
#include "comm/group.h"

#include <algorithm>
#include <set>

#include "comm/gloo_group.h"
#include "comm/nccl_group.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUint8: return 1;
  }
  return 1;
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUint8: return "uint8";
  }
  return "?";
}

namespace {

[[noreturn]] void unsupported(const Group& group, const char* op) {
  CommErrorInfo info;
  info.kind = CommErrorKind::kBadInput;
  info.group = group.name();
  info.epoch = group.epoch();
  info.op = op;
  info.detail = "not supported by this Group implementation";
  throw CommError(std::move(info));
}

}  // namespace

const std::vector<int>& Group::ranks() const {
  static const std::vector<int> unknown;
  return unknown;
}
void Group::set_timeout(std::chrono::milliseconds) {}
std::chrono::milliseconds Group::timeout() const { return std::chrono::milliseconds(0); }

void Group::do_all_reduce(View data, ReduceOp op) {
  if (data.type == DataType::kFloat32) return all_reduce(static_cast<float*>(data.data), data.count, op);
  if (data.type == DataType::kFloat64) return all_reduce(static_cast<double*>(data.data), data.count, op);
  unsupported(*this, "all_reduce");
}
void Group::all_gather(ConstView, View) { unsupported(*this, "all_gather"); }
void Group::all_gather_v(ConstView, View, const std::vector<std::size_t>&) { unsupported(*this, "all_gather_v"); }
void Group::reduce_scatter(ConstView, View, const std::vector<std::size_t>&, ReduceOp) {
  unsupported(*this, "reduce_scatter");
}
void Group::all_to_all_v(ConstView, const std::vector<std::size_t>&, View, const std::vector<std::size_t>&) {
  unsupported(*this, "all_to_all_v");
}
void Group::broadcast(View, int) { unsupported(*this, "broadcast"); }
void Group::send(ConstView, int, std::uint32_t) { unsupported(*this, "send"); }
void Group::recv(View, int, std::uint32_t) { unsupported(*this, "recv"); }
void Group::exchange(const std::vector<P2POp>&) { unsupported(*this, "exchange"); }
void Group::barrier() { unsupported(*this, "barrier"); }

std::shared_ptr<Work> Group::run_async(std::function<void(Group&)> task) {
  try {
    task(*this);
    return Work::completed();
  } catch (...) {
    return Work::completed(std::current_exception());
  }
}

std::shared_ptr<Work> Group::all_reduce_async(float* data, std::size_t count, ReduceOp op) {
  return run_async([=](Group& g) { g.all_reduce(data, count, op); });
}

std::shared_ptr<Work> Group::all_reduce_async(double* data, std::size_t count, ReduceOp op) {
  return run_async([=](Group& g) { g.all_reduce(data, count, op); });
}

namespace {

// Rejects options no backend could honour, naming the group and the rank.
void check_options(const Store* store, const GroupOptions& opts) {
  auto fail = [&](const std::string& detail) {
    throw group_error(opts, CommErrorKind::kBadInput, "create_group", detail);
  };
  if (store == nullptr) fail("no store given");
  if (opts.name.empty()) fail("group name is empty");
  if (opts.name.find_first_of(" \t\n") != std::string::npos) fail("group name contains whitespace");
  if (opts.ranks.empty()) fail("member list is empty");
  if (opts.timeout.count() <= 0) fail("timeout must be positive");
  if (opts.world_size < 0) fail("world_size is negative");
  std::set<int> seen;
  for (int r : opts.ranks) {
    if (r < 0) fail("member rank " + std::to_string(r) + " is negative");
    if (opts.world_size > 0 && r >= opts.world_size) {
      fail("member rank " + std::to_string(r) + " is outside the world of " + std::to_string(opts.world_size) +
           " ranks");
    }
    if (!seen.insert(r).second) fail("member rank " + std::to_string(r) + " is listed twice");
  }
  if (seen.count(opts.global_rank) == 0) {
    fail("global rank " + std::to_string(opts.global_rank) + " is not a member of the group");
  }
}

}  // namespace

std::unique_ptr<Group> create_group(std::shared_ptr<Store> store, const GroupOptions& opts) {
  check_options(store.get(), opts);
  if (opts.backend == Backend::kNccl) return create_nccl_group(std::move(store), opts);
  return std::make_unique<GlooGroup>(std::move(store), opts);
}

}  // namespace ntp::comm
