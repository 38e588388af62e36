#pragma once
// What `ntp train` says about a run and leaves in summary.json: the job in
// one line, and the record of a run that finished or failed (an interrupted
// one: interruption() in train_job.h). Internal to `ntp train`
// (train_job.cpp, multi_host.cpp); the CLI uses train_job.h.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config.h"
#include "train/metrics.h"
#include "train/run_dir.h"

namespace ntp::elastic {

// The job in one line. The model is named by its source and shape: the
// preset's name alone called a GPT-2 124M checkpoint "tiny".
std::string describe_job(const train::Config& c);

// The summary of a finished run: written to summary.json and printed, with
// each in-job recovery, rejoin and restart from a checkpoint. `start`: when
// this launch of the run began (unix seconds).
nlohmann::json finish_run(const train::Config& config, const train::RunDir& run,
                          const std::vector<train::StepMetrics>& metrics, double start, std::FILE* out);

// A failed run still says why, in events.jsonl and summary.json, and where it
// can go on from: the newest complete checkpoint. Best effort: on a full disk
// the record fails too, and the run's own error must still be the one shown.
void record_failure(const train::Config& config, const train::RunDir& run, const std::string& reason,
                    std::FILE* out);

}  // namespace ntp::elastic
