#pragma once
// A process group: the ranks that run collectives together in one epoch.
// This is the interface the model (TP all-reduce) and the trainer (DP sync,
// reshard) use; backends (Gloo over TCP, NCCL) implement it. Every blocking
// call has a deadline and throws ntp::comm::CommError instead of hanging.
//
// Creating groups (stable API):
//   auto store = ntp::comm::open_store("file:/tmp/job");   // comm/store.h
//   ntp::comm::GroupOptions opts;
//   opts.ranks = {0, 1, 2, 3}; opts.global_rank = my_rank;
//   opts.epoch = 1; opts.name = "tp/r0"; opts.timeout = 5s;
//   std::unique_ptr<Group> g = ntp::comm::create_group(store, opts);
//   g->all_reduce(grad.data(), grad.size());            // sum, in place
//
// Every member calls create_group with the same ranks, epoch and name; the
// call returns once all members joined (or throws CommError by the deadline,
// naming the ranks that did not show up). Store keys live under
// "ntp/groups/e<epoch>/<name>/", so a group of epoch e+1 never sees epoch e,
// and erase_prefix(group_keys_prefix(e)) drops every group of an epoch that
// is over.
//
// Order: collectives of one group run in the order they are issued, and every
// member must issue the same sequence (as with MPI/NCCL). Groups are
// independent: a TP group and a DP group of one rank may run concurrently.
//
// Failure: after any error except a kBadInput caught before data moved, the
// group is broken: it closes its connections (so peers fail fast, too) and
// every later call throws kBroken. Build a new group in the next epoch.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/error.h"
#include "comm/store.h"
#include "comm/work.h"

namespace ntp::comm {

enum class ReduceOp { kSum, kMax };

enum class DataType { kFloat32, kFloat64, kInt32, kInt64, kUint8 };
std::size_t size_of(DataType type);
const char* to_string(DataType type);

template <class T>
constexpr DataType data_type_of();
template <> constexpr DataType data_type_of<float>() { return DataType::kFloat32; }
template <> constexpr DataType data_type_of<double>() { return DataType::kFloat64; }
template <> constexpr DataType data_type_of<std::int32_t>() { return DataType::kInt32; }
template <> constexpr DataType data_type_of<std::int64_t>() { return DataType::kInt64; }
template <> constexpr DataType data_type_of<std::uint8_t>() { return DataType::kUint8; }

// A typed buffer: pointer, element count, element type. Build one from a
// pointer and count or from any contiguous range (std::vector, std::span).
struct View {
  void* data = nullptr;
  std::size_t count = 0;
  DataType type = DataType::kUint8;

  View() = default;
  template <class T>
  View(T* ptr, std::size_t n) : data(ptr), count(n), type(data_type_of<T>()) {}
  template <class T>
  View(std::span<T> s) : View(s.data(), s.size()) {}  // NOLINT(implicit)
  template <class T>
  View(std::vector<T>& v) : View(v.data(), v.size()) {}  // NOLINT(implicit)
  std::size_t bytes() const { return count * size_of(type); }
};

struct ConstView {
  const void* data = nullptr;
  std::size_t count = 0;
  DataType type = DataType::kUint8;

  ConstView() = default;
  template <class T>
  ConstView(const T* ptr, std::size_t n) : data(ptr), count(n), type(data_type_of<T>()) {}
  template <class T>
  ConstView(std::span<const T> s) : ConstView(s.data(), s.size()) {}  // NOLINT(implicit)
  template <class T>
  ConstView(const std::vector<T>& v) : ConstView(v.data(), v.size()) {}  // NOLINT(implicit)
  ConstView(const View& v) : data(v.data), count(v.count), type(v.type) {}  // NOLINT(implicit)
  std::size_t bytes() const { return count * size_of(type); }
};

// One send or receive of a batched exchange().
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  View buffer;  // read for a send, written for a receive
  int peer = -1;  // group rank
  std::uint32_t tag = 0;

  static P2POp send(ConstView data, int dst, std::uint32_t tag) {
    View v;
    v.data = const_cast<void*>(data.data);  // only read
    v.count = data.count;
    v.type = data.type;
    return {Kind::kSend, v, dst, tag};
  }
  static P2POp recv(View data, int src, std::uint32_t tag) { return {Kind::kRecv, data, src, tag}; }
};

enum class Backend { kGloo, kNccl };

