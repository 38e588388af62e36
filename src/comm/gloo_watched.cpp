#include "comm/gloo_watched.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace ntp::comm {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slot of the sentinel's receives: nobody sends on it. Gloo's collectives use
// prefixes 0x01..0x08, ours 0xA0, 0xA1 (gloo_p2p.cpp) and 0xAF (the abort probe).
constexpr std::uint8_t kSentinelSlotPrefix = 0xAE;

class WatchedBuffer;
class WatchedContext;

// Interrupts each buffer that has waited kWaitCheck, and again every
// kWaitCheck while it waits; the many short waits of a step are never
// touched. One thread per process, asleep while nothing waits. Never
// destroyed: a buffer may still wait on another thread while the process exits.
class WaitTicker {
 public:
  static WaitTicker& instance() {
    static WaitTicker* ticker = new WaitTicker;
    return *ticker;
  }

  void add(WatchedBuffer* buffer) {
    std::lock_guard lock(mutex_);
    const bool idle = waiting_.empty();
    waiting_[buffer] = Clock::now();
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    if (idle) cv_.notify_one();
  }

  // After this returns the ticker no longer touches `buffer`.
  void remove(WatchedBuffer* buffer) {
    std::lock_guard lock(mutex_);
    waiting_.erase(buffer);
  }

 private:
  WaitTicker() = default;
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<WatchedBuffer*, Clock::time_point> waiting_;  // since the wait or its last interruption
  bool started_ = false;
};

// The operations of one direction (receives or sends) that a buffer posted and
// its caller has not yet waited for, by peer. Gloo reports the peer of the
// last completion; with several peers outstanding that may not be the one a
// wait consumed, so the tally is then given up ("ambiguous") and the buffer
// is left to Gloo's own wakeups: a missed wakeup costs the deadline, a wrong
// one would fail a healthy call whose peer finished and left.
class Outstanding {
 public:
  void posted(int peer) { ++count_[peer]; }
  void posted_to_any() { ambiguous_ = true; }
  void completed(int peer) {
    const auto it = count_.find(peer);
    if (count_.size() != 1 || it == count_.end()) {
      ambiguous_ = true;
      return;
    }
    if (--it->second == 0) count_.erase(it);
  }
  // Peers with an operation outstanding; none once the tally is ambiguous.
  std::vector<int> peers() const {
    std::vector<int> out;
    if (!ambiguous_) {
      for (const auto& entry : count_) out.push_back(entry.first);
    }
    return out;
  }

 private:
  std::map<int, int> count_;
  bool ambiguous_ = false;
};

class WatchedBuffer final : public gloo::transport::UnboundBuffer {
 public:
  WatchedBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner, WatchedContext& context)
      : gloo::transport::UnboundBuffer(inner->ptr, inner->size), inner_(std::move(inner)), context_(context) {}

  bool waitRecv(int* rank, milliseconds timeout) override { return wait(true, rank, timeout); }
  bool waitSend(int* rank, milliseconds timeout) override { return wait(false, rank, timeout); }

  void abortWaitRecv() override {
    aborted_recv_ = true;
    inner_->abortWaitRecv();
  }
  void abortWaitSend() override {
    aborted_send_ = true;
    inner_->abortWaitSend();
  }

  void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t nbytes) override {
    inner_->send(dst, slot, offset, nbytes);
    sends_.posted(dst);
  }
  void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t nbytes) override {
    inner_->recv(src, slot, offset, nbytes);
    recvs_.posted(src);
  }
  void recv(std::vector<int> srcs, std::uint64_t slot, std::size_t offset, std::size_t nbytes) override {
    inner_->recv(std::move(srcs), slot, offset, nbytes);
    recvs_.posted_to_any();
  }

  // From the ticker's thread: end the current wait slice.
  void interrupt() {
    if (waiting_recv_) inner_->abortWaitRecv();
    else inner_->abortWaitSend();
  }

 private:
  bool wait(bool recv, int* rank, milliseconds timeout);
  bool wait_slice(bool recv, int* rank, milliseconds left);
  std::exception_ptr failed_peer(bool recv) const;

  std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  WatchedContext& context_;
  Outstanding recvs_, sends_;              // touched by the calling thread only
  std::atomic<bool> waiting_recv_{false};  // which wait the ticker interrupts
  std::atomic<bool> aborted_recv_{false}, aborted_send_{false};  // aborts asked for by Gloo's callers
};

void WaitTicker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return !waiting_.empty(); });
    const auto tick = Clock::now() + kWaitCheck;
    while (Clock::now() < tick) cv_.wait_until(lock, tick);
    const auto now = Clock::now();
    for (auto& [buffer, since] : waiting_) {
      if (now - since < kWaitCheck) continue;
      buffer->interrupt();
      since = now;
    }
  }
}

// Registers a buffer with the ticker for the length of one wait.
class TickerEntry {
 public:
  explicit TickerEntry(WatchedBuffer* buffer) : buffer_(buffer) { WaitTicker::instance().add(buffer_); }
  ~TickerEntry() { WaitTicker::instance().remove(buffer_); }
  TickerEntry(const TickerEntry&) = delete;
  TickerEntry& operator=(const TickerEntry&) = delete;

 private:
  WatchedBuffer* buffer_;
};

