#pragma once
// Call checks: before a collective, members exchange a small descriptor of
// the call they are about to make (operation, element type, counts, root).
// If the calls differ, every member raises the same kBadInput error naming the
// rank at fault, instead of exchanging garbage or waiting for a deadline.
// Pure logic: encoding and comparison, no I/O.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.h"

namespace ntp::comm {

enum class CallOp : std::int64_t {
  kAllReduce = 1, kAllGather, kAllGatherV, kReduceScatter, kAllToAllV, kBroadcast, kBarrier,
};
const char* to_string(CallOp op);

struct CallDescriptor {
  CallOp op = CallOp::kBarrier;
  DataType type = DataType::kUint8;
  std::uint64_t count = 0;       // elements this rank contributes (or holds)
  std::int64_t aux = 0;          // reduce op, or the broadcast root
  std::vector<std::size_t> counts;       // per-rank counts that must agree (-v forms)
  std::vector<std::size_t> recv_counts;  // all_to_all_v: what this rank expects
  bool local_ok = true;          // false: this rank's own arguments are invalid
};

// Fixed-width encoding for an all-gather: 6 + 2 * group_size int64 words.
std::size_t descriptor_words(int group_size);
std::vector<std::int64_t> encode(const CallDescriptor& call, int group_size);

struct Mismatch {
  int rank = -1;        // group rank at fault
  std::string detail;   // empty when the calls agree
};

// Compares the gathered descriptors of all ranks (rank-major). Every rank
// computes the same answer from the same input, so all raise together.
Mismatch find_mismatch(const std::vector<std::int64_t>& gathered, int group_size);

}  // namespace ntp::comm
