#pragma once
// Runs one command as N local ranks (processes), the way a launcher would:
// each child gets RANK, LOCAL_RANK and WORLD_SIZE in its environment. Used by
// `ntp bench comm --nproc N`. Bounded: past the deadline, or soon after one
// rank failed, the remaining ranks are killed; every child is reaped.
#include <chrono>
#include <string>
#include <vector>

namespace ntp::comm {

struct LocalRanksResult {
  std::vector<std::string> outcome;  // per rank: "exit 0", "killed by signal 9", "killed at deadline"
  bool ok = false;                   // every rank exited with 0
};

LocalRanksResult run_local_ranks(const std::vector<std::string>& argv, int nproc,
                                 const std::vector<std::string>& extra_env, std::chrono::seconds deadline,
                                 std::chrono::seconds grace_after_failure = std::chrono::seconds(30));

// Reads RANK and WORLD_SIZE from the environment; false if absent. Throws
// CommError(kBadInput) naming the variable when a value is malformed or the
// rank is outside the world.
bool launcher_rank(int& rank, int& world_size);

}  // namespace ntp::comm
