#pragma once
// The restart from a checkpoint when in-job recovery is impossible
// (elastic.fallback = "checkpoint"), and the reading of a launch's end that
// decides it. Internal to `ntp train` (train_job.cpp, worker_launch.cpp).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "elastic/launcher.h"
#include "train/config.h"
#include "train/run_dir.h"

namespace ntp::elastic {

// With elastic.recover: the job succeeded when every step was committed and
// every worker that ended on its own exited 0 — the dead (killed by a
// signal) are the failures the survivors recovered from.
bool recovered(const LaunchResult& result, const train::RunDir& run, std::int64_t steps);

// The first `name` event logged at or after `since` (unix seconds).
std::optional<nlohmann::json> first_event(const train::RunDir& run, const std::string& name, double since);

// Why the workers stopped, from the first run_stopped event since `since`; empty if none.
std::string last_stop_reason(const train::RunDir& run, double since);

// Makes the run directory ready to continue from a checkpoint after N steps:
// every byte of the checkpoint is checked once; rows of steps >= N, the hash
// files, trace fragments and store of the previous workers and abandoned
// partial saves go; complete checkpoints past N (a future that is now
// redone) are renamed step-M.discarded (step-M.discarded-2, ... when a
// resume from an earlier step discarded one before), not deleted.
void prepare_restart(const train::RunDir& run, const std::filesystem::path& checkpoint_dir);

// The configuration the workers restart with when in-job recovery is
// impossible (elastic.fallback = "checkpoint"): the slots of workers lost to a
// signal join parallel.failed (unless `keep_layout`: every rank was lost, so
// no slot is singled out), training starts from the newest checkpoint and
// the injected failures are not injected again. Throws UnsupportedRequest
// when no checkpoint exists or no replica can train.
train::Config fallback_config(const train::Config& config, const LaunchResult& result, const train::RunDir& run,
                              const std::string& reason, bool keep_layout, std::FILE* out);

}  // namespace ntp::elastic
