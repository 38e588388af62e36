#pragma once
// CommError: the one exception type of the comm layer. It says what went wrong
// (kind), where (group name, epoch, this rank) and, when known, which peer.
// Survivors of a failure catch it, rebuild groups in the next epoch and go on.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ntp::comm {

enum class CommErrorKind {
  kTimeout,           // a deadline passed (hung or stopped peer, slow store)
  kConnectionClosed,  // a peer's connection closed or reset (dead process)
  kPeerError,         // the transport or a peer reported another failure
  kBadInput,          // invalid arguments, mismatched calls between ranks, bad store
  kBroken,            // the group failed earlier and can no longer be used
};

const char* to_string(CommErrorKind kind);

struct CommErrorInfo {
  CommErrorKind kind = CommErrorKind::kPeerError;
  std::string group;       // group name ("" for store-level errors)
  std::uint64_t epoch = 0;
  int rank = -1;           // this process's global rank, -1 if unknown
  int peer = -1;           // global rank of the peer at fault, -1 if unknown
  std::string op;          // "all_reduce", "rendezvous", "store.get", ...
  std::string detail;      // human-readable cause
};

class CommError : public std::runtime_error {
 public:
  explicit CommError(CommErrorInfo info);
  CommErrorKind kind() const { return info_.kind; }
  const std::string& group() const { return info_.group; }
  std::uint64_t epoch() const { return info_.epoch; }
  int rank() const { return info_.rank; }
  int peer() const { return info_.peer; }
  const std::string& op() const { return info_.op; }
  const std::string& detail() const { return info_.detail; }
  const CommErrorInfo& info() const { return info_; }

 private:
  CommErrorInfo info_;
};

// Shorthand for errors raised before a group exists (stores, option checks).
[[noreturn]] void throw_bad_input(const std::string& op, const std::string& detail);

}  // namespace ntp::comm
