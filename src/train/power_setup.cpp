#include "train/power_setup.h"

namespace ntp::train {
namespace {

double need_of(int n, int active) { return active > 0 ? static_cast<double>(n) / active : 0.0; }

}  // namespace

power::RankPowerOptions rank_power_options(const PowerConfig& config, const std::string& gpu) {
  power::RankPowerOptions options;
  options.mode = config.mode;
  options.model = {config.tdp_w, config.max_frac, config.alpha};
  options.headroom_w = config.headroom_w;
  if (!gpu.empty()) options.nvml.devices = {gpu};
  return options;
}

nlohmann::json plan_json(const power::BoostPlan& plan, int n) {
  nlohmann::json replicas = nlohmann::json::array();
  for (std::size_t r = 0; r < plan.replicas.size(); ++r) {
    const power::ReplicaBoost& b = plan.replicas[r];
    replicas.push_back({{"replica", r},
                        {"active", b.active},
                        {"need", need_of(n, b.active)},
                        {"limit_w", b.limit_w},
                        {"speedup", b.speedup},
                        {"share", b.share}});
  }
  return replicas;
}

nlohmann::json decision_json(const power::PowerDecision& d) {
  return {{"replica", d.replica}, {"active", d.active},   {"need", d.need},
          {"limit_w", d.limit_w}, {"speedup", d.speedup}, {"share", d.share},
          {"device_limit_w", d.device_limit_w}};
}

std::vector<ReplicaPower> replica_power(const power::BoostPlan& plan) {
  std::vector<ReplicaPower> out;
  for (const power::ReplicaBoost& b : plan.replicas) out.push_back({b.limit_w, b.speedup});
  return out;
}

}  // namespace ntp::train
