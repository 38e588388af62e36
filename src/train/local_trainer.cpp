#include "train/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "model/model_file.h"
#include "train/checkpoint_saver.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/lr_schedule.h"
#include "train/power_setup.h"
#include "train/run_dir.h"
#include "train/schedule.h"

namespace ntp::train {
namespace {

// Records [start, now) as a span when a recorder is given.
void span(TraceRecorder* trace, const char* name, double start, std::int64_t step) {
  if (trace != nullptr) trace->add({name, Track::kCompute, start, unix_time_s() - start, step});
}

// The kernels' context of a trainer alone on its host. The --verify replay is
// the CPU reference a GPU run is checked against: it runs on the host's cores
// whatever model.device says (so it also needs no GPU to check a cuda run).
tensor::ThreadSetup context_setup(const ModelConfig& keys, TrainerRole role) {
  tensor::ThreadSetup setup = thread_setup(keys, 1);
  if (role == TrainerRole::kReference) setup.cuda = false;
  return setup;
}

}  // namespace

LocalTrainer::LocalTrainer(const Config& config, const std::filesystem::path& run_dir, TrainerRole role)
    : config_(config),
      input_(read_job_input(config, run_dir)),
      plan_(JobPlan::build(config, input_.shape())),
      ctx_(std::make_unique<tensor::Context>(context_setup(config.model, role))) {
  check_job_data(run_dir, input_.identity.train);  // the data the job started on
  tensor::set_huge_pages(config.model.huge_pages);
  const model::Shard full = model::Shard::full(setup().gpt);
  model_ = std::make_unique<model::Model>(setup().gpt, full, *ctx_);
  const double init_start = unix_time_s();
  init_model(config.model, static_cast<std::uint64_t>(config.train.seed), *model_);
  init_s_ = unix_time_s() - init_start;
  optimizer_ = std::make_unique<model::AdamW>(adamw_config(config.train), model_->layout());
}

LocalTrainer::~LocalTrainer() = default;

StepMetrics LocalTrainer::step(std::int64_t step,
                               const std::vector<std::vector<std::int64_t>>& samples,
                               TraceRecorder* trace, StepUpdate update) {
  const double start = unix_time_s();
  const std::int64_t T = setup().seq_len;
  std::vector<std::int64_t> all;
  StepMetrics m;
  m.step = step;
  for (const auto& replica : samples) {
    all.insert(all.end(), replica.begin(), replica.end());
    m.samples.push_back(static_cast<std::int64_t>(replica.size()));
  }
  m.tokens = static_cast<std::int64_t>(all.size()) * T;
  model_->zero_grad();
  model_->set_loss_scale(1.0f / static_cast<float>(m.tokens));
  double loss_sum = 0;
  std::size_t next = 0;
  // The one-process reference keeps micro-batches of train.micro_batch:
  // parallel.microbatches cuts each replica's share, and the whole batch cut
  // that way would be dp times larger micro-batches than any rank ran (the
  // sum is the same up to float order).
  for (std::int64_t micro : micro_batches(static_cast<std::int64_t>(all.size()), config_.train.micro_batch)) {
    inputs_.resize(static_cast<std::size_t>(micro * T));
    targets_.resize(inputs_.size());
    for (std::int64_t i = 0; i < micro; ++i, ++next) {
      input_.data.sample(all[next], T, inputs_.data() + i * T, targets_.data() + i * T);
    }
    double t0 = unix_time_s();
    const model::LossStats loss =
        model_->forward({inputs_.data(), targets_.data(), micro, T});
    span(trace, "forward", t0, step);
    t0 = unix_time_s();
    model_->backward();
    span(trace, "backward", t0, step);
    loss_sum += loss.sum;
  }
  const double t0 = unix_time_s();
  m.lr = learning_rate(config_.train, step);
  if (update == StepUpdate::kApply) {
    if (before_update_) before_update_(step);
    m.grad_norm = optimizer_->step(*model_, static_cast<float>(m.lr)).grad_norm;
  } else {
    m.grad_norm = model::AdamW::grad_norm(*model_);
  }
  span(trace, "optimizer", t0, step);
  m.loss = loss_sum / static_cast<double>(m.tokens);
  m.step_time_s = unix_time_s() - start;
  return m;
}

void LocalTrainer::load_checkpoint(const Checkpoint& checkpoint) {
  checkpoint.check_model(setup().gpt);
  checkpoint.load(model_->layout(), model_->params(), optimizer_->m().span(), optimizer_->v().span());
  optimizer_->set_steps(checkpoint.info().optimizer_steps);
}

CheckpointPart LocalTrainer::snapshot(std::vector<float> reuse, bool copy) const {
  // Read only, from the saver's thread too: the const params() (the other
  // marks the weights changed and takes their bf16 copy off the Context).
  const model::Model& model = *model_;
  if (!copy) return part_view(model.layout(), model.params(), optimizer_->m().span(), optimizer_->v().span(), true);
  return snapshot_part(model.layout(), model.params(), optimizer_->m().span(), optimizer_->v().span(), true,
                       std::move(reuse));
}

double LocalTrainer::validation_loss(const model::TokenData& val) {
  const std::vector<std::int64_t> ids = eval_samples(val, setup().seq_len, config_.train);
  const double sum = forward_loss_sum(*model_, val, ids, setup().seq_len, config_.train.micro_batch);
  return sum / static_cast<double>(static_cast<std::int64_t>(ids.size()) * setup().seq_len);
}

namespace {

// Saves the state after `steps_done` steps: the one rank writes the one part,
// a copy unless it is the `last` save (the run ends: nothing changes the state).
void save_checkpoint(const Config& config, const LocalTrainer& trainer, CheckpointSaver& saver,
                     std::int64_t steps_done, bool last) {
  const double start = unix_time_s();
  saver.wait();
  SaveJob job;
  job.wait_s = unix_time_s() - start;
  job.info = checkpoint_info(config, trainer.setup().gpt, trainer.setup().seq_len, trainer.data_identity(), steps_done,
                             trainer.optimizer_steps(), config.parallel, 0);
  job.copy = [&trainer, last](std::vector<float> reuse) { return trainer.snapshot(std::move(reuse), !last); };
  job.assemble = true;
  job.writers = {0};
  job.config_toml = checkpoint_config_toml(config, config.parallel);
  saver.save(std::move(job));
}

// The run's steps, with the power plan of its one configuration in force.
std::vector<StepMetrics> run_steps(const Config& config, const RunDir& run, RankPowerRun& power,
                                   const std::function<void(const StepMetrics&)>& on_step) {
  const double run_start = unix_time_s();
  LocalTrainer trainer(config, run.path(), TrainerRole::kRun);
  const std::vector<std::int64_t> shares =
      power.configure(config.parallel, config.train.global_batch, trainer.setup());
  std::int64_t first = 0;
  if (!config.run.resume.empty()) {
    const Checkpoint checkpoint = Checkpoint::open(config.run.resume);
    trainer.load_checkpoint(checkpoint);
    first = checkpoint.info().step;
    run.event("checkpoint_loaded", {{"rank", 0}, {"path", config.run.resume}, {"step", first},
                                    {"seconds", unix_time_s() - run_start}});
  }
  CheckpointSaver saver(config, run);
  // A save copies the state in the background while the next step computes;
  // that step's update waits for the copy.
  trainer.set_before_update([&saver, &run](std::int64_t step) {
    const double blocked = saver.wait_for_copy();
    if (blocked > 1e-3) run.event("checkpoint_copy_waited", {{"rank", 0}, {"step", step}, {"seconds", blocked}});
  });
  const StopRequest stop;
  const std::optional<model::TokenData>& val = trainer.val();
  run.event("model_ready", {{"model", model::to_string(trainer.setup().gpt)},
                            {"parameters", model::parameter_count(trainer.setup().gpt)},
                            {"seq_len", trainer.setup().seq_len},
                            {"data_tokens", trainer.data().size()},
                            {"threads", trainer.describe_threads()},
                            {"init_s", trainer.init_seconds()}});
  const SampleSchedule schedule = trainer.plan().schedule();
  const BatchSplitInput split = trainer.plan().split();
  const std::int64_t first_traced = config.train.steps > 1 ? 1 : 0;
  TraceRecorder trace(0, "rank 0: replica 0 slot 0", run_start);
  std::vector<StepMetrics> metrics;
  for (std::int64_t s = first; s < config.train.steps; ++s) {
    const auto samples = assign_samples(schedule.step_samples(s), shares);
    run.append_schedule(s, schedule.epoch_of(s), samples);
    const bool traced = s >= first_traced && s < first_traced + config.run.trace_steps;
    StepMetrics m = trainer.step(s, samples, traced ? &trace : nullptr);
    m.epoch = schedule.epoch_of(s);
    m.tp = split.active;
    m.power = power.metrics();
    if (val && eval_due(config.train, s)) m.val_loss = trainer.validation_loss(*val);
    m.time = unix_time_s();
    run.append_metrics(m);
    metrics.push_back(m);
    if (on_step) on_step(m);
    const bool last = s + 1 == config.train.steps;
    if (StopRequest::signal() != 0 || last) {
      save_checkpoint(config, trainer, saver, s + 1, true);
    } else if (saver.step_due(s + 1) || saver.time_due()) {
      if (saver.busy()) saver.skip(s + 1, 0);  // a slow disk does not stall training
      else save_checkpoint(config, trainer, saver, s + 1, false);
    }
    if (StopRequest::signal() != 0 && !last) {
      saver.wait();
      run.event("run_interrupted", {{"rank", 0}, {"steps_done", s + 1}});
      return metrics;
    }
  }
  saver.wait();
  model::write_model_file(run.file("model.bin").string(), trainer.setup().gpt, trainer.params());
  if (config.run.trace_steps > 0) {
    trace.write(run.path() / "trace" / "rank-0.json");
    merge_traces(run.path() / "trace", run.file("trace.json"));
  }
  return metrics;
}

}  // namespace

std::vector<StepMetrics> train_local(const Config& config, const std::filesystem::path& run_dir,
                                     const std::function<void(const StepMetrics&)>& on_step,
                                     const std::string& gpu) {
  const RunDir run = RunDir::open(run_dir);
  RankPowerRun power(config, run, PowerRank{}, gpu);
  try {
    std::vector<StepMetrics> metrics = run_steps(config, run, power, on_step);
    power.restore("exit");
    return metrics;
  } catch (...) {
    power.restore("error");
    throw;
  }
}

}  // namespace ntp::train
