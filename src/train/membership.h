#pragma once
// Membership agreement after a failure, through the job's store. Every
// survivor of epoch e registers in epoch e+1; the launcher marks each worker
// that died (dead_key). Once every member of epoch e is either registered or
// dead, the lowest registered rank — the leader — waits `settle` (so that
// near-simultaneous deaths make one reconfiguration), then publishes the
// survivors. A member neither registered nor dead after `silence` counts as
// dead (a hung or unreachable process). Everyone else waits for the
// published list, by `deadline`.
//
// Store keys: "ntp/dead/<rank>" (the launcher), "ntp/e<E>/alive/<rank>" and
// "ntp/e<E>/members" ("0,2,3").
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ntp::train {

// The key the launcher sets when worker `rank` dies.
std::string dead_key(int rank);

struct MembershipOptions {
  int rank = 0;              // this process's global rank
  std::vector<int> members;  // the global ranks of the failed epoch
  std::uint64_t epoch = 1;   // the epoch being agreed on
  std::chrono::milliseconds settle{500};
  std::chrono::milliseconds silence{5000};
  std::chrono::milliseconds deadline{60000};
};

struct Membership {
  std::uint64_t epoch = 0;
  std::vector<int> survivors;  // ascending
  std::vector<int> lost;       // members of the old epoch not in `survivors`
};

// Blocks until the survivors of `options.epoch` are published. Throws
// std::runtime_error when the deadline passes or this rank is not among them.
Membership agree_membership(comm::Store& store, const MembershipOptions& options);

}  // namespace ntp::train
