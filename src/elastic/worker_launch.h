#pragma once
// How `ntp train` runs the training: in this process for one rank, else
// through the launcher, with fencing and the fallback restart. Internal to
// `ntp train` (train_job.cpp, multi_host.cpp).
#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

#include "elastic/launcher.h"
#include "elastic/train_job.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/run_dir.h"

namespace ntp::elastic {

// launch_workers on any host: a store that stops answering past its deadline
// ends this host's part, and the error says so in the product's words (the
// launcher has killed the workers by then). Another host cut off from the
// store takes part in no agreement: the hosts that reach it recover without
// it, so the job never splits in two.
LaunchResult launch_or_lose_store(const train::Config& config, const train::RunDir& run, const NodeOptions& node,
                                  const std::function<void(const train::StepMetrics&)>& on_step);

// The workers' whole life: launches, and with elastic.recover relaunches from
// the newest checkpoint when in-job recovery is impossible
// (elastic.fallback). Returns every step's metrics.
std::vector<train::StepMetrics> train_with_workers(
    const train::Config& first, const train::RunDir& run, const NodeOptions& node, std::FILE* out,
    const std::function<void(const train::StepMetrics&)>& on_step);

// TP = DP = 1: the trainer runs in this process, on local rank 0's GPU.
std::vector<train::StepMetrics> train_in_process(
    const train::Config& config, const std::filesystem::path& run_dir,
    const std::function<void(const train::StepMetrics&)>& on_step);

}  // namespace ntp::elastic
