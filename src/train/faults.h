#pragma once
// Failures to inject into a run (test.failures, test.chaos): each one a real
// signal that a worker sends itself at a chosen phase of a chosen step. The
// other workers are not told; they find out the way they would on a cluster.
//
//   test.failures = "3@5:commit:KILL; 1@8:forward:STOP; 2@9:recovery"
//
// RANK@STEP:PHASE[:SIGNAL]. PHASE is one of start, forward, backward, sync,
// commit (after the commit collective, before the local update), optimizer
// (inside the update), recovery (during the first recovery the rank takes
// part in at or after STEP) or checkpoint (in the background save made after
// STEP, before this rank's part is written). SIGNAL is KILL (default) or STOP; HANG: no
// signal, the rank's main thread blocks forever while its heartbeat goes on
// (a wedged process: only the collective deadlines and the survivors'
// agreement can find it); MUTE: no signal, the rank's heartbeat stops while
// it trains on (a heartbeat thread starved of CPU: the launcher sees the
// process still gets CPU and must not fence it; its lease on the store is
// still renewed, so nobody may act on its absence); LAPSE: no signal, the
// rank stops renewing its lease and beating (as if cut off from the store):
// its guard fences it (exit 4) before the lease can end; or, at commit
// only, LAG: no signal, the rank acts as if the commit collective had failed
// on it while the others completed it (a partial commit: it falls one step
// behind and recovery must roll it forward); or SLOW=F: no signal, from this
// phase on the rank's forward and backward passes take F times as long (a GPU
// slow rather than dead; F >= 1, SLOW=1 gives it back its speed).
#include <cstdint>
#include <string>
#include <vector>

namespace ntp::train {

constexpr int kLag = 0;    // FaultSpec::signal of LAG
constexpr int kHang = -1;  // FaultSpec::signal of HANG
constexpr int kMute = -2;  // FaultSpec::signal of MUTE
constexpr int kLapse = -3;  // FaultSpec::signal of LAPSE
constexpr int kSlow = -4;   // FaultSpec::signal of SLOW=F

struct FaultSpec {
  int rank = 0;
  std::int64_t step = 0;
  std::string phase = "start";
  int signal = 9;  // SIGKILL, SIGSTOP, kLag, kHang, kMute, kLapse or kSlow
  double slowdown = 1;  // F of SLOW=F
  bool operator==(const FaultSpec&) const = default;
};

extern const std::vector<std::string> kFaultPhases;

// Throws std::invalid_argument naming the entry and what is wrong with it.
std::vector<FaultSpec> parse_faults(const std::string& text);

// `count` random failures over ranks [0, ranks) and steps [1, steps), each at a
// random phase with a random signal; the same seed gives the same list. At
// most one failure per rank (a dead rank cannot fail again).
std::vector<FaultSpec> chaos_faults(std::int64_t count, std::uint64_t seed, int ranks, std::int64_t steps);

std::string to_string(const FaultSpec& fault);

}  // namespace ntp::train
