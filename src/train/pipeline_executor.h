#pragma once
// Runs one stage's part of a pipeline schedule on this rank: activations go
// forward and their gradients come back as point-to-point messages between
// neighbouring stages (docs/pipeline.md, "Running a schedule over
// point-to-point messages").
//
// Two halves. The plan is pure: which messages each stage posts in which
// exchange (plan_pipeline), and the proof that those exchanges cannot wait on
// each other forever (check_exchanges); both are tested with no processes.
// run_stage is the one function that does I/O: it walks its stage's plan,
// calling the stage's compute between the exchanges and timing both.
//
// Tags: the message of micro-batch i travels with tag
//   tag_base + 2 i + 0  for its activation (stage s to s + 1),
//   tag_base + 2 i + 1  for its gradient   (stage s + 1 to s),
// so a receive can only match the message of its own micro-batch and
// direction. Stages need no tag of their own: a receive names its peer, and
// each peer is one neighbour. A step uses tags [tag_base, tag_base + 2 m);
// give successive steps or other traffic on the group disjoint ranges.
//
// Deadlock: a send returns only once the peer received it (comm/group.h), so
// 1F1B's steady state, in which stage s sends micro-batch i's activation to
// s + 1 while s + 1 sends micro-batch j's gradient back to s, hangs with
// blocking sends. Each step therefore posts the previous op's output and the
// next op's input together in one exchange (Megatron's
// send_forward_recv_backward), which starts both before it waits for either.
// check_exchanges shows that every stage's plan then completes whenever each
// exchange waits until its peers posted the other ends (the strictest
// transport; see pipeline_executor.cpp for why it holds for 1F1B), and
// run_stage refuses a schedule whose plan fails it instead of hanging.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "comm/group.h"
#include "train/pipeline_schedule.h"

namespace ntp::train {

// ---- The plan (pure) ----

// One message between neighbouring stages: micro-batch i's activation, from
// stage s to s + 1, or the gradient of that activation, from s + 1 to s.
struct StageMessage {
  enum class Kind { kActivation = 0, kGradient = 1 };
  Kind kind = Kind::kActivation;
  int microbatch = 0;
  int from = 0;  // stage
  int to = 0;    // stage
  friend bool operator==(const StageMessage&, const StageMessage&) = default;
};

// The tag of a message of a step whose tags start at tag_base (above).
std::uint32_t message_tag(std::uint32_t tag_base, const StageMessage& message);

// One step of a stage: one exchange, which sends the previous op's output and
// receives this op's input together, then the op. The first step sends
// nothing; a last step without an op sends the last op's output.
struct StageStep {
  std::optional<StageMessage> send;
  std::optional<StageMessage> recv;
  std::optional<PipelineOp> op;
};

// Every stage's steps, plan[s], for a schedule check_schedule accepts (it
// throws std::invalid_argument otherwise).
std::vector<std::vector<StageStep>> plan_pipeline(const PipelineSchedule& schedule);

// Throws PipelineDeadlock unless every stage's plan runs to its end when each
// exchange returns only once the peer of each of its messages has posted that
// message too (the Gloo and NCCL behaviour of a send: it completes when the
// peer receives). The message names every stuck stage, its step and the
// message it waits for.
void check_exchanges(const std::vector<std::vector<StageStep>>& plan);

// One rank of a pipeline whose stages may each hold several ranks (a stage's
// TP group: every rank of it computes the whole activation), with its links
// as indices into the list of ranks checked; -1 / empty at the ends.
struct RankLinks {
  int stage = 0;
  int activation_from = -1;        // the rank of stage - 1 whose output is its input
  std::vector<int> gradient_to;    // the ranks of stage - 1 it sends its input's gradient to
  int gradient_from = -1;          // the rank of stage + 1 whose input gradient is its output's
  std::vector<int> activation_to;  // the ranks of stage + 1 it sends its output to
};

// The same check over ranks: rank r walks plan[ranks[r].stage], a step's send
// going to every rank its links name and its receive coming from the one. A
// receiver whose sender does not list it waits forever, so inconsistent
// links are a PipelineDeadlock too, naming the rank, the message and "never
// posts". With one rank per stage, paired, this is check_exchanges(plan).
void check_exchanges(const std::vector<std::vector<StageStep>>& plan, const std::vector<RankLinks>& ranks);

// ---- Running a stage (I/O) ----

// Where this rank's messages go: ranks of `group`, -1 / empty at the ends
// (RankLinks' fields; docs/pipeline.md, "Activations between TP degrees").
// A rank receives each message from one peer and may send each of its own to
// several, or to none (a rank of a wider stage whose copy another rank
// sends). `group` may be null when the pipeline has one stage.
struct StageLinks {
  comm::Group* group = nullptr;
  int activation_from = -1;
  std::vector<int> gradient_to;
  int gradient_from = -1;
  std::vector<int> activation_to;