struct GroupOptions {
  std::vector<int> ranks;   // global ranks of the members, in group-rank order
  int global_rank = -1;     // this process's global rank (must be in `ranks`)
  std::uint64_t epoch = 0;  // membership epoch; store keys are prefixed with it
  std::string name;         // e.g. "tp/r0", "dp/core3"; unique within an epoch
  std::chrono::milliseconds timeout{30000};  // deadline of every blocking call

  // --- additions (defaults keep the fields above sufficient) ---
  Backend backend = Backend::kGloo;
  // Deadline of group creation (join + connect); 0 means `timeout`.
  std::chrono::milliseconds connect_timeout{0};
  // Size of the world the ranks come from; 0 = unknown (no upper bound check).
  int world_size = 0;
  // Before the first collective of each shape (op, type, counts, root),
  // members exchange a small descriptor of it, so a call that differs
  // between ranks fails with kBadInput naming the rank, instead of corrupting
  // data or timing out. Later calls of an agreed shape skip the exchange, so
  // a steady training step pays nothing. Off (or for a call that differs
  // after its shape was agreed), calls that differ between ranks are
  // undefined: they may fail by the deadline or make the transport abort.
  bool check_inputs = true;
  // Debugging: exchange the descriptor before every call, not only the first
  // of a shape (also set by NTP_COMM_CHECK_EVERY_CALL=1 in the environment).
  bool check_every_call = false;
  // Gloo TCP: address to bind and publish (multi-host: this host's IP or
  // name), or a network interface name ("eth0") which wins if set.
  std::string hostname = "127.0.0.1";
  std::string interface;
  // NCCL: CUDA device of this rank (-1: global_rank % device count).
  int device = -1;
  // Gloo: connect each member only to the members 1 and 2^k group ranks away
  // either way around the ring (about 2 log2 N connections per rank instead of
  // N - 1), the pairs that Gloo's ring all-reduce and all-gather and its
  // dissemination barrier use. Only all_reduce, all_gather and barrier may be
  // called then; the other calls throw kBadInput. For a large group that
  // carries little, such as a job's world group: a full mesh of 144 ranks is
  // 10,296 connections to make at every epoch. NCCL ignores it.
  bool sparse = false;
  // Sparse groups: more pairs of group ranks to connect (either order; every
  // member passes the same list). Point-to-point (send, recv, exchange) may
  // then be used between any two connected members: the pairs listed here and
  // those of the ring. For a group that moves state between a few pairs.
  std::vector<std::pair<int, int>> links;
  // Optional liveness oracle (e.g. the heartbeat): true when the member of
  // that global rank is known dead. create_group asks it about every other
  // member every ~25 ms while it waits for their join records and (Gloo)
  // while it connects, and fails at once with kPeerError naming the first
  // dead one instead of waiting out the deadline. Called from a helper
  // thread, so it must be thread-safe. Empty: wait for the deadline.
  std::function<bool(int global_rank)> is_dead;
  // Optional: true once the epoch this group belongs to was given up (e.g. a
  // member marked it failed and went on to agree on the next one). Asked with
  // is_dead at each of creation's polls; creation then fails at once with
  // kBroken instead of waiting out connect_timeout for members that will not
  // come (they are in the next epoch's agreement). Thread-safe, like is_dead.
  std::function<bool()> abandoned;
  // Optional: called once, in the thread of the call, when a transport
  // failure of one of this group's calls breaks it (not when abort() does).
  // A trainer aborts the other groups of its epoch from here
  // (abort_epoch_groups), so that a call in flight on another thread, e.g.
  // the main thread's TP all-reduce while the DP sync failed on the
  // communication thread, fails within milliseconds rather than when that
  // thread next waits on the failed group.
  std::function<void(const CommError& error)> on_failure;
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

  // ---- additions: every backend in this layer implements all of them; the
  // defaults only exist so that test doubles deriving from Group still compile.

