#pragma once
// The single-process trainer (TP = 1, DP = 1): the whole model in one
// process. It is both the trainer of single-rank runs (llm.c-compatible with
// data.order = "sequential", model.init_from and llm.c's optimizer settings)
// and the reference that `--verify` replays a run's logged schedule on.
//
//   LocalTrainer trainer(config, run_dir, TrainerRole::kRun);
//   for (step ...) trainer.step(step, samples_per_replica);
//
// A step trains on every sample of the global batch, the samples of replica
// 0 first, then replica 1's, ..., in micro-batches of train.micro_batch; the
// loss of each token is scaled by 1 / (tokens of the global batch), so the
// update is the global mean gradient whatever the split.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>
#include <utility>

#include "model/model.h"
#include "model/optimizer.h"
#include "model/token_data.h"
#include "train/dataset.h"
#include "tensor/context.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/job_input.h"
#include "train/job_plan.h"
#include "train/metrics.h"
#include "train/model_setup.h"
#include "train/trace.h"

namespace ntp::train {

// What a step does with its gradients: apply them, or drop them (the run
// skipped the step's update, e.g. on a non-finite loss; --verify replays that).
enum class StepUpdate { kApply, kSkip };

// What a LocalTrainer is for: the trainer of a single-rank run (its kernels on
// model.device) or the reference that --verify replays (always on the CPU).
enum class TrainerRole { kRun, kReference };

class LocalTrainer {
 public:
  // Reads the data, plans the job and builds the model (from model.init_from
  // or random init). Throws ConfigError naming the key when the model does not
  // fit the data.
  LocalTrainer(const Config& config, const std::filesystem::path& run_dir, TrainerRole role);
  ~LocalTrainer();

  const ModelSetup& setup() const { return input_.setup; }
  const model::TokenData& data() const { return input_.data; }
  const std::optional<model::TokenData>& val() const { return input_.val; }
  const DataIdentity& data_identity() const { return input_.identity.train; }
  // The job this trainer runs (--verify: the run it replays) as planned.
  const JobPlan& plan() const { return plan_; }
  std::span<const float> params() const { return std::as_const(*model_).params(); }
  std::string describe_threads() const { return ctx_->describe(); }
  // Seconds the parameters' first values took (model.init_from's read, or the random init).
  double init_seconds() const { return init_s_; }

  // One optimizer step on `samples` (one list per replica). Fills loss, lr,
  // grad_norm, tokens, samples and step_time_s; spans go to `trace` if given.
  // With StepUpdate::kSkip the gradients are measured but not applied (the
  // parameters, the moments and AdamW's step count stay as they were).
  StepMetrics step(std::int64_t step, const std::vector<std::vector<std::int64_t>>& samples,
                   TraceRecorder* trace = nullptr, StepUpdate update = StepUpdate::kApply);

  // The whole training state (parameters, both moments, AdamW's step count)
  // from a checkpoint of any layout, and its host copy as one part (without
  // `copy`: a view of the state, part_view, for the save that ends the run).
  void load_checkpoint(const Checkpoint& checkpoint);
  CheckpointPart snapshot(std::vector<float> reuse = {}, bool copy = true) const;
  std::int64_t optimizer_steps() const { return optimizer_->steps(); }
  // Called in step() right before the optimizer changes the state (a
  // checkpoint copy in flight must end first).
  void set_before_update(std::function<void(std::int64_t step)> fn) { before_update_ = std::move(fn); }
  // The mean loss per token on the validation sequences of `val` (evaluate.h).
  double validation_loss(const model::TokenData& val);

 private:
  Config config_;
  JobInput input_;
  JobPlan plan_;
  std::unique_ptr<tensor::Context> ctx_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::AdamW> optimizer_;
  double init_s_ = 0;
  std::vector<std::int32_t> inputs_;
  std::vector<std::int32_t> targets_;
  std::function<void(std::int64_t)> before_update_;
};

// Runs a single-process training (parallel.tp = parallel.dp = 1) in the run
// directory: schedule.jsonl, metrics.jsonl, events, trace.json, model.bin
// (llm.c checkpoint of the final parameters), checkpoints; starts after the
// checkpoint in run.resume if set; calls on_step after each step. On SIGINT
// or SIGTERM it saves a checkpoint after the step in flight and returns early
// (a run_interrupted event says so).
// With power.mode != off the process's GPU (`gpu`: NVML index or UUID, for
// nvml) is planned and restored like a worker's (one healthy replica: its
// default limit). Returns the per-step metrics.
std::vector<StepMetrics> train_local(const Config& config, const std::filesystem::path& run_dir,
                                     const std::function<void(const StepMetrics&)>& on_step,
                                     const std::string& gpu = "0");

}  // namespace ntp::train
