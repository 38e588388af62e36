// The simulated power backend (see simulated_controller.h).
#include "power/simulated_controller.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ntp::power {

SimulatedPowerController::SimulatedPowerController(int device_count, DevicePowerModel model,
                                                   double min_frac)
    : model_(model), min_frac_(min_frac) {
  validate(model_);
  if (device_count < 0) throw PowerError("simulated power: device_count must be >= 0");
  if (!(min_frac > 0.0 && min_frac <= 1.0)) {
    throw PowerError("simulated power: min_frac must be in (0, 1]");
  }
  devices_.assign(static_cast<std::size_t>(device_count), Device{model_.tdp_w, {}});
}

std::string SimulatedPowerController::device_name(int device) const {
  return fmt::format("simulated device {}", device);
}

LimitRange SimulatedPowerController::limit_range(int device) const {
  check_device(device);
  return {min_frac_ * model_.tdp_w, model_.max_frac * model_.tdp_w};
}

double SimulatedPowerController::default_limit_w(int device) const {
  check_device(device);
  return model_.tdp_w;
}

double SimulatedPowerController::get_limit_w(int device) const {
  check_device(device);
  std::lock_guard lock(mutex_);
  return devices_[static_cast<std::size_t>(device)].limit_w;
}

void SimulatedPowerController::set_limit_w(int device, double watts) {
  check_device(device);
  check_limit(device, watts);
  const LimitRange range = limit_range(device);
  watts = std::clamp(watts, range.min_w, range.max_w);
  std::lock_guard lock(mutex_);
  if (sets_until_failure_ == 0) {
    sets_until_failure_ = -1;
    throw PowerError(fmt::format("simulated power: injected failure setting {:.1f} W on {}",
                                 watts, device_name(device)));
  }
  if (sets_until_failure_ > 0) --sets_until_failure_;
  Device& d = devices_[static_cast<std::size_t>(device)];
  d.limit_w = watts;
  d.history.push_back(watts);
}

double SimulatedPowerController::power_usage_w(int device) const { return get_limit_w(device); }

double SimulatedPowerController::speed(int device) const {
  return std::pow(get_limit_w(device) / model_.tdp_w, model_.alpha);
}

std::vector<double> SimulatedPowerController::limit_history(int device) const {
  check_device(device);
  std::lock_guard lock(mutex_);
  return devices_[static_cast<std::size_t>(device)].history;
}

void SimulatedPowerController::inject_set_failure(int successful_sets) {
  std::lock_guard lock(mutex_);
  sets_until_failure_ = successful_sets < 0 ? -1 : successful_sets;
}

}  // namespace ntp::power
