#pragma once
// RankPower: one rank's power control across configurations, the single
// object the job's driver holds (the trainer's configuration builder, or the
// launcher in elastic). It owns the controller of the rank's GPU, a LimitGuard
// and a SignalRestore, plans every configuration with the shared policy and
// sets (or restores) the rank's GPU limit accordingly.
//
// Plans must be identical on every rank, so they come from the configured
// model (power.tdp_w, power.max_frac, power.alpha), never from the local
// device; with nvml the constructor checks that the device agrees with it.
#include <memory>
#include <optional>
#include <vector>

#include "power/boost_policy.h"
#include "power/limit_guard.h"
#include "power/power_mode.h"
#include "power/signal_restore.h"

namespace ntp::power {

struct RankPowerOptions {
  PowerMode mode = PowerMode::off;
  DevicePowerModel model;     // the configured model; the same on every rank
  double headroom_w = 0.0;    // per domain, beyond n x tdp_w
  NvmlOptions nvml;           // devices = {this rank's GPU}, by index or UUID
  bool restore_on_signal = true;  // install a SignalRestore (SIGTERM, SIGINT)
};

// What one configuration asks of this rank's GPU, for metrics and events.
struct PowerDecision {
  int replica = 0;
  int active = 0;               // k of the replica
  double need = 0.0;            // the per-GPU speed that keeps pace (n / k unless given)
  double limit_w = 0.0;         // planned per-GPU limit (0: power off or sitting out)
  double speedup = 0.0;         // modelled speed reached (1 when power is off)
  long share = 0;               // sequences of the global batch
  double device_limit_w = 0.0;  // limit in force on the GPU after apply (0: power off)
};

class RankPower {
 public:
  // Throws PowerError when the backend cannot start ("NVML not available: ...")
  // or when the device disagrees with the configured model.
  explicit RankPower(RankPowerOptions options);
  ~RankPower();  // restores the GPU's original limit
  RankPower(const RankPower&) = delete;
  RankPower& operator=(const RankPower&) = delete;

  PowerMode mode() const { return options_.mode; }
  // Pure and identical on every rank. Power off: speed-up 1, limit 0, shares
  // k/n (shares_without_boost). `needs`: the speed-up each replica needs to
  // keep pace (e.g. its step time at TDP over the healthy one, measured);
  // empty = n/k (plan_boost).
  BoostPlan plan(int n, const std::vector<int>& active, long global_batch,
                 const std::vector<double>& needs = {}) const;
  // Sets this rank's GPU to the plan's limit for `replica` (restores it when the
  // replica is healthy or sits out). Throws PowerError if the device refuses;
  // the guard still restores on destruction.
  PowerDecision apply(const BoostPlan& plan, int n, int replica);
  // Puts the GPU's original limit back (job end, power switched off).
  void restore();
  // The controller, for reading usage; nullptr when power is off.
  const PowerController* controller() const { return controller_.get(); }

 private:
  RankPowerOptions options_;
  std::unique_ptr<PowerController> controller_;
  std::optional<LimitGuard> guard_;
  std::optional<SignalRestore> on_signal_;
};

}  // namespace ntp::power
