#pragma once
// The NVML power backend. libnvidia-ml.so.1 is loaded with dlopen when the
// controller is built, so ntp builds and runs without a GPU driver; the few
// NVML functions used are declared in nvml_controller.cpp. Without NVML (no
// driver, no GPU) construction throws PowerError("NVML not available: ...");
// setting a limit without root throws PowerError naming the device and the
// missing permission. Limits are in watts here, milliwatts in NVML; a limit is
// rounded down to the milliwatt, so a budget is never exceeded by rounding.
#include <memory>
#include <string>
#include <vector>

#include "power/power_controller.h"

namespace ntp::power {

struct NvmlOptions {
  std::string library = "libnvidia-ml.so.1";
  // Devices to control, by NVML index ("0") or UUID ("GPU-..."); empty = all.
  std::vector<std::string> devices;
};

class NvmlPowerController final : public PowerController {
 public:
  explicit NvmlPowerController(NvmlOptions options = {});
  ~NvmlPowerController() override;  // nvmlShutdown, then dlclose
  NvmlPowerController(const NvmlPowerController&) = delete;
  NvmlPowerController& operator=(const NvmlPowerController&) = delete;

  std::string backend() const override { return "nvml"; }
  int device_count() const override;
  std::string device_name(int device) const override;
  LimitRange limit_range(int device) const override;
  double default_limit_w(int device) const override;
  double get_limit_w(int device) const override;
  void set_limit_w(int device, double watts) override;
  double power_usage_w(int device) const override;
  // nvmlDeviceGetName / nvmlDeviceGetClockInfo (SM, memory); empty where the
  // library or the device does not report them (read only, never an error).
  std::string product_name(int device) const override;
  Clocks clocks(int device) const override;

 private:
  struct Library;
  std::unique_ptr<Library> nvml_;
};

}  // namespace ntp::power
