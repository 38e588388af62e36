// RankPower (see rank_power.h).
#include "power/rank_power.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace ntp::power {
namespace {

// With nvml, the configured model must describe the rank's GPU: its default
// limit is the TDP, and it must accept the configured maximum.
void check_device_matches(const PowerController& controller, const DevicePowerModel& model) {
  if (controller.device_count() != 1) {
    throw PowerError(fmt::format("power: a rank controls exactly one GPU, the selection has {}",
                                 controller.device_count()));
  }
  const double default_w = controller.default_limit_w(0);
  if (std::abs(default_w - model.tdp_w) > 1.0) {
    throw PowerError(fmt::format("power.tdp_w = {:.1f} W but {} defaults to {:.1f} W",
                                 model.tdp_w, controller.device_name(0), default_w));
  }
  const double max_w = controller.limit_range(0).max_w;
  if (model.max_frac * model.tdp_w > max_w + 1e-3) {
    throw PowerError(fmt::format("power.max_frac = {} asks for {:.1f} W but {} stops at {:.1f} W",
                                 model.max_frac, model.max_frac * model.tdp_w,
                                 controller.device_name(0), max_w));
  }
}

}  // namespace

RankPower::RankPower(RankPowerOptions options) : options_(std::move(options)) {
  validate(options_.model);
  if (!std::isfinite(options_.headroom_w) || options_.headroom_w < 0.0) {
    throw std::invalid_argument("power.headroom_w must be finite and >= 0");
  }
  ControllerOptions controller_options;
  controller_options.simulated_devices = 1;
  controller_options.model = options_.model;
  controller_options.nvml = options_.nvml;
  controller_ = make_power_controller(options_.mode, controller_options);
  if (controller_ == nullptr) return;
  if (options_.mode == PowerMode::nvml) check_device_matches(*controller_, options_.model);
  guard_.emplace(*controller_);
  if (options_.restore_on_signal) on_signal_.emplace(*guard_);
}

RankPower::~RankPower() {
  on_signal_.reset();  // before the guard it watches
  guard_.reset();      // restores
}

BoostPlan RankPower::plan(int n, const std::vector<int>& active, long global_batch,
                          const std::vector<double>& needs) const {
  if (options_.mode != PowerMode::off) {
    return plan_boost(n, active, needs, options_.headroom_w, global_batch, options_.model);
  }
  const std::vector<long> shares = shares_without_boost(n, active, global_batch);
  BoostPlan plan;
  for (std::size_t r = 0; r < active.size(); ++r) {
    plan.replicas.push_back({active[r], 0.0, active[r] > 0 ? 1.0 : 0.0, shares[r]});
  }
  return plan;
}

PowerDecision RankPower::apply(const BoostPlan& plan, int n, int replica) {
  if (replica < 0 || static_cast<std::size_t>(replica) >= plan.replicas.size()) {
    throw std::invalid_argument(fmt::format("power: replica {} is not in the plan ({} replicas)",
                                            replica, plan.replicas.size()));
  }
  const ReplicaBoost& boost = plan.replicas[static_cast<std::size_t>(replica)];
  PowerDecision decision{replica,       boost.active, 0.0, boost.limit_w,
                         boost.speedup, boost.share,  0.0};
  if (boost.active > 0) {
    decision.need = boost.need > 0.0 ? boost.need : static_cast<double>(n) / boost.active;
  }
  if (!guard_) return decision;
  guard_->apply(0, boost.limit_w);
  decision.device_limit_w = controller_->get_limit_w(0);
  return decision;
}

void RankPower::restore() {
  if (guard_) guard_->restore_all();
}

}  // namespace ntp::power
