// NCCL backend: non-blocking communicators polled against deadlines, with
// ncclCommAbort as the watchdog's answer to a missed deadline.
#include "comm/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "comm/group_base.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

namespace {

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw_bad_input(what, cudaGetErrorString(status));
}

std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

char* at_element(void* base, std::size_t offset, DataType type) {
  return static_cast<char*>(base) + offset * size_of(type);
}

class NcclGroup : public GroupBase {
 public:
  NcclGroup(std::shared_ptr<Store> store, GroupOptions opts);
  ~NcclGroup() override;

  void all_reduce(float* data, std::size_t count, ReduceOp op = ReduceOp::kSum) override {
    do_all_reduce(View(data, count), op);
  }
  void all_reduce(double* data, std::size_t count, ReduceOp op = ReduceOp::kSum) override {
    do_all_reduce(View(data, count), op);
  }
  void all_gather(ConstView in, View out) override;
  void all_gather_v(ConstView in, View out, const std::vector<std::size_t>& counts) override;
  void reduce_scatter(ConstView in, View out, const std::vector<std::size_t>& counts, ReduceOp op) override;
  void all_to_all_v(ConstView in, const std::vector<std::size_t>& send_counts, View out,
                    const std::vector<std::size_t>& recv_counts) override;
  void broadcast(View data, int root) override;
  void send(ConstView data, int dst, std::uint32_t tag) override { exchange({P2POp::send(data, dst, tag)}); }
  void recv(View data, int src, std::uint32_t tag) override { exchange({P2POp::recv(data, src, tag)}); }
  void exchange(const std::vector<P2POp>& ops) override;
  void barrier() override;

 protected:
  void do_all_reduce(View data, ReduceOp op) override;

 private:
  // Enqueues `launch` (NCCL calls on stream_) and waits for the stream, both
  // against the deadline; on a miss or an NCCL error the communicator is aborted.
  void run(const char* op, const std::function<ncclResult_t()>& launch);
  void wait_not_in_progress(const char* op, std::chrono::steady_clock::time_point deadline);
  void release();
  [[noreturn]] void abort_and_throw(const char* op, CommErrorKind kind, const std::string& detail);
  void require(bool ok, const char* op, const std::string& detail) const {
    if (!ok) throw group_error(opts_, CommErrorKind::kBadInput, op, detail);
  }

  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int* scratch_ = nullptr;  // one device int for barrier()
};

NcclGroup::NcclGroup(std::shared_ptr<Store> store, GroupOptions opts)
    : GroupBase(std::move(store), std::move(opts)) {
  const int devices = cuda_device_count();
  require(devices > 0, "create_group", "no CUDA device is visible to this process");
  device_ = opts_.device >= 0 ? opts_.device : opts_.global_rank % devices;
  require(device_ < devices, "create_group",
          "device " + std::to_string(device_) + " does not exist (" + std::to_string(devices) + " visible)");
  const std::string prefix = group_prefix(opts_.epoch, opts_.name);
  join_group(*store_, prefix, opts_, connect_timeout());
  // The unique id of this epoch's communicator: a fresh one per epoch is
  // what re-initializes the survivors after a failure.
  ncclUniqueId id{};
  if (rank_ == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) {
      throw group_error(opts_, CommErrorKind::kPeerError, "create_group", "ncclGetUniqueId failed");
    }
    store_->set(prefix + "nccl/id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    const auto bytes = store_->get(prefix + "nccl/id", connect_timeout());
    require(bytes.size() == sizeof(id.internal), "create_group", "malformed ncclUniqueId in the store");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  try {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(int)), "cudaMalloc");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, size(), id, rank_, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      abort_and_throw("create_group", CommErrorKind::kPeerError, ncclGetErrorString(started));
    }
    wait_not_in_progress("create_group", std::chrono::steady_clock::now() + connect_timeout());
  } catch (...) {
    release();  // no destructor runs for a constructor that throws
    throw;
  }
}

