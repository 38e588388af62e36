#pragma once
// power.mode in the trainer (docs/power.md, "How the trainer uses it"): the
// options of each rank's power::RankPower, the JSON of its decisions, and
// RankPowerRun, which drives the RankPower through a run and logs every
// decision in events.jsonl.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/stage.h"
#include "power/measured_need.h"
#include "power/rank_power.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/model_setup.h"
#include "train/run_dir.h"

namespace ntp::train {

// The rank's RankPower: the configured mode and device model (identical on
// every rank, so every rank plans the same), and with nvml the rank's GPU
// (`gpu`: an NVML index or UUID).
power::RankPowerOptions rank_power_options(const PowerConfig& config, const std::string& gpu);

// The work of each unit kind the TP group splits, per token of one layer
// stack's forward pass (the backward's 2x and the token count cancel in a
// ratio): a head 8 d^2/h (QKV rows, projection columns) + 4 T d/h (scores,
// weighted values), an FFN neuron 4 d per layer, a vocabulary row 2 d (LM head).
std::vector<power::UnitWork> step_work(const ModelSetup& model);
// The same for one pipeline stage: its blocks' heads and neurons, and the
// vocabulary rows only on the stage with the LM head.
std::vector<power::UnitWork> step_work(const ModelSetup& model, const model::StageRange& blocks);

// The speed-up each replica of `active` (k per replica, 0 = sits out) needs to
// keep pace: power::busiest_work_need of `work`. Depends only on the
// configuration and the model, so every rank computes the same bits.
std::vector<double> modelled_needs(int n, const std::vector<int>& active,
                                   const std::vector<power::UnitWork>& work);

// [{"replica", "active", "need", "limit_w", "speedup", "share", "cap"}, ...]:
// the plan of one configuration ("need" 0 for a replica that sits out; "cap":
// none, device_max or domain_budget, what kept the speed-up below the need).
nlohmann::json plan_json(const power::BoostPlan& plan);

// {"replica", "active", "need", "limit_w", "speedup", "share", "device_limit_w"}
nlohmann::json decision_json(const power::PowerDecision& decision);

// Per replica {limit_w, speedup} for metrics.jsonl.
std::vector<ReplicaPower> replica_power(const power::BoostPlan& plan);

// Where a rank runs: its global rank, replica and slot, and with pipeline
// stages its stage and every stage's blocks (empty: one stage, the whole
// model).
struct PowerRank {
  int rank = 0;
  int replica = 0;
  int slot = 0;
  int stage = 0;
  std::vector<model::StageRange> stages;
};

// One rank's power control for a whole run. With power.mode = "off" it plans
// k/n shares and logs nothing.
class RankPowerRun {
 public:
  // Throws power::PowerError when the backend cannot start.
  RankPowerRun(const Config& config, const RunDir& run, PowerRank place, const std::string& gpu);

  // At every configuration (today: the start; a reconfiguration calls it
  // again): the plan for the modelled needs of `model` (modelled_needs), the
  // same on every rank; this rank's GPU set to its
  // replica's limit (a healthy replica keeps or gets back the default); events
  // power_plan (rank 0) and power_applied. Returns the batch shares of
  // parallel.batch_policy, `proportional` taking the plan's.
  // With pipeline stages a replica's need is its neediest stage's (each
  // stage's work at its own degree), and each stage's domain is boosted for
  // its own degree and work: a healthy stage keeps the default limit, a
  // degraded one gets the limit that keeps it at full pace (its stage's plan
  // over every replica's degree of that stage); the stage that sets the
  // replica's need gets the replica plan's limit.
  std::vector<std::int64_t> configure(const ParallelConfig& parallel, std::int64_t global_batch,
                                      const ModelSetup& model);
  // After each committed step, with power.need = "measured": the forward
  // seconds of every replica's busiest GPU (from the step's commit record,
  // the same on every rank; 0 for a replica that does not train), measured
  // under the plan in force with the shares configure() returned. Folds
  // them into the need estimate (power::track_need); when the rule asks for
  // it, plans and applies again with the estimates (events as configure,
  // power_plan with "cause": "measured") and returns the new shares.
  // nullopt: the plan stands.
  std::optional<std::vector<std::int64_t>> observe(const std::vector<double>& compute_s);
  // The per-GPU speed-up the plan in force gives `replica`'s GPUs of this
  // rank's domain (its stage's, with stages; 1 with power off).
  double speedup(int replica) const;
  // The plan in force for metrics.jsonl; empty with power off.
  std::vector<ReplicaPower> metrics() const;
  // Puts the GPU's original limit back and logs power_restored with the limit
  // read back; `cause`: "exit" or "error". Never throws: an error goes to stderr
  // (RankPower's destructor tries again).
  void restore(const char* cause) noexcept;

 private:
  // Plans for `needs`, applies this rank's limit, logs, and returns the shares.
  std::vector<std::int64_t> plan_and_apply(const std::vector<double>& needs, const char* cause);

  const RunDir& run_;
  PowerRank place_;
  power::RankPower power_;
  bool measure_ = false;
  power::NeedRule rule_;
  power::BoostPlan plan_;
  // The plan of this rank's domain: with stages, its stage's (every
  // replica's degree of that stage); else plan_.
  power::BoostPlan domain_plan_;
  // The configuration the plan is for.
  ParallelConfig parallel_;
  std::int64_t global_batch_ = 0;
  std::vector<int> active_;
  std::vector<int> stage_active_;     // this rank's stage, per replica (0: sits out); with stages only
  std::vector<double> stage_needs_;
  std::vector<std::int64_t> shares_;
  power::NeedTrack track_;
};

}  // namespace ntp::train
