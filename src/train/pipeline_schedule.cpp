#include "train/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "layout/errors.h"

namespace ntp::train {

namespace {

using Kind = PipelineOp::Kind;

std::string describe(PipelineOp op) {
  return std::string(op.kind == Kind::kForward ? "forward" : "backward") + " of micro-batch " +
         std::to_string(op.microbatch);
}

std::string at_stage(int stage) {
  return "pipeline schedule: stage " + std::to_string(stage);
}

// How many times each of a stage's ops appears: [kind][microbatch].
using OpCounts = std::vector<std::vector<int>>;

OpCounts count_ops(const PipelineSchedule& schedule, int stage) {
  const int m = schedule.microbatches;
  OpCounts counts(2, std::vector<int>(static_cast<size_t>(m), 0));
  for (const PipelineOp& op : schedule.stages[static_cast<size_t>(stage)]) {
    if (op.microbatch < 0 || op.microbatch >= m)
      throw std::invalid_argument(at_stage(stage) + " runs the " + describe(op) + ", outside [0, " +
                                  std::to_string(m) + ")");
    ++counts[static_cast<size_t>(op.kind)][static_cast<size_t>(op.microbatch)];
  }
  return counts;
}

void require_each_once(const OpCounts& counts, int stage) {
  for (const Kind kind : {Kind::kForward, Kind::kBackward})
    for (size_t i = 0; i < counts[0].size(); ++i) {
      const int n = counts[static_cast<size_t>(kind)][i];
      if (n != 1)
        throw std::invalid_argument(at_stage(stage) + " runs the " +
                                    describe({kind, static_cast<int>(i)}) + " " +
                                    std::to_string(n) + " times, not once");
    }
}

void check_times(const StageTimes& times, int pp) {
  const auto require = [](double t, const std::string& field) {
    if (!std::isfinite(t) || t < 0)
      throw std::invalid_argument("stage times: " + field + " must be >= 0 and finite, got " +
                                  std::to_string(t));
  };
  for (const auto* per_stage : {&times.forward, &times.backward})
    if (per_stage->size() != static_cast<size_t>(pp))
      throw std::invalid_argument("stage times: " + std::to_string(per_stage->size()) +
                                  " forward or backward times for " + std::to_string(pp) +
                                  " stages");
  for (int s = 0; s < pp; ++s) {
    require(times.forward[static_cast<size_t>(s)], "forward[" + std::to_string(s) + "]");
    require(times.backward[static_cast<size_t>(s)], "backward[" + std::to_string(s) + "]");
  }
  require(times.p2p, "p2p");
}

// An op another op waits for, and the hand-off between them (0 on one stage).
struct Dependency {
  int stage;
  PipelineOp op;
  double handoff;
};

// pipeline_schedule.h, "Dependencies between ops".
std::vector<Dependency> dependencies(int stage, PipelineOp op, int pp, double p2p) {
  const int i = op.microbatch;
  if (op.kind == Kind::kForward) {
    if (stage == 0) return {};
    return {{stage - 1, {Kind::kForward, i}, p2p}};
  }
  std::vector<Dependency> deps{{stage, {Kind::kForward, i}, 0.0}};
  if (stage < pp - 1) deps.push_back({stage + 1, {Kind::kBackward, i}, p2p});
  return deps;
}

// Runs ops as their dependencies finish. Each pass lets every stage run all
// the ops it can; a pass in which no stage can run one, with ops left, is a
// deadlock: nothing that could still finish is left to wait for.
class Simulation {
 public:
  Simulation(const PipelineSchedule& schedule, const StageTimes& times)
      : schedule_(schedule),
        times_(times),
        pp_(schedule.pp()),
        finished_(static_cast<size_t>(pp_), unfinished(schedule.microbatches)),
        next_(static_cast<size_t>(pp_), 0),
        free_at_(static_cast<size_t>(pp_), 0.0),
        spans_(static_cast<size_t>(pp_)) {}

  std::vector<std::vector<OpSpan>> run() {
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (int s = 0; s < pp_; ++s) progressed = advance(s) || progressed;
    }
    if (!all_done()) throw PipelineDeadlock(stuck());
    return std::move(spans_);
  }

 private:
  const std::vector<PipelineOp>& ops(int stage) const {
    return schedule_.stages[static_cast<size_t>(stage)];
  }
  // When each of a stage's ops finished, [kind][micro-batch]; nullopt until it ran.
  using Finishes = std::array<std::vector<std::optional<double>>, 2>;
  static Finishes unfinished(int microbatches) {
    const std::vector<std::optional<double>> none(static_cast<size_t>(microbatches));
    return {none, none};
  }

  std::optional<double>& finish_of(int stage, PipelineOp op) {
    return finished_[static_cast<size_t>(stage)][static_cast<size_t>(op.kind)]
                    [static_cast<size_t>(op.microbatch)];
  }
  double duration(int stage, PipelineOp op) const {
    const auto& per_stage = op.kind == Kind::kForward ? times_.forward : times_.backward;
    return per_stage[static_cast<size_t>(stage)];
  }

  // The earliest start the dependencies allow; nullopt while one has not run.
  std::optional<double> ready_at(int stage, PipelineOp op) {
    double ready = 0;
    for (const Dependency& d : dependencies(stage, op, pp_, times_.p2p)) {
      const std::optional<double> done = finish_of(d.stage, d.op);
      if (!done) return std::nullopt;
      ready = std::max(ready, *done + d.handoff);
    }
    return ready;
  }

