// Checks shared by the PowerController backends.
#include "power/power_controller.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ntp::power {

void PowerController::check_device(int device) const {
  if (device < 0 || device >= device_count()) {
    throw PowerError(fmt::format("{} power: no device {} (have {})", backend(), device,
                                 device_count()));
  }
}

std::string PowerController::product_name(int device) const {
  check_device(device);
  return "";
}

Clocks PowerController::clocks(int device) const {
  check_device(device);
  return {};
}

void PowerController::check_limit(int device, double watts) const {
  // One milliwatt (NVML's resolution) of slack: a plan's max_frac * tdp_w may
  // land an ulp above the device maximum it was derived from.
  constexpr double kSlackW = 1e-3;
  const LimitRange range = limit_range(device);
  if (!std::isfinite(watts) || watts < range.min_w - kSlackW || watts > range.max_w + kSlackW) {
    throw PowerError(fmt::format("{} power: limit {:.1f} W for {} is outside [{:.1f}, {:.1f}] W",
                                 backend(), watts, device_name(device), range.min_w, range.max_w));
  }
}

DevicePowerModel device_model(const PowerController& controller, int device, double max_frac,
                              double alpha) {
  DevicePowerModel model;
  model.tdp_w = controller.default_limit_w(device);
  const double device_max_frac = controller.limit_range(device).max_w / model.tdp_w;
  model.max_frac = std::max(1.0, std::min(max_frac, device_max_frac));
  model.alpha = alpha;
  validate(model);
  return model;
}

}  // namespace ntp::power
