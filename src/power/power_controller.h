#pragma once
// PowerController: reads and sets per-device power limits. Two backends:
// NvmlPowerController (real GPUs, NVML loaded at run time) and
// SimulatedPowerController (a device model, for CPU runs and tests). Callers
// that change limits do so through a LimitGuard, which puts the originals back.
//
// Devices are numbered 0 .. device_count()-1 in the controller's own order.
// Every call that fails throws PowerError naming the device; none crashes.
#include <optional>
#include <stdexcept>
#include <string>

#include "power/boost_policy.h"

namespace ntp::power {

class PowerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LimitRange {
  double min_w = 0.0;
  double max_w = 0.0;
};

// A device's clocks now, in MHz (`ntp power show`); empty where the backend or
// the device does not report one.
struct Clocks {
  std::optional<unsigned> sm_mhz;   // streaming multiprocessors
  std::optional<unsigned> mem_mhz;  // memory
};

class PowerController {
 public:
  virtual ~PowerController() = default;

  virtual std::string backend() const = 0;  // "nvml" or "simulated"
  virtual int device_count() const = 0;
  // A short name of the device for messages: its index and UUID or model.
  virtual std::string device_name(int device) const = 0;
  virtual LimitRange limit_range(int device) const = 0;
  // The limit the device boots with (its TDP for the policy).
  virtual double default_limit_w(int device) const = 0;
  // The limit in force now.
  virtual double get_limit_w(int device) const = 0;
  // Throws PowerError when watts is outside limit_range(device), when the
  // caller lacks the permission, or when the device refuses.
  virtual void set_limit_w(int device, double watts) = 0;
  virtual double power_usage_w(int device) const = 0;
  // Read only, for `ntp power show`: the product name ("NVIDIA H200"; empty
  // where unknown) and the clocks now. The base class knows neither.
  virtual std::string product_name(int device) const;
  virtual Clocks clocks(int device) const;

 protected:
  // Throws PowerError unless 0 <= device < device_count().
  void check_device(int device) const;
  // Throws PowerError unless watts lies within limit_range(device), give or
  // take one milliwatt; backends clamp what they set to the range.
  void check_limit(int device, double watts) const;
};

// The policy's model of one device: its default limit as TDP, and max_frac
// capped by what the device accepts (max limit / default), so plans built from
// it never ask a device for more than it allows.
DevicePowerModel device_model(const PowerController& controller, int device, double max_frac,
                              double alpha);

}  // namespace ntp::power