NcclGroup::~NcclGroup() {
  unlist();
  executor_.drain();
  release();
}

void NcclGroup::release() {
  if (comm_ != nullptr) {
    // Flush cleanly within the deadline, else abort.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  scratch_ = nullptr;
  stream_ = nullptr;
}

void NcclGroup::abort_and_throw(const char* op, CommErrorKind kind, const std::string& detail) {
  std::string why = detail;
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') why += " (" + std::string(last) + ")";
    ncclCommAbort(comm_);  // releases peers blocked on us and frees the communicator
    comm_ = nullptr;
  }
  const CommError error = group_error(opts_, kind, op, why);
  if (mark_broken(why)) notify_failure(error);
  throw error;
}

void NcclGroup::wait_not_in_progress(const char* op, std::chrono::steady_clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) {
      abort_and_throw(op, CommErrorKind::kPeerError, "ncclCommGetAsyncError failed");
    }
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) abort_and_throw(op, CommErrorKind::kPeerError, ncclGetErrorString(state));
    if (broken()) abort_and_throw(op, CommErrorKind::kBroken, "aborted while in progress");
    if (std::chrono::steady_clock::now() >= deadline) {
      abort_and_throw(op, CommErrorKind::kTimeout, "deadline passed; communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclGroup::run(const char* op, const std::function<ncclResult_t()>& launch) {
  executor_.run([&] {
    throw_if_broken(op);
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    const ncclResult_t enqueued = launch();
    if (enqueued != ncclSuccess && enqueued != ncclInProgress) {
      abort_and_throw(op, CommErrorKind::kPeerError, ncclGetErrorString(enqueued));
    }
    wait_not_in_progress(op, deadline);
    // The watchdog: poll the stream and the communicator until the deadline.
    while (true) {
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) abort_and_throw(op, CommErrorKind::kPeerError, cudaGetErrorString(done));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        abort_and_throw(op, CommErrorKind::kPeerError, ncclGetErrorString(state));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        abort_and_throw(op, CommErrorKind::kTimeout,
                        "not complete after " + std::to_string(timeout().count()) + " ms; communicator aborted");
      }
      if (broken()) abort_and_throw(op, CommErrorKind::kBroken, "aborted by a watchdog while in flight");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

void NcclGroup::do_all_reduce(View data, ReduceOp op) {
  require(data.type != DataType::kUint8, "all_reduce", "uint8 buffers cannot be reduced");
  if (data.count == 0) return;
  run("all_reduce", [&] {
    return ncclAllReduce(data.data, data.data, data.count, nccl_type(data.type), nccl_op(op), comm_, stream_);
  });
}

void NcclGroup::all_gather(ConstView in, View out) {
  require(in.type == out.type && out.count == in.count * static_cast<std::size_t>(size()), "all_gather",
          "output must hold size() x input elements of the same type");
  if (in.count == 0) return;
  run("all_gather", [&] { return ncclAllGather(in.data, out.data, in.count, nccl_type(in.type), comm_, stream_); });
}

// Uneven blocks: one broadcast per rank, fused in an NCCL group call.
void NcclGroup::all_gather_v(ConstView in, View out, const std::vector<std::size_t>& counts) {
  require(counts.size() == static_cast<std::size_t>(size()) && out.count == total(counts) &&
              in.count == counts[static_cast<std::size_t>(rank_)] && in.type == out.type,
          "all_gather_v", "counts, input and output sizes disagree");
  run("all_gather_v", [&] {
    ncclGroupStart();
    std::size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const std::size_t n = counts[static_cast<std::size_t>(r)];
      if (n > 0) {
        ncclBroadcast(r == rank_ ? in.data : nullptr, at_element(out.data, offset, out.type), n, nccl_type(out.type),
                      r, comm_, stream_);
      }
      offset += n;
    }
    return ncclGroupEnd();
  });
}

// Uneven blocks: one reduce per rank (rank r is the root of block r).
void NcclGroup::reduce_scatter(ConstView in, View out, const std::vector<std::size_t>& counts, ReduceOp op) {
  require(counts.size() == static_cast<std::size_t>(size()) && in.count == total(counts) &&
              out.count == counts[static_cast<std::size_t>(rank_)] && in.type == out.type &&
              in.type != DataType::kUint8,
          "reduce_scatter", "counts, input and output sizes disagree");
  run("reduce_scatter", [&] {
    ncclGroupStart();
    std::size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const std::size_t n = counts[static_cast<std::size_t>(r)];
      if (n > 0) {
        ncclReduce(at_element(const_cast<void*>(in.data), offset, in.type), r == rank_ ? out.data : nullptr, n,
                   nccl_type(in.type), nccl_op(op), r, comm_, stream_);
      }
      offset += n;
    }
    return ncclGroupEnd();
  });
}

void NcclGroup::all_to_all_v(ConstView in, const std::vector<std::size_t>& send_counts, View out,
                             const std::vector<std::size_t>& recv_counts) {
  const auto n = static_cast<std::size_t>(size());
  require(send_counts.size() == n && recv_counts.size() == n && in.count == total(send_counts) &&
              out.count == total(recv_counts) && in.type == out.type,
          "all_to_all_v", "counts and buffer sizes disagree");
  run("all_to_all_v", [&] {
    ncclGroupStart();
    std::size_t send_offset = 0, recv_offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (send_counts[r] > 0) {
        ncclSend(at_element(const_cast<void*>(in.data), send_offset, in.type), send_counts[r], nccl_type(in.type),
                 static_cast<int>(r), comm_, stream_);
      }
      if (recv_counts[r] > 0) {
        ncclRecv(at_element(out.data, recv_offset, out.type), recv_counts[r], nccl_type(out.type),
                 static_cast<int>(r), comm_, stream_);
      }
      send_offset += send_counts[r];
      recv_offset += recv_counts[r];
    }
    return ncclGroupEnd();
  });
}

