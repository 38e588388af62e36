// `ntp train` on node 0 or a single host: the short top-level sequence of a
// job (run_train_job), and the CLI's choice of run directory and demo. Each
// step it takes lives in a file named by its concern: preflight.cpp (checks
// of this host), multi_host.cpp (several hosts), worker_launch.cpp (the
// workers' launches), fallback_restart.cpp (restarts from a checkpoint),
// run_summary.cpp (what the run says and records); the worker process's side
// is run_train_worker in worker.cpp.
#include "elastic/train_job.h"

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <optional>

#include "elastic/fallback_restart.h"
#include "elastic/multi_host.h"
#include "elastic/preflight.h"
#include "elastic/run_summary.h"
#include "elastic/worker_launch.h"
#include "train/checkpoint.h"
#include "train/checkpoint_saver.h"
#include "train/dataset.h"
#include "train/model_setup.h"
#include "train/ntp_trainer.h"
#include "train/progress.h"
#include "train/run_dir.h"

namespace ntp::elastic {

std::vector<std::string> demo_overrides() {
  return {"parallel.tp=4", "parallel.dp=2", "parallel.failed={0=[2]}", "train.steps=30",
          "train.global_batch=16", "train.lr=1e-3", "train.warmup_steps=3"};
}

std::filesystem::path choose_run_dir(const train::Config& config, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (!config.run.dir.empty()) return config.run.dir;
  return train::create_new_run_dir();
}

TrainJobResult run_train_job(const train::Config& config, const std::filesystem::path& run_dir,
                             bool verify, std::FILE* out, const NodeOptions& node_in) {
  validate(node_in);
  NodeOptions node = node_in;
  const Host host = host_of(config, node);  // --nnodes that does not fit the replicas: before anything runs
  train::check_device(config.model);        // model.device = "cuda" on a host that cannot have it: exit 2
  check_power(config, host.place.ranks);
  check_ports(config, host.place.ranks, host.world);
  train::warn_if_oversubscribed(config.model, host.place.ranks);
  // --resume of a checkpoint inside a run directory continues that run.
  const bool resuming = !config.run.resume.empty();
  const bool continues = resuming && train::run_dir_of_checkpoint(config.run.resume) ==
                                         std::filesystem::absolute(run_dir).lexically_normal();
  if (resuming && !continues && verify) {
    throw train::ConfigError(fmt::format("--verify replays a run from its first step: resume from a checkpoint "
                                         "inside its run directory ({} is not)", config.run.resume));
  }
  // An empty folder counts as new (choose_run_dir makes the default one).
  const bool existed = std::filesystem::exists(run_dir) && !std::filesystem::is_empty(run_dir);
  const train::RunDir run = continues ? train::RunDir::open(run_dir) : train::RunDir::create(run_dir);
  // Held to the end: nobody else may train in this directory meanwhile.
  const train::RunLock lock(run_dir);
  std::optional<train::CheckedJob> checked;
  try {
    checked = train::check_job(config, run_dir, node.nnodes);
  } catch (const std::exception&) {  // ConfigError, CheckpointError
    // A new run gives its claim back; a continued run's files are its history.
    if (!continues && !existed) std::filesystem::remove_all(run_dir);  // nothing ran: leave nothing behind
    if (!continues && existed) std::filesystem::remove(run.file("events.jsonl"));
    throw;
  }
  if (resuming) prepare_restart(run, config.run.resume);
  run.write_config(train::to_toml(config));
  train::record_job_data(run_dir, checked->data);  // before any worker reads the data
  run.event("run_started", {{"job", describe_job(config)}, {"ranks", checked->plan.world_size()}});
  std::fprintf(out, "ntp train: %s\nrun directory: %s\n", describe_job(config).c_str(),
               run_dir.string().c_str());
  if (node.multi_host()) start_hosts(config, run, node, out);
  const double start = train::unix_time_s();
  // A live line on a terminal, plain lines in logs and pipes.
  train::Progress progress(out, config.train.steps, ::isatty(::fileno(out)) == 1);
  const auto show = [&](const train::StepMetrics& m) {
    progress.update(m, train::unix_time_s() - start);
  };
  std::vector<train::StepMetrics> metrics;
  try {
    metrics = checked->plan.world_size() == 1 ? train_in_process(config, run_dir, show)
                                                            : train_with_workers(config, run, node, out, show);
  } catch (const std::exception& e) {
    progress.finish();
    if (!std::filesystem::exists(run_dir / "config.toml")) {
      // Every later error (the store, events.jsonl) follows from this one.
      throw std::runtime_error(fmt::format("the run directory {} was removed while the job ran, and the job stopped "
                                           "({})", run_dir.string(), e.what()));
    }
    // A host cut off from the job, or one that lost the store after another
    // host finished the run, leaves the run's record to the hosts that went on.
    const bool elsewhere = dynamic_cast<const HostCutOff*>(&e) != nullptr ||
                           (node.multi_host() && first_event(run, "run_finished", start));
    if (!elsewhere) record_failure(config, run, e.what(), out);
    throw;
  }
  progress.finish();
  if (const std::optional<nlohmann::json> stopped = first_event(run, "run_interrupted", start)) {
    const std::int64_t steps = stopped->value("steps_done", std::int64_t{0});
    const Interruption left = interruption(run_dir, steps);
    run.write_summary({{"status", "interrupted"},
                       {"steps_done", steps},
                       {"checkpoint", left.checkpoint ? nlohmann::json(left.checkpoint->string()) : nlohmann::json()},
                       {"job", describe_job(config)}});
    throw RunInterrupted(left.message);
  }
  // Ctrl-C during the replay: the run itself is done and recorded; say so
  // (exit 130) instead of dying mid-replay without a word. Caught from
  // before the summary: one that came right after run_finished was logged
  // killed the process before the summary was printed.
  std::optional<train::StopRequest> stop;
  if (verify) stop.emplace();
  TrainJobResult result{run_dir, finish_run(config, run, metrics, start, out), {}};
  if (verify) {
    try {
      result.verify = train::verify_run(run_dir, {}, [] { return train::StopRequest::signal() != 0; });
    } catch (const train::VerifyInterrupted& e) {
      throw RunInterrupted(fmt::format("--verify interrupted ({}); the run itself finished and is recorded in {}; "
                                       "check it with: ntp verify {}",
                                       e.what(), run_dir.string(), run_dir.string()));
    }
    run.event("verify", result.verify->to_json());
    try {
      train::write_verify_json(run_dir, *result.verify);
    } catch (const std::exception& e) {
      spdlog::warn("ntp train: {}", e.what());  // the verdict is still printed and in events.jsonl
    }
  }
  return result;
}

}  // namespace ntp::elastic
