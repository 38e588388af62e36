// GlooGroup's collectives: local argument checks, the call check, then one
// Gloo algorithm call with this group's tag and deadline.
#include <cstring>
#include <numeric>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>

#include "comm/gloo_group.h"
#include "comm/reduce.h"

namespace ntp::comm {

namespace {

std::uint8_t* bytes_of(const void* p) { return static_cast<std::uint8_t*>(const_cast<void*>(p)); }

std::string type_problem(DataType a, DataType b) {
  if (a == b) return "";
  return std::string("input is ") + to_string(a) + " but output is " + to_string(b);
}

// Gloo's all-reduce needs the element type at compile time.
void set_typed_output(gloo::AllreduceOptions& o, View data) {
  switch (data.type) {
    case DataType::kFloat32: return o.setOutput(static_cast<float*>(data.data), data.count);
    case DataType::kFloat64: return o.setOutput(static_cast<double*>(data.data), data.count);
    case DataType::kInt32: return o.setOutput(static_cast<std::int32_t*>(data.data), data.count);
    case DataType::kInt64: return o.setOutput(static_cast<std::int64_t*>(data.data), data.count);
    case DataType::kUint8: return o.setOutput(static_cast<std::uint8_t*>(data.data), data.count);
  }
}

std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

}  // namespace


void GlooGroup::all_reduce(float* data, std::size_t count, ReduceOp op) { do_all_reduce(View(data, count), op); }

void GlooGroup::all_reduce(double* data, std::size_t count, ReduceOp op) { do_all_reduce(View(data, count), op); }

void GlooGroup::do_all_reduce(View data, ReduceOp op) {
  guarded("all_reduce", [&] {
    std::string problem;
    if (data.data == nullptr && data.count > 0) problem = "null buffer";
    if (data.type == DataType::kUint8) problem = "uint8 buffers cannot be reduced";
    check_call({CallOp::kAllReduce, data.type, data.count, static_cast<std::int64_t>(op), {}, {}, true}, problem);
    if (data.count == 0) return;
    gloo::AllreduceOptions o(context_);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);  // its neighbours only: a sparse mesh has them
    set_typed_output(o, data);
    o.setReduceFunction(reduce_fn(data.type, op));
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::allreduce(o);
  });
}

void GlooGroup::all_gather(ConstView in, View out) {
  guarded("all_gather", [&] {
    std::string problem = type_problem(in.type, out.type);
    if (problem.empty() && out.count != in.count * static_cast<std::size_t>(size())) {
      problem = "output holds " + std::to_string(out.count) + " elements, need " + std::to_string(in.count) +
                " x " + std::to_string(size());
    }
    check_call({CallOp::kAllGather, in.type, in.count, 0, {}, {}, true}, problem);
    if (in.count == 0) return;
    gloo::AllgatherOptions o(context_);
    o.setInput(bytes_of(in.data), in.bytes());
    o.setOutput(bytes_of(out.data), out.bytes());
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::allgather(o);
  });
}

void GlooGroup::all_gather_v(ConstView in, View out, const std::vector<std::size_t>& counts) {
  guarded("all_gather_v", [&] {
    std::string problem = type_problem(in.type, out.type);
    if (counts.size() != static_cast<std::size_t>(size())) {
      problem = "counts has " + std::to_string(counts.size()) + " entries for " + std::to_string(size()) + " ranks";
    } else if (problem.empty() && out.count != total(counts)) {
      problem = "output holds " + std::to_string(out.count) + " elements, counts sum to " +
                std::to_string(total(counts));
    } else if (problem.empty() && in.count != counts[static_cast<std::size_t>(rank_)]) {
      problem = "input holds " + std::to_string(in.count) + " elements, counts[" + std::to_string(rank_) +
                "] = " + std::to_string(counts[static_cast<std::size_t>(rank_)]);
    }
    check_call({CallOp::kAllGatherV, in.type, in.count, 0, counts, {}, true}, problem);
    if (out.count == 0) return;
    std::vector<std::size_t> bytes_per_rank;
    for (auto c : counts) bytes_per_rank.push_back(c * size_of(in.type));
    gloo::AllgathervOptions o(context_);
    o.setInput(bytes_of(in.data), in.bytes());
    o.setOutput(bytes_of(out.data), bytes_per_rank);
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::allgatherv(o);
  });
}

