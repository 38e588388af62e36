#pragma once
// The simulated power backend: devices that follow the policy's device model
// (speed = (limit / tdp)^alpha up to max_frac * tdp) and record every limit
// they are given. Used for CPU runs (power.mode = "simulated"), where it only
// reports what a boost would do, and for tests, where inject_set_failure()
// makes a set fail so the restore path can be exercised. Thread-safe.
#include <mutex>
#include <vector>

#include "power/power_controller.h"

namespace ntp::power {

class SimulatedPowerController final : public PowerController {
 public:
  // device_count devices booting at tdp_w, accepting [min_frac, max_frac] x tdp_w.
  SimulatedPowerController(int device_count, DevicePowerModel model, double min_frac = 0.5);

  std::string backend() const override { return "simulated"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  std::string device_name(int device) const override;
  LimitRange limit_range(int device) const override;
  double default_limit_w(int device) const override;
  double get_limit_w(int device) const override;
  void set_limit_w(int device, double watts) override;
  // Modelled, not measured: a busy device draws its limit.
  double power_usage_w(int device) const override;

  // Modelled speed relative to TDP at the limit in force.
  double speed(int device) const;
  // Every limit successfully set on the device, in order.
  std::vector<double> limit_history(int device) const;
  // The set_limit_w call that follows `successful_sets` more successful ones
  // throws PowerError (once), leaving the limit unchanged.
  void inject_set_failure(int successful_sets);

 private:
  struct Device {
    double limit_w = 0.0;
    std::vector<double> history;
  };
  DevicePowerModel model_;
  double min_frac_;
  mutable std::mutex mutex_;
  std::vector<Device> devices_;
  int sets_until_failure_ = -1;  // -1: no failure armed
};

}  // namespace ntp::power
