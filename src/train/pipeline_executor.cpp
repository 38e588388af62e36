#include "train/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace ntp::train {

namespace {

using Kind = PipelineOp::Kind;
using MessageKind = StageMessage::Kind;

std::string describe(PipelineOp op) {
  return std::string(op.kind == Kind::kForward ? "forward" : "backward") + " of micro-batch " +
         std::to_string(op.microbatch);
}

std::string describe_message(const StageMessage& message) {
  return "micro-batch " + std::to_string(message.microbatch) + "'s " +
         (message.kind == MessageKind::kActivation ? "activation" : "gradient") + " from stage " +
         std::to_string(message.from) + " to stage " + std::to_string(message.to);
}

std::string describe_step(const StageStep& step, std::size_t index) {
  std::string out = "step " + std::to_string(index);
  return out + (step.op ? " (before its " + describe(*step.op) + ")" : " (no op)");
}

// ---- The plan ----

// What op `op` of `stage` receives before it runs: a forward, the previous
// stage's activation; a backward, the next stage's gradient. Nothing at the
// ends (stage 0 reads its data, the last stage starts from its loss).
std::optional<StageMessage> input_of(PipelineOp op, int stage, int pp) {
  const int i = op.microbatch;
  if (op.kind == Kind::kForward) {
    if (stage == 0) return std::nullopt;
    return StageMessage{MessageKind::kActivation, i, stage - 1, stage};
  }
  if (stage == pp - 1) return std::nullopt;
  return StageMessage{MessageKind::kGradient, i, stage + 1, stage};
}

// What op `op` of `stage` sends after it ran: the mirror of input_of.
std::optional<StageMessage> output_of(PipelineOp op, int stage, int pp) {
  const int i = op.microbatch;
  if (op.kind == Kind::kForward) {
    if (stage == pp - 1) return std::nullopt;
    return StageMessage{MessageKind::kActivation, i, stage, stage + 1};
  }
  if (stage == 0) return std::nullopt;
  return StageMessage{MessageKind::kGradient, i, stage, stage - 1};
}

std::vector<StageStep> plan_stage(const std::vector<PipelineOp>& ops, int stage, int pp) {
  std::vector<StageStep> steps;
  std::optional<StageMessage> pending;  // the previous op's output, not sent yet
  for (const PipelineOp& op : ops) {
    steps.push_back({pending, input_of(op, stage, pp), op});
    pending = output_of(op, stage, pp);
  }
  if (pending) steps.push_back({pending, std::nullopt, std::nullopt});
  return steps;
}

// ---- The exchange check ----
//
// Why 1F1B's plan passes (m >= pp): project each stage's exchanges onto one
// link (s, s + 1), keeping that link's messages. Both ends post the same sets
// in the same order: one activation per exchange during stage s's warm-up,
// {activation, gradient} pairs in the steady state, one gradient per
// exchange in the cool-down. With the same sequence on both ends, s can wait
// on s + 1 over the link only while s + 1 has posted fewer of the link's
// exchanges than s, and s + 1 on s only in the opposite case, so two
// neighbours never wait on each other; the stages form a path, so any cycle
// of waits would need such a pair. (With m < pp the warm-up takes every
// forward and s may post its last activation with its first gradient while
// s + 1 posts them apart; s then waits on s + 1, which does not wait back.)
// The blocking order (receive, compute, send, each alone) breaks the
// sequence: s posts activation i, then gradient j, while s + 1 posts gradient
// j, then activation i, and both wait. The check below does not rely on this
// argument: it runs the plan, so every schedule is checked as it is.

// One message between two ranks (indices into the ranks checked).
struct RankMessage {
  StageMessage message;
  int from = -1;
  int to = -1;
};

// A message's identity within the pipeline.
using MessageKey = std::tuple<int, int, int, int, int, int>;
MessageKey key_of(const RankMessage& m) {
  return {static_cast<int>(m.message.kind), m.message.microbatch, m.message.from, m.message.to, m.from, m.to};
}

// Runs every rank's plan with rendezvous exchanges: a rank's current step
// completes once each of its messages was posted by the peer (a message is
// posted when the exchange holding it starts). Passes advance every rank as
// far as it can; a pass without progress, with steps left, is a deadlock.
class ExchangeRun {
 public:
  ExchangeRun(const std::vector<std::vector<StageStep>>& plan, const std::vector<RankLinks>& ranks)
      : plan_(plan), ranks_(ranks), at_(ranks.size(), 0), messages_(ranks.size()), posted_at_(ranks.size()) {
    one_per_stage_ = ranks.size() == plan.size();
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const int stage = ranks[r].stage;
      if (stage < 0 || stage >= static_cast<int>(plan.size()))
        throw std::invalid_argument("pipeline exchanges: rank " + std::to_string(r) + " is in stage " +
                                    std::to_string(stage) + ", outside [0, " + std::to_string(plan.size()) + ")");
      one_per_stage_ = one_per_stage_ && stage == static_cast<int>(r);
      for (const StageStep& step : steps(r)) {
        messages_[r].push_back(expand(step, static_cast<int>(r)));
        for (const RankMessage& m : messages_[r].back()) posted_at_[r].emplace(key_of(m), messages_[r].size() - 1);
      }
    }
  }