namespace {

// Gloo's all-to-all-v over raw bytes.
void gloo_all_to_all_v(const std::shared_ptr<gloo::Context>& context, const void* in,
                       const std::vector<std::size_t>& send_counts, void* out,
                       const std::vector<std::size_t>& recv_counts, std::size_t element_size, std::uint32_t tag,
                       std::chrono::milliseconds timeout) {
  std::vector<std::int64_t> send_bytes;
  std::vector<std::int64_t> recv_bytes;
  for (auto c : send_counts) send_bytes.push_back(static_cast<std::int64_t>(c * element_size));
  for (auto c : recv_counts) recv_bytes.push_back(static_cast<std::int64_t>(c * element_size));
  // Gloo wants non-null buffers even when nothing moves.
  std::uint8_t dummy = 0;
  gloo::AlltoallvOptions o(context);
  o.setInput(in != nullptr ? bytes_of(in) : &dummy, send_bytes);
  o.setOutput(out != nullptr ? static_cast<std::uint8_t*>(out) : &dummy, recv_bytes);
  o.setTag(tag);
  o.setTimeout(timeout);
  gloo::alltoallv(o);
}

}  // namespace

void GlooGroup::reduce_scatter(ConstView in, View out, const std::vector<std::size_t>& counts, ReduceOp op) {
  guarded("reduce_scatter", [&] {
    std::string problem = type_problem(in.type, out.type);
    if (in.type == DataType::kUint8) problem = "uint8 buffers cannot be reduced";
    if (counts.size() != static_cast<std::size_t>(size())) {
      problem = "counts has " + std::to_string(counts.size()) + " entries for " + std::to_string(size()) + " ranks";
    } else if (problem.empty() && in.count != total(counts)) {
      problem = "input holds " + std::to_string(in.count) + " elements, counts sum to " + std::to_string(total(counts));
    } else if (problem.empty() && out.count != counts[static_cast<std::size_t>(rank_)]) {
      problem = "output holds " + std::to_string(out.count) + " elements, counts[" + std::to_string(rank_) +
                "] = " + std::to_string(counts[static_cast<std::size_t>(rank_)]);
    }
    check_call({CallOp::kReduceScatter, in.type, in.count, static_cast<std::int64_t>(op), counts, {}, true},
               problem);
    // Block r goes to rank r; each rank then reduces the blocks it received,
    // in rank order (deterministic). Traffic per rank equals a ring's.
    const std::size_t mine = out.count;
    const std::size_t element = size_of(in.type);
    std::vector<std::uint8_t> blocks(mine * element * static_cast<std::size_t>(size()));
    const std::vector<std::size_t> recv_counts(static_cast<std::size_t>(size()), mine);
    if (total(counts) > 0) {
      gloo_all_to_all_v(context_, in.data, counts, blocks.data(), recv_counts, element, next_tag(), deadline());
    }
    if (mine == 0) return;
    std::memcpy(out.data, blocks.data(), mine * element);
    for (int r = 1; r < size(); ++r) {
      reduce_into(out, blocks.data() + static_cast<std::size_t>(r) * mine * element, op);
    }
  });
}

void GlooGroup::all_to_all_v(ConstView in, const std::vector<std::size_t>& send_counts, View out,
                             const std::vector<std::size_t>& recv_counts) {
  guarded("all_to_all_v", [&] {
    std::string problem = type_problem(in.type, out.type);
    const auto n = static_cast<std::size_t>(size());
    if (send_counts.size() != n || recv_counts.size() != n) {
      problem = "send/recv counts need " + std::to_string(n) + " entries";
    } else if (problem.empty() && (in.count != total(send_counts) || out.count != total(recv_counts))) {
      problem = "buffers hold " + std::to_string(in.count) + "/" + std::to_string(out.count) +
                " elements, counts sum to " + std::to_string(total(send_counts)) + "/" +
                std::to_string(total(recv_counts));
    }
    check_call({CallOp::kAllToAllV, in.type, in.count, 0, send_counts, recv_counts, true}, problem);
    if (total(send_counts) == 0 && total(recv_counts) == 0) return;
    gloo_all_to_all_v(context_, in.data, send_counts, out.data, recv_counts, size_of(in.type), next_tag(),
                      deadline());
  });
}

void GlooGroup::broadcast(View data, int root) {
  guarded("broadcast", [&] {
    std::string problem;
    if (root < 0 || root >= size()) {
      problem = "root " + std::to_string(root) + " is outside the group of " + std::to_string(size());
    }
    check_call({CallOp::kBroadcast, data.type, data.count, root, {}, {}, true}, problem);
    if (data.count == 0 || size() == 1) return;
    gloo::BroadcastOptions o(context_);
    o.setOutput(bytes_of(data.data), data.bytes());
    o.setRoot(root);
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::broadcast(o);
  });
}

void GlooGroup::barrier() {
  guarded("barrier", [&] {
    // A descriptor exchange is a barrier too.
    if (check_call({CallOp::kBarrier, DataType::kUint8, 0, 0, {}, {}, true}, "")) return;
    gloo::BarrierOptions o(context_);
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::barrier(o);
  });
}
}  // namespace ntp::comm
