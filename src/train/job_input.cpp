#include "train/job_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/model.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/schedule.h"

namespace ntp::train {

JobShape JobInput::shape() const { return {setup.gpt, setup.seq_len, samples_in(data.size(), setup.seq_len)}; }

JobInput read_job_input(const Config& config, const std::filesystem::path& run_dir) {
  model::TokenData data = open_dataset(config.data, run_dir);
  ModelSetup setup = resolve_model(config.model, data.max_token());
  std::optional<model::TokenData> val = open_val_dataset(config.data);
  if (val) check_val_data(*val, setup.seq_len, setup.gpt.vocab);
  JobData identity = job_data_of(config.data, data, val);
  return {std::move(data), std::move(val), std::move(setup), std::move(identity)};
}

namespace {

// The checkpoint of run.resume fits the configured model and schedule.
void check_resume(const Config& config, const ModelSetup& setup, const DataIdentity& data) {
  const Checkpoint checkpoint = Checkpoint::open(config.run.resume);
  checkpoint.check_model(setup.gpt);
  const CheckpointInfo& info = checkpoint.info();
  const auto differs = [&](const char* key, const std::string& saved, const std::string& now) {
    if (saved != now) {
      throw CheckpointError(fmt::format("{}: saved with {} = {}, the run has {}", checkpoint.dir().string(), key,
                                        saved, now));
    }
  };
  differs("seq_len", std::to_string(info.seq_len), std::to_string(setup.seq_len));
  differs("train.seed", std::to_string(info.seed), std::to_string(config.train.seed));
  differs("data.order", info.order, to_string(config.data.order));
  differs("train.global_batch", std::to_string(info.global_batch), std::to_string(config.train.global_batch));
  // The schedule's position is a step over these tokens (data.path cannot
  // change on a resume; its contents can).
  if (info.data && !info.data->same_tokens(data)) {
    throw CheckpointError(fmt::format(
        "{}: saved over {} ({}), but data.path now holds {}: the file changed since, and the run would go on over "
        "other samples; put back the data the run trained on",
        checkpoint.dir().string(), info.data->file(), info.data->describe(), data.describe()));
  }
  if (info.step > config.train.steps) {
    throw CheckpointError(fmt::format("{}: holds {} steps, more than train.steps = {}", checkpoint.dir().string(),
                                      info.step, config.train.steps));
  }
}

// What a pipeline run (parallel.pp > 1) does not do yet, refused before
// anything starts: each names its key and the way out (docs/pipeline.md).
void check_pipeline(const Config& config, const JobPlan& plan) {
  if (plan.pp() == 1) return;
  std::vector<std::string> stages;
  for (const model::StageRange& stage : plan.stages()) stages.push_back(model::to_string(stage));
  const auto refuse = [&](const std::string& what) {
    throw ConfigError(fmt::format("parallel.pp = {} (the {} blocks in stages of {}): {}", plan.pp(),
                                  plan.gpt().layers, fmt::join(stages, ", "), what));
  };
  if (config.elastic.relayout) refuse("elastic.relayout: per-stage speeds are not built yet; set it false");
  if (config.power.mode != power::PowerMode::off && config.power.need == NeedSource::kMeasured) {
    refuse("power.need = \"measured\": measured needs per stage are not built yet; set \"modelled\"");
  }
  if (config.model.device != tensor::Device::kCpu) refuse("model.device: pipeline stages run on the CPU only; set \"cpu\"");
  // Each stage keeps up to pp micro-batches' activations in flight, one slot each.
  if (plan.pp() > model::Model::kMaxSlots) {
    refuse(fmt::format("parallel.pp: at most {} stages (activation slots per model)", model::Model::kMaxSlots));
  }
}

}  // namespace

CheckedJob check_job(const Config& config, const std::filesystem::path& run_dir, int nnodes) {
  const JobInput input = read_job_input(config, run_dir);
  JobPlan plan = JobPlan::build(config, input.shape(), nnodes);
  check_pipeline(config, plan);
  if (!config.run.resume.empty()) check_resume(config, input.setup, input.identity.train);
  return {input.identity, std::move(plan)};
}


}  // namespace ntp::train
