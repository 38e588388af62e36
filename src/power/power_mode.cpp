// power.mode parsing and the controller factory (see power_mode.h).
#include "power/power_mode.h"

#include <stdexcept>
#include <string>

#include "power/simulated_controller.h"

namespace ntp::power {

PowerMode parse_power_mode(std::string_view text) {
  if (text == "off") return PowerMode::off;
  if (text == "simulated") return PowerMode::simulated;
  if (text == "nvml") return PowerMode::nvml;
  throw std::invalid_argument("power.mode must be one of off, simulated, nvml; got '" +
                              std::string(text) + "'");
}

std::string_view to_string(PowerMode mode) {
  switch (mode) {
    case PowerMode::off:
      return "off";
    case PowerMode::simulated:
      return "simulated";
    case PowerMode::nvml:
      return "nvml";
  }
  return "off";
}

std::unique_ptr<PowerController> make_power_controller(PowerMode mode,
                                                       const ControllerOptions& options) {
  switch (mode) {
    case PowerMode::off:
      return nullptr;
    case PowerMode::simulated:
      return std::make_unique<SimulatedPowerController>(options.simulated_devices, options.model);
    case PowerMode::nvml:
      return std::make_unique<NvmlPowerController>(options.nvml);
  }
  return nullptr;
}

}  // namespace ntp::power
