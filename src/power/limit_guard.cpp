// LimitGuard (see limit_guard.h).
#include "power/limit_guard.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <optional>

namespace ntp::power {

LimitGuard::LimitGuard(PowerController& controller) : controller_(controller) {}

LimitGuard::~LimitGuard() {
  try {
    restore_all();
  } catch (const std::exception& e) {
    spdlog::error("ntp power: could not restore power limits: {}", e.what());
  }
}

void LimitGuard::set_limit_w(int device, double watts) {
  std::lock_guard lock(mutex_);
  if (!original_w_.contains(device)) {
    // Record before changing: if the set fails half-way, restore still knows.
    original_w_.emplace(device, controller_.get_limit_w(device));
  }
  controller_.set_limit_w(device, watts);
}

void LimitGuard::apply(int device, double limit_w) {
  if (limit_w > controller_.default_limit_w(device)) {
    set_limit_w(device, limit_w);
  } else {
    restore(device);
  }
}

void LimitGuard::restore(int device) {
  std::lock_guard lock(mutex_);
  const auto it = original_w_.find(device);
  if (it == original_w_.end()) return;
  controller_.set_limit_w(device, it->second);
  original_w_.erase(it);
}

void LimitGuard::restore_all() {
  std::lock_guard lock(mutex_);
  std::optional<PowerError> first_error;
  for (auto it = original_w_.begin(); it != original_w_.end();) {
    try {
      controller_.set_limit_w(it->first, it->second);
      it = original_w_.erase(it);
    } catch (const PowerError& e) {
      if (!first_error) first_error = e;
      ++it;  // keep it: a later restore_all() may still succeed
    }
  }
  if (first_error) throw *first_error;
}

std::vector<int> LimitGuard::changed_devices() const {
  std::lock_guard lock(mutex_);
  std::vector<int> devices;
  for (const auto& [device, original] : original_w_) {
    if (controller_.get_limit_w(device) != original) devices.push_back(device);
  }
  return devices;
}

}  // namespace ntp::power
