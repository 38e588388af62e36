#include "train/verify.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/llmc_checkpoint.h"
#include "model/parameters.h"
#include "train/local_trainer.h"
#include "train/run_dir.h"

namespace ntp::train {
namespace {

// max over tensors of ||a - b|| / ||b|| (L2). Per tensor, so a small tensor
// is not drowned by a large one; a norm rather than an element maximum,
// because AdamW turns the rounding noise of gradients that cancel to nearly
// zero (e.g. the key biases, whose exact gradient is 0) into updates of
// order lr / 100 per step, in any two runs that sum in different orders. On
// the tiny model the qkv biases then differ by ~1e-4 (relative) after a few
// steps, every other tensor by ~1e-6; a mis-paired unit gives ~1e-1.
double max_tensor_rel_diff(const model::ParameterLayout& layout, std::span<const float> a,
                           std::span<const float> b) {
  double worst = 0;
  for (const model::TensorSpec& spec : layout.tensors()) {
    double diff = 0;
    double norm = 0;
    for (std::int64_t i = spec.offset; i < spec.offset + spec.count; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double d = static_cast<double>(a[k]) - static_cast<double>(b[k]);
      diff += d * d;
      norm += static_cast<double>(b[k]) * static_cast<double>(b[k]);
    }
    worst = std::max(worst, norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff));
  }
  return worst;
}

}  // namespace

nlohmann::json VerifyResult::to_json() const {
  return {{"verify", pass ? "pass" : "fail"},
          {"max_param_rel_diff", max_param_rel_diff},
          {"max_loss_abs_diff", max_loss_abs_diff},
          {"steps", steps}};
}

VerifyResult verify_run(const std::filesystem::path& run_dir, const VerifyTolerance& tolerance) {
  const RunDir run = RunDir::open(run_dir);
  Config config = load_config(run.file("config.toml").string(), {});
  const std::vector<StepMetrics> metrics = run.read_metrics();
  const std::vector<nlohmann::json> schedule = read_jsonl(run.file("schedule.jsonl"));
  if (schedule.size() != metrics.size()) {
    throw std::runtime_error(fmt::format("{}: {} steps in schedule.jsonl but {} in metrics.jsonl",
                                         run_dir.string(), schedule.size(), metrics.size()));
  }
  LocalTrainer reference(config, run_dir);
  VerifyResult result;
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    const auto samples = schedule[i].at("samples").get<std::vector<std::vector<std::int64_t>>>();
    const StepMetrics replay = reference.step(schedule[i].at("step").get<std::int64_t>(), samples);
    result.max_loss_abs_diff =
        std::max(result.max_loss_abs_diff, std::abs(replay.loss - metrics[i].loss));
    ++result.steps;
  }
  const model::LlmcCheckpoint trained = model::read_llmc_checkpoint(run.file("model.bin").string());
  const model::ParameterLayout full(reference.setup().gpt, model::Shard::full(reference.setup().gpt));
  if (trained.params.size() != reference.params().size()) {
    throw std::runtime_error(fmt::format("{}: model.bin does not match the run's model",
                                         run.file("model.bin").string()));
  }
  result.max_param_rel_diff = max_tensor_rel_diff(full, trained.params, reference.params());
  result.pass = result.max_param_rel_diff <= tolerance.param_rel &&
                result.max_loss_abs_diff <= tolerance.loss_abs;
  return result;
}

}  // namespace ntp::train