  void run() {
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (std::size_t r = 0; r < ranks_.size(); ++r)
        while (at_[r] < steps(r).size() && step_can_finish(r)) {
          ++at_[r];
          progressed = true;
        }
    }
    std::string stuck;
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      if (at_[r] < steps(r).size()) stuck += " " + why_stuck(r) + ";";
    if (!stuck.empty()) {
      stuck.pop_back();
      throw PipelineDeadlock("pipeline exchanges deadlock:" + stuck);
    }
  }

 private:
  const std::vector<StageStep>& steps(std::size_t rank) const {
    return plan_[static_cast<std::size_t>(ranks_[rank].stage)];
  }

  // A step's messages between ranks: its send to every rank the links name,
  // its receive from the one.
  std::vector<RankMessage> expand(const StageStep& step, int rank) const {
    const RankLinks& links = ranks_[static_cast<std::size_t>(rank)];
    std::vector<RankMessage> out;
    if (step.send) {
      const bool activation = step.send->kind == MessageKind::kActivation;
      for (int to : activation ? links.activation_to : links.gradient_to) out.push_back({*step.send, rank, to});
    }
    if (step.recv) {
      const bool activation = step.recv->kind == MessageKind::kActivation;
      out.push_back({*step.recv, activation ? links.activation_from : links.gradient_from, rank});
    }
    return out;
  }

  static int peer_of(const RankMessage& m, std::size_t rank) {
    return m.from == static_cast<int>(rank) ? m.to : m.from;
  }

  // Where the peer posts `m`; nullopt when it never does (or is no rank).
  std::optional<std::size_t> peer_posts_at(const RankMessage& m, std::size_t rank) const {
    const int peer = peer_of(m, rank);
    if (peer < 0 || peer >= static_cast<int>(ranks_.size())) return std::nullopt;
    const auto& posted = posted_at_[static_cast<std::size_t>(peer)];
    const auto it = posted.find(key_of(m));
    if (it == posted.end()) return std::nullopt;
    return it->second;
  }

  bool peer_posted(const RankMessage& m, std::size_t rank) const {
    const std::optional<std::size_t> at = peer_posts_at(m, rank);
    return at && *at <= at_[static_cast<std::size_t>(peer_of(m, rank))];
  }

  bool step_can_finish(std::size_t rank) const {
    for (const RankMessage& m : messages_[rank][at_[rank]])
      if (!peer_posted(m, rank)) return false;
    return true;
  }

  // "stage 1" with one rank per stage, else "rank 3 (stage 1)".
  std::string name(int rank) const {
    if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return "rank " + std::to_string(rank) + " (none)";
    const std::string stage = "stage " + std::to_string(ranks_[static_cast<std::size_t>(rank)].stage);
    return one_per_stage_ ? stage : "rank " + std::to_string(rank) + " (" + stage + ")";
  }

  std::string describe(const RankMessage& m) const {
    const std::string text = describe_message(m.message);
    return one_per_stage_ ? text : text + " (rank " + std::to_string(m.from) + " to rank " + std::to_string(m.to) + ")";
  }

  // "stage 0 waits at step 2 (before its backward of micro-batch 0) for
  // micro-batch 1's activation from stage 0 to stage 1, which stage 1 posts
  // at step 3 and is at step 1"
  std::string why_stuck(std::size_t rank) const {
    const StageStep& step = steps(rank)[at_[rank]];
    for (const RankMessage& m : messages_[rank][at_[rank]]) {
      if (peer_posted(m, rank)) continue;
      const int peer = peer_of(m, rank);
      const std::optional<std::size_t> at = peer_posts_at(m, rank);
      std::string out = name(static_cast<int>(rank)) + " waits at its " + describe_step(step, at_[rank]) + " for " +
                        describe(m) + ", which " + name(peer);
      if (!at) return out + " never posts";
      return out + " posts at step " + std::to_string(*at) + " and is at step " +
             std::to_string(at_[static_cast<std::size_t>(peer)]);
    }
    return name(static_cast<int>(rank)) + " is stuck";  // unreachable: a stuck step waits for a message
  }

  const std::vector<std::vector<StageStep>>& plan_;
  const std::vector<RankLinks>& ranks_;
  bool one_per_stage_ = false;
  std::vector<std::size_t> at_;  // per rank: its current step (posted, not finished)
  std::vector<std::vector<std::vector<RankMessage>>> messages_;  // per rank, per step
  std::vector<std::map<MessageKey, std::size_t>> posted_at_;     // per rank: the step posting each message
};

