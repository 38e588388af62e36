#pragma once
// Per-step metrics of a run (one line of metrics.jsonl), the run summary, and
// the progress line. Pure: formatting and arithmetic only; the writers are in
// run_dir.h and progress.h. Field meanings: docs/train.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ntp::train {

// The power plan of one replica in force during a step (power.mode != off).
struct ReplicaPower {
  double limit_w = 0.0;  // planned per-GPU limit of its domain (0: sits out)
  double speedup = 0.0;  // modelled per-GPU speed relative to TDP
  bool operator==(const ReplicaPower&) const = default;
};

struct StepMetrics {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double loss = 0.0;       // mean loss per token over the global batch
  double lr = 0.0;         // learning rate used by this step's update
  double grad_norm = 0.0;  // global gradient norm before clipping
  std::int64_t tokens = 0;                 // tokens trained this step (whole job)
  std::vector<std::int64_t> samples;       // sequences per replica
  std::vector<std::int64_t> tp;            // active slots per replica
  double step_time_s = 0.0;                // the job's wall time of the step (StepClock)
  double exposed_sync_s = 0.0;             // wait on communication backward did not hide (last backward's rank)
  double sync_wait_max_s = 0.0;            // the longest wait of any rank: exposed sync plus skew between ranks
  std::int64_t reshard_bytes = 0;          // pre-sync + post-sync bytes, whole job
  std::int64_t allreduce_bytes = 0;        // DP all-reduce payload, whole job
  std::vector<ReplicaPower> power;         // per replica; empty when power.mode = off
  bool skipped = false;                    // non-finite loss or norm: no update (train.on_nan = "skip")
  std::optional<double> val_loss;          // mean validation loss after this step's update (train.eval_every)
  double time = 0.0;                       // Unix time the step was logged (0: not recorded)
  bool operator==(const StepMetrics&) const = default;
};

// The job's step time from the step commits. The commit is one collective
// over every training rank, so it completes on all of them when the slowest
// arrives: the interval between two consecutive commits on any rank is the
// slowest rank's whole step, its previous update included, with no extra
// collective. Time between steps that is not training (validation,
// checkpoint saves) is taken off; an interval that spans a new epoch (a
// recovery or a rejoin) or a gap in the steps has no step time.
class StepClock {
 public:
  // Step `step` of `epoch` committed at `now` (seconds): the seconds since
  // the previous commit less the off-clock time in between, or nullopt when
  // the previous commit was not step - 1 of the same epoch.
  std::optional<double> commit(std::int64_t step, std::uint64_t epoch, double now);
  // Seconds spent since the last commit on something that is not a step.
  void off_clock(double seconds) { off_s_ += seconds; }

 private:
  std::int64_t step_ = -1;
  std::uint64_t epoch_ = 0;
  double at_ = 0.0;
  double off_s_ = 0.0;
};

nlohmann::json to_json(const StepMetrics& m);
// Throws std::runtime_error naming the missing or mistyped field.
StepMetrics step_metrics_from_json(const nlohmann::json& j);

// The summary.json object of a run from its per-step metrics:
// steps, first/last/min loss, mean step time (step 0 excluded when there are
// more steps: it includes warm-up), tokens/s, total tokens, exposed sync as a
// fraction of step time, reshard and all-reduce bytes per step.
nlohmann::json summarize(const std::vector<StepMetrics>& steps, double wall_s);

// One progress line: "step 11 (12 of 20)  loss 3.2145  val 3.3012  4.1k tok/s  tp [3,4]  eta 0:42"
// (val when the step has a validation loss). Steps count from 0 everywhere.
std::string progress_line(const StepMetrics& m, std::int64_t total_steps, double elapsed_s);

// "0:42", "12:05", "1:02:03".
std::string format_duration(double seconds);

}  // namespace ntp::train
