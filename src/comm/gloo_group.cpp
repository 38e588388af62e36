#include "comm/gloo_group.h"

#include <array>
#include <csignal>
#include <cstring>
#include <numeric>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/gloo_store.h"
#include "comm/reduce.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

namespace {

// Slot prefixes of point-to-point messages; Gloo's collectives use 0x01..0x08.
constexpr std::uint8_t kSendSlotPrefix = 0xA0;
constexpr std::uint8_t kSendHeaderSlotPrefix = 0xA1;

// A peer that dies while we write to it must become an error, not SIGPIPE.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

std::shared_ptr<gloo::transport::Device> make_device(const GroupOptions& opts) {
  gloo::transport::tcp::attr attr;
  if (!opts.interface.empty()) {
    attr.iface = opts.interface;
  } else {
    attr.hostname = opts.hostname;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw group_error(opts, CommErrorKind::kBadInput, "create_group",
                      "cannot use " + (opts.interface.empty() ? "host '" + opts.hostname : "interface '" + opts.interface) +
                          "' for TCP: " + e.what());
  }
}

bool contains(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

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

GlooGroup::GlooGroup(std::shared_ptr<Store> store, GroupOptions opts)
    : GroupBase(std::move(store), std::move(opts)), prefix_(group_prefix(opts_.epoch, opts_.name)) {
  ignore_sigpipe();
  try {
    join_group(*store_, prefix_, opts_, connect_timeout());
    auto device = make_device(opts_);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size());
    context->setTimeout(connect_timeout());
    GlooStoreAdapter adapter(*store_, prefix_ + "mesh/", connect_timeout());
    context->connectFullMesh(adapter, device);
    context->setTimeout(opts_.timeout);
    context_ = std::move(context);
    map_peer_addresses();
  } catch (const CommError& e) {
    if (!e.group().empty()) throw;
    fail(e.kind(), "create_group", e.detail());
  } catch (const std::exception& e) {
    throw translate("create_group", e);
  }
}

GlooGroup::~GlooGroup() { executor_.drain(); }

// Gloo names a failed peer by its address; remember which group rank that is.
void GlooGroup::map_peer_addresses() {
  const int n = size();
  for (int i = 0; i < n; ++i) {
    if (i == rank_) continue;
    auto all = store_->try_get(prefix_ + "mesh/" + std::to_string(i));
    if (!all || all->empty()) continue;
    const std::size_t width = all->size() / static_cast<std::size_t>(n - 1);
    const std::size_t index = static_cast<std::size_t>(rank_ < i ? rank_ : rank_ - 1);
    std::vector<char> bytes(all->begin() + static_cast<std::ptrdiff_t>(index * width),
                            all->begin() + static_cast<std::ptrdiff_t>((index + 1) * width));
    try {
      std::string text = gloo::transport::tcp::Address(bytes).str();
      // Drop a trailing sequence number ("$3"): messages may print it or not.
      if (auto dollar = text.find('$'); dollar != std::string::npos) text.resize(dollar);
      peer_by_address_[text] = i;
    } catch (const std::exception&) {
      // Unknown address format: errors will just not name the peer.
    }
  }
}

void GlooGroup::fail(CommErrorKind kind, const char* op, const std::string& detail, int peer_group_rank) {
  const bool known = peer_group_rank >= 0 && peer_group_rank < size();
  throw group_error(opts_, kind, op, detail, known ? opts_.ranks[static_cast<std::size_t>(peer_group_rank)] : -1);
}

CommError GlooGroup::translate(const char* op, const std::exception& e) const {
  const std::string message = e.what();
  CommErrorInfo info = group_error(opts_, CommErrorKind::kPeerError, op, message).info();
  if (contains(message, "Timed out") || contains(message, "timed out") || contains(message, "Timeout")) {
    info.kind = CommErrorKind::kTimeout;
  } else if (contains(message, "closed") || contains(message, "reset") || contains(message, "Broken pipe") ||
             contains(message, "Connection refused")) {
    info.kind = CommErrorKind::kConnectionClosed;
  } else {
    info.kind = CommErrorKind::kPeerError;
  }
  for (const auto& [address, group_rank] : peer_by_address_) {
    if (contains(message, address.c_str())) info.peer = opts_.ranks[static_cast<std::size_t>(group_rank)];
  }
  return CommError(std::move(info));
}

// Closing our connections turns a peer's wait on us into an immediate
// "connection closed", so one failure reaches every member well within the
// deadline instead of each timing out on its own.
void GlooGroup::break_group(const CommError& error) {
  if (!mark_broken(error.what())) return;
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
    // Already closed by the transport.
  }
}

void GlooGroup::guarded(const char* op, const std::function<void()>& body) {
  executor_.run([&] {
    throw_if_broken(op);
    try {
      body();
    } catch (const CommError& e) {
      if (e.kind() != CommErrorKind::kBadInput) break_group(e);
      throw;
    } catch (const std::exception& e) {
      CommError error = translate(op, e);
      break_group(error);
      throw error;
    }
  });
}