  // Runs the stage's next ops while they are ready; true when one ran.
  bool advance(int stage) {
    size_t& next = next_[static_cast<size_t>(stage)];
    const size_t before = next;
    for (; next < ops(stage).size(); ++next) {
      const PipelineOp op = ops(stage)[next];
      const std::optional<double> ready = ready_at(stage, op);
      if (!ready) break;
      double& free_at = free_at_[static_cast<size_t>(stage)];
      const double start = std::max(free_at, *ready);
      const OpSpan span{start, start + duration(stage, op)};
      spans_[static_cast<size_t>(stage)].push_back(span);
      finish_of(stage, op) = span.finish;
      free_at = span.finish;
    }
    return next != before;
  }

  bool all_done() const {
    for (int s = 0; s < pp_; ++s)
      if (next_[static_cast<size_t>(s)] < ops(s).size()) return false;
    return true;
  }

  // "stage 0 waits at its backward of micro-batch 0 for stage 1's backward of
  // micro-batch 0; ...": every stuck stage and the first op it waits for.
  std::string stuck() {
    std::string out = "pipeline schedule deadlocks:";
    for (int s = 0; s < pp_; ++s) {
      const size_t next = next_[static_cast<size_t>(s)];
      if (next == ops(s).size()) continue;
      const PipelineOp op = ops(s)[next];
      for (const Dependency& d : dependencies(s, op, pp_, times_.p2p))
        if (!finish_of(d.stage, d.op)) {
          out += " stage " + std::to_string(s) + " waits at its " + describe(op) + " (op " +
                 std::to_string(next) + ") for stage " + std::to_string(d.stage) + "'s " +
                 describe(d.op) + ";";
          break;
        }
    }
    out.pop_back();
    return out;
  }

  const PipelineSchedule& schedule_;
  const StageTimes& times_;
  int pp_;
  std::vector<Finishes> finished_;  // per stage
  std::vector<size_t> next_;        // per stage: its next op
  std::vector<double> free_at_;     // per stage: when its last op finished
  std::vector<std::vector<OpSpan>> spans_;
};

PipelineRun summarize(const PipelineSchedule& schedule, std::vector<std::vector<OpSpan>> spans) {
  PipelineRun run;
  for (int s = 0; s < schedule.pp(); ++s) {
    double busy = 0;
    for (const OpSpan& span : spans[static_cast<size_t>(s)]) {
      busy += span.finish - span.start;
      run.makespan = std::max(run.makespan, span.finish);
    }
    run.busy.push_back(busy);
  }
  run.spans = std::move(spans);
  complete_run(schedule, run);
  return run;
}

}  // namespace

PipelineSchedule one_f_one_b(int pp, int microbatches) {
  layout::require_positive(pp, "parallel.pp");
  layout::require_positive(microbatches, "parallel.microbatches");
  PipelineSchedule schedule{microbatches,
                            std::vector<std::vector<PipelineOp>>(static_cast<size_t>(pp))};
  for (int s = 0; s < pp; ++s) {
    std::vector<PipelineOp>& ops = schedule.stages[static_cast<size_t>(s)];
    // Warm-up: enough forwards that the first backward can come back to this
    // stage while it is busy with the next forward.
    const int warmup = std::min(pp - s - 1, microbatches);
    int forwards = 0, backwards = 0;
    while (forwards < warmup) ops.push_back({Kind::kForward, forwards++});
    while (forwards < microbatches) {  // steady state: one forward, one backward
      ops.push_back({Kind::kForward, forwards++});
      ops.push_back({Kind::kBackward, backwards++});
    }
    while (backwards < microbatches) ops.push_back({Kind::kBackward, backwards++});  // cool-down
  }
  return schedule;
}

void check_schedule(const PipelineSchedule& schedule) {
  layout::require_positive(schedule.pp(), "pipeline schedule: stages");
  layout::require_positive(schedule.microbatches, "pipeline schedule: microbatches");
  for (int s = 0; s < schedule.pp(); ++s) require_each_once(count_ops(schedule, s), s);
}

PipelineRun simulate_pipeline(const PipelineSchedule& schedule, const StageTimes& times) {
  check_schedule(schedule);
  check_times(times, schedule.pp());
  return summarize(schedule, Simulation(schedule, times).run());
}

void complete_run(const PipelineSchedule& schedule, PipelineRun& run) {
  run.idle.clear();
  for (const double busy : run.busy) run.idle.push_back(run.makespan - busy);
  run.peak_in_flight.clear();
  for (const auto& ops : schedule.stages) run.peak_in_flight.push_back(peak_in_flight(ops));
  const double busiest = run.busy.empty() ? 0.0 : *std::max_element(run.busy.begin(), run.busy.end());
  run.bubble_fraction = run.makespan > 0 ? (run.makespan - busiest) / run.makespan : 0.0;
}

int peak_in_flight(const std::vector<PipelineOp>& ops) {
  int held = 0, peak = 0;
  for (const PipelineOp& op : ops) {
    held += op.kind == PipelineOp::Kind::kForward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

}  // namespace ntp::train
