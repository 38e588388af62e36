#pragma once
// The 1F1B pipeline schedule and an event simulator that runs a schedule on
// modelled stage times. Pure: no I/O, no threads (docs/pipeline.md).
//
// 1F1B (PipeDream-flush, Megatron's non-interleaved schedule): stage s of pp
// first runs w_s = min(pp - s - 1, m) warm-up forwards, then alternates one
// forward and one backward, then runs the cool-down backwards. It has the same
// bubble as GPipe (all forwards, then all backwards) but stage s never holds
// the activations of more than pp - s micro-batches, where GPipe holds m.
//
// Dependencies between ops: F(s, i) needs F(s-1, i) and one point-to-point
// hand-off (the activation); B(s, i) needs F(s, i) on its own stage and, below
// the last stage, B(s+1, i) and one hand-off (the activation's gradient); the
// last stage's backward starts from the loss its own forward computed. A stage
// runs its ops one at a time in the schedule's order.
#include <stdexcept>
#include <vector>

namespace ntp::train {

struct PipelineOp {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int microbatch = 0;
  friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

struct PipelineSchedule {
  int microbatches = 0;                         // m
  std::vector<std::vector<PipelineOp>> stages;  // stages[s]: what stage s runs, in order
  int pp() const { return static_cast<int>(stages.size()); }
};

// 1F1B for pp stages and m micro-batches. Throws std::invalid_argument naming
// parallel.pp or parallel.microbatches when either is < 1.
PipelineSchedule one_f_one_b(int pp, int microbatches);

// Throws std::invalid_argument naming the stage and the op unless every stage
// runs the forward and the backward of each micro-batch in [0, m) exactly once.
// Order is not checked here: an order that cannot run is the simulator's
// deadlock.
void check_schedule(const PipelineSchedule& schedule);

// The most micro-batches a stage running `ops` in order holds at once: it
// holds micro-batch i's activations from its forward until its backward, and
// runs its ops one at a time, so the peak depends on the order alone.
int peak_in_flight(const std::vector<PipelineOp>& ops);

// Modelled durations, in any one time unit.
struct StageTimes {
  std::vector<double> forward;   // per stage: one micro-batch's forward
  std::vector<double> backward;  // per stage: one micro-batch's backward
  double p2p = 0;                // one activation or gradient hand-off between stages
};

// When one op ran.
struct OpSpan {
  double start = 0;
  double finish = 0;
};

// The outcome of a simulated step. A stage is busy while it runs an op and
// idle otherwise, from time 0 to the makespan.
struct PipelineRun {
  double makespan = 0;              // when the last op finishes
  std::vector<double> busy;         // per stage
  std::vector<double> idle;         // per stage: makespan - busy
  std::vector<int> peak_in_flight;  // per stage: most micro-batches forwarded, not yet backwarded
  // The bubble: the share of the makespan in which the busiest stage (the
  // bottleneck) is idle, (makespan - max busy) / makespan; 0 when the
  // makespan is 0. A stage that idles because it has less work than the
  // bottleneck is imbalance, not bubble, so only the busiest stage counts.
  // Equal stages, no p2p: (pp - 1) / (m + pp - 1).
  double bubble_fraction = 0;
  std::vector<std::vector<OpSpan>> spans;  // spans[s][k]: stage s's k-th op of the schedule
};

// Fills `run`'s idle times, peak in-flight counts and bubble fraction from
// its makespan and busy times (one per stage of `schedule`): the one
// definition, for simulated and measured runs alike.
void complete_run(const PipelineSchedule& schedule, PipelineRun& run);

// A schedule whose order cannot complete: two stages (or a stage and itself)
// each wait for an op the other runs later.
class PipelineDeadlock : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `schedule` with each op starting as soon as its dependencies and its
// stage allow. Throws std::invalid_argument for a schedule check_schedule
// rejects or times that are negative, not finite, or not one per stage, and
// PipelineDeadlock naming every stuck stage's op and what it waits for.
PipelineRun simulate_pipeline(const PipelineSchedule& schedule, const StageTimes& times);

}  // namespace ntp::train