void NcclGroup::broadcast(View data, int root) {
  require(root >= 0 && root < size(), "broadcast", "root " + std::to_string(root) + " is outside the group");
  if (data.count == 0) return;
  run("broadcast", [&] {
    return ncclBroadcast(data.data, data.data, data.count, nccl_type(data.type), root, comm_, stream_);
  });
}

// NCCL matches point-to-point by order per peer, not by tag: the tag is not
// sent, so a pair of ranks must issue its sends and receives in one order.
void NcclGroup::exchange(const std::vector<P2POp>& ops) {
  for (const auto& op : ops) {
    require(op.peer >= 0 && op.peer < size() && op.peer != rank_, "exchange",
            "peer rank " + std::to_string(op.peer) + " is invalid");
  }
  run("exchange", [&] {
    ncclGroupStart();
    for (const auto& op : ops) {
      if (op.buffer.count == 0) continue;
      if (op.kind == P2POp::Kind::kSend) {
        ncclSend(op.buffer.data, op.buffer.count, nccl_type(op.buffer.type), op.peer, comm_, stream_);
      } else {
        ncclRecv(op.buffer.data, op.buffer.count, nccl_type(op.buffer.type), op.peer, comm_, stream_);
      }
    }
    return ncclGroupEnd();
  });
}

void NcclGroup::barrier() {
  run("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_); });
}

}  // namespace

bool have_nccl() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;  // no driver or no device
  return count;
}

std::unique_ptr<Group> create_nccl_group(std::shared_ptr<Store> store, const GroupOptions& opts) {
  return std::make_unique<NcclGroup>(std::move(store), opts);
}

void* device_alloc(std::size_t bytes, int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  void* ptr = nullptr;
  check_cuda(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
  return ptr;
}

void device_free(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace ntp::comm