void GlooGroup::check_call(const CallDescriptor& call, const std::string& local_problem) {
  const char* op = to_string(call.op);
  if (!opts_.check_inputs || size() == 1) {
    if (!local_problem.empty()) fail(CommErrorKind::kBadInput, op, local_problem);
    return;
  }
  CallDescriptor mine = call;
  mine.local_ok = local_problem.empty();
  std::vector<std::int64_t> words = encode(mine, size());
  std::vector<std::int64_t> gathered(words.size() * static_cast<std::size_t>(size()));
  gloo::AllgatherOptions o(context_);
  o.setInput(words.data(), words.size());
  o.setOutput(gathered.data(), gathered.size());
  o.setTag(next_tag());
  o.setTimeout(deadline());
  gloo::allgather(o);
  if (!local_problem.empty()) fail(CommErrorKind::kBadInput, op, local_problem);
  const Mismatch mismatch = find_mismatch(gathered, size());
  if (!mismatch.detail.empty()) fail(CommErrorKind::kBadInput, op, mismatch.detail, mismatch.rank);
}

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
    if (opts_.check_inputs) {
      check_call({CallOp::kBarrier, DataType::kUint8, 0, 0, {}, {}, true}, "");  // the exchange is the barrier
      return;
    }
    gloo::BarrierOptions o(context_);
    o.setTag(next_tag());
    o.setTimeout(deadline());
    gloo::barrier(o);
  });
}

void GlooGroup::send(ConstView data, int dst, std::uint32_t tag) { exchange({P2POp::send(data, dst, tag)}); }

void GlooGroup::recv(View data, int src, std::uint32_t tag) { exchange({P2POp::recv(data, src, tag)}); }

// Point-to-point: every send and receive is posted before any is waited on.
// With check_inputs, a small header (type, count) travels ahead of each
// message, and receives are posted only after their header matched, so a
// size mismatch is named instead of misreading data.
void GlooGroup::exchange(const std::vector<P2POp>& ops) {
  guarded("exchange", [&] {
    for (const auto& op : ops) {
      if (op.peer < 0 || op.peer >= size() || op.peer == rank_) {
        fail(CommErrorKind::kBadInput, "exchange",
             std::string(op.kind == P2POp::Kind::kSend ? "destination" : "source") + " rank " +
                 std::to_string(op.peer) + " is invalid in a group of " + std::to_string(size()));
      }
    }
    using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;
    const bool headers = opts_.check_inputs;
    std::vector<std::array<std::int64_t, 2>> header(ops.size());
    std::vector<Buffer> header_bufs(ops.size());
    std::vector<Buffer> data_bufs(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      const auto header_slot = gloo::Slot::build(kSendHeaderSlotPrefix, op.tag);
      if (headers) {
        header[i] = {static_cast<std::int64_t>(op.buffer.type), static_cast<std::int64_t>(op.buffer.count)};
        header_bufs[i] = context_->createUnboundBuffer(header[i].data(), sizeof(header[i]));
        if (op.kind == P2POp::Kind::kSend) header_bufs[i]->send(op.peer, header_slot);
        else header_bufs[i]->recv(op.peer, header_slot);
      }
      if (op.kind == P2POp::Kind::kSend && op.buffer.count > 0) {
        data_bufs[i] = context_->createUnboundBuffer(op.buffer.data, op.buffer.bytes());
        data_bufs[i]->send(op.peer, gloo::Slot::build(kSendSlotPrefix, op.tag));
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (op.kind != P2POp::Kind::kRecv) continue;
      if (headers) {
        header_bufs[i]->waitRecv(deadline());
        if (header[i][0] != static_cast<std::int64_t>(op.buffer.type) ||
            header[i][1] != static_cast<std::int64_t>(op.buffer.count)) {
          CommError error = group_error(
              opts_, CommErrorKind::kBadInput, "recv",
              "rank " + std::to_string(op.peer) + " sends " + std::to_string(header[i][1]) + " " +
                  to_string(static_cast<DataType>(header[i][0])) + " elements with tag " + std::to_string(op.tag) +
                  ", receiver expects " + std::to_string(op.buffer.count) + " " + to_string(op.buffer.type),
              opts_.ranks[static_cast<std::size_t>(op.peer)]);
          break_group(error);  // the peer's send stays pending: the group cannot go on
          throw error;
        }
      }
      if (op.buffer.count > 0) {
        data_bufs[i] = context_->createUnboundBuffer(op.buffer.data, op.buffer.bytes());
        data_bufs[i]->recv(op.peer, gloo::Slot::build(kSendSlotPrefix, op.tag));
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (headers && ops[i].kind == P2POp::Kind::kSend) header_bufs[i]->waitSend(deadline());
      if (!data_bufs[i]) continue;
      if (ops[i].kind == P2POp::Kind::kSend) data_bufs[i]->waitSend(deadline());
      else data_bufs[i]->waitRecv(deadline());
    }
  });
}

}  // namespace ntp::comm
