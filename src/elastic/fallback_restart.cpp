// The fallback restart: when no survivor is left to recover in the job (or
// the units are lost), the workers start again from the newest intact
// checkpoint without the lost slots. Here are the checks of what a launch
// left (every step committed? why did it stop?), the run directory made
// ready to continue from a checkpoint (also for --resume), and the
// configuration of the restart; worker_launch.cpp decides when to use them.
#include "elastic/fallback_restart.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "elastic/train_job.h"
#include "train/checkpoint.h"
#include "train/job_input.h"
#include "train/ntp_trainer.h"
#include "train/schedule.h"

namespace ntp::elastic {

bool recovered(const LaunchResult& result, const train::RunDir& run, std::int64_t steps) {
  if (!std::filesystem::exists(run.file("metrics.jsonl"))) return false;
  const std::vector<train::StepMetrics> metrics = run.read_metrics();
  if (static_cast<std::int64_t>(metrics.size()) != steps) return false;
  for (std::int64_t s = 0; s < steps; ++s) {
    if (metrics[static_cast<std::size_t>(s)].step != s) return false;  // one row per step, in order
  }
  if (!std::filesystem::exists(run.file("model.bin"))) return false;
  return std::all_of(result.ranks.begin(), result.ranks.end(), [](const RankExit& r) { return r.ok() || r.lost(); });
}

std::optional<nlohmann::json> first_event(const train::RunDir& run, const std::string& name, double since) {
  try {
    for (const nlohmann::json& e : run.read_events()) {
      if (e.value("event", "") == name && e.value("time", 0.0) >= since) return e;
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string last_stop_reason(const train::RunDir& run, double since) {
  const std::optional<nlohmann::json> e = first_event(run, "run_stopped", since);
  return e ? e->value("reason", "") : "";
}

void prepare_restart(const train::RunDir& run, const std::filesystem::path& checkpoint_dir) {
  const train::Checkpoint checkpoint = train::Checkpoint::open(checkpoint_dir);
  const std::int64_t step = checkpoint.info().step;
  try {
    checkpoint.verify_checksums();
  } catch (const train::CheckpointError& e) {
    // A damaged byte shows only here: name where the run can go on from instead.
    std::optional<std::filesystem::path> older;
    for (const std::filesystem::path& c : train::complete_checkpoints(run.path() / "checkpoints")) {
      if (train::checkpoint_step(c) < step) older = c;  // in step order: the last one before it
    }
    if (!older) throw;
    throw train::CheckpointError(fmt::format("{}; an older checkpoint: ntp train --resume {}", e.what(),
                                             older->string()));
  }
  run.truncate_jsonl_from_step("metrics.jsonl", step);
  run.truncate_jsonl_from_step("schedule.jsonl", step);
  for (const char* folder : {"hashes", "trace"}) std::filesystem::remove_all(run.path() / folder);
  std::filesystem::remove_all(run.store_dir());
  std::filesystem::create_directories(run.store_dir());
  const std::filesystem::path root = run.path() / "checkpoints";
  for (const std::filesystem::path& later : train::complete_checkpoints(root)) {
    if (later.filename() == checkpoint_dir.filename()) continue;
    if (train::checkpoint_step(later) > step) {  // by name: a damaged one cannot be opened
      // A run resumed from the same step before discarded one already: keep both.
      std::filesystem::path discarded = later.string() + ".discarded";
      for (int k = 2; std::filesystem::exists(discarded); ++k) discarded = later.string() + ".discarded-" + std::to_string(k);
      std::filesystem::rename(later, discarded);
    }
  }
  train::prune_checkpoints(root, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max());
  run.event("run_resumed", {{"checkpoint", checkpoint_dir.string()}, {"step", step}});
}

train::Config fallback_config(const train::Config& config, const LaunchResult& result, const train::RunDir& run,
                              const std::string& reason, bool keep_layout, std::FILE* out) {
  std::vector<std::string> damaged;
  const std::optional<std::filesystem::path> checkpoint =
      train::newest_intact_checkpoint(run.path() / "checkpoints", &damaged);
  for (const std::string& why : damaged) std::fprintf(out, "ntp train: skipping a damaged checkpoint, %s\n", why.c_str());
  if (!checkpoint) {
    throw UnsupportedRequest(fmt::format("in-job recovery is impossible ({}) and there is no checkpoint to restart "
                                         "from (logs in {})",
                                         reason, run.log_dir().string()));
  }
  train::Config next = config;
  std::vector<int> lost;
  for (const RankExit& r : result.ranks) {
    if (r.exited || r.stopped_by_launcher) continue;  // ended on its own or stopped by us: healthy
    lost.push_back(r.rank);
  }
  next.run.resume = checkpoint->string();
  train::drop_injected_failures(next);
  int ranks = 0;
  try {
    if (!keep_layout) {
      // The lost ranks' slots, by the plan the workers ran under.
      const train::JobPlan ran = train::JobPlan::build(config, train::read_job_input(config, run.path()).shape());
      next.parallel = ran.next_parallel(lost, {});
    }
    train::validate(next);
    ranks = train::check_job(next, run.path()).plan.world_size();  // the checkpoint's data included
  } catch (const std::exception& e) {
    throw UnsupportedRequest(fmt::format("in-job recovery is impossible ({}) and a restart from {} is too: {}",
                                         reason, checkpoint->string(), e.what()));
  }
  prepare_restart(run, *checkpoint);
  run.write_config(train::to_toml(next));
  const std::vector<std::int64_t> tp = train::split_input(next.parallel, next.train.global_batch).active;
  run.event("fallback_restart", {{"reason", reason}, {"lost", lost}, {"checkpoint", checkpoint->string()},
                                 {"ranks", ranks}, {"tp", tp}});
  std::fprintf(out, "in-job recovery impossible (%s): restarting from %s with TP %s\n", reason.c_str(),
               checkpoint->string().c_str(), nlohmann::json(tp).dump().c_str());
  return next;
}

}  // namespace ntp::elastic
