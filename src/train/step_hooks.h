#pragma once
// Where tests reach into a rank's step, all in one place: the fault points
// (test.failures, elastic/faults), the deliberate bugs of test.mutation
// (train/mutations.h) and the slow ranks of the timing tests
// (NTP_TEST_SLOW_COMPUTE, NTP_TEST_SLOW_UPDATE, test.failures SLOW=F). Built once per rank from the
// configuration and the environment, which is read then and never again; with
// none of them set every hook is a test of a member and does nothing.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "train/config.h"
#include "train/mutations.h"

namespace ntp::train {

// Where a step is when a fault point fires (fault injection, test.failures).
// kCheckpoint: in the background save after the step, before this rank's
// part is written.
enum class StepPhase { kStart, kForward, kBackward, kSync, kCommit, kOptimizer, kValidation, kCheckpoint };
const char* to_string(StepPhase phase);

class StepHooks {
 public:
  using FaultPoint = std::function<void(std::int64_t step, StepPhase phase)>;

  StepHooks() = default;  // no hooks
  // test.mutation when test.mutation_rank is -1 or `rank`; `mispair_rank`:
  // the rank whose sync buffer mis-pairs two head units (-1 = none). Reads
  // NTP_TEST_MUTATIONS, NTP_TEST_SLOW_COMPUTE and NTP_TEST_SLOW_UPDATE;
  // throws std::invalid_argument naming a variable that does not parse.
  StepHooks(const TestConfig& test, int rank, int mispair_rank = -1);

  // --- fault points
  // Called at every phase of every step.
  void set_fault_point(FaultPoint fn) { fault_point_ = std::move(fn); }
  void fault(std::int64_t step, StepPhase phase) const {
    if (fault_point_) fault_point_(step, phase);
  }

  // --- test.mutation (train/mutations.h)
  Mutation mutation() const { return mutation_; }
  bool mispairs() const { return mispairs_; }
  // kSampleTwice, kSampleSkipped: at step 1, replica 0 trains its first
  // sample twice instead of its second, or leaves its last one out.
  void mutate_samples(std::int64_t step, int replica, std::vector<std::int64_t>& samples) const;
  // The samples the loss is scaled by: the global batch's, or with
  // kLocalLossScale the replica's own.
  std::int64_t loss_scale_samples(std::int64_t global_batch, std::int64_t replica_samples) const {
    return mutation_ == Mutation::kLocalLossScale ? replica_samples : global_batch;
  }
  // The learning rate's factor: 1.01 with kUpdateScaled.
  double lr_factor() const {
    return mutation_ == Mutation::kUpdateScaled ? 1.01 : mutation_ == Mutation::kUpdateScaled3 ? 1.03 : 1.0;
  }

  // --- slow ranks (NTP_TEST_MUTATIONS=1 only)
  // NTP_TEST_SLOW_COMPUTE = "SECONDS:RANK:FACTOR": every rank's compute takes
  // SECONDS longer per sample, rank RANK's FACTOR x SECONDS, each divided by
  // the speed-up its replica's power plan gives it: a GPU whose speed follows
  // its power limit as the device model says (the measured-need test).
  double compute_delay_s(std::int64_t samples, double speedup) const;
  // NTP_TEST_SLOW_UPDATE = "RANK:SECONDS": that rank sleeps in every update,
  // a straggler whose delay only the next step can see (the step-time test).
  double update_delay_s() const { return slow_update_s_; }
  // Sleep those delays (nothing when they are 0). `speedup()` is asked only
  // when there is a delay.
  template <class Speedup>
  void slow_compute(std::int64_t samples, Speedup&& speedup) const {
    if (slow_compute_s_per_sample_ > 0) sleep_s(compute_delay_s(samples, speedup()));
  }
  void slow_update() const {
    if (slow_update_s_ > 0) sleep_s(slow_update_s_);
  }

  // --- a GPU slow rather than dead (test.failures SLOW=F)
  void set_slowdown(double factor) { slowdown_ = factor; }
  double slowdown() const { return slowdown_; }
  // After a forward or backward pass that computed for `busy_s`: the pass
  // takes F times as long (sleeps (F - 1) x busy_s).
  void slow_pass(double busy_s) const {
    if (slowdown_ > 1) sleep_s((slowdown_ - 1) * busy_s);
  }

 private:
  static void sleep_s(double seconds);

  FaultPoint fault_point_;
  Mutation mutation_ = Mutation::kNone;
  bool mispairs_ = false;
  double slow_compute_s_per_sample_ = 0;
  double slow_update_s_ = 0;
  double slowdown_ = 1;
};

}  // namespace ntp::train
