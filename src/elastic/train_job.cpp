#include "elastic/train_job.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "train/local_trainer.h"
#include "train/progress.h"
#include "train/run_dir.h"

namespace ntp::elastic {
namespace {

std::string describe_job(const train::Config& c) {
  std::string failed;
  for (const auto& [replica, slots] : c.parallel.failed) {
    failed += fmt::format(" replica {} without slots [{}];", replica, fmt::join(slots, ","));
  }
  return fmt::format("model {}, dp {} x tp {},{} batch {} ({}), {} steps, data {}", c.model.preset,
                     c.parallel.dp, c.parallel.tp, failed.empty() ? " all healthy;" : failed,
                     c.train.global_batch, train::to_string(c.parallel.batch_policy), c.train.steps,
                     c.data.path.empty() ? "built-in corpus" : c.data.path);
}

void print_summary(std::FILE* out, const nlohmann::json& s) {
  if (s.value("steps", 0) == 0) return;
  std::fprintf(out,
               "done: %d steps, loss %.4f -> %.4f, %.0f tokens/s, %.3f s/step, exposed sync %.2f%% "
               "of step time\n",
               s["steps"].get<int>(), s["first_loss"].get<double>(), s["last_loss"].get<double>(),
               s["tokens_per_s"].get<double>(), s["mean_step_time_s"].get<double>(),
               100.0 * s["exposed_sync_fraction"].get<double>());
}

}  // namespace

std::filesystem::path choose_run_dir(const train::Config& config, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (!config.run.dir.empty()) return config.run.dir;
  return train::default_run_dir();
}

TrainJobResult run_train_job(const train::Config& config, const std::filesystem::path& run_dir,
                             bool verify, std::FILE* out) {
  if (config.parallel.tp * config.parallel.dp != 1) {
    throw UnsupportedRequest(fmt::format(
        "parallel.tp = {}, parallel.dp = {}: this build trains in one process only (tp = dp = 1); "
        "the multi-process NTP trainer is not built yet",
        config.parallel.tp, config.parallel.dp));
  }
  const train::RunDir run = train::RunDir::create(run_dir);
  run.write_config(train::to_toml(config));
  run.event("run_started", {{"job", describe_job(config)}, {"ranks", 1}});
  std::fprintf(out, "ntp train: %s\nrun directory: %s\n", describe_job(config).c_str(),
               run_dir.string().c_str());
  const double start = train::unix_time_s();
  // A live line on a terminal, plain lines in logs and pipes.
  train::Progress progress(out, config.train.steps, ::isatty(::fileno(out)) == 1);
  const std::vector<train::StepMetrics> metrics = train::train_local(
      config, run_dir,
      [&](const train::StepMetrics& m) { progress.update(m, train::unix_time_s() - start); });
  progress.finish();
  TrainJobResult result{run_dir, train::summarize(metrics, train::unix_time_s() - start), {}};
  result.summary["job"] = describe_job(config);
  run.event("run_finished", {{"steps", metrics.size()}});
  run.write_summary(result.summary);
  print_summary(out, result.summary);
  if (verify) {
    result.verify = train::verify_run(run_dir);
    run.event("verify", result.verify->to_json());
  }
  return result;
}

}  // namespace ntp::elastic