  // Global ranks of the members, in group-rank order.
  virtual const std::vector<int>& ranks() const;
  // Deadline of the calls issued from now on (per phase, e.g. a long broadcast).
  virtual void set_timeout(std::chrono::milliseconds timeout);
  virtual std::chrono::milliseconds timeout() const;
  // True once an error broke the group; it must then be rebuilt.
  virtual bool broken() const { return false; }
  // For a watchdog (e.g. the heartbeat says a member is gone): breaks the
  // group from any thread; later calls fail at once with kBroken. NCCL: a
  // call in flight aborts the communicator within ~1 ms and raises kBroken.
  // Gloo: abort also closes the group's connections at once, so a call in
  // flight on another thread fails within milliseconds with kBroken naming
  // `reason`, and peers blocked on this rank see their sockets close and fail
  // fast too (kConnectionClosed) instead of waiting for their deadlines. The
  // group may be destroyed afterwards as usual.
  virtual void abort(const std::string& reason) { (void)reason; }

  // In-place all-reduce of any numeric type (non-virtual so that a class
  // overriding only the two pointer overloads hides nothing).
  void all_reduce(View data, ReduceOp op = ReduceOp::kSum) { do_all_reduce(data, op); }
  // out[r*in.count ...] = in of group rank r. out.count = size() * in.count.
  virtual void all_gather(ConstView in, View out);
  // Rank r contributes counts[r] elements; out holds them in rank order.
  virtual void all_gather_v(ConstView in, View out, const std::vector<std::size_t>& counts);
  // in holds sum(counts) elements, block r for rank r; out (counts[rank()]
  // elements) receives the reduction of everyone's block rank().
  virtual void reduce_scatter(ConstView in, View out, const std::vector<std::size_t>& counts,
                              ReduceOp op = ReduceOp::kSum);
  // Sends block r of `in` (send_counts[r] elements) to rank r; receives
  // recv_counts[r] elements from rank r into block r of `out`.
  virtual void all_to_all_v(ConstView in, const std::vector<std::size_t>& send_counts, View out,
                            const std::vector<std::size_t>& recv_counts);
  // Copies root's buffer to everyone.
  virtual void broadcast(View data, int root);
  // Point-to-point with a user tag (group ranks). A send matches the recv of
  // the same tag and size on the peer, and returns once the peer received it,
  // so a cycle of blocking sends deadlocks (until the deadline): post such
  // patterns together with exchange(), which starts every send and receive
  // first and then waits for all of them.
  virtual void send(ConstView data, int dst, std::uint32_t tag);
  virtual void recv(View data, int src, std::uint32_t tag);
  virtual void exchange(const std::vector<P2POp>& ops);
  virtual void barrier();

  // Runs `task` on the group's communication thread after every operation
  // issued before it; the caller continues at once (e.g. backward keeps
  // computing while gradient buckets are reduced). Inside `task`, call this
  // group's blocking methods. The buffers must stay valid until wait().
  // A blocking call issued later waits for the queued tasks first. An async
  // call made inside `task` runs at once (its Work is already complete), so
  // waiting on it there cannot deadlock.
  virtual std::shared_ptr<Work> run_async(std::function<void(Group&)> task);
  std::shared_ptr<Work> all_reduce_async(float* data, std::size_t count, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_reduce_async(double* data, std::size_t count, ReduceOp op = ReduceOp::kSum);

 protected:
  // Backends implement all_reduce(View) here; the default handles float and
  // double through the pointer overloads.
  virtual void do_all_reduce(View data, ReduceOp op);
};

// Creates this rank's member of the group described by `opts` (Gloo over TCP
// by default; NCCL when opts.backend == kNccl and the build has CUDA).
// Throws CommError: kBadInput for invalid options or members that disagree on
// the membership, kTimeout naming missing ranks, kConnectionClosed/kPeerError
// for transport failures.
std::unique_ptr<Group> create_group(std::shared_ptr<Store> store, const GroupOptions& opts);

// For a watchdog that learns from outside the transport that a member is gone
// (a rank declared lost with its host: its sockets may never close, so calls
// blocked on it would wait out their deadline): aborts every live group of
// this process that has `global_rank` as a member, as Group::abort does, and
// returns how many. Groups already broken are left alone. Thread-safe.
int abort_groups_with(int global_rank, const std::string& reason);
// Aborts every live group of this process in membership epoch `epoch`, as
// Group::abort does, and returns how many. Groups already broken are left
// alone. Thread-safe.
int abort_epoch_groups(std::uint64_t epoch, const std::string& reason);

// "ntp/groups/e<epoch>/": the prefix of every group's store keys in that epoch.
std::string group_keys_prefix(std::uint64_t epoch);

// True when this build has the NCCL backend.
bool have_nccl();

}  // namespace ntp::comm