// ---- Running a stage ----

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A peer named in links.`which`: another rank of the group where the stage
// has that neighbour (`needed`), -1 at the pipeline's end.
void check_peer(int rank, int stage, bool needed, const std::string& which, const StageLinks& links) {
  const std::string where = "pipeline stage " + std::to_string(stage) + ": links." + which;
  if (!needed) {
    if (rank != -1) throw std::invalid_argument(where + " must be -1 at this end, got " + std::to_string(rank));
    return;
  }
  if (links.group == nullptr)
    throw std::invalid_argument(where + ": this stage has that neighbour, so links.group must be set (it is null)");
  if (rank < 0 || rank >= links.group->size() || rank == links.group->rank())
    throw std::invalid_argument(where + " must be another rank of group '" + links.group->name() + "' (size " +
                                std::to_string(links.group->size()) + "), got " + std::to_string(rank));
}

// One side of the links: the one peer it receives from, the peers it sends
// to (none at the end; possibly none elsewhere, when another rank sends).
void check_side(int from, const std::vector<int>& to, int stage, bool exists, const char* from_name,
                const char* to_name, const StageLinks& links) {
  check_peer(from, stage, exists, from_name, links);
  if (!exists && !to.empty())
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + ": links." + to_name +
                                " must be empty at this end, got " + std::to_string(to.size()) + " ranks");
  for (std::size_t i = 0; i < to.size(); ++i)
    check_peer(to[i], stage, true, std::string(to_name) + "[" + std::to_string(i) + "]", links);
}

void check_stage_args(const PipelineSchedule& schedule, int stage, const StageLinks& links,
                      const StageWork& work, std::uint32_t tag_base) {
  const int pp = schedule.pp();
  if (stage < 0 || stage >= pp)
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " is outside [0, " +
                                std::to_string(pp) + ")");
  check_side(links.activation_from, links.gradient_to, stage, stage > 0, "activation_from", "gradient_to", links);
  check_side(links.gradient_from, links.activation_to, stage, stage < pp - 1, "gradient_from", "activation_to", links);
  if (!work.forward || !work.backward)
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + ": work.forward and work.backward must be set");
  const std::uint64_t last_tag = std::uint64_t{tag_base} + 2 * static_cast<std::uint64_t>(schedule.microbatches) - 1;
  if (last_tag > std::numeric_limits<std::uint32_t>::max())
    throw std::invalid_argument("pipeline tags: tag_base " + std::to_string(tag_base) + " + 2 x " +
                                std::to_string(schedule.microbatches) + " micro-batches overflows 32 bits");
}

