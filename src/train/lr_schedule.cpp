#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ntp::train {

double learning_rate(const OptimConfig& t, std::int64_t step) {
  if (step < t.warmup_steps) {
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  }
  if (t.lr_schedule == LrSchedule::kConstant) return t.lr;
  const double min_lr = 0.1 * t.lr;
  const std::int64_t decay_steps = std::max<std::int64_t>(1, t.steps - 1 - t.warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - t.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (t.lr - min_lr);
}

}  // namespace ntp::train
