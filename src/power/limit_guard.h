#pragma once
// LimitGuard: the only way ntp changes power limits. It remembers each
// device's limit before the first change and puts it back
//   - on restore(device) / restore_all()  (a replica heals, the job ends),
//   - on destruction, including stack unwinding after an error,
//   - on SIGTERM / SIGINT when a SignalRestore watches it (signal_restore.h).
// NVML limits outlive the process that set them, so this matters: a job that
// dies boosted would leave its GPUs boosted. Only SIGKILL escapes it (see
// docs/power.md). Thread-safe: a SignalRestore restores from its own thread.
#include <map>
#include <mutex>
#include <vector>

#include "power/power_controller.h"

namespace ntp::power {

class LimitGuard {
 public:
  explicit LimitGuard(PowerController& controller);
  // restore_all(); a failure is reported on stderr, never thrown.
  ~LimitGuard();
  LimitGuard(const LimitGuard&) = delete;
  LimitGuard& operator=(const LimitGuard&) = delete;

  PowerController& controller() const { return controller_; }

  // Sets the limit, recording the device's original limit on first touch.
  void set_limit_w(int device, double watts);
  // What a plan asks of one device: limit_w above the device's default is set,
  // anything else (a healthy or healed domain) restores the original limit.
  void apply(int device, double limit_w);
  // Puts the device's original limit back and forgets it; no-op if untouched.
  void restore(int device);
  // Restores every touched device, trying all of them even when some fail;
  // then throws the first PowerError, if any.
  void restore_all();
  // Devices whose limit differs from the original (ascending).
  std::vector<int> changed_devices() const;

 private:
  PowerController& controller_;
  mutable std::mutex mutex_;
  std::map<int, double> original_w_;  // device -> limit before the first change
};

}  // namespace ntp::power
