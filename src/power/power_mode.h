#pragma once
// power.mode: which controller, if any, a job uses.
//   off       - no controller; the batch policy uses shares_without_boost().
//   simulated - SimulatedPowerController: decisions are computed and reported,
//               nothing runs faster.
//   nvml      - NvmlPowerController: limits are really set (needs root).
#include <memory>
#include <string_view>

#include "power/nvml_controller.h"
#include "power/power_controller.h"

namespace ntp::power {

enum class PowerMode { off, simulated, nvml };

// Throws std::invalid_argument naming power.mode and the accepted values.
PowerMode parse_power_mode(std::string_view text);
std::string_view to_string(PowerMode mode);

struct ControllerOptions {
  int simulated_devices = 1;  // devices of the simulated backend
  DevicePowerModel model;     // the simulated backend's devices
  NvmlOptions nvml;
};

// nullptr for `off`. Throws PowerError when the backend cannot start (for
// nvml: "NVML not available: ...").
std::unique_ptr<PowerController> make_power_controller(PowerMode mode,
                                                       const ControllerOptions& options);

}  // namespace ntp::power