// One stage's buffers and clock while it walks its steps. Four buffers, so
// that an exchange never sends from the buffer it receives into: forward
// reads input_ and writes output_; backward reads grad_output_ and writes
// grad_input_; a step sends the previous op's output while it receives the
// next op's input.
class StageRunner {
 public:
  StageRunner(int stage, int pp, const StageLinks& links, const StageWork& work, std::uint32_t tag_base)
      : stage_(stage),
        links_(links),
        work_(work),
        tag_base_(tag_base),
        input_(stage > 0 ? work.in_elems : 0),
        grad_input_(input_.size()),
        output_(stage < pp - 1 ? work.out_elems : 0),
        grad_output_(output_.size()) {}

  StageTiming run(const std::vector<StageStep>& steps) {
    timing_.start = now_seconds();
    for (std::size_t k = 0; k < steps.size(); ++k) {
      exchange(steps[k], k);
      if (steps[k].op) compute(*steps[k].op);
    }
    timing_.finish = now_seconds();
    return std::move(timing_);
  }

 private:
  // This stage's buffer for a message it sends or receives.
  std::vector<float>& buffer_of(const StageMessage& message) {
    const bool activation = message.kind == MessageKind::kActivation;
    if (message.to == stage_) return activation ? input_ : grad_output_;
    return activation ? output_ : grad_input_;
  }

  // The peers of a message: the ranks a send goes to, the one a receive
  // comes from.
  std::vector<int> peers(const StageMessage& message) const {
    const bool activation = message.kind == MessageKind::kActivation;
    if (message.from == stage_) return activation ? links_.activation_to : links_.gradient_to;
    return {activation ? links_.activation_from : links_.gradient_from};
  }

  // Both messages of a step are posted before either is waited on (the
  // header's "Deadlock"); each wait keeps the group's deadline.
  void exchange(const StageStep& step, std::size_t index) {
    std::vector<comm::P2POp> ops;
    if (step.send)
      for (int peer : peers(*step.send))
        ops.push_back(comm::P2POp::send(buffer_of(*step.send), peer, message_tag(tag_base_, *step.send)));
    if (step.recv)
      for (int peer : peers(*step.recv))
        ops.push_back(comm::P2POp::recv(buffer_of(*step.recv), peer, message_tag(tag_base_, *step.recv)));
    if (ops.empty()) return;
    try {
      links_.group->exchange(ops);
    } catch (const comm::CommError& e) {
      comm::CommErrorInfo info = e.info();
      info.detail = where(step, index) + ": " + info.detail;
      throw comm::CommError(std::move(info));
    }
  }

  // "pipeline stage 1, step 3 (before its backward of micro-batch 0), sending
  // micro-batch 1's activation from stage 1 to stage 2 (group rank 2, tag 2)"
  std::string where(const StageStep& step, std::size_t index) const {
    std::string out = "pipeline stage " + std::to_string(stage_) + ", " + describe_step(step, index);
    const auto add = [&](const char* verb, const std::optional<StageMessage>& message) {
      if (!message) return;
      const std::vector<int> to = peers(*message);
      if (to.empty()) return;  // another rank of this stage sends it
      std::string ranks;
      for (int r : to) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      out += std::string(", ") + verb + " " + describe_message(*message) + " (group rank" + (to.size() > 1 ? "s " : " ") +
             ranks + ", tag " + std::to_string(message_tag(tag_base_, *message)) + ")";
    };
    add("sending", step.send);
    add("receiving", step.recv);
    return out;
  }

  // Runs the op and records its span. A stage that fails here leaves its
  // neighbours waiting on messages that will not come: abort the group so
  // they fail now rather than at their deadlines.
  void compute(PipelineOp op) {
    const double start = now_seconds();
    try {
      if (op.kind == Kind::kForward) work_.forward(op.microbatch, input_, output_);
      else work_.backward(op.microbatch, grad_output_, grad_input_);
    } catch (...) {
      if (links_.group != nullptr)
        links_.group->abort("pipeline stage " + std::to_string(stage_) + " failed in its " + describe(op));
      throw;
    }
    const double finish = now_seconds();
    timing_.spans.push_back({start, finish});
    timing_.busy += finish - start;
  }