  // One peer each way, the same for both directions: `prev` in stage - 1
  // (-1 on stage 0), `next` in stage + 1 (-1 on the last stage).
  static StageLinks paired(comm::Group* group, int prev, int next);
};

// This stage's compute, per micro-batch. The spans are valid during the call
// only; keep what the backward needs (the activations) yourself.
struct StageWork {
  // in: stage - 1's output activation (empty on stage 0, which reads its own
  // data); out: this stage's, sent to stage + 1 (empty on the last stage,
  // which computes the loss).
  std::function<void(int mb, std::span<const float> in, std::span<float> out)> forward;
  // grad_out: the gradient of this stage's output, from stage + 1 (empty on
  // the last stage, which starts from its loss); grad_in: the gradient of its
  // input, sent to stage - 1 (empty on stage 0).
  std::function<void(int mb, std::span<const float> grad_out, std::span<float> grad_in)> backward;
  std::size_t in_elems = 0;   // activation size at this stage's input (ignored on stage 0)
  std::size_t out_elems = 0;  // and at its output (ignored on the last stage)
};

// What this rank measured while it ran its stage. Times are seconds on
// std::chrono::steady_clock, so the timings of ranks of one host share a
// clock (measured_run); across hosts, shift each by its clock's offset first.
struct StageTiming {
  double start = 0;           // when run_stage began
  double finish = 0;          // when its last exchange (or op) returned
  std::vector<OpSpan> spans;  // spans[k]: the k-th op of this stage's schedule
  double busy = 0;            // the sum of the op spans: time in forward and backward
  // Everything else: waiting in exchanges for a neighbour, for the transfer.
  double idle() const { return finish - start - busy; }
};

// Runs schedule.stages[stage] on this rank: for each op, the exchange that
// sends the previous op's output and receives this op's input, then the op.
// Tags start at tag_base (above). Every wait keeps the group's deadline: a
// neighbour that died, stopped or aborted raises comm::CommError (its kind,
// group and peer kept; the detail prefixed with the stage, the op and the
// message). When `work` throws, the group is aborted before the exception
// leaves, so the neighbours fail within milliseconds instead of at their
// deadlines; the group must then be rebuilt, as after any CommError.
// Throws std::invalid_argument for a bad schedule, stage, links or tag range,
// and PipelineDeadlock for an order the simulator cannot run (a backward
// before its forward) or a plan check_exchanges rejects, before any message
// moves.
StageTiming run_stage(const PipelineSchedule& schedule, int stage, const StageLinks& links,
                      const StageWork& work, std::uint32_t tag_base);

// Every stage's timing (ranks of one host: one clock) as the simulator's
// PipelineRun, measured: time 0 is the earliest start, the makespan ends at
// the latest finish, and bubble_fraction is the busiest stage's share of idle
// time, as simulate_pipeline defines it. Throws std::invalid_argument unless
// there is one timing per stage with one span per op.
PipelineRun measured_run(const PipelineSchedule& schedule, const std::vector<StageTiming>& timings);

}  // namespace ntp::train
