#pragma once
// power.mode in the trainer (docs/power.md, "How the trainer uses it"): the
// options of each rank's power::RankPower and the JSON of its decisions for
// events.jsonl and metrics.jsonl. Pure: no I/O.
#include <string>

#include <nlohmann/json.hpp>

#include "power/rank_power.h"
#include "train/config.h"
#include "train/metrics.h"

namespace ntp::train {

// The rank's RankPower: the configured mode and device model (identical on
// every rank, so every rank plans the same), and with nvml the rank's GPU
// (`gpu`: an NVML index or UUID).
power::RankPowerOptions rank_power_options(const PowerConfig& config, const std::string& gpu);

// [{"replica", "active", "need", "limit_w", "speedup", "share"}, ...]: the plan
// of one configuration of n slots per replica.
nlohmann::json plan_json(const power::BoostPlan& plan, int n);

// {"replica", "active", "need", "limit_w", "speedup", "share", "device_limit_w"}
nlohmann::json decision_json(const power::PowerDecision& decision);

// Per replica {limit_w, speedup} for metrics.jsonl.
std::vector<ReplicaPower> replica_power(const power::BoostPlan& plan);

}  // namespace ntp::train