// The TCP context, its pairs and buffers, with every buffer it creates
// watched. Delegation, not derivation: the Debian package of Gloo does not
// ship the headers of its TCP context.
class WatchedContext final : public gloo::transport::Context {
 public:
  explicit WatchedContext(std::shared_ptr<gloo::transport::Context> inner)
      : gloo::transport::Context(inner->rank, inner->size), inner_(std::move(inner)) {}

  std::unique_ptr<gloo::transport::Pair>& getPair(int peer) override { return inner_->getPair(peer); }
  std::unique_ptr<gloo::transport::Pair>& createPair(int peer) override { return inner_->createPair(peer); }
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr, std::size_t bytes) override {
    return std::make_unique<WatchedBuffer>(inner_->createUnboundBuffer(ptr, bytes), *this);
  }

  // Gloo fails a pair by waking the buffers with a receive pending on it, so
  // each pair's sentinel keeps one pending, on a slot nobody sends on, and
  // learns of the pair's failure.
  void arm(const std::vector<int>& peers) {
    std::lock_guard lock(sentinel_mutex_);
    for (int peer : peers) {
      Sentinel& sentinel = sentinels_[peer];
      sentinel.buffer = inner_->createUnboundBuffer(&sentinel.byte, sizeof(sentinel.byte));
      try {
        sentinel.buffer->recv(peer, gloo::Slot::build(kSentinelSlotPrefix, 0));
      } catch (const std::exception&) {
        sentinel.failed = std::current_exception();  // failed already
      }
    }
  }

  // The error the pair with `peer` failed with; null while it is healthy (or
  // not watched). The sentinel's wait, aborted before it starts, returns at
  // once or rethrows that error.
  std::exception_ptr failure(int peer) {
    std::lock_guard lock(sentinel_mutex_);
    const auto it = sentinels_.find(peer);
    if (it == sentinels_.end()) return nullptr;
    Sentinel& sentinel = it->second;
    if (sentinel.failed) return sentinel.failed;
    sentinel.buffer->abortWaitRecv();
    try {
      sentinel.buffer->waitRecv(nullptr, kWaitCheck);
    } catch (const std::exception&) {
      sentinel.failed = std::current_exception();
    }
    return sentinel.failed;
  }

 private:
  struct Sentinel {
    char byte = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    std::exception_ptr failed;
  };

  std::shared_ptr<gloo::transport::Context> inner_;
  std::mutex sentinel_mutex_;
  std::map<int, Sentinel> sentinels_;  // by peer; declared after inner_, so destroyed before it
};

// Gloo's wait returns false when interrupted; this one returns false only for
// an abort its caller asked for, and true on completion. An interruption by
// the ticker looks at the pairs of the operations outstanding in this
// direction and waits on with what is left of the deadline; the last slice
// waits the remainder in Gloo, which on timeout fails the context's pairs.
bool WatchedBuffer::wait(bool recv, int* rank, milliseconds timeout) {
  if (timeout == gloo::transport::kUnsetTimeout) timeout = context_.getTimeout();
  const auto deadline = Clock::now() + timeout;
  std::atomic<bool>& aborted = recv ? aborted_recv_ : aborted_send_;
  waiting_recv_ = recv;
  TickerEntry entry(this);
  for (;;) {
    const auto left = std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
    try {
      if (wait_slice(recv, rank, left)) return true;
    } catch (const gloo::IoException&) {
      if (Clock::now() < deadline) throw;
      // The slice's own length would be misleading in the message.
      throw gloo::IoException(std::string("Timed out waiting ") + std::to_string(timeout.count()) + "ms for " +
                              (recv ? "recv" : "send") + " operation to complete");
    }
    if (aborted.exchange(false)) return false;
    if (const std::exception_ptr error = failed_peer(recv)) {
      // A completion that arrived since the slice ended is returned, not
      // failed: its peer may have finished and closed. With none, the zero
      // wait fails the context's pairs, as a timeout would.
      try {
        if (wait_slice(recv, rank, milliseconds(0))) return true;
      } catch (const gloo::IoException&) {
        std::rethrow_exception(error);
      }
    }
  }
}

bool WatchedBuffer::wait_slice(bool recv, int* rank, milliseconds left) {
  int peer = -1;
  const bool done = recv ? inner_->waitRecv(&peer, left) : inner_->waitSend(&peer, left);
  if (done) {
    (recv ? recvs_ : sends_).completed(peer);
    if (rank != nullptr) *rank = peer;
  }
  return done;
}

std::exception_ptr WatchedBuffer::failed_peer(bool recv) const {
  for (int peer : (recv ? recvs_ : sends_).peers()) {
    if (std::exception_ptr error = context_.failure(peer)) return error;
  }
  return nullptr;
}

}  // namespace


std::shared_ptr<gloo::transport::Context> create_watched_context(
    const std::shared_ptr<gloo::transport::Device>& device, int rank, int size, std::chrono::milliseconds timeout) {
  auto inner = device->createContext(rank, size);
  inner->setTimeout(timeout);  // its pairs take theirs from it
  auto context = std::make_shared<WatchedContext>(std::move(inner));
  context->setTimeout(timeout);
  return context;
}

void arm_watched_context(gloo::transport::Context& context, const std::vector<int>& peers) {
  if (auto* watched = dynamic_cast<WatchedContext*>(&context)) watched->arm(peers);
}

}  // namespace ntp::comm
