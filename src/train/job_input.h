#pragma once
// What a job reads before it can be planned: the training data, the
// validation data, and the model resolved against the data. The launcher's
// preflight, every rank and the one-process trainer read it the same way,
// and build the job plan (train/job_plan.h) from its shape:
//
//   Config ─▶ read_job_input (I/O) ─▶ JobInput ─▶ JobPlan::build (pure)
#include <filesystem>
#include <optional>

#include "model/token_data.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/job_plan.h"
#include "train/model_setup.h"

namespace ntp::train {

struct JobInput {
  model::TokenData data;
  std::optional<model::TokenData> val;  // data.val_path
  ModelSetup setup;
  JobData identity;  // of both, for the job's record and each rank's check
  JobShape shape() const;
};

// Opens the data (`run_dir` hosts the built-in corpus) and resolves the
// model against it; checks the validation data against the model. Throws
// ConfigError naming the key.
JobInput read_job_input(const Config& config, const std::filesystem::path& run_dir);

// Everything about the job that can be wrong before a process starts: the
// data, the model against the data, the layouts of every unit kind (e.g.
// fewer heads than the active slots of a replica), the hosts, and for a
// resume the checkpoint against the configuration and the data. Throws
// ConfigError naming the key. Returns the plan and what was read, for the
// job's record (record_job_data).
struct CheckedJob {
  JobData data;
  JobPlan plan;
};
CheckedJob check_job(const Config& config, const std::filesystem::path& run_dir, int nnodes = 1);

}  // namespace ntp::train