  int stage_;
  const StageLinks& links_;
  const StageWork& work_;
  std::uint32_t tag_base_;
  std::vector<float> input_, grad_input_;    // in_elems each (none on stage 0)
  std::vector<float> output_, grad_output_;  // out_elems each (none on the last stage)
  StageTiming timing_;
};

// An order that cannot complete (a backward before its own forward; stages
// each waiting for an op the other runs later) is the simulator's
// PipelineDeadlock; any times will do to find it.
void check_order(const PipelineSchedule& schedule) {
  const std::vector<double> unit(static_cast<std::size_t>(schedule.pp()), 1.0);
  simulate_pipeline(schedule, StageTimes{unit, unit, 0.0});
}

}  // namespace

std::uint32_t message_tag(std::uint32_t tag_base, const StageMessage& message) {
  return tag_base + 2 * static_cast<std::uint32_t>(message.microbatch) + static_cast<std::uint32_t>(message.kind);
}

std::vector<std::vector<StageStep>> plan_pipeline(const PipelineSchedule& schedule) {
  check_schedule(schedule);
  std::vector<std::vector<StageStep>> plan;
  for (int s = 0; s < schedule.pp(); ++s)
    plan.push_back(plan_stage(schedule.stages[static_cast<std::size_t>(s)], s, schedule.pp()));
  return plan;
}

void check_exchanges(const std::vector<std::vector<StageStep>>& plan, const std::vector<RankLinks>& ranks) {
  ExchangeRun(plan, ranks).run();
}

void check_exchanges(const std::vector<std::vector<StageStep>>& plan) {
  const int pp = static_cast<int>(plan.size());
  std::vector<RankLinks> ranks;
  for (int s = 0; s < pp; ++s) {
    RankLinks r;
    r.stage = s;
    if (s > 0) {
      r.activation_from = s - 1;
      r.gradient_to = {s - 1};
    }
    if (s < pp - 1) {
      r.gradient_from = s + 1;
      r.activation_to = {s + 1};
    }
    ranks.push_back(std::move(r));
  }
  check_exchanges(plan, ranks);
}

StageLinks StageLinks::paired(comm::Group* group, int prev, int next) {
  StageLinks links;
  links.group = group;
  links.activation_from = prev;
  if (prev >= 0) links.gradient_to = {prev};
  links.gradient_from = next;
  if (next >= 0) links.activation_to = {next};
  return links;
}

StageTiming run_stage(const PipelineSchedule& schedule, int stage, const StageLinks& links,
                      const StageWork& work, std::uint32_t tag_base) {
  const std::vector<std::vector<StageStep>> plan = plan_pipeline(schedule);
  check_stage_args(schedule, stage, links, work, tag_base);
  check_order(schedule);
  check_exchanges(plan);
  return StageRunner(stage, schedule.pp(), links, work, tag_base).run(plan[static_cast<std::size_t>(stage)]);
}

PipelineRun measured_run(const PipelineSchedule& schedule, const std::vector<StageTiming>& timings) {
  const int pp = schedule.pp();
  if (timings.size() != static_cast<std::size_t>(pp))
    throw std::invalid_argument("measured pipeline: " + std::to_string(timings.size()) + " timings for " +
                                std::to_string(pp) + " stages");
  double origin = std::numeric_limits<double>::infinity(), end = -origin;
  for (int s = 0; s < pp; ++s) {
    const StageTiming& t = timings[static_cast<std::size_t>(s)];
    if (t.spans.size() != schedule.stages[static_cast<std::size_t>(s)].size())
      throw std::invalid_argument("measured pipeline: stage " + std::to_string(s) + " has " +
                                  std::to_string(t.spans.size()) + " op spans for " +
                                  std::to_string(schedule.stages[static_cast<std::size_t>(s)].size()) + " ops");
    origin = std::min(origin, t.start);
    end = std::max(end, t.finish);
  }
  PipelineRun run;
  run.makespan = end - origin;
  for (const StageTiming& t : timings) {
    std::vector<OpSpan> spans;
    for (const OpSpan& span : t.spans) spans.push_back({span.start - origin, span.finish - origin});
    run.spans.push_back(std::move(spans));
    run.busy.push_back(t.busy);
  }
  complete_run(schedule, run);
  return run;
}

}  // namespace ntp::train
